// renderSvg (see svg_writer.h).
#include "dynamo/gui/svg_writer.h"

#include <cstdio>
#include <sstream>

namespace dynamo::gui {
namespace {

std::string xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

std::string renderSvg(const InspectGraph& graph, const VisibleGraph& visible,
                      const LayoutResult& layout, const std::string& title, Overlay overlay) {
  const OverlayPainter painter(overlay, graph);
  std::ostringstream o;
  const double w = layout.width + 20, h = layout.height + 20;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(w) << "\" height=\"" << num(h)
    << "\" viewBox=\"-10 -10 " << num(w) << ' ' << num(h) << "\" font-family=\"DejaVu Sans, Helvetica, sans-serif\">\n"
    << "<title>" << xml(title) << "</title>\n"
    << "<rect x=\"-10\" y=\"-10\" width=\"" << num(w) << "\" height=\"" << num(h) << "\" fill=\"#fcfcfc\"/>\n";
  for (const VisibleCluster& c : visible.clusters) {
    auto it = layout.clusters.find(c.key);
    if (it == layout.clusters.end()) continue;
    const LayoutBox& b = it->second;
    o << "<g class=\"module\"><rect x=\"" << num(b.x) << "\" y=\"" << num(b.y) << "\" width=\"" << num(b.w)
      << "\" height=\"" << num(b.h) << "\" fill=\"#f4f4ff\" stroke=\"#8888aa\" stroke-dasharray=\"4 2\"/>"
      << "<text x=\"" << num(b.x + b.w / 2) << "\" y=\"" << num(b.y + 12) << "\" font-size=\"10\" text-anchor=\"middle\" fill=\"#333366\">"
      << xml(c.label) << "</text></g>\n";
  }
  for (const VisibleEdge& e : visible.edges) {
    auto it = layout.edges.find(e.key);
    if (it == layout.edges.end() || it->second.size() < 2) continue;
    const std::vector<double>& p = it->second;
    o << "<path fill=\"none\" stroke=\"#666666\" d=\"M" << num(p[0]) << ',' << num(p[1]);
    for (size_t i = 2; i + 5 < p.size(); i += 6)
      o << " C" << num(p[i]) << ',' << num(p[i + 1]) << ' ' << num(p[i + 2]) << ',' << num(p[i + 3]) << ' '
        << num(p[i + 4]) << ',' << num(p[i + 5]);
    auto tip = layout.tips.find(e.key);
    if (tip != layout.tips.end()) o << " L" << num(tip->second.x) << ',' << num(tip->second.y);
    const InspectNode& src = graph.node(e.srcNode);
    o << "\"><title>" << xml(src.name + " -> " + graph.node(e.dstNode).name +
                             (src.tensor.empty() ? "" : " " + src.tensor)) << "</title></path>\n";
  }
  for (const VisibleUnit& u : visible.units) {
    auto it = layout.nodes.find(u.key);
    if (it == layout.nodes.end()) continue;
    const LayoutBox& b = it->second;
    const std::string fill = painter.fill(u);
    const double x = b.x - b.w / 2, y = b.y - b.h / 2;
    o << "<g class=\"" << (u.group >= 0 ? "group" : "node") << "\">";
    if (u.node >= 0) o << "<title>" << xml(graph.node(u.node).printed) << "</title>";
    if (u.group >= 0)
      o << "<rect x=\"" << num(x + 4) << "\" y=\"" << num(y + 4) << "\" width=\"" << num(b.w) << "\" height=\""
        << num(b.h) << "\" rx=\"4\" fill=\"" << fill << "\" stroke=\"#777777\"/>";
    o << "<rect x=\"" << num(x) << "\" y=\"" << num(y) << "\" width=\"" << num(b.w) << "\" height=\"" << num(b.h)
      << "\" rx=\"4\" fill=\"" << fill << "\" stroke=\"#555555\"/>"
      << "<text x=\"" << num(b.x) << "\" y=\"" << num(b.y - 3) << "\" font-size=\"10\" font-weight=\"bold\" text-anchor=\"middle\">"
      << xml(u.title) << "</text>"
      << "<text x=\"" << num(b.x) << "\" y=\"" << num(b.y + 11) << "\" font-size=\"9\" text-anchor=\"middle\" fill=\"#333333\">"
      << xml(u.subtitle) << "</text></g>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace dynamo::gui
