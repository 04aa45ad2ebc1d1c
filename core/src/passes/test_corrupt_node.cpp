// test_corrupt_node (passes.def, DYNAMO_TEST_PASS): a pass with a bug, for dynamo-bisect's and
// dynamo-minify's tests only. It runs only when PassOptions::corruptNode names a node
// (DYNAMO_TEST_CORRUPT_NODE=relu_1, or relu_1:value). Every call node is one application, which
// copies the node as it is, except that the node of that name comes out followed by
//   - (default) a call of a method tensors do not have, `node.dynamo_test_corrupted()`:
//     AttributeError when the graph runs or is traced;
//   - (`:value`) `node.add(0.01)`: the graph runs, 1e-2 off. The accuracy checks see it because
//     their fp64 reference is the graph as captured, before the passes
//     (capturedGraphOfCurrentCompile()).
// One application among many is wrong, and the bisector must find which
// (DYNAMO_BISECT_PASS=test_corrupt_node:N applies the first N only).
#include "dynamo/core/passes.h"

namespace dynamo::core {

Graph runTestCorruptNode(const Graph& graph, PassContext& ctx) {
  const std::string& spec = ctx.options().corruptNode;
  if (spec.empty()) return graph;
  const std::string victim = spec.substr(0, spec.find(':'));
  const bool valueMode = spec.size() > victim.size() && spec.substr(victim.size() + 1) == "value";
  GraphRewriter rewriter(graph);
  for (const NodeRef& n : graph.body()) {
    NodeRef made = rewriter.copy(n);
    if (ctx.apply(n) && n->name() == victim) {
      NodeRef wrong = valueMode
                          ? rewriter.builder().callMethod("add", {Arg::node(made), Arg::floating(0.01)}, {},
                                                          n->meta(), n->name() + "_corrupted")
                          : rewriter.builder().callMethod("dynamo_test_corrupted", {Arg::node(made)}, {},
                                                          n->meta(), n->name() + "_corrupted");
      rewriter.replaceUses(n, wrong);
    }
  }
  return rewriter.finish();
}

}  // namespace dynamo::core
