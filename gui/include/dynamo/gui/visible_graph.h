// What the graph view shows of an InspectGraph for a set of expanded groups: the units (nodes,
// and collapsed groups drawn as one box), the clusters (expanded groups, drawn as frames), and
// the edges between units (an edge between two collapsed groups stands for every edge between
// their nodes). Only this is laid out, so Graphviz never sees more than kMaxLayoutUnits boxes
// however large the graph is.
//
//   InspectGraph + expanded groups --computeVisible--> VisibleGraph --toDot--> layout process
//                                                                    <--parseLayout-- positions
// No Qt.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "dynamo/gui/inspect_graph.h"

namespace dynamo::gui {

/// The most boxes the view lays out at once (dot takes about 1 s at 2,000 nodes here).
inline constexpr int kMaxLayoutUnits = 1500;

/// One box.
struct VisibleUnit {
  std::string key;        ///< DOT name: "n12" (node 12) or "g5" (collapsed group 5)
  int node = -1;          ///< the node, or -1
  int group = -1;         ///< the collapsed group, or -1
  std::string title;      ///< first line: op ("conv2d"), input source, or module path
  std::string subtitle;   ///< second line: tensor ("f32[1, 64, 56, 56]") or "69 nodes"
  OpCategory category = OpCategory::kOther;  ///< fill colour
  DiffStatus diff = DiffStatus::kNone;       ///< diff colour (a group: worst of its nodes)
  int cluster = -1;       ///< the VisibleCluster it sits in, -1 at the top
  double width = 0;       ///< points
  double height = 0;      ///< points
};

/// One edge between units (possibly standing for several edges of the graph).
struct VisibleEdge {
  std::string key;  ///< "e7": the DOT id
  int from = 0;     ///< unit index
  int to = 0;       ///< unit index
  int count = 0;    ///< graph edges it stands for
  int srcNode = 0;  ///< one of them: the producing node
  int dstNode = 0;  ///< ... and the consuming node
};

/// An expanded group, drawn as a frame around its units.
struct VisibleCluster {
  std::string key;     ///< "cluster_g5"
  int group = 0;       ///< the group
  int parent = -1;     ///< enclosing cluster, -1 at the top
  std::string label;   ///< module path
};

/// The laid-out part of a graph.
struct VisibleGraph {
  std::vector<VisibleUnit> units;
  std::vector<VisibleEdge> edges;
  std::vector<VisibleCluster> clusters;
  std::vector<int> unitOfNode;  ///< node -> the unit showing it (itself or a collapsed group)
  /// The unit showing a node.
  int unitOf(int node) const { return unitOfNode[static_cast<size_t>(node)]; }
};

/// The units, clusters and edges shown when `expanded` groups are open (the root always is).
VisibleGraph computeVisible(const InspectGraph& graph, const std::set<int>& expanded);

/// How many units the view would show with `group` expanded too (cheap: no edges).
int unitsIfExpanded(const InspectGraph& graph, const std::set<int>& expanded, int group);

/// The groups to open so that node `node` is visible (its chain of groups below the root).
std::set<int> groupsToReveal(const InspectGraph& graph, int node);

/// The DOT text Graphviz lays out: fixed-size boxes named by unit key, clusters by cluster key,
/// edges with id = edge key. The same visible graph always gives the same text (the layout
/// cache key is a hash of it).
std::string toDot(const VisibleGraph& visible);

/// Positions read back from the layout process (points, y downwards).
struct LayoutBox {
  double x = 0, y = 0, w = 0, h = 0;  ///< centre (nodes) or top-left (clusters), and size
};
struct LayoutResult {
  double width = 0, height = 0;                             ///< the drawing's size
  std::map<std::string, LayoutBox> nodes;                   ///< unit key -> centre and size
  std::map<std::string, LayoutBox> clusters;                ///< cluster key -> box
  std::map<std::string, std::vector<double>> edges;         ///< edge key -> x0 y0 x1 y1 ... (B-spline)
  std::map<std::string, LayoutBox> tips;                    ///< edge key -> arrow tip (x, y)
};

/// Parses the layout process's output. False, with `error` set, for truncated or foreign text.
bool parseLayout(const std::string& text, LayoutResult& out, std::string& error);

}  // namespace dynamo::gui
