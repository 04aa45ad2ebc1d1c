// The inspector's read-only picture of one captured graph: its nodes with what the views show
// (op category, module path, source line, arguments, tensor meta), its edges, and the tree of
// groups (modules, and runs of nodes when a level holds too many) that the graph view collapses.
//
//   store JSON --core::readGraphJson--> core::Graph --buildInspectGraph--> InspectGraph
//                                                                             |
//                  visible_graph.h (what is expanded) <-----------------------+--> graph_diff.h
//
// No Qt: built off the UI thread and tested headless.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dynamo/common/error.h"

namespace dynamo::core {
class Graph;
}

namespace dynamo::gui {

/// What the graph view colours a node by (op_categories.def).
enum class OpCategory {
#define DYNAMO_OP_CATEGORY(id, name, colour, description) id,
#include "dynamo/gui/op_categories.def"
#undef DYNAMO_OP_CATEGORY
};

/// "conv", "matmul", ... (the .def name).
std::string_view opCategoryName(OpCategory c);
/// "#fb8072": the fill colour of the category.
std::string_view opCategoryColour(OpCategory c);
/// One line for the legend.
std::string_view opCategoryDescription(OpCategory c);
/// Every category, in .def order.
const std::vector<OpCategory>& allOpCategories();
/// The category of a call: `op` is "call_function" / "call_method", `target` the qualified
/// target or method name ("torch.nn.functional.relu", "view", "torch.ops.aten.addmm.default").
OpCategory categorizeOp(std::string_view op, std::string_view target);

/// A node's state in a diff (graph_diff.h); kNone outside a diff.
enum class DiffStatus { kNone, kSame, kChanged, kAdded, kRemoved };

/// A node's part in an AOT graph's partition (overlays.def); kNone outside AOT graphs.
enum class PartitionRole {
  kNone,
#define DYNAMO_PARTITION_ROLE(id, name, fill, description) id,
#include "dynamo/gui/overlays.def"
};

/// One node.
struct InspectNode {
  int index = 0;                         ///< position in the graph (inputs, body, output)
  std::string name;                      ///< the node's name ("conv2d_3")
  std::string op;                        ///< "placeholder", "call_function", "call_method", "output"
  std::string target;                    ///< opKey: "torch.conv2d", "torch.Tensor.view"; source for inputs
  std::string shortName;                 ///< "conv2d", "view", the input's source
  OpCategory category = OpCategory::kOther;  ///< colour
  std::string modulePath;                ///< "layer1.0.conv1"; "" at the top level
  SourceLocation location;               ///< the user line that made it
  std::vector<SourceLocation> userStack; ///< outermost first
  std::string args;                      ///< the arguments as printed ("%x, 2, dim=1")
  std::string printed;                   ///< the node as the graph printer writes it
  std::string tensor;                    ///< "f32[1, 64, 56, 56]" or ""
  std::string tensorDetail;              ///< shape, strides, dtype, device, requires_grad
  std::int64_t tensorBytes = -1;         ///< shape x dtype size; -1 when not a tensor
  PartitionRole partition = PartitionRole::kNone;  ///< AOT graphs: saved, recomputed, ...
  std::vector<int> inputs;               ///< nodes it uses, in argument order, each once
  std::vector<int> users;                ///< nodes that use it, in graph order
  DiffStatus diff = DiffStatus::kNone;   ///< in a diff graph
  std::vector<std::string> changes;      ///< kChanged: "shape: [8] -> [16]", ...
  /// Generated kernels that compute this node (indexes into InspectGraph::kernels()): the first
  /// is its fusion group; a value inlined into several kernels is computed by each. Empty for
  /// inputs, ATen calls and graphs without kernels.
  std::vector<int> kernels;
  /// With dynamic sizes: the shape with symbols ("[s0, 16]", "[2*s0, 16]"), for every node the
  /// stored graph gives symbolic sizes (TensorMeta::symShape); for inputs also what each symbol
  /// is ("s0 = x.size()[0] in [2, inf] (dynamic; example 16)", from the compile's
  /// dynamo.dynamic_shapes report). Empty when every size is static.
  std::string symbolicShape;
  std::vector<std::string> symbols;
};

/// A kernel a backend generated for the graph (the fused backend's, from the trace store:
/// storage::KernelRecord), as the views show it.
struct InspectKernel {
  std::string name;            ///< "k0_mul_add_relu"
  std::string language;        ///< "c++", "cuda"
  std::string source;          ///< the generated source
  std::string loops;           ///< "outer [8192] inner [1024]"
  bool cacheHit = false;       ///< loaded from the kernel disk cache (no compiler run)
  double compileMs = 0;        ///< the system compiler's wall time for it (0 on a hit)
  double lowerMs = 0;          ///< lowering and emitting the whole graph (shared by its kernels)
  double runUs = -1;           ///< mean wall time per call over its first runCalls calls; -1:
                               ///< not measured (storage::KernelRecord::runUs)
  int runCalls = 0;            ///< the calls runUs averages
  std::vector<int> nodes;      ///< the nodes it computes (its fusion group), graph order
};

/// A group of nodes the view can collapse: a module ("layer1.0"), or a run of consecutive items
/// of a level that holds more than kMaxGroupItems ("nodes 1-40").
struct InspectGroup {
  int id = 0;                      ///< index in InspectGraph::groups(); 0 is the root
  int parent = -1;                 ///< -1 for the root
  std::string path;                ///< "layer1.0"; chunks: parent path + "#3"
  std::string label;               ///< "layer1.0" / "nodes 120-159"
  bool chunk = false;              ///< a run of items, not a module
  std::vector<int> items;          ///< children in graph order: >= 0 a node, < 0 group ~id
  int totalNodes = 0;              ///< nodes beneath, at any depth
  int firstNode = 0;               ///< the first node beneath (graph order)
};

/// Levels holding more items than this are split into chunks of it.
inline constexpr int kMaxGroupItems = 40;

/// The graph as the inspector shows it. Immutable once built; cheap to share.
class InspectGraph {
 public:
  /// Builds from graph nodes already converted (tests and the diff build them directly). Module
  /// paths come from the nodes; groups are made here.
  static std::shared_ptr<const InspectGraph> make(std::vector<InspectNode> nodes, std::string hash,
                                                  std::vector<InspectKernel> kernels = {});

  const std::vector<InspectNode>& nodes() const { return nodes_; }
  const std::vector<InspectGroup>& groups() const { return groups_; }
  /// The kernels generated for this graph (InspectNode::kernels index them); empty when none
  /// were recorded.
  const std::vector<InspectKernel>& kernels() const { return kernels_; }
  const InspectNode& node(int i) const { return nodes_[static_cast<size_t>(i)]; }
  const InspectGroup& group(int id) const { return groups_[static_cast<size_t>(id)]; }
  /// The innermost group holding node i.
  int groupOf(int i) const { return groupOf_[static_cast<size_t>(i)]; }
  /// The module group with this path, or -1.
  int findGroup(const std::string& path) const;
  /// Ancestors of a group, root first, the group itself last.
  std::vector<int> groupChain(int group) const;
  /// A hash of the graph (of its stored JSON text), for the layout cache.
  const std::string& hash() const { return hash_; }
  /// Number of edges (node inputs).
  size_t edgeCount() const;

 private:
  void buildGroups();
  std::vector<InspectNode> nodes_;
  std::vector<InspectGroup> groups_;
  std::vector<InspectKernel> kernels_;
  std::vector<int> groupOf_;
  std::string hash_;
};

using InspectGraphPtr = std::shared_ptr<const InspectGraph>;

/// The inspector's graph of a core graph. `hash` names it in the layout cache.
InspectGraphPtr buildInspectGraph(const core::Graph& graph, std::string hash);

/// Reads the stored JSON text (core::readGraphJson) and builds the graph. Throws UserError
/// (kInvalidArgument) for text that is not a graph.
InspectGraphPtr inspectGraphFromJson(const std::string& json);

/// A short, stable hash of a text (the first 16 hex digits of its SHA-256).
std::string textHash(std::string_view text);

/// The module path of every node of `graph`, in node order ("" for the top level), derived from
/// the sources of parameter inputs ("self.layer1.0.conv1.weight") and the user stacks (module_paths.cpp).
std::vector<std::string> deriveModulePaths(const core::Graph& graph);

}  // namespace dynamo::gui
