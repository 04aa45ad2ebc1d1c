// Overlays: what the boxes of a graph view are coloured by (overlays.def): op kind, tensor
// size, the partition of an AOT graph, the status of a diff. One OverlayPainter per drawn view
// gives each box its fill and the view its legend; the scene and the SVG export share it.
// No Qt.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dynamo/gui/visible_graph.h"

namespace dynamo::gui {

/// The overlays (overlays.def).
enum class Overlay {
#define DYNAMO_OVERLAY(id, name, description) id,
#include "dynamo/gui/overlays.def"
};

/// "op kind", "tensor size", ... (the .def name).
std::string_view overlayName(Overlay o);
/// One line saying what the overlay shows.
std::string_view overlayDescription(Overlay o);
/// Every overlay, in .def order.
const std::vector<Overlay>& allOverlays();

/// "saved", "forward", ... and "#e31a1c" (the .def row); "" and "#ffffff" for kNone.
std::string_view partitionRoleName(PartitionRole r);
std::string_view partitionRoleColour(PartitionRole r);
/// The fill of a diff status ("#ffffff" for kNone).
std::string_view diffStatusColour(DiffStatus d);
/// The fusion-group fill of kernel k (InspectGraph::kernels() index; -1: no kernel, white).
std::string_view fusionFill(int kernel);

/// Whether the overlay has anything to say about `graph`: op kind always; tensor size when a
/// node has a tensor; partition when a node has a role (AOT graphs); diff for a diff's graph.
bool overlayApplies(Overlay o, const InspectGraph& graph);

/// The overlay a graph opens with (the window and the export): fusion group when the graph has
/// generated kernels, partition for the other AOT graphs (`index` < 0), else op kind.
Overlay defaultOverlay(const InspectGraph& graph, int index);

/// One legend row.
struct LegendEntry {
  std::string label;   ///< "saved", "conv", "64 KiB - 1 MiB"
  std::string colour;  ///< "#rrggbb"
};

/// "512 B", "4 KiB", "1.5 MiB".
std::string formatBytes(std::int64_t bytes);

/// The fills of one overlay over one graph (ranges are computed once, at construction).
class OverlayPainter {
 public:
  OverlayPainter(Overlay overlay, const InspectGraph& graph);
  /// The fill of a box: its node's, or for a collapsed group the aggregate of its nodes
  /// (tensor size: the largest; partition: the role most of its nodes have, ties to the first
  /// in .def order; diff: the unit's).
  std::string fill(const VisibleUnit& unit) const;
  /// The fill of one node.
  std::string nodeFill(int node) const;
  /// What the overlay says of a collapsed group, for its tooltip: "12 saved, 3 recomputed,
  /// 40 backward, 52 forward", "largest tensor 4 MiB", "2 kernels: k0_mean, k1_add" (fusion
  /// group; compile time adds "; compiled in 1.20 s (sum)"); "" for op kind and diff.
  std::string describeGroup(int group) const;
  /// The legend: categories, roles, size steps with their byte ranges, diff statuses.
  std::vector<LegendEntry> legend() const;
  Overlay overlay() const { return overlay_; }

 private:
  int sizeStep(std::int64_t bytes) const;
  int logStep(double value) const;  ///< compile time: step of a positive value on [minLog_, maxLog_]
  std::vector<int> groupKernels(int group) const;  ///< kernels computing any node beneath a group
  std::string kernelTimeFill(int kernel) const;
  std::int64_t groupBytes(int group) const;
  PartitionRole groupRole(int group) const;
  std::vector<int> roleCounts(int group) const;
  Overlay overlay_;
  const InspectGraph& graph_;
  double minLog_ = 0, maxLog_ = 0;  ///< log2 of the smallest and largest tensor (tensor size) or
                                    ///< kernel compile time in ms (compile time)
};

}  // namespace dynamo::gui
