// The inspector's graph model without Qt: module paths, op categories, groups and chunks, the
// visible graph and its DOT text, layout output parsing, the diff, the SVG writer.
#include <algorithm>
#include <map>
#include <set>

#include "dynamo/core/graph_serializer.h"
#include "dynamo/gui/graph_diff.h"
#include "dynamo/gui/inspect_graph.h"
#include "dynamo/gui/svg_writer.h"
#include "dynamo/gui/visible_graph.h"
#include "dynamo_catch.h"
#include "gui_test_support.h"

using namespace dynamo;
using namespace dynamo::gui;

namespace {

std::map<std::string, std::string> moduleByName(const InspectGraph& g) {
  std::map<std::string, std::string> out;
  for (const InspectNode& n : g.nodes()) out[n.name] = n.modulePath;
  return out;
}

int nodeNamed(const InspectGraph& g, const std::string& name) {
  for (const InspectNode& n : g.nodes())
    if (n.name == name) return n.index;
  return -1;
}

}  // namespace

TEST_CASE("module paths come from parameters and user stacks") {
  auto g = buildInspectGraph(testing::makeResnetLike(), "h");
  auto m = moduleByName(*g);
  CHECK(m["x"] == "");
  CHECK(m["self_conv1_weight"] == "conv1");
  CHECK(m["conv2d"] == "conv1");
  CHECK(m["batch_norm"] == "bn1");
  CHECK(m["relu"] == "relu");                  // self.relu(x): a module without parameters
  CHECK(m["conv2d_1"] == "layer1.0.conv1");
  CHECK(m["relu_1"] == "layer1.0.relu");
  CHECK(m["iadd"] == "layer1.0");              // out += identity, in block 0 (not block 1)
  CHECK(m["relu_2"] == "layer1.0.relu");
  CHECK(m["conv2d_3"] == "layer1.1.conv1");
  CHECK(m["iadd_1"] == "layer1.1");
  CHECK(m["flatten"] == "");
  CHECK(m["linear"] == "fc");
  CHECK(m["output"] == "");
}

TEST_CASE("op categories follow the target") {
  CHECK(categorizeOp("call_function", "torch.conv2d") == OpCategory::kConv);
  CHECK(categorizeOp("call_function", "torch.ops.aten.convolution.default") == OpCategory::kConv);
  CHECK(categorizeOp("call_function", "torch._C._nn.linear") == OpCategory::kMatmul);
  CHECK(categorizeOp("call_function", "torch.ops.aten.addmm.default") == OpCategory::kMatmul);
  CHECK(categorizeOp("call_function", "torch.nn.functional.batch_norm") == OpCategory::kNorm);
  CHECK(categorizeOp("call_function", "torch.nn.functional.relu") == OpCategory::kActivation);
  CHECK(categorizeOp("call_method", "relu_") == OpCategory::kActivation);
  CHECK(categorizeOp("call_function", "operator.iadd") == OpCategory::kElementwise);
  CHECK(categorizeOp("call_function", "operator.getitem") == OpCategory::kShape);
  CHECK(categorizeOp("call_method", "view") == OpCategory::kShape);
  CHECK(categorizeOp("call_function", "torch.nn.functional.adaptive_avg_pool2d") == OpCategory::kPool);
  CHECK(categorizeOp("call_method", "sum") == OpCategory::kReduction);
  CHECK(categorizeOp("call_function", "builtins.print") == OpCategory::kOther);
  CHECK(categorizeOp("placeholder", "x") == OpCategory::kInput);
  CHECK(opCategoryName(OpCategory::kConv) == "conv");
  CHECK(opCategoryColour(OpCategory::kConv) == "#fb8072");
  CHECK(allOpCategories().size() == 13);
}

TEST_CASE("groups nest by module path and collapse to one box each") {
  auto g = buildInspectGraph(testing::makeResnetLike(), "h");
  const int layer1 = g->findGroup("layer1");
  const int block0 = g->findGroup("layer1.0");
  REQUIRE(layer1 > 0);
  REQUIRE(block0 > 0);
  CHECK(g->group(block0).parent == layer1);
  CHECK(g->group(layer1).totalNodes == g->group(block0).totalNodes + g->group(g->findGroup("layer1.1")).totalNodes);
  // Top level: x, conv1, bn1, relu, layer1, flatten, fc, output.
  VisibleGraph v = computeVisible(*g, {});
  std::vector<std::string> titles;
  for (const VisibleUnit& u : v.units) titles.push_back(u.title);
  CHECK(titles == std::vector<std::string>{"x", "conv1", "bn1", "relu", "layer1", "flatten", "fc", "output"});
  CHECK(v.clusters.empty());
  // Edges between collapsed boxes stand for the edges between their nodes; no self-loops.
  for (const VisibleEdge& e : v.edges) CHECK(e.from != e.to);
  CHECK(v.edges.size() == 7);
  // Expanding layer1 shows its two blocks inside a frame.
  VisibleGraph v2 = computeVisible(*g, {layer1});
  REQUIRE(v2.clusters.size() == 1);
  CHECK(v2.clusters[0].label == "layer1");
  int inCluster = 0;
  for (const VisibleUnit& u : v2.units) inCluster += u.cluster == 0;
  CHECK(inCluster == 2);
  CHECK(unitsIfExpanded(*g, {}, layer1) == static_cast<int>(v2.units.size()));
  // Revealing a node opens its chain of groups.
  const int conv = nodeNamed(*g, "conv2d_3");
  CHECK(groupsToReveal(*g, conv) == std::set<int>{layer1, g->findGroup("layer1.1"), g->findGroup("layer1.1.conv1")});
}

TEST_CASE("a level with too many items is split into chunks, so the top level stays small") {
  auto g = buildInspectGraph(testing::makeChain(10000), "h");
  const VisibleGraph v = computeVisible(*g, {});
  CHECK(v.units.size() <= static_cast<size_t>(kMaxGroupItems));
  CHECK(g->group(0).totalNodes == 10002);
  // Every node is reachable, once.
  std::vector<int> seen(g->nodes().size(), 0);
  for (const InspectGroup& gr : g->groups())
    for (int item : gr.items)
      if (item >= 0) seen[static_cast<size_t>(item)]++;
  CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  // A chunk's label names its first node and size.
  const InspectGroup& first = g->group(~g->group(0).items[0]);
  CHECK(first.chunk);
  CHECK(first.label.find("nodes from x") != std::string::npos);
}

TEST_CASE("the DOT text is deterministic and the layout output parses") {
  auto g = buildInspectGraph(testing::makeResnetLike(), "h");
  const VisibleGraph v = computeVisible(*g, {g->findGroup("layer1")});
  const std::string dot = toDot(v);
  CHECK(dot == toDot(computeVisible(*g, {g->findGroup("layer1")})));
  CHECK(dot.find("subgraph cluster_g") != std::string::npos);
  CHECK(dot.find("[id=e0]") != std::string::npos);
  LayoutResult r;
  std::string error;
  REQUIRE(parseLayout("graph 100 200\nnode n0 50 20 54 36\ncluster cluster_g1 8 8 96 150\n"
                      "edge e0 4 1 2 3 4 5 6 7 8 tip 9 10\nend\n", r, error));
  CHECK(r.width == 100);
  CHECK(r.nodes.at("n0").y == 20);
  CHECK(r.clusters.at("cluster_g1").h == 142);
  CHECK(r.edges.at("e0").size() == 8);
  CHECK(r.tips.at("e0").x == 9);
  CHECK_FALSE(parseLayout("graph 1 1\nnode n0 1 2\n", r, error));
  CHECK(error == "layout output line 2 is not understood: node n0 1 2");
  CHECK_FALSE(parseLayout("graph 1 1\n", r, error));
  CHECK(error == "the layout output is incomplete (no 'graph' or 'end' line)");
}

TEST_CASE("diff: matched, added, removed and changed nodes") {
  auto a = buildInspectGraph(testing::makeResnetLike(64, false), "a");
  auto b = buildInspectGraph(testing::makeResnetLike(32, true), "b");
  GraphDiff d = diffGraphs(*a, *b);
  CHECK(d.added == 1);    // out = out + 1 in block 1
  CHECK(d.removed == 0);
  CHECK(d.matched == static_cast<int>(a->nodes().size()));
  // Every call changed its tensor shape (64 -> 32 channels).
  const int conv = nodeNamed(*b, "conv2d_1");
  REQUIRE(conv >= 0);
  CHECK(d.beforeOfAfter[static_cast<size_t>(conv)] == nodeNamed(*a, "conv2d_1"));
  CHECK(d.matchRound[static_cast<size_t>(conv)] == 2);
  const InspectNode& mc = d.merged->node(conv);
  CHECK(mc.diff == DiffStatus::kChanged);
  REQUIRE_FALSE(mc.changes.empty());
  CHECK(mc.changes[0] == "tensor: shape [1, 64, 8, 8], torch.float32, cpu -> shape [1, 32, 8, 8], torch.float32, cpu");
  const int add = nodeNamed(*b, "add");
  CHECK(d.merged->node(add).diff == DiffStatus::kAdded);
  CHECK(diffSummary(d) == std::to_string(d.matched) + " nodes matched, 1 added, 0 removed, " +
                              std::to_string(d.changed.size()) + " changed");
  // The other way round the extra node is removed, and kept in the merged graph with its edges.
  GraphDiff r = diffGraphs(*b, *a);
  CHECK(r.removed == 1);
  CHECK(r.added == 0);
  CHECK(r.merged->nodes().size() == b->nodes().size());
  const InspectNode& removed = r.merged->nodes().back();
  CHECK(removed.diff == DiffStatus::kRemoved);
  CHECK(removed.name == "add");
  CHECK(removed.inputs.size() == 1);
  CHECK(removed.users.size() == 1);
}

TEST_CASE("diff: structure matches nodes whose lines moved, the sequence matches the rest") {
  auto a = buildInspectGraph(testing::makeChain(6), "a");
  auto b = buildInspectGraph(testing::makeChain(7), "b");
  GraphDiff d = diffGraphs(*a, *b);
  CHECK(d.added == 1);
  CHECK(d.removed == 0);
  for (int i = 0; i < 7; ++i) CHECK(d.afterOfBefore[static_cast<size_t>(i)] == i);  // x and the six ops
  // Identical graphs: everything the same.
  GraphDiff same = diffGraphs(*a, *a);
  CHECK(same.changed.empty());
  CHECK(same.added + same.removed == 0);
}

TEST_CASE("the SVG export draws every box and edge of the layout") {
  auto g = buildInspectGraph(testing::makeChain(3), "h");
  const VisibleGraph v = computeVisible(*g, {});
  LayoutResult r;
  for (const VisibleUnit& u : v.units) r.nodes[u.key] = LayoutBox{50, 20, u.width, u.height};
  for (const VisibleEdge& e : v.edges) r.edges[e.key] = {0, 0, 1, 1, 2, 2, 3, 3};
  r.width = 100;
  r.height = 100;
  const std::string svg = renderSvg(*g, v, r, "chain <3>");
  CHECK(svg.find("<title>chain &lt;3&gt;</title>") != std::string::npos);
  size_t groups = 0, paths = 0;
  for (size_t p = svg.find("<g class=\"node\">"); p != std::string::npos; p = svg.find("<g class=\"node\">", p + 1)) ++groups;
  for (size_t p = svg.find("<path "); p != std::string::npos; p = svg.find("<path ", p + 1)) ++paths;
  CHECK(groups == v.units.size());
  CHECK(paths == v.edges.size());
}

TEST_CASE("graphs read back from the store's JSON keep their meta") {
  const core::Graph graph = testing::makeResnetLike();
  auto g = inspectGraphFromJson(core::serializeGraph(graph));
  const InspectNode& conv = g->node(nodeNamed(*g, "conv2d_1"));
  CHECK(conv.tensor == "f32[1, 64, 8, 8]");
  CHECK(conv.location.line == 459);
  CHECK(conv.userStack.size() == 6);
  CHECK(conv.args == "%relu, %self_layer1_0_conv1_weight");
  CHECK(conv.category == OpCategory::kConv);
  CHECK(g->hash() == textHash(core::serializeGraph(graph)));
}
