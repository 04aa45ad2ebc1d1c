// spliceExpansion (see layout_splice.h).
#include "dynamo/gui/layout_splice.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

namespace dynamo::gui {
namespace {

// The spacing toDot asks Graphviz for (nodesep 0.25 in, ranksep 0.4 in), in points, and a
// frame's margin and title height as dot draws them at fontsize 10.
constexpr double kNodeSep = 18;
constexpr double kRankSep = 28.8;
constexpr double kMargin = 8;
constexpr double kTitle = 22;
constexpr double kArrow = 6;  // the arrow head's length: the curve stops short of the tip

/// The stretch of the plane that makes room for the block: right of the old box's centre moves
/// right by dx, below it down by dy. Monotone in each axis, so boxes that did not overlap still
/// do not.
struct Stretch {
  double cx, cy, dx, dy;
  double x(double v) const { return v > cx ? v + dx : v; }
  double y(double v) const { return v > cy ? v + dy : v; }
  LayoutBox centre(const LayoutBox& b) const { return {x(b.x), y(b.y), b.w, b.h}; }
  LayoutBox frame(const LayoutBox& b) const {  // top-left and size
    const double x1 = x(b.x), y1 = y(b.y);
    return {x1, y1, x(b.x + b.w) - x1, y(b.y + b.h) - y1};
  }
};

/// The boxes of the opened group, each one rank below its deepest predecessor inside the group
/// (predecessors earlier in graph order only, so cycles between collapsed boxes cannot loop), the
/// ranks' boxes side by side in graph order. Centres relative to the block's top-left; returns
/// the block's content size.
std::pair<double, double> layerInner(const VisibleGraph& after, const std::vector<int>& inner,
                                     std::map<int, LayoutBox>& at) {
  std::map<int, int> rank;
  for (int u : inner) rank[u] = 0;
  std::map<int, std::vector<int>> preds;
  for (const VisibleEdge& e : after.edges)
    if (e.from < e.to && rank.count(e.from) && rank.count(e.to)) preds[e.to].push_back(e.from);
  int ranks = 0;
  for (int u : inner) {  // ascending unit index: predecessors are done first
    for (int p : preds[u]) rank[u] = std::max(rank[u], rank[p] + 1);
    ranks = std::max(ranks, rank[u] + 1);
  }
  std::vector<std::vector<int>> rows(static_cast<size_t>(ranks));
  for (int u : inner) rows[static_cast<size_t>(rank[u])].push_back(u);
  std::vector<double> rowWidth(rows.size(), 0), rowHeight(rows.size(), 0);
  double width = 0, height = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    for (int u : rows[r]) {
      const VisibleUnit& vu = after.units[static_cast<size_t>(u)];
      rowWidth[r] += vu.width + (rowWidth[r] > 0 ? kNodeSep : 0);
      rowHeight[r] = std::max(rowHeight[r], vu.height);
    }
    width = std::max(width, rowWidth[r]);
    height += rowHeight[r] + (r > 0 ? kRankSep : 0);
  }
  double y = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    double x = (width - rowWidth[r]) / 2;
    for (int u : rows[r]) {
      const VisibleUnit& vu = after.units[static_cast<size_t>(u)];
      at[u] = LayoutBox{x + vu.width / 2, y + rowHeight[r] / 2, vu.width, vu.height};
      x += vu.width + kNodeSep;
    }
    y += rowHeight[r] + kRankSep;
  }
  return {width, height};
}

/// A straight edge from one box's border to the other's, as a one-segment B-spline and a tip.
void straightEdge(const LayoutBox& from, const LayoutBox& to, std::vector<double>& pts, LayoutBox& tip) {
  double x0 = from.x, y0 = from.y, x1 = to.x, y1 = to.y;
  if (to.y - from.y > (from.h + to.h) / 2) {  // below
    y0 += from.h / 2;
    y1 -= to.h / 2;
  } else if (from.y - to.y > (from.h + to.h) / 2) {  // above
    y0 -= from.h / 2;
    y1 += to.h / 2;
  } else {  // beside
    x0 += to.x > from.x ? from.w / 2 : -from.w / 2;
    x1 += to.x > from.x ? -to.w / 2 : to.w / 2;
  }
  tip = LayoutBox{x1, y1, 0, 0};
  const double len = std::hypot(x1 - x0, y1 - y0);
  if (len > kArrow) {
    x1 -= (x1 - x0) / len * kArrow;
    y1 -= (y1 - y0) / len * kArrow;
  }
  pts = {x0, y0, x0 + (x1 - x0) / 3, y0 + (y1 - y0) / 3, x0 + 2 * (x1 - x0) / 3, y0 + 2 * (y1 - y0) / 3, x1, y1};
}

}  // namespace

std::optional<LayoutResult> spliceExpansion(const VisibleGraph& before, const LayoutResult& beforeLayout,
                                            const VisibleGraph& after, int group) {
  const std::string boxKey = "g" + std::to_string(group);
  const auto old = beforeLayout.nodes.find(boxKey);
  if (old == beforeLayout.nodes.end()) return std::nullopt;
  int cluster = -1;
  for (size_t c = 0; c < after.clusters.size(); ++c)
    if (after.clusters[c].group == group) cluster = static_cast<int>(c);
  if (cluster < 0) return std::nullopt;
  for (const VisibleCluster& c : after.clusters)
    if (c.parent == cluster) return std::nullopt;  // a frame inside the new one
  for (const VisibleCluster& c : after.clusters)
    if (c.group != group && !beforeLayout.clusters.count(c.key)) return std::nullopt;
  std::vector<int> inner;
  for (size_t u = 0; u < after.units.size(); ++u) {
    if (after.units[u].cluster == cluster) inner.push_back(static_cast<int>(u));
    else if (!beforeLayout.nodes.count(after.units[u].key)) return std::nullopt;
  }
  if (inner.empty()) return std::nullopt;

  // The block: the group's boxes laid out alone, in a frame where the collapsed box was.
  std::map<int, LayoutBox> at;
  const auto [contentW, contentH] = layerInner(after, inner, at);
  const LayoutBox& ob = old->second;
  const double blockW = std::max(ob.w, contentW + 2 * kMargin);
  const double blockH = std::max(ob.h, contentH + 2 * kMargin + kTitle);
  const double left = ob.x - ob.w / 2, top = ob.y - ob.h / 2;
  const Stretch s{ob.x, ob.y, blockW - ob.w, blockH - ob.h};

  LayoutResult out;
  out.width = beforeLayout.width + s.dx;
  out.height = beforeLayout.height + s.dy;
  for (const VisibleUnit& u : after.units)
    if (u.cluster != cluster) out.nodes[u.key] = s.centre(beforeLayout.nodes.at(u.key));
  const double innerLeft = left + (blockW - contentW) / 2, innerTop = top + kTitle + kMargin;
  for (const auto& [u, b] : at)
    out.nodes[after.units[static_cast<size_t>(u)].key] = LayoutBox{innerLeft + b.x, innerTop + b.y, b.w, b.h};
  for (const VisibleCluster& c : after.clusters)
    if (c.group != group) out.clusters[c.key] = s.frame(beforeLayout.clusters.at(c.key));
  out.clusters[after.clusters[static_cast<size_t>(cluster)].key] = LayoutBox{left, top, blockW, blockH};

  // Edges between boxes that were drawn before keep their curve (stretched); the others, to and
  // from the opened group's boxes, are straight until Graphviz draws them.
  std::map<std::pair<std::string, std::string>, std::string> oldEdges;
  for (const VisibleEdge& e : before.edges)
    oldEdges[{before.units[static_cast<size_t>(e.from)].key, before.units[static_cast<size_t>(e.to)].key}] = e.key;
  for (const VisibleEdge& e : after.edges) {
    const std::string& from = after.units[static_cast<size_t>(e.from)].key;
    const std::string& to = after.units[static_cast<size_t>(e.to)].key;
    const auto was = oldEdges.find({from, to});
    if (was != oldEdges.end() && beforeLayout.edges.count(was->second)) {
      std::vector<double> pts = beforeLayout.edges.at(was->second);
      for (size_t i = 0; i + 1 < pts.size(); i += 2) {
        pts[i] = s.x(pts[i]);
        pts[i + 1] = s.y(pts[i + 1]);
      }
      out.edges[e.key] = std::move(pts);
      const auto tip = beforeLayout.tips.find(was->second);
      if (tip != beforeLayout.tips.end()) out.tips[e.key] = s.centre(tip->second);
      continue;
    }
    LayoutBox tip;
    straightEdge(out.nodes.at(from), out.nodes.at(to), out.edges[e.key], tip);
    out.tips[e.key] = tip;
  }
  out.width = std::max(out.width, left + blockW);
  out.height = std::max(out.height, top + blockH);
  return out;
}

}  // namespace dynamo::gui
