// test_corrupt_node (passes.def, DYNAMO_TEST_PASS): a pass with a bug, for dynamo-bisect's tests
// only. It runs only when PassOptions::corruptNode names a node (DYNAMO_TEST_CORRUPT_NODE=relu_1).
// Every call node is one application, which copies the node as it is, except that the node of
// that name comes out followed by a call of a method tensors do not have
// (`node.dynamo_test_corrupted()`: AttributeError when the graph runs or is traced): one
// application among many is wrong, and the bisector must find which
// (DYNAMO_BISECT_PASS=test_corrupt_node:N applies the first N only). It breaks the graph rather
// than its values because a value a pass gets wrong is in the graph the backend gets, and the
// fp64 reference of the accuracy checks runs that same graph.
#include "dynamo/core/passes.h"

namespace dynamo::core {

Graph runTestCorruptNode(const Graph& graph, PassContext& ctx) {
  const std::string& victim = ctx.options().corruptNode;
  if (victim.empty()) return graph;
  GraphRewriter rewriter(graph);
  for (const NodeRef& n : graph.body()) {
    NodeRef made = rewriter.copy(n);
    if (ctx.apply(n) && n->name() == victim) {
      NodeRef wrong = rewriter.builder().callMethod("dynamo_test_corrupted", {Arg::node(made)}, {}, n->meta(),
                                                    n->name() + "_corrupted");
      rewriter.replaceUses(n, wrong);
    }
  }
  return rewriter.finish();
}

}  // namespace dynamo::core
