// test_corrupt_node (passes.def, DYNAMO_TEST_PASS): a pass with a bug, for dynamo-bisect's tests
// only. It runs only when PassOptions::corruptNode names a node (DYNAMO_TEST_CORRUPT_NODE=relu_1).
// Every call node is one application, which copies the node as it is, except that the node of
// that name comes out as `node + 0.01`: one application among many is wrong, and the bisector
// must find which (DYNAMO_BISECT_PASS=test_corrupt_node:N applies the first N only).
#include "dynamo/core/passes.h"

namespace dynamo::core {

Graph runTestCorruptNode(const Graph& graph, PassContext& ctx) {
  const std::string& victim = ctx.options().corruptNode;
  if (victim.empty()) return graph;
  GraphRewriter rewriter(graph);
  for (const NodeRef& n : graph.body()) {
    NodeRef made = rewriter.copy(n);
    if (ctx.apply(n) && n->name() == victim) {
      NodeRef wrong = rewriter.builder().callMethod("add", {Arg::node(made), Arg::floating(0.01)}, {},
                                                    n->meta(), n->name() + "_corrupted");
      rewriter.replaceUses(n, wrong);
    }
  }
  return rewriter.finish();
}

}  // namespace dynamo::core
