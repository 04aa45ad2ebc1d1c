// The diff of two graphs: which nodes of `before` and `after` are the same node, which were
// added or removed, and what changed in the matched ones (tensor meta, arguments, target).
//
// Matching, in rounds, each round only among nodes not matched yet:
//   1. inputs by their source ("x", "self.layer1.0.conv1.weight");
//   2. calls by (op, target, module path, source file:line), k-th with k-th;
//   3. calls by (op, target, source file:line), k-th with k-th (a module path moved);
//   4. structure: a call whose inputs are all matched, to the unmatched call with the same
//      target whose inputs are their counterparts (repeated while it finds more);
//   5. calls by target, in order (longest common subsequence of the remaining targets).
// The output nodes always match.
//
// Across dialects (a Dynamo graph of torch-level ops against an AOT graph of ATen ops), "target"
// above reads "op family" (op_families.def: conv2d ~ convolution, batch_norm ~
// native_batch_norm, linear ~ addmm, ...), an extra round after 3 matches by (family, module
// path) because ATen graphs carry no source lines, and only tensor shapes and dtypes are
// compared (targets, arguments and strides differ by nature). No Qt.
#pragma once

#include <string>
#include <vector>

#include "dynamo/gui/inspect_graph.h"

namespace dynamo::gui {

/// The op level of a graph: Dynamo's torch-level ops, or ATen ops (AOT graphs).
enum class GraphDialect { kTorch, kAten };

/// kAten when more than half of the graph's calls are ATen ops (torch.ops.aten.*).
GraphDialect dialectOf(const InspectGraph& graph);

/// The op family of a call (op_families.def), its base name when in none.
std::string opFamily(const InspectNode& node);

/// A matched pair whose meta differs.
struct NodeChange {
  int before = 0;                    ///< node in `before`
  int after = 0;                     ///< node in `after`
  std::vector<std::string> changes;  ///< "shape: f32[8] -> f32[16]", "args: ... -> ..."
};

/// The result of diffGraphs.
struct GraphDiff {
  std::vector<int> afterOfBefore;   ///< before node -> after node, -1 removed
  std::vector<int> beforeOfAfter;   ///< after node -> before node, -1 added
  std::vector<int> matchRound;      ///< after node -> the round (1..5) that matched it, 0 added
  std::vector<NodeChange> changed;  ///< matched pairs with differences, in `after` order
  int matched = 0, added = 0, removed = 0;  ///< counts
  bool crossDialect = false;        ///< torch-level against ATen: matched by op family
  /// `after` with the removed nodes of `before` added, each node marked (DiffStatus), and the
  /// changes listed on changed nodes: what the diff view lays out.
  InspectGraphPtr merged;
  /// merged node -> after node (-1 for removed ones), and -> before node (-1 for added ones).
  std::vector<int> mergedToAfter, mergedToBefore;
};

/// Matches `before` against `after` (see the banner).
GraphDiff diffGraphs(const InspectGraph& before, const InspectGraph& after);

/// One line: "69 nodes matched, 2 added, 1 removed, 3 changed".
std::string diffSummary(const GraphDiff& diff);

}  // namespace dynamo::gui
