// The inspector's Qt side, headless (QT_QPA_PLATFORM=offscreen): the models over a store made by
// the test, bad input, live refresh, the layout process (cache, cancellation, timeout), graph
// loading, the graph view's expand/collapse/search, and the export.
// Python.h (through core's graph headers) before Qt: Qt's `slots` macro breaks CPython's headers.
#include "dynamo/core/graph_serializer.h"
#include "gui_test_support.h"

#include <QApplication>
#include <QElapsedTimer>
#include <QFile>
#include <QSignalSpy>
#include <QThread>

#include <filesystem>
#include <fstream>

#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include "dynamo/gui/compile_artifacts.h"
#include "dynamo/gui/exporter.h"
#include "dynamo/gui/graph_diff.h"
#include "dynamo/gui/graph_view.h"
#include "dynamo/gui/layout_engine.h"
#include "dynamo/gui/layout_splice.h"
#include "dynamo/gui/main_window.h"
#include "dynamo/gui/store_models.h"
#include "dynamo/gui/store_reports.h"
#include "dynamo/gui/store_session.h"
#include "dynamo/storage/crash_marker.h"
#include "dynamo/storage/trace_writer.h"
#include "dynamo_catch.h"

namespace Catch {
template <>
struct StringMaker<QString> {
  static std::string convert(const QString& s) { return '"' + s.toStdString() + '"'; }
};
}  // namespace Catch

using namespace dynamo;
using namespace dynamo::gui;
using testing::TempDir;

namespace {

QApplication& app() {
  static int argc = 1;
  static char arg0[] = "gui_tests";
  static char* argv[] = {arg0, nullptr};
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  static QApplication a(argc, argv);
  return a;
}

template <typename Pred>
bool waitFor(Pred pred, int ms = 20000) {
  QElapsedTimer t;
  t.start();
  while (!pred()) {
    if (t.elapsed() > ms) return false;
    QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
    QThread::msleep(2);
  }
  return true;
}

std::shared_ptr<LayoutCache> freshCache(const TempDir& dir) {
  return std::make_shared<LayoutCache>(QString::fromStdString(dir.file("cache")));
}

/// Graphviz's layout of a visible graph (the layout process, waited for).
LayoutResult graphvizLayout(const VisibleGraph& v) {
  LayoutResult r;
  QString error;
  const bool ok = LayoutEngine::layoutBlocking(QString::fromStdString(testing::layoutProgram()), nullptr,
                                               toDot(v), r, error);
  INFO(error.toStdString());
  REQUIRE(ok);
  return r;
}

/// Whether two unit boxes (centre and size) overlap.
bool overlaps(const LayoutBox& a, const LayoutBox& b) {
  return std::abs(a.x - b.x) < (a.w + b.w) / 2 - 0.01 && std::abs(a.y - b.y) < (a.h + b.h) / 2 - 0.01;
}

/// Whether a frame (top-left and size) holds a unit box (centre and size).
bool holds(const LayoutBox& frame, const LayoutBox& u) {
  return u.x - u.w / 2 >= frame.x - 0.01 && u.x + u.w / 2 <= frame.x + frame.w + 0.01 &&
         u.y - u.h / 2 >= frame.y - 0.01 && u.y + u.h / 2 <= frame.y + frame.h + 0.01;
}

/// Checks a provisional layout of `after` with `group` open: every box, frame and edge placed,
/// no two boxes overlapping, the group's boxes inside its frame, the frame inside its parents'.
void checkSplice(const VisibleGraph& after, const LayoutResult& r, int group) {
  REQUIRE(r.nodes.size() == after.units.size());
  REQUIRE(r.clusters.size() == after.clusters.size());
  REQUIRE(r.edges.size() == after.edges.size());
  for (size_t i = 0; i < after.units.size(); ++i)
    for (size_t j = i + 1; j < after.units.size(); ++j) {
      INFO(after.units[i].key << " and " << after.units[j].key);
      CHECK_FALSE(overlaps(r.nodes.at(after.units[i].key), r.nodes.at(after.units[j].key)));
    }
  int inside = 0;
  for (size_t c = 0; c < after.clusters.size(); ++c) {
    const VisibleCluster& vc = after.clusters[c];
    const LayoutBox& frame = r.clusters.at(vc.key);
    for (const VisibleUnit& u : after.units) {
      int up = u.cluster;
      while (up >= 0 && up != static_cast<int>(c)) up = after.clusters[static_cast<size_t>(up)].parent;
      INFO(u.key << " in " << vc.key);
      if (up == static_cast<int>(c)) CHECK(holds(frame, r.nodes.at(u.key)));
      else CHECK_FALSE(holds(frame, r.nodes.at(u.key)));
      if (vc.group == group && u.cluster == static_cast<int>(c)) ++inside;
    }
  }
  CHECK(inside > 0);
  for (const auto& [key, pts] : r.edges) CHECK((pts.size() >= 8 && (pts.size() / 2 - 1) % 3 == 0));
  CHECK(r.width > 0);
  CHECK(r.height > 0);
}

QString cell(const QAbstractItemModel& m, int row, int col, const QModelIndex& parent = {}) {
  return m.data(m.index(row, col, parent), Qt::DisplayRole).toString();
}

}  // namespace

TEST_CASE("the run tree shows runs, files and frames with compile counts and status") {
  app();
  TempDir dir;
  const std::string path = dir.file("t.db");
  const testing::StoreIds ids = testing::makeStore(path);
  QString error;
  auto session = StoreSession::open(QString::fromStdString(path), error);
  REQUIRE(session);
  CHECK(session->emptyMessage().isEmpty());
  RunTreeModel tree;
  tree.reload(session->reader());
  REQUIRE(tree.rowCount() == 1);
  CHECK(cell(tree, 0, 0) == "run 1: train.py --epochs 1 (pid " + QString::number(getpid()) + ")");
  CHECK(cell(tree, 0, 1) == "4");
  CHECK(cell(tree, 0, 2) == "recompiled");
  const QModelIndex run = tree.index(0, 0);
  REQUIRE(tree.rowCount(run) == 2);  // resnet.py, step.py
  CHECK(cell(tree, 0, 0, run) == "resnet.py");
  CHECK(cell(tree, 0, 2, run) == "ok");
  CHECK(cell(tree, 1, 0, run) == "step.py");
  CHECK(cell(tree, 1, 1, run) == "3");
  const QModelIndex step = tree.index(1, 0, run);
  REQUIRE(tree.rowCount(step) == 2);
  CHECK(cell(tree, 0, 0, step) == "step :3");
  CHECK(cell(tree, 0, 1, step) == "2");
  CHECK(cell(tree, 0, 2, step) == "recompiled");
  CHECK(cell(tree, 1, 0, step) == "<resume in step> :3");
  CHECK(tree.data(tree.index(0, 2, step), Qt::BackgroundRole).value<QColor>() == statusColour("recompiled"));
  CHECK(tree.frameIndex(ids.frameResume) == tree.index(1, 0, step));
  CHECK(tree.frame(tree.findFrame("ResNet"))->id == ids.frameModel);
  CHECK(tree.parent(tree.index(0, 0, step)) == step);
}

TEST_CASE("a run that did not close says how it ended, in the reports' words") {
  using namespace dynamo::storage;
  app();
  TempDir dir;
  const std::string path = dir.file("crashed.db");
  // A child process records a compile and ends without closing its writer (as a crash would).
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    RunRecord run;
    run.argv = {"/w/train.py"};
    auto w = TraceWriter::open(path, run);
    RowId frame = w->recordFrame({0, 0, "/w/model.py", 14, "forward"});
    CompileRecord c;
    c.frameId = frame;
    c.status = "ok";
    w->recordCompile(c);
    w->flush();
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  QString error;
  RunTreeModel tree;
  {
    auto session = StoreSession::open(QString::fromStdString(path), error);
    REQUIRE(session);
    tree.reload(session->reader());
    CHECK(cell(tree, 0, 0) == "run 1: train.py (pid " + QString::number(child) +
                                  "), did not close (still running, or killed)");
  }
  // The marker a fatal-signal handler would have left (crash_marker.h): the title names the
  // crash and the compile as dynamo-trace runs does.
  CrashMarker m;
  m.runId = 1;
  m.signal = SIGSEGV;
  m.stage = CrashStage::kFirstCall;
  m.compileId = (RowId{1} << 32) | 2;  // the child's second row: its compile
  m.timeUs = 1;
  std::ofstream(crashMarkerPath(path, 1), std::ios::binary) << formatCrashMarker(m);
  auto session = StoreSession::open(QString::fromStdString(path), error);
  REQUIRE(session);
  tree.reload(session->reader());
  CHECK(cell(tree, 0, 0) == "run 1: train.py (pid " + QString::number(child) +
                                "), crashed (SIGSEGV) during the first call of compile #0 of "
                                "frame forward (model.py:14)");
}

TEST_CASE("compiles, graphs, breaks, guards and recompile reasons of a frame") {
  app();
  TempDir dir;
  const std::string path = dir.file("t.db");
  const testing::StoreIds ids = testing::makeStore(path);
  auto reader = storage::TraceReader::open(path);
  CompilesModel compiles;
  compiles.setFrame(*reader, ids.frameStep);
  REQUIRE(compiles.rowCount() == 2);
  CHECK(cell(compiles, 0, 0) == "#0");
  CHECK(cell(compiles, 0, 1) == "graph_break");
  CHECK(cell(compiles, 1, 2) == "tensor 'x' size mismatch at dim 0: expected 8, got 16");
  CHECK(cell(compiles, 1, 3) == "3.0");
  CHECK(cell(compiles, 1, 5) == QString("entry %1").arg(ids.compileStep1));
  CHECK(cell(compiles, 1, 6) == "1");
  CHECK(cell(compiles, 1, 7) == "1");
  GraphsModel graphs;
  graphs.setCompile(*reader, ids.compileModel);
  REQUIRE(graphs.rowCount() == 1);
  CHECK(cell(graphs, 0, 0) == "graph 0");
  CHECK(graphs.data(graphs.index(0, 0), kRowIdRole).toLongLong() == ids.compileModel);
  CHECK(graphs.data(graphs.index(0, 0), kIndexRole).toInt() == 0);
  BreaksModel breaks;
  breaks.setCompile(*reader, ids.compileStep0);
  REQUIRE(breaks.rowCount() == 1);
  CHECK(cell(breaks, 0, 0) == "data-dependent-branch");
  CHECK(cell(breaks, 0, 1) == "/work/step.py:5");
  CHECK(cell(breaks, 0, 4) == "use torch.where");
  GuardsModel guards;
  guards.setCompile(*reader, ids.compileStep0);
  REQUIRE(guards.rowCount() == 1);
  CHECK(cell(guards, 0, 1) == "L['x']");
  const StoreReports reports = buildStoreReports(path);
  REQUIRE(reports.error.isEmpty());
  FailuresModel failures;
  failures.setCompile(reports.profile, compiles.compiles()[1]);
  REQUIRE(failures.rowCount() == 1);
  CHECK(cell(failures, 0, 0) == QString("entry %1").arg(ids.compileStep0));
  CHECK(cell(failures, 0, 2) == "x");
  CHECK(cell(failures, 0, 4) == "8");
  CHECK(cell(failures, 0, 5) == "16");
  CHECK(cell(failures, 0, 6) == "/work/step.py:4");
  // Store-wide: one break site, with the graphs before and after it; the diff pickers list 4 graphs.
  REQUIRE(reports.breakSites.size() == 1);
  const BreakSite& site = reports.breakSites[0];
  CHECK(site.compiles == std::vector<storage::RowId>{ids.compileStep0, ids.compileStep1});
  CHECK(site.graphBefore == ids.compileStep0);
  CHECK(site.graphAfter == ids.compileResume);
  BreakGroupsModel sites;
  sites.setSites(reports.breakSites);
  CHECK(cell(sites, 0, 2) == "2");  // occurrences: two compiles met it, no hits recorded
  REQUIRE(reports.graphs.size() == 4);
  CHECK(reports.graphs[1].label == "run 1 \u00b7 step \u00b7 compile #0 \u00b7 graph 0 (6 nodes)");
  RecompilesModel recompiles;
  recompiles.reload(reports.profile);
  REQUIRE(recompiles.rowCount() == 1);
  const QModelIndex fn = recompiles.index(0, 0);
  REQUIRE(recompiles.rowCount(fn) == 1);
  CHECK(cell(recompiles, 0, 0, fn) == "compile #1");
  CHECK(cell(recompiles, 0, 2, fn) == "TENSOR_MATCH x size");
  CHECK(cell(recompiles, 0, 3, fn) == "8");
  CHECK(cell(recompiles, 0, 4, fn) == "16");
  CHECK(cell(recompiles, 0, 5, fn) == "/work/step.py:4");
}

TEST_CASE("bad input: each a clear message, and the file is left as it was") {
  app();
  TempDir dir;
  QString error;
  SECTION("not a trace store") {
    const std::string p = dir.file("notes.txt");
    QFile f(QString::fromStdString(p));
    REQUIRE(f.open(QIODevice::WriteOnly));
    f.write("hello, not a database\n");
    f.close();
    CHECK_FALSE(StoreSession::open(QString::fromStdString(p), error));
    CHECK(error == QString::fromStdString("'" + p + "' is not a Dynamo trace store (not an SQLite database): the file does not start with the SQLite header; it was left untouched (hint: pass a new file name (e.g. trace.db); Dynamo never writes into a file it did not create)"));
    CHECK(testing::readFile(p) == "hello, not a database\n");
  }
  SECTION("a newer schema") {
    const std::string p = dir.file("new.db");
    testing::makeStore(p);
    {
      auto w = storage::TraceWriter::open(p, storage::RunRecord{});
      w->close();
    }
    // Bump the version with the same tool the storage tests use.
    REQUIRE(std::system(("sqlite3 '" + p + "' 'PRAGMA user_version = 7;'").c_str()) == 0);
    const std::string before = testing::readFile(p);
    CHECK_FALSE(StoreSession::open(QString::fromStdString(p), error));
    CHECK(error.startsWith(QString::fromStdString("'" + p + "' was written by trace-store schema version 7; this Dynamo reads up to version 3")));
    CHECK(testing::readFile(p) == before);
  }
  SECTION("a missing file") {
    CHECK_FALSE(StoreSession::open(QString::fromStdString(dir.file("nope.db")), error));
    CHECK(error.startsWith(QString::fromStdString("trace store '" + dir.file("nope.db") + "' does not exist")));
    CHECK_FALSE(std::filesystem::exists(dir.file("nope.db")));
  }
  SECTION("an empty store") {
    const std::string p = dir.file("empty.db");
    auto w = storage::TraceWriter::open(p, storage::RunRecord{});
    w->close();
    auto s = StoreSession::open(QString::fromStdString(p), error);
    REQUIRE(s);
    CHECK(s->emptyMessage() == QString::fromStdString("'" + p + "' holds 1 run(s) but no compiles yet; the views fill in as they are written"));
  }
  SECTION("a store deleted while open") {
    const std::string p = dir.file("gone.db");
    testing::makeStore(p);
    auto s = StoreSession::open(QString::fromStdString(p), error);
    REQUIRE(s);
    QSignalSpy lost(s.get(), &StoreSession::lostFile);
    std::filesystem::remove(p);
    s->poll();
    REQUIRE(lost.count() == 1);
    CHECK(lost.at(0).at(0).toString() == QString::fromStdString("trace store '" + p + "' was deleted while open: the views show what was read before; reopen it from a copy to see more"));
    CHECK(s->lost());
    CHECK_FALSE(std::filesystem::exists(p));  // nothing recreated it
  }
}

TEST_CASE("live refresh: rows a running writer commits show up without reopening") {
  app();
  TempDir dir;
  const std::string path = dir.file("live.db");
  storage::RunRecord run;
  run.argv = {"live.py"};
  auto w = storage::TraceWriter::open(path, run);
  const storage::RowId frame = w->recordFrame({0, 0, "live.py", 1, "f"});
  w->flush();
  QString error;
  auto s = StoreSession::open(QString::fromStdString(path), error);
  REQUIRE(s);
  QSignalSpy changed(s.get(), &StoreSession::changed);
  s->poll();
  CHECK(changed.count() == 0);
  storage::CompileRecord c;
  c.frameId = frame;
  c.status = "ok";
  c.reason = "first call";
  w->recordCompile(c);
  w->flush();
  QThread::msleep(20);  // a new modification time
  s->poll();
  CHECK(changed.count() == 1);
  CHECK(s->reader().counts().compiles == 1);
  w->close();
}

TEST_CASE("layouts run in another process, are cached, and can be cancelled") {
  app();
  TempDir dir;
  auto cache = freshCache(dir);
  LayoutEngine engine(QString::fromStdString(testing::layoutProgram()), cache);
  auto g = buildInspectGraph(testing::makeResnetLike(), "h");
  const std::string dot = toDot(computeVisible(*g, {g->findGroup("layer1")}));
  QSignalSpy done(&engine, &LayoutEngine::finished);
  const int t1 = engine.request(dot);
  CHECK(engine.busy());
  REQUIRE(waitFor([&] { return done.count() == 1; }));
  CHECK(done.at(0).at(0).toInt() == t1);
  CHECK_FALSE(done.at(0).at(2).toBool());
  const auto result = done.at(0).at(1).value<std::shared_ptr<const LayoutResult>>();
  REQUIRE(result);
  const VisibleGraph v = computeVisible(*g, {g->findGroup("layer1")});
  for (const VisibleUnit& u : v.units) CHECK(result->nodes.count(u.key) == 1);
  CHECK(result->clusters.count("cluster_g" + std::to_string(g->findGroup("layer1"))) == 1);
  // Again: from the cache, no process, still answered on a later event-loop turn.
  engine.request(dot);
  CHECK(done.count() == 1);
  REQUIRE(waitFor([&] { return done.count() == 2; }));
  CHECK(done.at(1).at(2).toBool());
  CHECK(engine.cacheHits() == 1);
  CHECK(engine.processRuns() == 1);
  CHECK(std::filesystem::exists(dir.file("cache")));

  // A slow layout (a wide, tangled graph) is cancelled: the process is killed.
  std::string big = "digraph G {\n";
  for (int i = 0; i < 1400; ++i) big += "  n" + std::to_string(i) + " -> n" + std::to_string((i * 7919) % 1400) + ";\n  n" +
                                        std::to_string(i) + " -> n" + std::to_string((i * 104729 + 13) % 1400) + ";\n";
  big += "}\n";
  QSignalSpy canceled(&engine, &LayoutEngine::canceled);
  const int t2 = engine.request(big);
  QThread::msleep(50);
  engine.cancel();
  REQUIRE(canceled.count() == 1);
  CHECK(canceled.at(0).at(0).toInt() == t2);
  CHECK_FALSE(engine.busy());
  // A layout past the time limit is stopped with a message.
  QSignalSpy failed(&engine, &LayoutEngine::failed);
  engine.setTimeoutMs(100);
  engine.request(big + " ");
  REQUIRE(waitFor([&] { return failed.count() == 1; }));
  CHECK(failed.at(0).at(1).toString() == "Graphviz took more than 0 s to lay this view out and was stopped: collapse some modules");
  // A missing layout program is a message too.
  LayoutEngine missing(QString::fromStdString(dir.file("no-such-program")), nullptr);
  QSignalSpy failed2(&missing, &LayoutEngine::failed);
  missing.request(dot);
  REQUIRE(waitFor([&] { return failed2.count() == 1; }));
  CHECK(failed2.at(0).at(1).toString().startsWith("cannot start the layout program '"));
}

TEST_CASE("graphs load off the UI thread, with messages for missing and oversized graphs") {
  app();
  TempDir dir;
  const std::string path = dir.file("t.db");
  const testing::StoreIds ids = testing::makeStore(path);
  GraphLoad ok = loadGraph(path, ids.compileModel, 0);
  REQUIRE(ok.graph);
  CHECK(ok.graph->nodes().size() == static_cast<size_t>(ok.record.numNodes));
  GraphLoad missing = loadGraph(path, ids.compileModel, 3);
  CHECK(missing.error == QString("compile %1 has no graph 3 in '%2'").arg(ids.compileModel).arg(QString::fromStdString(path)));
  // A graph row claiming more nodes than the inspector reads.
  {
    auto w = storage::TraceWriter::open(path, storage::RunRecord{});
    storage::GraphRecord g;
    g.compileId = ids.compileModel;
    g.index = 1;
    g.format = "dynamo.graph/1";
    g.serialized = core::serializeGraph(testing::makeChain(2));
    g.numNodes = kMaxGraphNodes + 1;
    w->recordGraph(g);
    w->close();
  }
  GraphLoad big = loadGraph(path, ids.compileModel, 1);
  CHECK_FALSE(big.graph);
  CHECK(big.error == QString("graph 1 of compile %1 has 500001 nodes: the inspector reads graphs of up to 500000 nodes (use dynamo-trace graph to print it)").arg(ids.compileModel));
}

TEST_CASE("the graph view expands, collapses, searches and refuses views too large to lay out") {
  app();
  TempDir dir;
  qputenv("DYNAMO_INSPECT_LAYOUT", QByteArray::fromStdString(testing::layoutProgram()));
  GraphView view(freshCache(dir));
  view.resize(1000, 700);
  QSignalSpy drawn(&view, &GraphView::layoutDrawn);
  auto g = buildInspectGraph(testing::makeResnetLike(), "h");
  view.setGraph(g, "resnet-like");
  REQUIRE(waitFor([&] { return drawn.count() == 1; }));
  REQUIRE(view.scene()->visible());
  CHECK(view.scene()->visible()->units.size() == 8);
  // Expand layer1, then one of its blocks: a frame each.
  REQUIRE(view.expandGroup(g->findGroup("layer1")));
  REQUIRE(waitFor([&] { return drawn.count() == 2; }));
  CHECK(view.scene()->visible()->clusters.size() == 1);
  // Search: regex over names and source lines; the first hit is selected and revealed.
  const std::vector<int> hits = view.search("out \\+= identity");
  REQUIRE(hits.size() == 2);
  REQUIRE(waitFor([&] { return drawn.count() == 3; }));
  CHECK(view.selectedNode() == hits[0]);
  CHECK(view.scene()->visible()->unitOf(hits[0]) >= 0);
  CHECK(view.scene()->visible()->units[static_cast<size_t>(view.scene()->visible()->unitOf(hits[0]))].node == hits[0]);
  CHECK(view.nodePanel()->toPlainText().contains("operator.iadd"));
  CHECK(view.sourceView()->highlightedLine() == 102);
  CHECK(view.sourceView()->highlightedText() == "out += identity");
  // The search box's Enter matches off the UI thread: the same hits, shown when they come.
  QSignalSpy searched(&view, &GraphView::searchDone);
  view.searchBox()->setText("out \\+= identity");
  emit view.searchBox()->returnPressed();  // (QTest's key events leave a device that crashes at exit)
  REQUIRE(waitFor([&] { return searched.count() == 1; }));
  CHECK(searched.at(0).at(0).toInt() == 2);
  CHECK(view.selectedNode() == hits[0]);
  REQUIRE(waitFor([&] { return !view.layoutPending(); }));
  CHECK(view.search("[unclosed").empty());
  CHECK(view.message().startsWith("not a regular expression: "));
  // Collapsing layer1 closes what is inside it too.
  view.collapseGroup(g->findGroup("layer1"));
  REQUIRE(waitFor([&] { return !view.layoutPending(); }));
  CHECK(view.expanded().empty());

  // A 10,000-node graph: shown collapsed with a message; expansions past the limit are refused.
  auto big = buildInspectGraph(testing::makeChain(10000), "big");
  const int before = drawn.count();
  view.setGraph(big, "chain");
  CHECK(view.message().startsWith("this graph has 10002 nodes: it is shown collapsed"));
  REQUIRE(waitFor([&] { return drawn.count() == before + 1; }));
  const int super = ~big->group(0).items[0];
  REQUIRE(view.expandGroup(super));
  bool refused = false;
  for (int item : big->group(super).items) {
    if (!view.expandGroup(~item)) {
      refused = true;
      break;
    }
  }
  CHECK(refused);
  CHECK(view.message().contains("the view lays out at most 1500 at once"));
  CHECK(computeVisible(*big, view.expanded()).units.size() <= static_cast<size_t>(kMaxLayoutUnits));
  qunsetenv("DYNAMO_INSPECT_LAYOUT");
}

TEST_CASE("the graph view lays out the likely expansions in the background: the click finds them cached") {
  app();
  testing::TempDir dir;
  qputenv("DYNAMO_INSPECT_LAYOUT", QByteArray::fromStdString(testing::layoutProgram()));
  GraphView view(freshCache(dir));
  view.resize(1000, 700);
  QSignalSpy drawn(&view, &GraphView::layoutDrawn);
  auto g = buildInspectGraph(testing::makeResnetLike(), "prefetch");
  view.setGraph(g, "resnet-like");
  REQUIRE(waitFor([&] { return drawn.count() == 1; }));
  // The largest collapsed modules on screen (layer1 first), each laid out expanded, one at a time.
  const int collapsed = static_cast<int>(std::count_if(view.scene()->visible()->units.begin(),
                                                       view.scene()->visible()->units.end(),
                                                       [](const VisibleUnit& u) { return u.group >= 0; }));
  const int expected = std::min(collapsed, kPrefetchExpansions);
  REQUIRE(expected > 0);
  REQUIRE(waitFor([&] { return view.prefetcher()->done() == expected; }));
  const int runs = view.engine()->processRuns(), hits = view.engine()->cacheHits();
  REQUIRE(view.expandGroup(g->findGroup("layer1")));
  REQUIRE(waitFor([&] { return drawn.count() == 2; }));
  CHECK(view.engine()->processRuns() == runs);     // no Graphviz for the click
  CHECK(view.engine()->cacheHits() == hits + 1);
  CHECK(view.message().endsWith("(cached)"));
  // Collapsing it again shows the first view, from the cache too.
  view.collapseGroup(g->findGroup("layer1"));
  REQUIRE(waitFor([&] { return drawn.count() == 3; }));
  CHECK(view.engine()->processRuns() == runs);
  qunsetenv("DYNAMO_INSPECT_LAYOUT");
}

TEST_CASE("an expansion is spliced into the drawn layout: the module's boxes alone, where its box was") {
  app();
  auto g = buildInspectGraph(testing::makeResnetLike(), "splice");
  const int layer1 = g->findGroup("layer1"), block = g->findGroup("layer1.0");
  REQUIRE(layer1 > 0);
  REQUIRE(block > 0);
  // The top level, then layer1 opened.
  const VisibleGraph top = computeVisible(*g, {});
  const LayoutResult topLayout = graphvizLayout(top);
  const VisibleGraph open1 = computeVisible(*g, {layer1});
  std::optional<LayoutResult> r = spliceExpansion(top, topLayout, open1, layer1);
  REQUIRE(r);
  checkSplice(open1, *r, layer1);
  // The new frame starts where layer1's box was; boxes above it did not move.
  const LayoutBox& old = topLayout.nodes.at("g" + std::to_string(layer1));
  const LayoutBox& frame = r->clusters.at("cluster_g" + std::to_string(layer1));
  CHECK(frame.x == Approx(old.x - old.w / 2));
  CHECK(frame.y == Approx(old.y - old.h / 2));
  for (const VisibleUnit& u : top.units)
    if (u.group != layer1 && topLayout.nodes.at(u.key).y < old.y) {
      CHECK(r->nodes.at(u.key).x == topLayout.nodes.at(u.key).x);
      CHECK(r->nodes.at(u.key).y == topLayout.nodes.at(u.key).y);
    }
  CHECK(r->height > topLayout.height);
  // One level deeper, spliced into Graphviz's layout of the first expansion: layer1.0's frame
  // sits inside layer1's.
  const LayoutResult open1Layout = graphvizLayout(open1);
  const VisibleGraph open2 = computeVisible(*g, {layer1, block});
  r = spliceExpansion(open1, open1Layout, open2, block);
  REQUIRE(r);
  checkSplice(open2, *r, block);
  // Not one more group: nothing (the view waits for Graphviz).
  CHECK_FALSE(spliceExpansion(top, topLayout, open2, block));
  CHECK_FALSE(spliceExpansion(top, topLayout, open2, layer1));
  CHECK_FALSE(spliceExpansion(open1, open1Layout, open1, layer1));
}

TEST_CASE("the graph view draws an uncached expansion at once, then Graphviz's layout replaces it") {
  app();
  TempDir dir;
  qputenv("DYNAMO_INSPECT_LAYOUT", QByteArray::fromStdString(testing::layoutProgram()));
  GraphView view(freshCache(dir));
  view.setPrefetchEnabled(false);
  view.resize(1000, 700);
  QSignalSpy drawn(&view, &GraphView::layoutDrawn);
  QSignalSpy provisional(&view, &GraphView::provisionalDrawn);
  auto g = buildInspectGraph(testing::makeResnetLike(), "provisional");
  view.setGraph(g, "resnet-like");
  REQUIRE(waitFor([&] { return drawn.count() == 1; }));
  CHECK(provisional.count() == 0);  // nothing to splice into: the first view waits for Graphviz
  const int layer1 = g->findGroup("layer1");
  const int runs = view.engine()->processRuns();
  REQUIRE(view.expandGroup(layer1));
  // Drawn before expandGroup returned: the scene shows layer1's frame and boxes already.
  CHECK(provisional.count() == 1);
  CHECK(view.provisional());
  CHECK(view.layoutPending());
  CHECK(view.message().contains("provisional layout drawn in"));
  REQUIRE(view.scene()->visible());
  REQUIRE(view.scene()->visible()->clusters.size() == 1);
  CHECK(view.scene()->visible()->clusters[0].group == layer1);
  CHECK_FALSE(view.scene()->unitRect("g" + std::to_string(g->findGroup("layer1.0"))).isNull());
  const QRectF provisionalRect = view.scene()->sceneRect();
  REQUIRE(waitFor([&] { return drawn.count() == 2; }));
  CHECK(view.engine()->processRuns() == runs + 1);
  CHECK_FALSE(view.provisional());
  CHECK(view.message().contains("laid out in"));
  CHECK(view.scene()->visible()->clusters.size() == 1);
  CHECK(view.scene()->sceneRect() != provisionalRect);  // Graphviz's own positions now
  // Collapsing and expanding again: the layout is cached, nothing provisional.
  view.collapseGroup(layer1);
  REQUIRE(waitFor([&] { return drawn.count() == 3; }));
  REQUIRE(view.expandGroup(layer1));
  REQUIRE(waitFor([&] { return drawn.count() == 4; }));
  CHECK(provisional.count() == 1);
  CHECK(view.message().endsWith("(cached)"));
  qunsetenv("DYNAMO_INSPECT_LAYOUT");
}

TEST_CASE("the graph a pass got is a graph of the store: listed for the diff, loaded, diffed against the one after") {
  testing::TempDir dir;
  const std::string path = dir.file("passes.db");
  storage::RowId compile = 0;
  {
    auto w = storage::TraceWriter::open(path, {});
    storage::CompileRecord c;
    c.frameId = w->recordFrame({0, 0, "m.py", 1, "f"});
    c.status = "ok";
    compile = w->recordCompile(c);
    storage::GraphRecord g;
    g.compileId = compile;
    g.format = "dynamo.graph/1";
    g.serialized = core::serializeGraph(testing::makeResnetLike(64, false));
    g.numNodes = 10;
    w->recordGraph(g);
    // What the sink records for a pass that changed the graph (python/src/recording_bindings.cpp).
    w->recordArtifact({0, 0, compile, "dynamo.passes", "text/plain",
                       "pass dead_code_elimination: changed (31 -> 30 nodes)\n  removed: add\n", 0});
    w->recordArtifact({0, 0, compile, "dynamo.pass.input/dead_code_elimination", "application/json",
                       core::serializeGraph(testing::makeResnetLike(64, true)), 0});
    w->close();
  }
  auto reader = storage::TraceReader::open(path);
  const std::vector<storage::ArtifactRecord> artifacts = reader->artifactsOfCompile(compile);
  const auto passes = passInputGraphs(artifacts);
  REQUIRE(passes.size() == 1);
  CHECK(passes[0] == std::make_pair(kPassGraphBase, std::string("dead_code_elimination")));
  CHECK(graphIndexLabel(kPassGraphBase) == "graph before pass #1");
  int ordinal = 0;
  AotGraphKind kind{};
  CHECK_FALSE(decodeAotGraphIndex(kPassGraphBase, ordinal, kind));
  CHECK_THAT(compileDetailsText(artifacts),
             Catch::Matchers::StartsWith("Passes that changed the graph (the nodes they removed and added)\n"
                                         "  pass dead_code_elimination: changed (31 -> 30 nodes)\n    removed: add\n"));
  CHECK_THAT(compileDetailsText(artifacts), !Catch::Matchers::Contains("dynamo.pass.input"));
  // The diff pickers list it after the graph it became.
  const StoreReports reports = buildStoreReports(path);
  REQUIRE(reports.graphs.size() == 2);
  CHECK(reports.graphs[1].index == kPassGraphBase);
  CHECK(reports.graphs[1].label.endsWith(" \u00b7 compile #0 \u00b7 graph 0 before dead_code_elimination"));
  const GraphLoad before = loadGraph(path, compile, kPassGraphBase);
  const GraphLoad after = loadGraph(path, compile, 0);
  REQUIRE(before.graph);
  REQUIRE(after.graph);
  const GraphDiff d = diffGraphs(*before.graph, *after.graph);
  CHECK(d.removed == 1);
  CHECK(d.added == 0);
  const GraphLoad missing = loadGraph(path, compile, kPassGraphBase - 1);
  CHECK(missing.error == QString("compile %1 has no graph before pass #2 in '%2'").arg(compile).arg(QString::fromStdString(path)));
}

TEST_CASE("export: SVG and PNG of every graph and a summary, in memory") {
  app();
  TempDir dir;
  const std::string path = dir.file("t.db");
  testing::makeStore(path);
  const std::string before = testing::readFile(path);
  LayoutCache cache(QString::fromStdString(dir.file("cache")));
  ExportOutput out = exportStore(path, QString::fromStdString(testing::layoutProgram()), &cache);
  REQUIRE_FALSE(out.files.empty());
  CHECK(out.files[0].name == "summary.txt");
  CHECK(out.files[0].data.find("graphs exported:") != std::string::npos);
  std::vector<std::string> names;
  for (const ExportFile& f : out.files) names.push_back(f.name);
  CHECK(std::count(names.begin(), names.end(), "graphs/ResNet.forward-c0-g0.svg") == 1);
  CHECK(std::count(names.begin(), names.end(), "graphs/ResNet.forward-c0-g0-expanded.png") == 1);
  CHECK(std::count(names.begin(), names.end(), "graphs/step-c1-g0.svg") == 1);
  CHECK(std::count(names.begin(), names.end(), "graphs/resume_in_step-c0-g0.png") == 1);
  for (const ExportFile& f : out.files)
    if (f.name.size() > 4 && f.name.compare(f.name.size() - 4, 4, ".png") == 0) CHECK(f.data.compare(1, 3, "PNG") == 0);
  CHECK(out.notes.empty());
  CHECK(testing::readFile(path) == before);
}

TEST_CASE("the window reads a frame's compiles and a compile's tables off the UI thread") {
  app();
  TempDir dir;
  qputenv("DYNAMO_INSPECT_CACHE", QByteArray::fromStdString(dir.file("cache")));
  const std::string path = dir.file("t.db");
  const testing::StoreIds ids = testing::makeStore(path);
  MainWindow w;
  REQUIRE(w.openStore(QString::fromStdString(path)));
  REQUIRE(waitFor([&] { return w.reportsReady(); }));
  QSignalSpy shown(&w, &MainWindow::compileShown);
  // Selecting a frame returns before anything is read; the rows come with the worker's result.
  REQUIRE(w.selectFrame(ids.frameStep));
  CHECK(w.storeReadsPending());
  REQUIRE(waitFor([&] { return !w.storeReadsPending(); }));
  REQUIRE(w.compiles()->rowCount() == 2);
  CHECK(cell(*w.compiles(), 1, 6) == "1");  // graph and break counts, read by the worker
  CHECK(cell(*w.compiles(), 1, 7) == "1");
  // The first compile is selected and its tables read in turn.
  CHECK(w.breaks()->rowCount() == 1);
  CHECK(cell(*w.breaks(), 0, 0) == "data-dependent-branch");
  CHECK(w.guards()->rowCount() == 1);
  CHECK(w.graphs()->data(w.graphs()->index(0, 0), kRowIdRole).toLongLong() == ids.compileStep0);
  const int before = shown.count();
  CHECK(before >= 1);
  // Two frames selected one after the other: only the last one's rows are shown.
  REQUIRE(w.selectFrame(ids.frameModel));
  REQUIRE(w.selectFrame(ids.frameStep));
  REQUIRE(waitFor([&] { return !w.storeReadsPending(); }));
  REQUIRE(w.compiles()->rowCount() == 2);
  CHECK(w.compiles()->compiles()[0].frameId == ids.frameStep);
  CHECK(w.graphs()->data(w.graphs()->index(0, 0), kRowIdRole).toLongLong() == ids.compileStep0);
  // Another compile: its tables are read off the UI thread too.
  w.compilesView()->selectRow(1);
  REQUIRE(waitFor([&] { return !w.storeReadsPending(); }));
  CHECK(w.breaks()->rowCount() == 1);
  CHECK(w.graphs()->data(w.graphs()->index(0, 0), kRowIdRole).toLongLong() == ids.compileStep1);
  qunsetenv("DYNAMO_INSPECT_CACHE");
}

TEST_CASE("the window: bad input in the banner, live refresh, a deleted store") {
  app();
  TempDir dir;
  qputenv("DYNAMO_INSPECT_CACHE", QByteArray::fromStdString(dir.file("cache")));
  MainWindow w;
  const std::string bad = dir.file("bad.db");
  QFile f(QString::fromStdString(bad));
  REQUIRE(f.open(QIODevice::WriteOnly));
  f.write("SQLite format 2\n");
  f.close();
  CHECK_FALSE(w.openStore(QString::fromStdString(bad)));
  CHECK(w.bannerText().startsWith(QString::fromStdString("'" + bad + "' is not a Dynamo trace store")));
  CHECK(testing::readFile(bad) == "SQLite format 2\n");

  // A store still being written: the window fills in as compiles are committed.
  const std::string path = dir.file("live.db");
  storage::RunRecord run;
  run.argv = {"live.py"};
  auto writer = storage::TraceWriter::open(path, run);
  writer->flush();
  REQUIRE(w.openStore(QString::fromStdString(path)));
  CHECK(w.bannerText() == QString::fromStdString("'" + path + "' holds 1 run(s) but no compiles yet; the views fill in as they are written"));
  CHECK(w.runTree()->rowCount(w.runTree()->index(0, 0)) == 0);
  const storage::RowId frame = writer->recordFrame({0, 0, "/w/live.py", 1, "f"});
  storage::CompileRecord c;
  c.frameId = frame;
  c.status = "ok";
  c.reason = "first call";
  writer->recordCompile(c);
  writer->flush();
  QThread::msleep(20);
  w.session()->poll();
  CHECK(w.liveReloads() == 1);
  CHECK(w.bannerText().isEmpty());
  CHECK(w.runTree()->findFrame("f").isValid());
  writer->close();

  // Deleted while open: the banner says so; the views keep what they read.
  std::filesystem::remove(path);
  std::filesystem::remove(path + "-wal");
  std::filesystem::remove(path + "-shm");
  w.session()->poll();
  CHECK(w.bannerText() == QString::fromStdString("trace store '" + path + "' was deleted while open: the views show what was read before; reopen it from a copy to see more"));
  CHECK(w.runTree()->findFrame("f").isValid());
  CHECK_FALSE(std::filesystem::exists(path));
  REQUIRE(waitFor([&] { return w.reportsReady(); }));
  qunsetenv("DYNAMO_INSPECT_CACHE");
}
