// The inspector's AOT views, under Xvfb in ctest (offscreen when QT_QPA_PLATFORM is unset), on the store of the
// gui.aot_store fixture (tests/gui/make_aot_store.py: Net.forward under aot_eager, trained one
// step; mlp recompiled with a dynamic batch). Every expected value is read back from the
// store's own artifacts, never written here. With DYNAMO_E2E_SHOTS set, the window test leaves
// screenshots there (docs/images/inspector-aot-*.png come from a resnet18 store:
// DYNAMO_AOT_FRAME=ResNet.forward).
// Python.h (through core's graph headers) before Qt: Qt's `slots` macro breaks CPython's headers.
#include "dynamo/core/graph_serializer.h"
#include "gui_test_support.h"

#include <QApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QSignalSpy>
#include <QThread>

#include <set>
#include <sstream>

#include "dynamo/gui/compile_artifacts.h"
#include "dynamo/gui/exporter.h"
#include "dynamo/gui/graph_diff.h"
#include "dynamo/gui/main_window.h"
#include "dynamo/gui/overlays.h"
#include "dynamo/gui/store_models.h"
#include "dynamo/gui/store_reports.h"
#include "dynamo/gui/store_session.h"
#include "dynamo/storage/trace_writer.h"
#include "dynamo_catch.h"

using namespace dynamo;
using namespace dynamo::gui;

namespace {

QApplication& app() {
  static int argc = 1;
  static char arg0[] = "gui_aot_tests";
  static char* argv[] = {arg0, nullptr};
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  // Never destroyed: a static QApplication outlives the input devices a shown window makes,
  // and their destructors crash at exit.
  static QApplication* a = new QApplication(argc, argv);
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
  const QByteArray p = qgetenv("DYNAMO_AOT_STORE");
  REQUIRE_FALSE(p.isEmpty());  // set by ctest (gui.aot_store writes it)
  return p.toStdString();
}

std::string frameName() {
  const QByteArray f = qgetenv("DYNAMO_AOT_FRAME");
  return f.isEmpty() ? std::string("Net.forward") : f.toStdString();
}

/// The compile of the frame named `name` (its first), from the store.
storage::CompileRecord compileOf(const storage::TraceReader& r, const std::string& name, int attempt = 0) {
  for (const storage::RunRecord& run : r.runs())
    for (const storage::FrameRecord& f : r.frames(run.id))
      if (f.name == name)
        for (const storage::CompileRecord& c : r.compilesOfFrame(f.id))
          if (c.attempt == attempt) return c;
  FAIL("no compile #" << attempt << " of " << name << " in the store");
  return {};
}

int nodeNamed(const InspectGraph& g, const std::string& name) {
  for (const InspectNode& n : g.nodes())
    if (n.name == name) return n.index;
  return -1;
}

QString cell(const QAbstractItemModel& m, int row, int col) {
  return m.data(m.index(row, col), Qt::DisplayRole).toString();
}

void shot(QWidget* w, const char* name) {
  const QString dir = qEnvironmentVariable("DYNAMO_E2E_SHOTS");
  if (dir.isEmpty()) return;
  QDir().mkpath(dir);
  QCoreApplication::processEvents();
  CHECK(w->grab().save(dir + "/" + name + ".png"));
}

}  // namespace

TEST_CASE("a compile's artifacts: the AOT summary, its three graphs and their indexes") {
  auto reader = storage::TraceReader::open(storePath());
  const storage::CompileRecord c = compileOf(*reader, frameName());
  const std::vector<storage::ArtifactRecord> artifacts = reader->artifactsOfCompile(c.id);
  std::set<std::string> names;
  for (const storage::ArtifactRecord& a : artifacts) {
    CHECK(a.compileId == c.id);
    names.insert(a.name);
  }
  CHECK(names.count("dynamo.aot"));
  CHECK(names.count("dynamo.aot.joint"));
  const std::vector<AotRecord> records = aotRecords(artifacts);
  REQUIRE(records.size() == 1);
  const AotRecord& r = records[0];
  CHECK(r.error.empty());
  CHECK(r.backend == "aot_eager");
  CHECK(r.training);
  CHECK(r.fallback.empty());
  CHECK_FALSE(r.saved.empty());
  CHECK(r.summary.rfind(std::to_string(r.saved.size()) + " saved (" + std::to_string(r.bytesSaved) + " bytes)", 0) == 0);
  REQUIRE(r.graphs.size() == 3);
  CHECK(r.graphs[0].kind == AotGraphKind::kJoint);
  CHECK(r.graphs[0].index == -1);
  CHECK(r.graphs[1].index == -2);
  CHECK(r.graphs[2].index == -3);
  CHECK(graphIndexLabel(-2) == "AOT forward graph");
  CHECK(graphIndexLabel(-6) == "AOT #2 backward graph");
  CHECK(graphIndexLabel(1) == "graph 1");
  int ordinal = 0;
  AotGraphKind kind{};
  CHECK(decodeAotGraphIndex(aotGraphIndex(3, AotGraphKind::kForward), ordinal, kind));
  CHECK((ordinal == 3 && kind == AotGraphKind::kForward));
  CHECK_FALSE(decodeAotGraphIndex(0, ordinal, kind));
  CHECK(aotGraphArtifact(artifacts, -3)->name == "dynamo.aot.backward");
  CHECK(aotGraphArtifact(artifacts, -4) == nullptr);
  // An inference compile (no grad): its forward graph only, nothing partitioned.
  const storage::CompileRecord head = compileOf(*reader, "Head.forward");
  const std::vector<AotRecord> inference = aotRecords(reader->artifactsOfCompile(head.id));
  REQUIRE(inference.size() == 1);
  CHECK_FALSE(inference[0].training);
  CHECK(inference[0].saved.empty());
  const std::string headText = compileDetailsText(reader->artifactsOfCompile(head.id));
  CHECK_THAT(headText, Catch::Matchers::StartsWith("AOT compile\n  backend: aot_eager (inference)\n  compile time: "));
  CHECK_THAT(headText, Catch::Matchers::Contains("\n  graphs: forward ("));
  CHECK(headText.find("partition") == std::string::npos);
  REQUIRE(inference[0].graphs.size() == 1);
  CHECK(inference[0].graphs[0].index == aotGraphIndex(0, AotGraphKind::kForward));
  const GraphLoad headForward = loadGraph(storePath(), head.id, -2);
  REQUIRE(headForward.graph);
  CHECK_FALSE(overlayApplies(Overlay::kPartition, *headForward.graph));
  CHECK(loadGraph(storePath(), head.id, -1).error ==
        QString("compile %1 has no AOT joint graph in '%2'").arg(head.id).arg(QString::fromStdString(storePath())));
  // A compile without AOT (mlp runs on the eager backend) has none.
  CHECK(aotRecords(reader->artifactsOfCompile(compileOf(*reader, "mlp").id)).empty());
}

TEST_CASE("the graphs table lists Dynamo's graph, then the AOT joint, forward and backward graphs") {
  app();
  auto reader = storage::TraceReader::open(storePath());
  const storage::CompileRecord c = compileOf(*reader, frameName());
  GraphsModel graphs;
  graphs.setCompile(*reader, c.id);
  REQUIRE(graphs.rowCount() == 4);
  CHECK(cell(graphs, 0, 0) == "graph 0");
  CHECK(cell(graphs, 1, 0) == "AOT joint graph");
  CHECK(cell(graphs, 2, 0) == "AOT forward graph");
  CHECK(cell(graphs, 3, 0) == "AOT backward graph");
  CHECK(cell(graphs, 1, 1).endsWith(" of JSON"));
  const AotRecord r = aotRecords(graphs.artifacts())[0];
  CHECK(cell(graphs, 1, 3) == QString::fromStdString(r.summary));
  for (int row = 1; row < 4; ++row) {
    CHECK(graphs.data(graphs.index(row, 0), kRowIdRole).toLongLong() == c.id);
    CHECK(graphs.data(graphs.index(row, 0), kIndexRole).toInt() == -row);
  }
}

TEST_CASE("AOT graphs load with each node's partition role; a missing one is a clear error") {
  auto reader = storage::TraceReader::open(storePath());
  const storage::CompileRecord c = compileOf(*reader, frameName());
  const AotRecord r = aotRecords(reader->artifactsOfCompile(c.id))[0];
  const GraphLoad joint = loadGraph(storePath(), c.id, -1);
  REQUIRE(joint.graph);
  CHECK(joint.record.index == -1);
  CHECK(joint.record.numNodes == static_cast<int>(joint.graph->nodes().size()));
  std::map<PartitionRole, int> counts;
  for (const InspectNode& n : joint.graph->nodes()) {
    ++counts[n.partition];
    if (n.op == "output") CHECK(n.partition == PartitionRole::kNone);
    else CHECK(n.partition != PartitionRole::kNone);
    if (n.op == "placeholder" && n.target.rfind("tangents", 0) == 0) CHECK(n.partition == PartitionRole::kBackward);
  }
  CHECK(counts[PartitionRole::kSaved] == static_cast<int>(r.saved.size()));
  CHECK(counts[PartitionRole::kRecomputed] == static_cast<int>(r.recomputed.size()));
  CHECK(counts[PartitionRole::kForward] > 0);
  CHECK(counts[PartitionRole::kBackward] > 0);
  for (const std::string& s : r.saved) CHECK(joint.graph->node(nodeNamed(*joint.graph, s)).partition == PartitionRole::kSaved);
  // A backward node of the joint graph depends on a tangent; a forward one does not.
  for (const InspectNode& n : joint.graph->nodes())
    if (n.partition == PartitionRole::kBackward && n.op != "placeholder") {
      bool fromBackward = false;
      for (int in : n.inputs)
        fromBackward = fromBackward || joint.graph->node(in).partition == PartitionRole::kBackward;
      CHECK(fromBackward);
    }
  const GraphLoad fwd = loadGraph(storePath(), c.id, -2);
  REQUIRE(fwd.graph);
  for (const InspectNode& n : fwd.graph->nodes()) CHECK(n.partition != PartitionRole::kBackward);
  // ATen nodes carry no source lines: the matched Dynamo node lends its module and line.
  const GraphLoad dyn = loadGraph(storePath(), c.id, 0);
  REQUIRE(dyn.graph);
  int conv = -1;
  for (const InspectNode& n : dyn.graph->nodes())
    if (conv < 0 && n.op != "placeholder" && opFamily(n) == "conv") conv = n.index;
  REQUIRE(conv >= 0);
  const InspectNode& fwdConv = fwd.graph->node(nodeNamed(*fwd.graph, "convolution"));
  CHECK(fwdConv.modulePath == dyn.graph->node(conv).modulePath);
  CHECK_FALSE(fwdConv.modulePath.empty());
  CHECK(fwdConv.location.line == dyn.graph->node(conv).location.line);
  CHECK(fwdConv.location.sourceLine == dyn.graph->node(conv).location.sourceLine);
  CHECK(fwdConv.userStack.size() == dyn.graph->node(conv).userStack.size());
  const GraphLoad bwd = loadGraph(storePath(), c.id, -3);
  REQUIRE(bwd.graph);
  // The forward and backward graphs take module and line from the joint graph, by node name.
  for (const GraphLoad* part : {&fwd, &bwd})
    for (const InspectNode& n : part->graph->nodes()) {
      const int j = nodeNamed(*joint.graph, n.name);
      if (n.op == "output" || j < 0) continue;
      INFO(n.name);
      CHECK(n.modulePath == joint.graph->node(j).modulePath);
      CHECK(n.location.line == joint.graph->node(j).location.line);
    }
  for (const InspectNode& n : bwd.graph->nodes())
    if (n.op != "output") CHECK(n.partition != PartitionRole::kForward);
  const GraphLoad missing = loadGraph(storePath(), c.id, -4);
  CHECK_FALSE(missing.graph);
  CHECK(missing.error == QString("compile %1 has no AOT #2 joint graph in '%2'").arg(c.id).arg(QString::fromStdString(storePath())));
  // Dynamo's own graph has no roles: the partition overlay does not apply to it.
  const GraphLoad dynamoGraph = loadGraph(storePath(), c.id, 0);
  REQUIRE(dynamoGraph.graph);
  CHECK_FALSE(overlayApplies(Overlay::kPartition, *dynamoGraph.graph));
  CHECK(overlayApplies(Overlay::kPartition, *joint.graph));
  CHECK(overlayApplies(Overlay::kTensorSize, *joint.graph));
  CHECK_FALSE(overlayApplies(Overlay::kDiff, *joint.graph));
}

TEST_CASE("overlays: partition, tensor size and op kind fills, group aggregates and legends") {
  auto reader = storage::TraceReader::open(storePath());
  const storage::CompileRecord c = compileOf(*reader, frameName());
  const GraphLoad joint = loadGraph(storePath(), c.id, -1);
  REQUIRE(joint.graph);
  const InspectGraph& g = *joint.graph;
  const OverlayPainter partition(Overlay::kPartition, g);
  for (const InspectNode& n : g.nodes())
    CHECK(partition.nodeFill(n.index) == std::string(partitionRoleColour(n.partition)));
  std::vector<std::string> labels;
  for (const LegendEntry& e : partition.legend()) labels.push_back(e.label);
  CHECK(labels == std::vector<std::string>{"saved", "recomputed", "backward", "forward"});
  // A collapsed module shows the role most of its nodes have (ties: .def order), its tooltip
  // the counts.
  const VisibleGraph top = computeVisible(g, {});
  bool sawGroup = false;
  for (size_t u = 0; u < top.units.size(); ++u) {
    if (top.units[u].group < 0) continue;
    sawGroup = true;
    std::map<PartitionRole, int> counts;
    for (const InspectNode& n : g.nodes())
      if (top.unitOf(n.index) == static_cast<int>(u) && n.partition != PartitionRole::kNone) ++counts[n.partition];
    PartitionRole most = PartitionRole::kNone;
    std::string described;
    for (const auto& [role, k] : counts) {  // map order is .def order
      if (most == PartitionRole::kNone || k > counts[most]) most = role;
      described += (described.empty() ? "" : ", ") + std::to_string(k) + " " + std::string(partitionRoleName(role));
    }
    CHECK(partition.fill(top.units[u]) == std::string(partitionRoleColour(most)));
    CHECK(partition.describeGroup(top.units[u].group) == described);
  }
  CHECK(sawGroup);
  // Tensor size: five steps, the largest tensor darkest, non-tensors white.
  const OverlayPainter size(Overlay::kTensorSize, g);
  const std::vector<LegendEntry> steps = size.legend();
  REQUIRE(steps.size() == 6);
  CHECK(steps.back().label == "not a tensor");
  int largest = -1, smallest = -1;
  for (const InspectNode& n : g.nodes()) {
    if (n.tensorBytes <= 0) continue;
    if (largest < 0 || n.tensorBytes > g.node(largest).tensorBytes) largest = n.index;
    if (smallest < 0 || n.tensorBytes < g.node(smallest).tensorBytes) smallest = n.index;
  }
  REQUIRE(largest >= 0);
  CHECK(size.nodeFill(largest) == steps[4].colour);
  CHECK(size.nodeFill(smallest) == steps[0].colour);
  CHECK(size.nodeFill(nodeNamed(g, "output")) == "#ffffff");
  CHECK(OverlayPainter(Overlay::kOpKind, g).nodeFill(nodeNamed(g, "convolution")) ==
        std::string(opCategoryColour(OpCategory::kConv)));
  CHECK(formatBytes(512) == "512 B");
  CHECK(formatBytes(1536) == "1.5 KiB");
  CHECK(formatBytes(10944) == "11 KiB");
}

TEST_CASE("the Details text: the AOT summary and the dynamic-shapes report of a compile") {
  auto reader = storage::TraceReader::open(storePath());
  const storage::CompileRecord c = compileOf(*reader, frameName());
  const std::vector<storage::ArtifactRecord> artifacts = reader->artifactsOfCompile(c.id);
  const AotRecord r = aotRecords(artifacts)[0];
  const std::string text = compileDetailsText(artifacts);
  CHECK_THAT(text, Catch::Matchers::StartsWith("AOT compile\n  backend: aot_eager (training)\n"));
  CHECK_THAT(text, Catch::Matchers::Contains("  partition: " + r.partitionMode + ": " + r.summary + "\n"));
  CHECK_THAT(text, Catch::Matchers::Contains("  saved for backward (" + std::to_string(r.saved.size()) + ", " +
                                                      formatBytes(r.bytesSaved) + "): " + r.saved[0]));
  CHECK_THAT(text, Catch::Matchers::Contains("  graphs: joint ("));
  // mlp's recompile made its batch dynamic: the report is shown as recorded.
  const storage::CompileRecord recompile = compileOf(*reader, "mlp", 1);
  const std::vector<storage::ArtifactRecord> mlpArtifacts = reader->artifactsOfCompile(recompile.id);
  REQUIRE(mlpArtifacts.size() == 1);
  const std::string mlpText = compileDetailsText(mlpArtifacts);
  CHECK_THAT(mlpText, Catch::Matchers::StartsWith("Dynamic shapes\n"));
  CHECK_THAT(mlpText, Catch::Matchers::Contains("  s0 = x.size()[0] in [2, inf] (dynamic; example 16)\n"));
  CHECK(compileDetailsText({}) == "This compile recorded no artifacts (no AOT graphs, no dynamic shapes).\n");
}

TEST_CASE("diff across dialects: Dynamo's torch-level graph against its AOT forward graph") {
  auto reader = storage::TraceReader::open(storePath());
  const storage::CompileRecord c = compileOf(*reader, frameName());
  const GraphLoad dyn = loadGraph(storePath(), c.id, 0);
  const GraphLoad fwd = loadGraph(storePath(), c.id, -2);
  REQUIRE((dyn.graph && fwd.graph));
  CHECK(dialectOf(*dyn.graph) == GraphDialect::kTorch);
  CHECK(dialectOf(*fwd.graph) == GraphDialect::kAten);
  const GraphDiff d = diffGraphs(*dyn.graph, *fwd.graph);
  CHECK(d.crossDialect);
  CHECK_THAT(diffSummary(d), Catch::Matchers::EndsWith(
                                 " (torch-level vs ATen: matched by op family, shapes and dtypes compared)"));
  // Every input is matched by its source, and each torch-level op by its ATen counterpart.
  for (const InspectNode& n : dyn.graph->nodes())
    if (n.op == "placeholder") CHECK(d.afterOfBefore[static_cast<size_t>(n.index)] >= 0);
  auto counterpart = [&](const std::string& family) -> std::string {
    for (const InspectNode& n : dyn.graph->nodes())
      if (n.op != "placeholder" && opFamily(n) == family) {
        const int b = d.afterOfBefore[static_cast<size_t>(n.index)];
        return b < 0 ? "(removed)" : fwd.graph->node(b).shortName;
      }
    return "(none)";
  };
  CHECK(counterpart("conv") == "convolution");
  CHECK(counterpart("batch_norm") == "native_batch_norm");
  CHECK(counterpart("linear") == "addmm");
  CHECK(counterpart("relu") == "relu");
  // What only ATen has: tuple items and transposes, nothing else.
  for (const InspectNode& n : fwd.graph->nodes())
    if (d.beforeOfAfter[static_cast<size_t>(n.index)] < 0)
      CHECK_THAT(n.shortName, Catch::Matchers::Equals("getitem") || Catch::Matchers::Equals("t"));
  // The same graph against itself stays in one dialect.
  const GraphDiff same = diffGraphs(*fwd.graph, *fwd.graph);
  CHECK_FALSE(same.crossDialect);
  CHECK(same.added + same.removed + static_cast<int>(same.changed.size()) == 0);
}

TEST_CASE("the window: AOT graphs in the graphs table, the partition overlay, Details, diff") {
  app();
  auto reader = storage::TraceReader::open(storePath());
  const storage::CompileRecord c = compileOf(*reader, frameName());
  MainWindow w;
  w.resize(1500, 950);
  w.show();
  REQUIRE(w.openStore(QString::fromStdString(storePath())));
  REQUIRE(waitFor([&] { return w.reportsReady(); }));
  CHECK(w.bannerText().isEmpty());
  REQUIRE(w.selectFrame(c.frameId));
  CHECK(w.storeReadsPending());  // read off the UI thread
  REQUIRE(waitFor([&] { return !w.storeReadsPending(); }));
  REQUIRE(w.graphs()->rowCount() == 4);
  w.compileTabs()->setCurrentWidget(w.detailsView());
  CHECK(w.detailsView()->toPlainText().startsWith("AOT compile\n  backend: aot_eager (training)"));
  shot(&w, "inspector-details");

  // The joint graph opens coloured by its partition.
  QSignalSpy loaded(&w, &MainWindow::graphLoaded);
  w.openGraph(c.id, -1);
  REQUIRE(waitFor([&] { return loaded.count() == 1; }));
  GraphView* v = w.graphView();
  REQUIRE(waitFor([&] { return v->graph() && !v->layoutPending() && v->scene()->visible(); }));
  CHECK(v->findChild<QLabel*>("graphTitle")->text().contains(" compile #0 AOT joint graph: "));
  CHECK(v->overlay() == Overlay::kPartition);
  QStringList picker;
  for (int i = 0; i < v->overlayPicker()->count(); ++i) picker << v->overlayPicker()->itemText(i);
  CHECK(picker == QStringList{"op kind", "tensor size", "partition"});
  CHECK(v->legend()->text().contains("saved"));
  const AotRecord r = aotRecords(reader->artifactsOfCompile(c.id))[0];
  const int saved = nodeNamed(*v->graph(), r.saved.back());
  REQUIRE(saved >= 0);
  v->selectNode(saved);
  REQUIRE(waitFor([&] { return !v->layoutPending(); }));
  const std::string key = v->scene()->visible()->units[static_cast<size_t>(v->scene()->visible()->unitOf(saved))].key;
  CHECK(v->scene()->unitFill(key) == QString::fromStdString(std::string(partitionRoleColour(PartitionRole::kSaved))));
  CHECK(v->nodePanel()->toPlainText().contains("partition\nsaved"));
  shot(&w, "inspector-aot-partition");
  // Recolouring keeps the layout; an overlay that does not apply is refused.
  CHECK(v->setOverlay(Overlay::kTensorSize));
  CHECK(v->scene()->unitFill(key) ==
        QString::fromStdString(OverlayPainter(Overlay::kTensorSize, *v->graph()).nodeFill(saved)));
  CHECK_FALSE(v->setOverlay(Overlay::kDiff));
  CHECK(v->overlay() == Overlay::kTensorSize);

  // The diff pickers list the AOT graphs: Dynamo's graph against the AOT forward graph.
  DiffPanel* d = w.diffPanel();
  int before = -1, after = -1;
  for (size_t i = 0; i < d->entries().size(); ++i) {
    const GraphEntry& e = d->entries()[i];
    if (e.compileId == c.id && e.index == 0) before = static_cast<int>(i);
    if (e.compileId == c.id && e.index == -2) after = static_cast<int>(i);
  }
  REQUIRE((before >= 0 && after >= 0));
  CHECK(d->entries()[static_cast<size_t>(after)].label.endsWith(" \u00b7 AOT forward graph (aot_eager)"));
  w.tabs()->setCurrentWidget(d);
  QSignalSpy shown(d, &DiffPanel::diffShown);
  d->diff(before, after);
  REQUIRE(waitFor([&] { return shown.count() == 1; }));
  REQUIRE(waitFor([&] { return d->view()->graph() && !d->view()->layoutPending() && d->view()->scene()->visible(); }));
  REQUIRE(d->result());
  CHECK(d->result()->crossDialect);
  CHECK(d->summary()->text().contains("torch-level vs ATen"));
  CHECK(d->view()->overlay() == Overlay::kDiff);
  shot(&w, "inspector-aot-diff");
}

TEST_CASE("export: the AOT graphs drawn by their partition, next to Dynamo's graph") {
  app();
  testing::TempDir dir;
  LayoutCache cache(QString::fromStdString(dir.file("cache")));
  const ExportOutput out = exportStore(storePath(), QString::fromStdString(testing::layoutProgram()), &cache);
  std::map<std::string, std::string> files;
  for (const ExportFile& f : out.files) files[f.name] = f.data;
  const std::string base = "graphs/" + fileSafe(frameName()) + "-c0";
  for (const char* kind : {"-g0", "-aot-joint", "-aot-forward", "-aot-backward"}) {
    INFO(base + kind);
    CHECK(files.count(base + kind + ".svg"));
    CHECK(files.count(base + kind + ".png"));
  }
  const std::string saved(partitionRoleColour(PartitionRole::kSaved));
  CHECK(files[base + "-aot-joint.svg"].find("fill=\"" + saved + "\"") != std::string::npos);
  CHECK(files[base + "-g0.svg"].find("fill=\"" + saved + "\"") == std::string::npos);
  CHECK_THAT(files["summary.txt"], Catch::Matchers::Contains(base.substr(7) + "-aot-joint.{svg,png}: " +
                                                             frameName() + " compile #0 AOT joint graph, "));
}

TEST_CASE("bad input: an AOT graph artifact that is not a graph is an error naming it, nothing else") {
  testing::TempDir dir;
  const std::string path = dir.file("bad.db");
  {
    auto w = storage::TraceWriter::open(path, {});
    const storage::RowId frame = w->recordFrame({0, 0, "m.py", 1, "f"});
    storage::CompileRecord c;
    c.frameId = frame;
    c.status = "ok";
    const storage::RowId compile = w->recordCompile(c);
    w->recordArtifact({0, 0, compile, "dynamo.aot", "application/json", "[1, 2]", 0});
    w->recordArtifact({0, 0, compile, "dynamo.aot.joint", "application/json", "not a graph", 0});
    w->close();
  }
  const std::string bytes = testing::readFile(path);
  auto reader = storage::TraceReader::open(path);
  const storage::RowId compile = reader->compilesOfRun(reader->runs()[0].id)[0].id;
  const std::vector<AotRecord> records = aotRecords(reader->artifactsOfCompile(compile));
  REQUIRE(records.size() == 1);
  CHECK(records[0].error == "the dynamo.aot artifact is not a JSON object");
  CHECK_THAT(compileDetailsText(reader->artifactsOfCompile(compile)),
             Catch::Matchers::StartsWith("AOT compile\n  note: the dynamo.aot artifact is not a JSON object\n"));
  const GraphLoad load = loadGraph(path, compile, -1);
  CHECK_FALSE(load.graph);
  CHECK(load.error == QString("cannot read AOT joint graph of compile %1: cannot read graph JSON: not valid JSON "
                              "([json.exception.parse_error.101] parse error at line 1, column 2: syntax error "
                              "while parsing value - invalid literal; last read: 'no')").arg(compile));
  CHECK(testing::readFile(path) == bytes);  // only read
}

TEST_CASE("dynamic sizes show their symbols: inputs from the dynamic-shapes report, every node from the graph") {
  auto reader = storage::TraceReader::open(storePath());
  const storage::CompileRecord c = compileOf(*reader, "mlp", 1);  // recompiled with a dynamic batch
  std::string report;
  for (const storage::ArtifactRecord& a : reader->artifactsOfCompile(c.id))
    if (a.name == kDynamicShapesArtifact) report = a.data;
  // The report's symbol line, as recorded ("s0 = x.size()[0] in [2, inf] (dynamic; example 16)").
  std::string line;
  std::istringstream in(report);
  for (std::string l; std::getline(in, l);)
    if (l.rfind("s0 = x.size()[0] in ", 0) == 0) line = l;
  REQUIRE_FALSE(line.empty());
  const GraphLoad load = loadGraph(storePath(), c.id, 0);
  REQUIRE(load.graph);
  const InspectNode& x = load.graph->node(nodeNamed(*load.graph, "x"));
  CHECK(x.tensor == "f32[16, 16]");
  CHECK(x.symbolicShape == "[s0, 16]");
  CHECK(x.symbols == std::vector<std::string>{line});
  // The weight's sizes are static; nodes past the inputs show the symbolic sizes the stored graph
  // gives them (x @ w is [s0, 4]), with no symbol lines of their own.
  CHECK(load.graph->node(nodeNamed(*load.graph, "w")).symbolicShape.empty());
  const InspectNode& tanh = load.graph->node(nodeNamed(*load.graph, "tanh"));
  CHECK(tanh.tensor == "f32[16, 4]");
  CHECK(tanh.symbolicShape == "[s0, 4]");
  CHECK(tanh.symbols.empty());
  // The first compile (static sizes) has none.
  const GraphLoad first = loadGraph(storePath(), compileOf(*reader, "mlp", 0).id, 0);
  REQUIRE(first.graph);
  CHECK(first.graph->node(nodeNamed(*first.graph, "x")).symbolicShape.empty());
}

TEST_CASE("the Details tab lists the fused lowerings per input signature with their kernels, read off the UI thread") {
  app();
  testing::TempDir dir;
  const std::string path = dir.file("lowerings.db");
  storage::RowId frame = 0;
  {
    // What the sink writes for a dynamic fused entry lowered for 3 sizes (recording_bindings.cpp).
    auto w = storage::TraceWriter::open(path, {});
    frame = w->recordFrame({0, 0, "m.py", 1, "f"});
    storage::CompileRecord c;
    c.frameId = frame;
    c.status = "ok";
    const storage::RowId compile = w->recordCompile(c);
    storage::KernelRecord k;
    k.compileId = compile;
    k.name = "k0_tanh";
    k.source = "void k0_tanh() {}";
    k.graph = "dynamo";
    const std::string own = std::to_string(w->recordKernel(k));
    k.name = "k1_sum";
    k.graph = "per_size";
    k.graphIndex = 2;
    k.compileUs = 700000;
    const std::string later = std::to_string(w->recordKernel(k));
    auto lowering = [&](int n, const std::string& size, const std::string& kernels) {
      w->recordArtifact({0, 0, compile, "dynamo.aot_per_size", "application/json",
                         "{\"backend\":\"fused\",\"when\":\"" + std::string(n ? "call" : "compile") +
                             "\",\"signature\":[\"x: [" + size + ", 8]\"],\"compile_ms\":5,\"lowering\":" +
                             std::to_string(n) + ",\"reason\":\"" + (n ? "new" : "first") +
                             " input signature\",\"symbols\":[\"s0=" + size + "\"],\"lower_ms\":2,\"kernels\":[" +
                             kernels + "]}",
                         0});
    };
    lowering(0, "5", "{\"name\":\"k0_tanh\",\"code_id\":" + own + ",\"reused\":false,\"compile_ms\":600}");
    lowering(1, "9", "{\"name\":\"k0_tanh\",\"code_id\":" + own + ",\"reused\":true}");
    lowering(2, "13", "{\"name\":\"k0_tanh\",\"code_id\":" + own + ",\"reused\":true},{\"name\":\"k1_sum\",\"code_id\":" +
                          later + ",\"reused\":false,\"compile_ms\":700}");
    w->close();
  }
  MainWindow w;
  w.resize(1200, 800);
  w.show();
  REQUIRE(w.openStore(QString::fromStdString(path)));
  REQUIRE(waitFor([&] { return w.reportsReady(); }));
  REQUIRE(w.selectFrame(frame));
  CHECK(w.storeReadsPending());  // read off the UI thread
  REQUIRE(waitFor([&] { return !w.storeReadsPending(); }));
  w.compileTabs()->setCurrentWidget(w.detailsView());
  const std::string text = w.detailsView()->toPlainText().toStdString();
  CHECK_THAT(text, Catch::Matchers::Contains(
                       "Lowerings per input signature (3; dynamic: s0)\n"
                       "  lowering #0 at s0=5 (first input signature): 1 kernel new, 0 reused (family hit); lowering "));
  CHECK_THAT(text, Catch::Matchers::Contains("    inputs: x: [5, 8]\n    k0_tanh: new, compiled in 600 ms\n"));
  CHECK_THAT(text, Catch::Matchers::Contains("  lowering #1 at s0=9 (new input signature): 0 kernels new, 1 reused"));
  CHECK_THAT(text, Catch::Matchers::Contains("    inputs: x: [13, 8]\n    k0_tanh: reused (family hit)\n"
                                             "    k1_sum: new, compiled in 700 ms\n"));
  CHECK_THAT(text, Catch::Matchers::Contains("  k1_sum (per_size graph 2, "));  // its row, among the kernels
  CHECK_THAT(text, !Catch::Matchers::Contains("dynamo.aot_per_size ("));      // not an "other artifact"
}
