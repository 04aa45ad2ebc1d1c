// The laid-out visible graph as standalone SVG text: the same boxes, frames, colours and edges
// as the graph view, for `dynamo-inspect --export` and CI artifacts. Pure: no Qt, no files.
#pragma once

#include <string>

#include "dynamo/gui/visible_graph.h"

namespace dynamo::gui {

/// Renders `visible` as laid out by `layout`; boxes coloured by op category, or by diff status
/// when `diffColours` is set. `title` goes in the SVG's <title>.
std::string renderSvg(const InspectGraph& graph, const VisibleGraph& visible,
                      const LayoutResult& layout, const std::string& title, bool diffColours = false);

}  // namespace dynamo::gui
