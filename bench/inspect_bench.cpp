// inspect_bench: how fast dynamo-inspect shows a graph, measured on the real window.
//
//   inspect_bench --synthetic N [--store PATH]   a generated model of about N nodes (modules of
//                                                modules, like a transformer's blocks)
//   inspect_bench STORE [--frame NAME]           the largest graph of a store (or of a frame)
//                       [--graph INDEX]          ... or that compile's graph INDEX (-1: its AOT
//                                                joint graph, -2 forward, -3 backward)
//
// For one graph, with a fresh layout cache (cold) and again with it (warm):
//   first_paint_ms  openGraph() to the canvas's first paint of the laid-out graph
//   expand          a click on the largest collapsed module to the paint that shows it open:
//                   shown_ms the first such paint (a provisional layout spliced into the drawn
//                   one when the view is not cached, layout_splice.h), ms the paint of
//                   Graphviz's layout (--think-ms MS: each click MS after the view was drawn, as
//                   a person reads it first; the view prefetches the likely expansions meanwhile);
//                   scene_ms: building the items of the last drawn layout (UI thread)
//   search_ms       a regular-expression search over every node (searchAsync: Enter in the
//                   search box, matched off the UI thread) to its results
// and for the whole session the longest the UI thread went without serving its event loop
// (a 5 ms QTimer watchdog: the largest gap between its ticks, minus 5 ms). The anchor, in the
// same run: Graphviz laying the whole graph out at once (every module open), what a viewer
// without grouping does before it can draw anything (stopped after --anchor-timeout s).
// Prints one JSON object per line (bench/inspect.py makes the table).
#include "dynamo/core/graph_serializer.h"
#include "gui_test_support.h"

#include <QApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QEvent>
#include <QTemporaryDir>
#include <QTimer>

#include <algorithm>
#include <set>

#include <cstdio>
#include <iostream>

#include "dynamo/gui/compile_artifacts.h"
#include "dynamo/gui/main_window.h"
#include "dynamo/storage/trace_writer.h"

using namespace dynamo;
using namespace dynamo::gui;

namespace {

/// The event-loop watchdog: the longest gap between ticks of a 5 ms timer.
class Watchdog : public QObject {
 public:
  Watchdog() {
    timer_.setInterval(kTickMs);
    timer_.setTimerType(Qt::PreciseTimer);
    connect(&timer_, &QTimer::timeout, this, [this] {
      const double now = static_cast<double>(clock_.nsecsElapsed()) / 1e6;
      if (last_ >= 0) maxGap_ = std::max(maxGap_, now - last_);
      last_ = now;
    });
    clock_.start();
    timer_.start();
  }
  double maxBlockMs() const { return std::max(0.0, maxGap_ - kTickMs); }
  void reset() {
    maxGap_ = 0;
    last_ = -1;
  }

 private:
  static constexpr int kTickMs = 5;
  QTimer timer_;
  QElapsedTimer clock_;
  double last_ = -1, maxGap_ = 0;
};

/// Records when the canvas last painted.
class PaintProbe : public QObject {
 public:
  qint64 lastPaintNs = 0;
  qint64 drawnNs = -1;  ///< when the graph view last drew a new layout
  qint64 shownNs = -1;  ///< ... or a provisional one
  qint64 firstShownPaintNs = -1;  ///< the first paint after shownNs
  QElapsedTimer clock;
  PaintProbe() { clock.start(); }
  /// The first paint after the last drawn layout has happened.
  bool paintedAfterDrawn() const { return drawnNs >= 0 && lastPaintNs > drawnNs; }
  bool eventFilter(QObject*, QEvent* e) override {
    if (e->type() == QEvent::Paint) {
      lastPaintNs = clock.nsecsElapsed();
      if (shownNs >= 0 && firstShownPaintNs < 0) firstShownPaintNs = lastPaintNs;
    }
    return false;
  }
};

template <typename Pred>
bool waitFor(Pred pred, int ms) {
  QElapsedTimer t;
  t.start();
  while (!pred()) {
    if (t.elapsed() > ms) return false;
    QCoreApplication::processEvents(QEventLoop::AllEvents, 5);
  }
  return true;
}

std::string writeSyntheticStore(const std::string& path, int nodes) {
  // blocks x 8 layers x (ops + 1) nodes; ops per layer fixed at 24.
  const int layers = 8, ops = 24;
  const int blocks = std::max(1, nodes / (layers * (ops + 1)));
  const core::Graph g = testing::makeSynthetic(blocks, layers, ops);
  storage::RunRecord run;
  run.argv = {"synthetic"};
  auto w = storage::TraceWriter::open(path, run);
  const storage::RowId frame = w->recordFrame({0, 0, "model.py", 10, "Synthetic.forward"});
  storage::CompileRecord c;
  c.frameId = frame;
  c.status = "ok";
  c.reason = "first call";
  const storage::RowId compile = w->recordCompile(c);
  storage::GraphRecord r;
  r.compileId = compile;
  r.format = "dynamo.graph/1";
  r.serialized = core::serializeGraph(g);
  r.numNodes = static_cast<int>(g.size());
  w->recordGraph(r);
  w->close();
  return path;
}

struct Pick {
  storage::RowId compile = 0;
  int index = 0;
  int nodes = 0;
  std::string name;
};

Pick largestGraph(const std::string& path, const std::string& frameFilter) {
  auto reader = storage::TraceReader::open(path);
  Pick best;
  for (const auto& run : reader->runs())
    for (const auto& f : reader->frames(run.id)) {
      if (!frameFilter.empty() && f.name.find(frameFilter) == std::string::npos) continue;
      for (const auto& c : reader->compilesOfFrame(f.id))
        for (const auto& g : reader->graphs(c.id)) {
          const int n = static_cast<int>(std::count(g.serialized.begin(), g.serialized.end(), '{'));  // rough size
          if (n > best.nodes) best = {c.id, g.index, n, f.name};
        }
    }
  return best;
}

void printLine(const std::string& json) { std::cout << json << std::endl; }

/// One pass over the graph: open, paint, expand the largest module, search. Returns false on error.
bool measure(MainWindow& w, PaintProbe& probe, const Pick& pick, const char* cache, Watchdog& dog, int thinkMs) {
  GraphView* v = w.graphView();
  QElapsedTimer t;
  dog.reset();
  t.start();
  const qint64 t0 = probe.clock.nsecsElapsed();
  probe.drawnNs = -1;
  w.openGraph(pick.compile, pick.index);
  if (!waitFor([&] { return v->graph() && !v->layoutPending() && probe.paintedAfterDrawn(); }, 120000)) {
    std::cerr << "inspect_bench: the graph was not drawn: " << v->message().toStdString() << "\n";
    return false;
  }
  QCoreApplication::processEvents();
  const double firstPaint = static_cast<double>(probe.lastPaintNs - t0) / 1e6;
  const InspectGraph& g = *v->graph();
  const size_t firstBoxes = v->scene()->visible()->units.size();
  // Three clicks, each on the largest collapsed module on screen.
  std::string expands = "[";
  for (int level = 0; level < 3; ++level) {
    int group = -1, size = 0;
    for (const VisibleUnit& u : v->scene()->visible()->units)
      if (u.group >= 0 && g.group(u.group).totalNodes > size) {
        size = g.group(u.group).totalNodes;
        group = u.group;
      }
    if (group < 0) break;
    // A person looks at the view before clicking (--think-ms): the background layouts of the
    // likely expansions run meanwhile (GraphView::prefetcher).
    if (thinkMs > 0) {
      QElapsedTimer think;
      think.start();
      waitFor([&] { return think.elapsed() >= thinkMs; }, thinkMs + 1000);
    }
    const qint64 t1 = probe.clock.nsecsElapsed();
    probe.drawnNs = -1;
    probe.shownNs = -1;
    probe.firstShownPaintNs = -1;
    const int provisional = v->provisionalCount();
    if (!v->expandGroup(group)) break;
    waitFor([&] { return !v->layoutPending() && probe.paintedAfterDrawn(); }, 120000);
    QCoreApplication::processEvents();
    char one[320];
    std::snprintf(one, sizeof one, "%s{\"module_nodes\": %d, \"boxes\": %zu, \"shown_ms\": %.1f, \"provisional\": %s, \"ms\": %.1f, \"scene_ms\": %.1f}",
                  level ? ", " : "", size, v->scene()->visible()->units.size(),
                  static_cast<double>(probe.firstShownPaintNs - t1) / 1e6,
                  v->provisionalCount() > provisional ? "true" : "false",
                  static_cast<double>(probe.lastPaintNs - t1) / 1e6, v->lastSceneMs());
    expands += one;
  }
  expands += "]";
  // The search box's path: matched off the UI thread, shown when the worker answers.
  size_t hits = 0;
  const QMetaObject::Connection counted =
      QObject::connect(v, &GraphView::searchDone, [&hits](int n) { hits = static_cast<size_t>(n); });
  QElapsedTimer s;
  s.start();
  v->searchAsync("gelu|relu");
  waitFor([&] { return !v->searchPending(); }, 120000);
  const double searchMs = static_cast<double>(s.nsecsElapsed()) / 1e6;
  QObject::disconnect(counted);
  waitFor([&] { return !v->layoutPending(); }, 120000);
  QCoreApplication::processEvents();
  char buf[1200];
  std::snprintf(buf, sizeof buf,
                "{\"graph\": \"%s\", \"nodes\": %zu, \"cache\": \"%s\", \"first_paint_ms\": %.1f, "
                "\"boxes\": %zu, \"expand\": %s, "
                "\"search_ms\": %.1f, \"search_hits\": %zu, \"max_ui_block_ms\": %.1f}",
                pick.name.c_str(), g.nodes().size(), cache, firstPaint, firstBoxes, expands.c_str(),
                searchMs, hits, dog.maxBlockMs());
  printLine(buf);
  return true;
}

/// The anchor: Graphviz on every node at once.
void anchor(const std::string& path, const Pick& pick, int timeoutS) {
  GraphLoad load = loadGraph(path, pick.compile, pick.index);
  if (!load.graph) return;
  std::set<int> all;
  for (const InspectGroup& gr : load.graph->groups())
    if (gr.id != 0) all.insert(gr.id);
  const VisibleGraph v = computeVisible(*load.graph, all);
  LayoutResult r;
  QString error;
  QElapsedTimer t;
  t.start();
  const bool ok = LayoutEngine::layoutBlocking(LayoutEngine::locateLayoutProgram(), nullptr, toDot(v), r, error,
                                               timeoutS * 1000);
  char buf[256];
  std::snprintf(buf, sizeof buf, "{\"graph\": \"%s\", \"anchor\": \"graphviz-all-nodes\", \"boxes\": %zu, "
                "\"layout_ms\": %.1f, \"finished\": %s}",
                pick.name.c_str(), v.units.size(), static_cast<double>(t.nsecsElapsed()) / 1e6, ok ? "true" : "false");
  printLine(buf);
}

}  // namespace

int main(int argc, char** argv) {
  std::string store, frame;
  int synthetic = 0, anchorTimeout = 60, graphIndex = 0, thinkMs = 0;
  bool pickIndex = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--synthetic" && i + 1 < argc) synthetic = std::atoi(argv[++i]);
    else if (a == "--frame" && i + 1 < argc) frame = argv[++i];
    else if (a == "--store" && i + 1 < argc) store = argv[++i];
    else if (a == "--anchor-timeout" && i + 1 < argc) anchorTimeout = std::atoi(argv[++i]);
    else if (a == "--think-ms" && i + 1 < argc) thinkMs = std::atoi(argv[++i]);
    else if (a == "--graph" && i + 1 < argc) {
      graphIndex = std::atoi(argv[++i]);
      pickIndex = true;
    }
    else if (a[0] != '-') store = a;
    else {
      std::cerr << "usage: inspect_bench --synthetic N [--store PATH] | STORE [--frame NAME] [--graph INDEX] [--anchor-timeout S] [--think-ms MS]\n";
      return 2;
    }
  }
  QTemporaryDir tmp;
  qputenv("DYNAMO_INSPECT_CACHE", QDir(tmp.path()).filePath("cache").toLocal8Bit());
  if (qEnvironmentVariableIsEmpty("DYNAMO_INSPECT_LAYOUT"))
    qputenv("DYNAMO_INSPECT_LAYOUT", QByteArray::fromStdString(testing::layoutProgram()));
  if (synthetic > 0) {
    if (store.empty()) store = QDir(tmp.path()).filePath("synthetic.db").toStdString();
    writeSyntheticStore(store, synthetic);
  }
  if (store.empty()) {
    std::cerr << "inspect_bench: give a store or --synthetic N\n";
    return 2;
  }
  QApplication app(argc, argv);
  Watchdog dog;
  MainWindow w;
  w.resize(1500, 950);
  w.show();
  PaintProbe probe;
  w.graphView()->view()->viewport()->installEventFilter(&probe);
  QObject::connect(w.graphView(), &GraphView::layoutDrawn, &probe, [&probe] {
    probe.drawnNs = probe.clock.nsecsElapsed();
    if (probe.shownNs < 0) probe.shownNs = probe.drawnNs;
  });
  QObject::connect(w.graphView(), &GraphView::provisionalDrawn, &probe,
                   [&probe] { probe.shownNs = probe.clock.nsecsElapsed(); });
  if (!w.openStore(QString::fromStdString(store))) return 1;
  waitFor([&] { return w.reportsReady(); }, 120000);
  Pick pick = largestGraph(store, frame);
  if (pick.compile && pickIndex) {
    pick.index = graphIndex;
    pick.name += " " + graphIndexLabel(graphIndex);
  }
  if (!pick.compile) {
    std::cerr << "inspect_bench: no graph in " << store << "\n";
    return 1;
  }
  if (!measure(w, probe, pick, "cold", dog, thinkMs)) return 1;
  if (!measure(w, probe, pick, "warm", dog, thinkMs)) return 1;
  anchor(store, pick, anchorTimeout);
  return 0;
}
