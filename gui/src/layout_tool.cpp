// dynamo-inspect-layout: lays out one DOT graph with Graphviz's dot engine, in a process of its
// own. Graphviz is neither thread-safe nor interruptible, so the inspector runs it here and kills
// the process to cancel a layout (gui/include/dynamo/gui/layout_engine.h).
//
//   stdin:  a DOT digraph (gui/src/layout_request.cpp writes it)
//   stdout: the positions, in points, y growing downwards (gui/src/layout_result.cpp reads them)
//             graph W H
//             node NAME X Y W H          (centre, size)
//             cluster NAME X1 Y1 X2 Y2   (box)
//             edge ID N X1 Y1 ... XN YN [tip X Y]  (cubic B-spline control points, arrow tip;
//                                                    ID = the edge's id)
//             end
//   exit 0; 1 with one line on stderr when the input is not DOT or the layout fails.
#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>

// The dot layout plugin, linked in (no plugin configuration file needed at run time).
extern "C" {
extern gvplugin_library_t gvplugin_dot_layout_LTX_library;
}

namespace {

lt_symlist_t kPreloaded[] = {
    {"gvplugin_dot_layout_LTX_library", &gvplugin_dot_layout_LTX_library},
    {nullptr, nullptr},
};

double flip(double y, double top) { return top - y; }

void writeClusters(Agraph_t* g, double top, std::ostream& out) {
  for (Agraph_t* sub = agfstsubg(g); sub; sub = agnxtsubg(sub)) {
    const char* name = agnameof(sub);
    if (name && std::string(name).rfind("cluster", 0) == 0) {
      const boxf bb = GD_bb(sub);
      out << "cluster " << name << ' ' << bb.LL.x << ' ' << flip(bb.UR.y, top) << ' ' << bb.UR.x
          << ' ' << flip(bb.LL.y, top) << '\n';
    }
    writeClusters(sub, top, out);
  }
}

void writeEdge(Agedge_t* e, double top, std::ostream& out) {
  const char* id = agget(e, const_cast<char*>("id"));
  const splines* spl = ED_spl(e);
  if (!id || !*id || !spl || spl->size == 0) return;
  const bezier& bz = spl->list[0];
  out << "edge " << id << ' ' << bz.size;
  for (int i = 0; i < bz.size; ++i) out << ' ' << bz.list[i].x << ' ' << flip(bz.list[i].y, top);
  if (bz.eflag) out << " tip " << bz.ep.x << ' ' << flip(bz.ep.y, top);
  out << '\n';
}

}  // namespace

int main() {
  std::string dot((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  GVC_t* gvc = gvContextPlugins(kPreloaded, 0);
  Agraph_t* g = agmemread(dot.c_str());
  if (!g) {
    std::fprintf(stderr, "dynamo-inspect-layout: the input is not a DOT graph\n");
    return 1;
  }
  if (gvLayout(gvc, g, "dot") != 0) {
    std::fprintf(stderr, "dynamo-inspect-layout: Graphviz could not lay the graph out\n");
    return 1;
  }
  std::ostringstream out;
  out.precision(6);
  const boxf bb = GD_bb(g);
  const double top = bb.UR.y;
  out << "graph " << bb.UR.x - bb.LL.x << ' ' << bb.UR.y - bb.LL.y << '\n';
  for (Agnode_t* n = agfstnode(g); n; n = agnxtnode(g, n)) {
    out << "node " << agnameof(n) << ' ' << ND_coord(n).x << ' ' << flip(ND_coord(n).y, top) << ' '
        << ND_width(n) * 72.0 << ' ' << ND_height(n) * 72.0 << '\n';
  }
  writeClusters(g, top, out);
  for (Agnode_t* n = agfstnode(g); n; n = agnxtnode(g, n))
    for (Agedge_t* e = agfstout(g, n); e; e = agnxtout(g, e)) writeEdge(e, top, out);
  out << "end\n";
  std::fwrite(out.str().data(), 1, out.str().size(), stdout);
  gvFreeLayout(gvc, g);
  agclose(g);
  gvFreeContext(gvc);
  return 0;
}
