// The laid-out visible graph as standalone SVG text: the same boxes, frames, colours and edges
// as the graph view, for `dynamo-inspect --export` and CI artifacts. Pure: no Qt, no files.
#pragma once

#include <string>

#include "dynamo/gui/overlays.h"
#include "dynamo/gui/visible_graph.h"

namespace dynamo::gui {

/// Renders `visible` as laid out by `layout`, boxes coloured by `overlay` (overlays.def).
/// `title` goes in the SVG's <title>.
std::string renderSvg(const InspectGraph& graph, const VisibleGraph& visible,
                      const LayoutResult& layout, const std::string& title,
                      Overlay overlay = Overlay::kOpKind);

}  // namespace dynamo::gui
