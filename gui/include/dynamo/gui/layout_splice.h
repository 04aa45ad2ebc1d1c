// The provisional layout of an expansion, made without Graphviz: when the user opens a collapsed
// module whose view is not in the layout cache, the view does not wait for dot (0.5 to 3 s on a
// dense block of densenet). It lays out the module's own boxes alone (a layered layout: each box
// one rank below its deepest predecessor inside the module, ranks in graph order), splices that
// block into the drawn layout where the collapsed box was, and stretches the plane around it so
// nothing overlaps: everything right of the old box's centre moves right by the block's extra
// width, everything below it down by its extra height (boxes, frames, edge control points; a
// frame around the old box grows). The full Graphviz layout, started at the same time in the
// layout process, replaces it when it comes.
//
//   drawn layout of `before` ----+                      +--> provisional LayoutResult of `after`
//                                 +--> spliceExpansion --+        (drawn at once)
//   `after` = before + group ----+                      layout process --> final LayoutResult
//
// No Qt: tested headless.
#pragma once

#include <optional>

#include "dynamo/gui/visible_graph.h"

namespace dynamo::gui {

/// A layout of `after` (the visible graph of `before`'s expanded groups plus `group`) made from
/// `beforeLayout` (the layout of `before`) and a layered layout of the group's boxes. Nothing
/// (std::nullopt) when `after` is not `before` with exactly that group opened: a box of `after`
/// outside the group that `beforeLayout` does not place, a group without a box in `before`, or a
/// frame nested inside the new one (the view then waits for Graphviz).
std::optional<LayoutResult> spliceExpansion(const VisibleGraph& before, const LayoutResult& beforeLayout,
                                            const VisibleGraph& after, int group);

}  // namespace dynamo::gui
