// The inspector's kernel views, under Xvfb in ctest (offscreen when QT_QPA_PLATFORM is unset), on
// the store of the gui.fused_store fixture (tests/gui/make_fused_store.py: Net.forward under the
// fused backend, eval; step trained one step under fused, whose AOT forward graph has kernels).
// Every expected value (kernel names, the nodes they compute, sources, cache state) is read back
// from the store with TraceReader::kernelsOfCompile, never written here. With DYNAMO_E2E_SHOTS
// set, the window test leaves screenshots there (docs/images/inspector-kernels.png comes from a
// resnet18 store: DYNAMO_FUSED_FRAME=ResNet.forward).
// Python.h (through core's graph headers) before Qt: Qt's `slots` macro breaks CPython's headers.
#include "dynamo/core/graph_serializer.h"
#include "gui_test_support.h"

#include <QApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QSignalSpy>
#include <QThread>

#include <map>
#include <set>

#include "dynamo/gui/compile_artifacts.h"
#include "dynamo/gui/exporter.h"
#include "dynamo/gui/main_window.h"
#include "dynamo/gui/overlays.h"
#include "dynamo/gui/store_session.h"
#include "dynamo/storage/trace_reader.h"
#include "dynamo_catch.h"

using namespace dynamo;
using namespace dynamo::gui;

namespace {

QApplication& app() {
  static int argc = 1;
  static char arg0[] = "gui_kernel_tests";
  static char* argv[] = {arg0, nullptr};
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  static QApplication* a = new QApplication(argc, argv);  // never destroyed (see test_aot_views)
  return *a;
}

template <typename Pred>
bool waitFor(Pred pred, int ms = 30000) {
  QElapsedTimer t;
  t.start();
  while (!pred()) {
    if (t.elapsed() > ms) return false;
    QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
    QThread::msleep(2);
  }
  return true;
}

std::string storePath() {
  const QByteArray p = qgetenv("DYNAMO_FUSED_STORE");
  REQUIRE_FALSE(p.isEmpty());  // set by ctest (gui.fused_store writes it)
  return p.toStdString();
}

std::string frameName() {
  const QByteArray f = qgetenv("DYNAMO_FUSED_FRAME");
  return f.isEmpty() ? std::string("Net.forward") : f.toStdString();
}

storage::CompileRecord compileOf(const storage::TraceReader& r, const std::string& name) {
  for (const storage::RunRecord& run : r.runs())
    for (const storage::FrameRecord& f : r.frames(run.id))
      if (f.name == name)
        for (const storage::CompileRecord& c : r.compilesOfFrame(f.id))
          if (c.attempt == 0) return c;
  FAIL("no compile of " << name << " in the store");
  return {};
}

int nodeNamed(const InspectGraph& g, const std::string& name) {
  for (const InspectNode& n : g.nodes())
    if (n.name == name) return n.index;
  return -1;
}

std::string unitKeyOf(GraphView* v, int node) {
  const VisibleGraph* vis = v->scene()->visible();
  return vis->units[static_cast<size_t>(vis->unitOf(node))].key;
}

void shot(QWidget* w, const char* name) {
  const QString dir = qEnvironmentVariable("DYNAMO_E2E_SHOTS");
  if (dir.isEmpty()) return;
  QDir().mkpath(dir);
  QCoreApplication::processEvents();
  CHECK(w->grab().save(dir + "/" + name + ".png"));
}

/// The kernels of graph `graph` ("dynamo", "aot.forward") of a compile, from the store.
std::vector<storage::KernelRecord> storedKernels(const storage::TraceReader& r, storage::RowId compile,
                                                 const std::string& graph) {
  std::vector<storage::KernelRecord> out;
  for (storage::KernelRecord& k : r.kernelsOfCompile(compile))
    if (k.graph == graph && k.graphIndex == 0) out.push_back(std::move(k));
  return out;
}

}  // namespace

TEST_CASE("a fused graph loads with its kernels: each node knows the kernel that computes it") {
  auto reader = storage::TraceReader::open(storePath());
  const storage::CompileRecord c = compileOf(*reader, frameName());
  const std::vector<storage::KernelRecord> stored = storedKernels(*reader, c.id, "dynamo");
  REQUIRE(stored.size() >= 2);
  const GraphLoad load = loadGraph(storePath(), c.id, 0);
  REQUIRE(load.graph);
  const InspectGraph& g = *load.graph;
  REQUIRE(g.kernels().size() == stored.size());
  std::set<int> covered;
  for (size_t k = 0; k < stored.size(); ++k) {
    const InspectKernel& ik = g.kernels()[k];
    INFO(stored[k].name);
    CHECK(ik.name == stored[k].name);
    CHECK(ik.source == stored[k].source);
    CHECK(ik.language == "c++");
    CHECK(ik.loops == stored[k].loops);
    CHECK(ik.cacheHit == stored[k].cacheHit);
    CHECK(ik.compileMs == static_cast<double>(stored[k].compileUs) / 1000.0);
    REQUIRE(ik.nodes.size() == stored[k].nodes.size());
    for (const std::string& name : stored[k].nodes) {
      const int n = nodeNamed(g, name);
      REQUIRE(n >= 0);
      const std::vector<int>& ks = g.node(n).kernels;
      CHECK(std::find(ks.begin(), ks.end(), static_cast<int>(k)) != ks.end());
      covered.insert(n);
    }
  }
  // Inputs, the convolution (an ATen step) and the output are computed by no kernel.
  for (const InspectNode& n : g.nodes())
    if (!covered.count(n.index)) CHECK(n.kernels.empty());
  if (frameName() == "Net.forward") {
    CHECK(g.node(nodeNamed(g, "conv2d")).kernels.empty());
    CHECK_FALSE(g.node(nodeNamed(g, "relu")).kernels.empty());
  }
  CHECK(overlayApplies(Overlay::kFusionGroup, g));
  CHECK(overlayApplies(Overlay::kCompileTime, g));
  CHECK(defaultOverlay(g, 0) == Overlay::kFusionGroup);
  // The Details tab lists them (not as "other artifacts").
  const std::string details = compileDetailsText(reader->artifactsOfCompile(c.id));
  CHECK_THAT(details, Catch::Matchers::Contains("Generated kernels (" + std::to_string(stored.size()) + ")\n  " +
                                                stored[0].name + " (dynamo graph 0, " + stored[0].loops + ", "));
  CHECK_THAT(details, !Catch::Matchers::Contains("dynamo.kernel ("));
  CHECK_THAT(details, !Catch::Matchers::Contains("dynamo.kernel.run ("));
  // Each kernel's line ends with its run time as measured (the store ran each graph 5 times).
  for (const storage::KernelRecord& k : stored) {
    INFO(k.name);
    REQUIRE(k.runCalls == 5);
    CHECK_THAT(details, Catch::Matchers::Contains(
                            "ran in " + std::to_string(k.runUs) + " us per call (mean of its first 5 calls)): " +
                            std::to_string(k.nodes.size()) + " nodes\n"));
    CHECK(kernelRunText(static_cast<double>(k.runUs), k.runCalls) ==
          "ran in " + std::to_string(k.runUs) + " us per call (mean of its first 5 calls)");
  }
  CHECK(kernelRunText(-1, 0) == "run time not measured");
}

TEST_CASE("the training compile's kernels belong to its AOT forward graph (and its joint graph), its late ones to its backward graph") {
  auto reader = storage::TraceReader::open(storePath());
  const storage::CompileRecord c = compileOf(*reader, "step");
  const std::vector<storage::KernelRecord> stored = storedKernels(*reader, c.id, "aot.forward");
  REQUIRE_FALSE(stored.empty());
  // Dynamo's own graph of that compile ran through the AOT layer: no kernel is its own.
  const GraphLoad dynamoGraph = loadGraph(storePath(), c.id, 0);
  REQUIRE(dynamoGraph.graph);
  CHECK(dynamoGraph.graph->kernels().empty());
  CHECK_FALSE(overlayApplies(Overlay::kFusionGroup, *dynamoGraph.graph));
  // The backward graph is compiled at the first backward call, after the compile was recorded:
  // its kernels are late rows of the compile.
  const std::vector<storage::KernelRecord> late = storedKernels(*reader, c.id, "aot.backward");
  REQUIRE_FALSE(late.empty());
  for (int index : {aotGraphIndex(0, AotGraphKind::kForward), aotGraphIndex(0, AotGraphKind::kJoint)}) {
    INFO(graphIndexLabel(index));
    const GraphLoad load = loadGraph(storePath(), c.id, index);
    REQUIRE(load.graph);
    // The joint graph holds both: the forward's kernels, then the backward's.
    const bool joint = index == aotGraphIndex(0, AotGraphKind::kJoint);
    REQUIRE(load.graph->kernels().size() == stored.size() + (joint ? late.size() : 0));
    for (const std::string& name : stored[0].nodes) {
      const int n = nodeNamed(*load.graph, name);
      REQUIRE(n >= 0);
      CHECK(load.graph->node(n).kernels == std::vector<int>{0});
    }
  }
  // The late kernels on the backward graph, each on the nodes it computes.
  const GraphLoad backward = loadGraph(storePath(), c.id, aotGraphIndex(0, AotGraphKind::kBackward));
  REQUIRE(backward.graph);
  REQUIRE(backward.graph->kernels().size() == late.size());
  CHECK(overlayApplies(Overlay::kFusionGroup, *backward.graph));
  for (std::size_t k = 0; k < late.size(); ++k) {
    for (const std::string& name : late[k].nodes) {
      const int n = nodeNamed(*backward.graph, name);
      REQUIRE(n >= 0);
      CHECK(backward.graph->node(n).kernels == std::vector<int>{static_cast<int>(k)});
    }
  }
}

TEST_CASE("overlays: fusion group and compile time fills, group aggregates and legends") {
  auto reader = storage::TraceReader::open(storePath());
  const GraphLoad load = loadGraph(storePath(), compileOf(*reader, frameName()).id, 0);
  REQUIRE(load.graph);
  const InspectGraph& g = *load.graph;
  const OverlayPainter fusion(Overlay::kFusionGroup, g);
  const OverlayPainter time(Overlay::kCompileTime, g);
  std::set<std::string> kernelFills;
  for (const InspectNode& n : g.nodes()) {
    if (n.kernels.empty()) {
      CHECK(fusion.nodeFill(n.index) == "#ffffff");
      CHECK(time.nodeFill(n.index) == "#ffffff");
      continue;
    }
    const int k = n.kernels.front();
    CHECK(fusion.nodeFill(n.index) == std::string(fusionFill(k)));
    kernelFills.insert(fusion.nodeFill(n.index));
    const InspectKernel& ik = g.kernels()[static_cast<size_t>(k)];
    if (ik.cacheHit) CHECK(time.nodeFill(n.index) == "#a1d99b");
    else CHECK(time.nodeFill(n.index) != "#ffffff");
  }
  CHECK(kernelFills.size() == std::min<size_t>(g.kernels().size(), 12));  // one colour per kernel
  // The legend names every kernel, then the keys for the rest.
  const std::vector<LegendEntry> legend = fusion.legend();
  // (Past 12 kernels the colours repeat: one row says how many more.)
  const size_t shown = std::min<size_t>(g.kernels().size(), 12);
  REQUIRE(legend.size() == shown + (g.kernels().size() > 12 ? 1 : 0) + 2);
  CHECK(legend[0].label == g.kernels()[0].name);
  CHECK(legend[0].colour == std::string(fusionFill(0)));
  CHECK(legend.back().label == "no kernel");
  CHECK(time.legend().back().label == "no kernel");
  // The root group (the whole graph) spans every kernel.
  const std::string all = fusion.describeGroup(0);
  CHECK_THAT(all, Catch::Matchers::StartsWith(std::to_string(g.kernels().size()) + " kernels: " +
                                              g.kernels()[0].name + ", "));
  CHECK_THAT(time.describeGroup(0), Catch::Matchers::Contains("; compiled in "));
  VisibleUnit root;
  root.group = 0;
  CHECK(fusion.fill(root) == "#969696");  // several kernels
}

TEST_CASE("the window: a fused graph opens by fusion group; a node's panel and its kernel's source side by side") {
  app();
  auto reader = storage::TraceReader::open(storePath());
  const storage::CompileRecord c = compileOf(*reader, frameName());
  const std::vector<storage::KernelRecord> stored = storedKernels(*reader, c.id, "dynamo");
  REQUIRE_FALSE(stored.empty());
  MainWindow w;
  w.resize(1500, 950);
  w.show();
  REQUIRE(w.openStore(QString::fromStdString(storePath())));
  REQUIRE(waitFor([&] { return w.reportsReady(); }));
  REQUIRE(w.selectFrame(c.frameId));
  REQUIRE(waitFor([&] { return !w.storeReadsPending(); }));
  QSignalSpy loaded(&w, &MainWindow::graphLoaded);
  w.openGraph(c.id, 0);
  REQUIRE(waitFor([&] { return loaded.count() == 1; }));
  GraphView* v = w.graphView();
  REQUIRE(waitFor([&] { return v->graph() && !v->layoutPending() && v->scene()->visible(); }));
  CHECK(v->overlay() == Overlay::kFusionGroup);
  QStringList picker;
  for (int i = 0; i < v->overlayPicker()->count(); ++i) picker << v->overlayPicker()->itemText(i);
  CHECK(picker == QStringList{"op kind", "tensor size", "fusion group", "compile time"});
  CHECK(v->legend()->text().contains(QString::fromStdString(stored[0].name)));
  CHECK(v->kernelView()->isVisible());

  // The last node of the largest kernel (the last of those): its panel names the kernel and its
  // fusion group, and the kernel's source is shown beside the user's line, entry point highlighted.
  size_t largest = 0;
  for (size_t i = 0; i < stored.size(); ++i)
    if (stored[i].nodes.size() >= stored[largest].nodes.size()) largest = i;
  const storage::KernelRecord& k = stored[largest];
  const int node = nodeNamed(*v->graph(), k.nodes.back());
  REQUIRE(node >= 0);
  v->selectNode(node);
  REQUIRE(waitFor([&] { return !v->layoutPending(); }));
  const QString panel = v->nodePanel()->toPlainText();
  CHECK(panel.contains(QString("kernel %1 (c++, %2; ").arg(QString::fromStdString(k.name), QString::fromStdString(k.loops))));
  CHECK(panel.contains(k.cacheHit ? QString("loaded from the disk cache")
                                  : QString("compiled in %1 ms").arg(static_cast<double>(k.compileUs) / 1000.0, 0, 'f', 0)));
  // The fixture calls the net 5 times: its kernels' run times are measured.
  REQUIRE(k.runCalls == 5);
  CHECK(panel.contains(QString("; ran in %1 us per call (mean of its first 5 calls)").arg(k.runUs)));
  QString group = "fusion group: ";
  for (const std::string& n : k.nodes) group += QString::fromStdString(n) + " ";
  CHECK(panel.contains(group.trimmed()));
  CHECK(v->kernelView()->header().startsWith(QString("kernel %1 (c++ source, ").arg(QString::fromStdString(k.name))));
  CHECK(v->kernelView()->editor()->toPlainText() == QString::fromStdString(k.source));
  CHECK(v->kernelView()->highlightedText().contains(QString::fromStdString(" " + k.name + "(")));
  CHECK(v->sourceView()->highlightedLine() > 0);  // the user's line, still beside it
  const std::string key = unitKeyOf(v, node);
  CHECK(v->scene()->unitFill(key) == QString::fromStdString(std::string(fusionFill(static_cast<int>(largest)))));
  CHECK(v->scene()->unitToolTip(key).contains(QString("kernel <b>%1</b>").arg(QString::fromStdString(k.name))));
  if (!qEnvironmentVariableIsEmpty("DYNAMO_E2E_SHOTS")) {  // the docs' picture: a block opened
    for (const char* module : {"layer1", "layer1.0"}) {
      const int group = v->graph()->findGroup(module);
      if (group > 0 && v->expandGroup(group)) REQUIRE(waitFor([&] { return !v->layoutPending(); }));
    }
    if (!v->search("^relu_2$").empty()) REQUIRE(waitFor([&] { return !v->layoutPending(); }));
  }
  shot(&w, "inspector-kernels");

  // The compile-time overlay recolours the same boxes.
  CHECK(v->setOverlay(Overlay::kCompileTime));
  CHECK(v->scene()->unitFill(key) ==
        QString::fromStdString(OverlayPainter(Overlay::kCompileTime, *v->graph()).nodeFill(node)));
  shot(&w, "inspector-compile-time");

  // A node no kernel computes (a graph input) says so in the kernel view.
  v->selectNode(0);
  REQUIRE(waitFor([&] { return !v->layoutPending(); }));
  CHECK(v->kernelView()->header() ==
        QString("%1 is computed by no generated kernel (not an op)").arg(QString::fromStdString(v->graph()->node(0).name)));
}

TEST_CASE("export: fused graphs drawn by fusion group, each kernel's source as a file, listed in the summary") {
  app();
  testing::TempDir dir;
  LayoutCache cache(QString::fromStdString(dir.file("cache")));
  const ExportOutput out = exportStore(storePath(), QString::fromStdString(testing::layoutProgram()), &cache);
  std::map<std::string, std::string> files;
  for (const ExportFile& f : out.files) files[f.name] = f.data;
  auto reader = storage::TraceReader::open(storePath());
  const storage::CompileRecord c = compileOf(*reader, frameName());
  const std::string base = fileSafe(frameName()) + "-c0-g0";
  for (const storage::KernelRecord& k : storedKernels(*reader, c.id, "dynamo")) {
    const std::string file = "kernels/" + base + "-" + k.name + ".cpp";
    INFO(file);
    REQUIRE(files.count(file));
    CHECK(files[file] == k.source);
    CHECK_THAT(files["summary.txt"], Catch::Matchers::Contains("    " + file + ": " + k.name + " (" + k.loops));
    CHECK_THAT(files["summary.txt"],
               Catch::Matchers::Contains(", " + kernelRunText(static_cast<double>(k.runUs), k.runCalls) + "), nodes:"));
    CHECK(k.runUs >= 0);
  }
  CHECK(files["graphs/" + base + ".svg"].find("fill=\"" + std::string(fusionFill(0)) + "\"") != std::string::npos);
  // The training compile's forward-graph kernels are exported with the AOT forward graph.
  CHECK(files.count("kernels/step-c0-aot-forward-" + storedKernels(*reader, compileOf(*reader, "step").id,
                                                                  "aot.forward")[0].name + ".cpp"));
}
