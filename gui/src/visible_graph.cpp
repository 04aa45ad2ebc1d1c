// computeVisible, toDot and parseLayout (see visible_graph.h).
#include "dynamo/gui/visible_graph.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>
#include <unordered_map>

namespace dynamo::gui {
namespace {

constexpr double kCharWidth = 7.4;   // points per character of the view's bold 9 pt titles
constexpr double kUnitHeight = 34;   // two lines
constexpr double kPadding = 18;

double textWidth(const std::string& s) { return static_cast<double>(s.size()) * kCharWidth; }

void sizeUnit(VisibleUnit& u) {
  u.width = std::max(56.0, std::max(textWidth(u.title), textWidth(u.subtitle)) + kPadding);
  u.height = kUnitHeight;
}

DiffStatus groupDiff(const InspectGraph& g, const InspectGroup& group) {
  int same = 0, added = 0, removed = 0, changed = 0, none = 0;
  auto visit = [&](const InspectGroup& gr, auto& self) -> void {
    for (int item : gr.items) {
      if (item < 0) {
        self(g.group(~item), self);
        continue;
      }
      switch (g.node(item).diff) {
        case DiffStatus::kSame: ++same; break;
        case DiffStatus::kAdded: ++added; break;
        case DiffStatus::kRemoved: ++removed; break;
        case DiffStatus::kChanged: ++changed; break;
        case DiffStatus::kNone: ++none; break;
      }
    }
  };
  visit(group, visit);
  if (none > 0) return DiffStatus::kNone;
  if (added > 0 && same + removed + changed == 0) return DiffStatus::kAdded;
  if (removed > 0 && same + added + changed == 0) return DiffStatus::kRemoved;
  if (added + removed + changed > 0) return DiffStatus::kChanged;
  return DiffStatus::kSame;
}

class Builder {
 public:
  Builder(const InspectGraph& g, const std::set<int>& expanded, bool withEdges)
      : g_(g), expanded_(expanded), withEdges_(withEdges) {
    out_.unitOfNode.assign(g.nodes().size(), -1);
  }

  VisibleGraph run() {
    visitGroup(0, -1);
    if (withEdges_) addEdges();
    return std::move(out_);
  }

 private:
  void visitGroup(int id, int cluster) {
    for (int item : g_.group(id).items) {
      if (item >= 0) {
        addNode(item, cluster);
        continue;
      }
      const int child = ~item;
      const InspectGroup& cg = g_.group(child);
      if (expanded_.count(child)) {
        VisibleCluster c;
        c.key = "cluster_g" + std::to_string(child);
        c.group = child;
        c.parent = cluster;
        c.label = cg.label;
        out_.clusters.push_back(c);
        visitGroup(child, static_cast<int>(out_.clusters.size()) - 1);
      } else {
        addGroup(child, cluster);
      }
    }
  }

  void addNode(int i, int cluster) {
    const InspectNode& n = g_.node(i);
    VisibleUnit u;
    u.key = "n" + std::to_string(i);
    u.node = i;
    u.title = n.shortName;
    u.subtitle = n.tensor.empty() ? n.name : n.tensor;
    u.category = n.category;
    u.diff = n.diff;
    u.cluster = cluster;
    sizeUnit(u);
    out_.unitOfNode[static_cast<size_t>(i)] = static_cast<int>(out_.units.size());
    out_.units.push_back(std::move(u));
  }

  void addGroup(int id, int cluster) {
    const InspectGroup& gr = g_.group(id);
    VisibleUnit u;
    u.key = "g" + std::to_string(id);
    u.group = id;
    u.title = gr.label;
    // Inside an open module, a submodule is named relative to it ("conv1" in layer1.0).
    int up = gr.parent;
    while (up > 0 && g_.group(up).chunk) up = g_.group(up).parent;
    const std::string& prefix = up > 0 ? g_.group(up).path : std::string();
    if (!gr.chunk && !prefix.empty() && gr.path.rfind(prefix + ".", 0) == 0 && cluster >= 0 &&
        !std::isdigit(static_cast<unsigned char>(gr.path[prefix.size() + 1])))
      u.title = gr.path.substr(prefix.size() + 1);  // (items of a Sequential keep "layer1.0")
    u.subtitle = std::to_string(gr.totalNodes) + (gr.totalNodes == 1 ? " node" : " nodes");
    u.category = OpCategory::kGroup;
    u.diff = groupDiff(g_, gr);
    u.cluster = cluster;
    sizeUnit(u);
    const int unit = static_cast<int>(out_.units.size());
    markNodes(gr, unit);
    out_.units.push_back(std::move(u));
  }

  void markNodes(const InspectGroup& gr, int unit) {
    for (int item : gr.items) {
      if (item >= 0) out_.unitOfNode[static_cast<size_t>(item)] = unit;
      else markNodes(g_.group(~item), unit);
    }
  }

  void addEdges() {
    std::unordered_map<long long, int> index;
    for (const InspectNode& n : g_.nodes()) {
      const int to = out_.unitOfNode[static_cast<size_t>(n.index)];
      for (int in : n.inputs) {
        const int from = out_.unitOfNode[static_cast<size_t>(in)];
        if (from == to) continue;
        const long long key = static_cast<long long>(from) * 1000003LL + to;
        auto it = index.find(key);
        if (it != index.end()) {
          out_.edges[static_cast<size_t>(it->second)].count += 1;
          continue;
        }
        VisibleEdge e;
        e.key = "e" + std::to_string(out_.edges.size());
        e.from = from;
        e.to = to;
        e.count = 1;
        e.srcNode = in;
        e.dstNode = n.index;
        index[key] = static_cast<int>(out_.edges.size());
        out_.edges.push_back(std::move(e));
      }
    }
  }

  const InspectGraph& g_;
  const std::set<int>& expanded_;
  bool withEdges_;
  VisibleGraph out_;
};

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

void writeCluster(const VisibleGraph& v, int cluster, const std::vector<std::vector<int>>& unitsIn,
                  const std::vector<std::vector<int>>& clustersIn, std::ostringstream& out,
                  int depth) {
  const std::string indent(static_cast<size_t>(depth) * 2, ' ');
  const size_t slot = static_cast<size_t>(cluster + 1);
  for (int c : clustersIn[slot]) {
    const VisibleCluster& vc = v.clusters[static_cast<size_t>(c)];
    out << indent << "subgraph " << vc.key << " {\n"
        << indent << "  label=" << quote(vc.label) << ";\n";
    writeCluster(v, c, unitsIn, clustersIn, out, depth + 1);
    out << indent << "}\n";
  }
  char buf[64];
  for (int u : unitsIn[slot]) {
    const VisibleUnit& vu = v.units[static_cast<size_t>(u)];
    std::snprintf(buf, sizeof buf, "%.3f", vu.width / 72.0);
    out << indent << vu.key << " [width=" << buf;
    std::snprintf(buf, sizeof buf, "%.3f", vu.height / 72.0);
    out << ", height=" << buf << "];\n";
  }
}

}  // namespace

VisibleGraph computeVisible(const InspectGraph& graph, const std::set<int>& expanded) {
  return Builder(graph, expanded, true).run();
}

int unitsIfExpanded(const InspectGraph& graph, const std::set<int>& expanded, int group) {
  std::set<int> more = expanded;
  more.insert(group);
  return static_cast<int>(Builder(graph, more, false).run().units.size());
}

std::set<int> groupsToReveal(const InspectGraph& graph, int node) {
  std::set<int> out;
  for (int g : graph.groupChain(graph.groupOf(node)))
    if (g != 0) out.insert(g);
  return out;
}

std::string toDot(const VisibleGraph& v) {
  std::vector<std::vector<int>> unitsIn(v.clusters.size() + 1), clustersIn(v.clusters.size() + 1);
  for (size_t i = 0; i < v.units.size(); ++i)
    unitsIn[static_cast<size_t>(v.units[i].cluster + 1)].push_back(static_cast<int>(i));
  for (size_t i = 0; i < v.clusters.size(); ++i)
    clustersIn[static_cast<size_t>(v.clusters[i].parent + 1)].push_back(static_cast<int>(i));
  std::ostringstream out;
  out << "digraph G {\n"
         "  graph [rankdir=TB, nodesep=0.25, ranksep=0.4, fontsize=10, fontname=\"Helvetica\"];\n"
         "  node [shape=box, fixedsize=true, label=\"\"];\n"
         "  edge [arrowsize=0.6];\n";
  writeCluster(v, -1, unitsIn, clustersIn, out, 1);
  for (const VisibleEdge& e : v.edges)
    out << "  " << v.units[static_cast<size_t>(e.from)].key << " -> "
        << v.units[static_cast<size_t>(e.to)].key << " [id=" << e.key << "];\n";
  out << "}\n";
  return out.str();
}

bool parseLayout(const std::string& text, LayoutResult& out, std::string& error) {
  out = LayoutResult{};
  std::istringstream in(text);
  std::string line;
  bool sawGraph = false, sawEnd = false;
  int lineNo = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    std::istringstream ls(line);
    std::string tag, name;
    ls >> tag;
    bool ok = true;
    if (tag == "graph") {
      ok = static_cast<bool>(ls >> out.width >> out.height);
      sawGraph = true;
    } else if (tag == "node") {
      LayoutBox b;
      ok = static_cast<bool>(ls >> name >> b.x >> b.y >> b.w >> b.h);
      out.nodes[name] = b;
    } else if (tag == "cluster") {
      double x1, y1, x2, y2;
      ok = static_cast<bool>(ls >> name >> x1 >> y1 >> x2 >> y2);
      out.clusters[name] = LayoutBox{x1, y1, x2 - x1, y2 - y1};
    } else if (tag == "edge") {
      size_t n = 0;
      ok = static_cast<bool>(ls >> name >> n) && n < 100000;
      std::vector<double> pts(2 * n);
      for (size_t i = 0; ok && i < 2 * n; ++i) ok = static_cast<bool>(ls >> pts[i]);
      std::string tip;
      if (ok && ls >> tip) {
        LayoutBox t;
        ok = tip == "tip" && static_cast<bool>(ls >> t.x >> t.y);
        out.tips[name] = t;
      }
      out.edges[name] = std::move(pts);
    } else if (tag == "end") {
      sawEnd = true;
      break;
    } else if (!tag.empty()) {
      ok = false;
    }
    if (!ok) {
      error = "layout output line " + std::to_string(lineNo) + " is not understood: " + line.substr(0, 80);
      return false;
    }
  }
  if (!sawGraph || !sawEnd) {
    error = "the layout output is incomplete (no 'graph' or 'end' line)";
    return false;
  }
  return true;
}

}  // namespace dynamo::gui
