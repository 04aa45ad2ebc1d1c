// GraphView (see graph_view.h).
#include "dynamo/gui/graph_view.h"

#include <QHBoxLayout>
#include <QPushButton>
#include <QRegularExpression>
#include <QScrollBar>
#include <QSplitter>
#include <QVBoxLayout>
#include <QWheelEvent>
#include <QtConcurrent/QtConcurrent>

#include <cmath>

#include "dynamo/gui/compile_artifacts.h"
#include "dynamo/gui/layout_splice.h"

namespace dynamo::gui {
namespace {

QString esc(const std::string& s) { return QString::fromStdString(s).toHtmlEscaped(); }

QString locationText(const SourceLocation& l) {
  return esc(l.str()) + (l.sourceLine.empty() ? QString() : ": <code>" + esc(l.sourceLine) + "</code>");
}

/// The nodes (graph order) one of whose names, target, module, source line or tensor matches
/// (any thread: the graph is immutable).
std::vector<int> matchNodes(const InspectGraph& graph, const QRegularExpression& re) {
  std::vector<int> out;
  for (const InspectNode& n : graph.nodes()) {
    for (const std::string* field : {&n.name, &n.target, &n.shortName, &n.modulePath,
                                     &n.location.sourceLine, &n.tensor}) {
      if (re.match(QString::fromStdString(*field)).hasMatch()) {
        out.push_back(n.index);
        break;
      }
    }
  }
  return out;
}

}  // namespace

ZoomingView::ZoomingView(QGraphicsScene* scene, QWidget* parent) : QGraphicsView(scene, parent) {
  setDragMode(QGraphicsView::ScrollHandDrag);
  setTransformationAnchor(QGraphicsView::AnchorUnderMouse);
  setViewportUpdateMode(QGraphicsView::SmartViewportUpdate);
  setOptimizationFlag(QGraphicsView::DontAdjustForAntialiasing, true);
  setBackgroundBrush(QColor("#fcfcfc"));
}

void ZoomingView::wheelEvent(QWheelEvent* e) {
  const double factor = std::pow(1.0015, e->angleDelta().y());
  const double next = zoom() * factor;
  if (next < 0.02 || next > 8) return;
  scale(factor, factor);
  e->accept();
}

GraphView::GraphView(std::shared_ptr<LayoutCache> cache, QWidget* parent)
    : QWidget(parent), cache_(std::move(cache)) {
  engine_ = new LayoutEngine(LayoutEngine::locateLayoutProgram(), cache_, this);
  prefetch_ = new LayoutPrefetcher(LayoutEngine::locateLayoutProgram(), cache_, this);
  connect(prefetch_, &LayoutPrefetcher::ready, this, [this](const std::string& key) {
    if (waitingDot_.empty() || LayoutCache::keyOf(waitingDot_) != key) return;
    pendingTicket_ = engine_->request(waitingDot_);  // a cache hit now
    waitingDot_.clear();
  });
  scene_ = new GraphScene(this);
  view_ = new ZoomingView(scene_, this);
  view_->setObjectName("graphCanvas");
  title_ = new QLabel(this);
  title_->setObjectName("graphTitle");
  searchBox_ = new QLineEdit(this);
  searchBox_->setObjectName("graphSearch");
  searchBox_->setPlaceholderText("search: regular expression over names, ops, modules, source lines");
  searchBox_->setClearButtonEnabled(true);
  searchCount_ = new QLabel(this);
  overlayBox_ = new QComboBox(this);
  overlayBox_->setObjectName("overlayPicker");
  overlayBox_->setToolTip("what the boxes are coloured by");
  legend_ = new QLabel(this);
  legend_->setObjectName("overlayLegend");
  legend_->setWordWrap(true);
  legend_->setTextFormat(Qt::RichText);
  auto* prev = new QPushButton("<", this);
  auto* next = new QPushButton(">", this);
  auto* fit = new QPushButton("fit", this);
  prev->setMaximumWidth(30);
  next->setMaximumWidth(30);
  status_ = new QLabel(this);
  status_->setObjectName("graphStatus");
  status_->setWordWrap(true);
  panel_ = new QTextBrowser(this);
  panel_->setObjectName("nodePanel");
  panel_->setOpenLinks(false);
  source_ = new SourceView(this);
  source_->setObjectName("nodeSource");
  kernelSource_ = new SourceView(this);
  kernelSource_->setObjectName("kernelSource");
  kernelSource_->hide();

  auto* bar = new QHBoxLayout;
  bar->addWidget(title_, 1);
  bar->addWidget(searchBox_, 2);
  bar->addWidget(prev);
  bar->addWidget(next);
  bar->addWidget(searchCount_);
  bar->addWidget(fit);
  bar->addWidget(overlayBox_);
  auto* side = new QSplitter(Qt::Vertical, this);
  auto* sources = new QSplitter(Qt::Horizontal, this);
  sources->addWidget(source_);
  sources->addWidget(kernelSource_);
  side->addWidget(panel_);
  side->addWidget(sources);
  auto* split = split_ = new QSplitter(Qt::Horizontal, this);
  split->addWidget(view_);
  split->addWidget(side);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 1);
  split->setSizes({900, 380});
  side->setSizes({300, 300});
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(bar);
  layout->addWidget(legend_);
  layout->addWidget(split, 1);
  layout->addWidget(status_);

  connect(engine_, &LayoutEngine::finished, this, &GraphView::onLayout);
  connect(engine_, &LayoutEngine::failed, this, &GraphView::onLayoutFailed);
  connect(scene_, &GraphScene::unitClicked, this, &GraphView::onUnitClicked);
  connect(scene_, &GraphScene::clusterClicked, this, &GraphView::collapseGroup);
  connect(overlayBox_, &QComboBox::activated, this, [this](int i) {
    setOverlay(static_cast<Overlay>(overlayBox_->itemData(i).toInt()));
  });
  connect(searchBox_, &QLineEdit::returnPressed, this, [this] { searchAsync(searchBox_->text()); });
  connect(&searchWatcher_, &QFutureWatcher<std::vector<int>>::finished, this, [this] {
    if (!searchPending_ || searchWatcher_.property("ticket").toInt() != searchTicket_) return;
    searchPending_ = false;
    showResults(searchWatcher_.result());
    emit searchDone(static_cast<int>(results_.size()));
  });
  connect(prev, &QPushButton::clicked, this, [this] { goToResult(-1); });
  connect(next, &QPushButton::clicked, this, [this] { goToResult(+1); });
  connect(fit, &QPushButton::clicked, this, [this] {
    view_->fitInView(scene_->sceneRect(), Qt::KeepAspectRatio);
  });
  connect(panel_, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
    if (!graph_) return;
    const QString s = url.toString();
    if (s.startsWith("node:")) {
      selectNode(s.mid(5).toInt());
    } else if (s.startsWith("kernel:")) {
      showKernel(s.mid(7).toInt());
    } else if (s.startsWith("frame:") && selected_ >= 0) {
      const auto& stack = graph_->node(selected_).userStack;
      const size_t i = s.mid(6).toULongLong();
      if (i < stack.size()) source_->showLocation(stack[i]);
    }
  });
  showMessage("no graph selected");
}

void GraphView::setStatus(const QString& text) { status_->setText(text); }

void GraphView::showMessage(const QString& message) {
  engine_->cancel();
  prefetch_->stop();
  waitingDot_.clear();
  pendingTicket_ = 0;
  provisional_ = false;
  openedGroup_ = -1;
  graph_.reset();
  ++searchTicket_;
  searchPending_ = false;
  scene_->clearContent();
  expanded_.clear();
  selected_ = -1;
  results_.clear();
  panel_->clear();
  source_->clearLocation();
  kernelSource_->clearLocation();
  kernelSource_->hide();
  title_->clear();
  overlayBox_->clear();
  legend_->clear();
  setStatus(message);
}

void GraphView::setGraph(InspectGraphPtr graph, const QString& title, Overlay overlay) {
  graph_ = std::move(graph);
  ++searchTicket_;  // a search still on its way was over the previous graph
  searchPending_ = false;
  overlay_ = overlayApplies(overlay, *graph_) ? overlay : Overlay::kOpKind;
  fillOverlayPicker();
  showLegend();
  expanded_.clear();
  selected_ = -1;
  results_.clear();
  resultIndex_ = -1;
  searchCount_->clear();
  panel_->setHtml(QString("<p>%1 nodes, %2 edges. Click a module to expand it, a node to see it.</p>")
                      .arg(graph_->nodes().size()).arg(graph_->edgeCount()));
  source_->clearLocation();
  kernelSource_->clearLocation(QString("%1 generated kernels: select a node to see the one that computes it")
                                   .arg(graph_->kernels().size()));
  kernelSource_->setVisible(!graph_->kernels().empty());
  // The kernel source beside the user's source needs room: the side takes half then.
  const int width = std::max(1000, split_->width());
  split_->setSizes(graph_->kernels().empty() ? QList<int>{width * 7 / 10, width * 3 / 10}
                                             : QList<int>{width / 2, width / 2});
  title_->setText(title);
  fitAfterLayout_ = true;
  relayout();
  if (graph_->nodes().size() > static_cast<size_t>(kMaxLayoutUnits)) setStatus(bigGraphNote());
}

void GraphView::fillOverlayPicker() {
  overlayBox_->clear();
  for (Overlay o : allOverlays()) {
    if (!overlayApplies(o, *graph_)) continue;
    overlayBox_->addItem(QString::fromUtf8(overlayName(o).data(), static_cast<int>(overlayName(o).size())),
                         static_cast<int>(o));
    overlayBox_->setItemData(overlayBox_->count() - 1,
                             QString::fromUtf8(overlayDescription(o).data(), static_cast<int>(overlayDescription(o).size())),
                             Qt::ToolTipRole);
    if (o == overlay_) overlayBox_->setCurrentIndex(overlayBox_->count() - 1);
  }
}

void GraphView::showLegend() {
  QString h;
  for (const LegendEntry& e : OverlayPainter(overlay_, *graph_).legend())
    h += QString("<span style=\"background:%1\">&nbsp;&nbsp;&nbsp;&nbsp;</span>&nbsp;%2&nbsp;&nbsp; ")
             .arg(QString::fromStdString(e.colour), esc(e.label));
  legend_->setText(h);
}

bool GraphView::setOverlay(Overlay overlay) {
  if (!graph_ || !overlayApplies(overlay, *graph_)) return false;
  overlay_ = overlay;
  const int i = overlayBox_->findData(static_cast<int>(overlay));
  if (i >= 0) overlayBox_->setCurrentIndex(i);
  showLegend();
  scene_->setOverlay(overlay);
  return true;
}

QString GraphView::bigGraphNote() const {
  return QString("this graph has %1 nodes: it is shown collapsed, and modules and runs of nodes open "
                 "one at a time (the view lays out at most %2 boxes at once)")
      .arg(graph_->nodes().size()).arg(kMaxLayoutUnits);
}

void GraphView::relayout() {
  if (!graph_) return;
  auto visible = std::make_shared<VisibleGraph>(computeVisible(*graph_, expanded_));
  const std::string dot = toDot(*visible);
  pendingVisible_ = visible;
  layoutClock_.start();
  waitingDot_.clear();
  const bool shown = drawProvisional(dot);
  if (prefetch_->laysOut(LayoutCache::keyOf(dot))) {
    // The background layout of this very view is under way: wait for it rather than start
    // Graphviz a second time on the same text.
    engine_->cancel();
    waitingDot_ = dot;
    pendingTicket_ = -1;
    if (!shown) setStatus(QString("laying out %1 boxes (started in the background)...").arg(visible->units.size()));
    return;
  }
  prefetch_->stop();  // the user's layout gets the CPU
  pendingTicket_ = engine_->request(dot);
  if (!shown) setStatus(QString("laying out %1 boxes...").arg(visible->units.size()));
}

bool GraphView::drawProvisional(const std::string& dot) {
  const int group = openedGroup_;
  openedGroup_ = -1;
  const std::shared_ptr<const VisibleGraph> before = scene_->visibleGraph();  // draw() replaces them
  const std::shared_ptr<const LayoutResult> drawn = scene_->layout();
  if (group < 0 || !before || !drawn || scene_->graph() != graph_.get() ||
      cache_->contains(LayoutCache::keyOf(dot)))
    return false;
  std::optional<LayoutResult> spliced = spliceExpansion(*before, *drawn, *pendingVisible_, group);
  if (!spliced) return false;
  provisional_ = true;
  ++provisionalCount_;
  draw(std::make_shared<const LayoutResult>(std::move(*spliced)));
  setStatus(QString("%1 boxes, %2 edges: provisional layout drawn in %3 ms; Graphviz is laying the view out...")
                .arg(pendingVisible_->units.size()).arg(pendingVisible_->edges.size())
                .arg(static_cast<double>(layoutClock_.nsecsElapsed()) / 1e6, 0, 'f', 0));
  emit provisionalDrawn();
  return true;
}

void GraphView::prefetchExpansions() {
  static const bool off = qEnvironmentVariable("DYNAMO_INSPECT_PREFETCH") == "0";
  if (off || !prefetchOn_ || !graph_ || !pendingVisible_) return;
  std::vector<std::pair<int, int>> groups;  // (nodes beneath, group) of the collapsed boxes
  for (const VisibleUnit& u : pendingVisible_->units)
    if (u.group >= 0) groups.emplace_back(graph_->group(u.group).totalNodes, u.group);
  std::sort(groups.begin(), groups.end(), std::greater<>());
  std::vector<std::string> dots;
  for (const auto& [nodes, group] : groups) {
    if (static_cast<int>(dots.size()) == kPrefetchExpansions) break;
    if (unitsIfExpanded(*graph_, expanded_, group) > kMaxLayoutUnits) continue;
    std::set<int> open = expanded_;
    open.insert(group);
    dots.push_back(toDot(computeVisible(*graph_, open)));
  }
  prefetch_->prefetch(std::move(dots));
}

void GraphView::onLayout(int ticket, std::shared_ptr<const LayoutResult> result, bool fromCache) {
  if (ticket != pendingTicket_ || !graph_) return;
  pendingTicket_ = 0;
  provisional_ = false;
  draw(std::move(result));
  lastLayoutMs_ = static_cast<double>(layoutClock_.nsecsElapsed()) / 1e6;
  const QString msg = QString("%1 boxes, %2 edges, laid out in %3 ms%4")
                          .arg(pendingVisible_->units.size()).arg(pendingVisible_->edges.size())
                          .arg(lastLayoutMs_, 0, 'f', 0).arg(fromCache ? " (cached)" : "");
  setStatus(graph_->nodes().size() > static_cast<size_t>(kMaxLayoutUnits) ? bigGraphNote() + "; " + msg : msg);
  prefetchExpansions();
  emit layoutDrawn();
}

void GraphView::draw(std::shared_ptr<const LayoutResult> result) {
  QElapsedTimer t;
  t.start();
  scene_->setContent(graph_, pendingVisible_, std::move(result), overlay_);
  lastSceneMs_ = static_cast<double>(t.nsecsElapsed()) / 1e6;
  if (fitAfterLayout_) {
    fitAfterLayout_ = false;
    view_->resetTransform();
    const QRectF r = scene_->sceneRect();
    const double sx = view_->viewport()->width() / std::max(1.0, r.width());
    const double sy = view_->viewport()->height() / std::max(1.0, r.height());
    const double s = std::clamp(std::min(sx, sy), 0.05, 1.0);
    view_->scale(s, s);
    view_->centerOn(r.center().x(), r.top() + view_->viewport()->height() / (2 * s));
  }
  QSet<int> marks;
  for (int n : results_) marks.insert(n);
  scene_->setHighlighted(marks);
  if (selected_ >= 0) {
    const QRectF r = scene_->selectNode(selected_);
    if (!r.isNull()) view_->centerOn(r.center());
  }
}

void GraphView::onLayoutFailed(int ticket, const QString& message) {
  if (ticket != pendingTicket_) return;
  pendingTicket_ = 0;
  setStatus(provisional_ ? "layout failed (the provisional layout stays): " + message : "layout failed: " + message);
}

bool GraphView::expandGroup(int group) {
  if (!graph_ || group <= 0 || static_cast<size_t>(group) >= graph_->groups().size()) return false;
  if (expanded_.count(group)) return true;
  const int units = unitsIfExpanded(*graph_, expanded_, group);
  if (units > kMaxLayoutUnits) {
    setStatus(QString("expanding '%1' would show %2 boxes; the view lays out at most %3 at once: "
                      "collapse other modules first")
                  .arg(QString::fromStdString(graph_->group(group).label)).arg(units).arg(kMaxLayoutUnits));
    return false;
  }
  expanded_.insert(group);
  openedGroup_ = group;
  relayout();
  return true;
}

void GraphView::collapseGroup(int group) {
  if (!graph_ || !expanded_.count(group)) return;
  for (auto it = expanded_.begin(); it != expanded_.end();) {
    const std::vector<int> chain = graph_->groupChain(*it);
    if (std::find(chain.begin(), chain.end(), group) != chain.end()) it = expanded_.erase(it);
    else ++it;
  }
  relayout();
}

bool GraphView::validPattern(const QString& pattern, QRegularExpression& re) {
  results_.clear();
  resultIndex_ = -1;
  ++searchTicket_;  // an answer still on its way is for an older search
  searchPending_ = false;
  if (!graph_) return false;
  if (pattern.isEmpty()) {
    scene_->setHighlighted({});
    searchCount_->clear();
    return false;
  }
  re = QRegularExpression(pattern, QRegularExpression::CaseInsensitiveOption);
  if (!re.isValid()) {
    setStatus(QString("not a regular expression: %1 (at offset %2)")
                  .arg(re.errorString()).arg(re.patternErrorOffset()));
    return false;
  }
  return true;
}

std::vector<int> GraphView::search(const QString& pattern) {
  QRegularExpression re;
  if (!validPattern(pattern, re)) return {};
  showResults(matchNodes(*graph_, re));
  return results_;
}

void GraphView::searchAsync(const QString& pattern) {
  QRegularExpression re;
  if (!validPattern(pattern, re)) {
    emit searchDone(0);
    return;
  }
  searchPending_ = true;
  searchCount_->setText("searching...");
  searchWatcher_.setProperty("ticket", searchTicket_);
  searchWatcher_.setFuture(QtConcurrent::run([graph = graph_, re] { return matchNodes(*graph, re); }));
}

void GraphView::showResults(std::vector<int> results) {
  results_ = std::move(results);
  searchCount_->setText(results_.empty() ? QString("no match") : QString("%1 found").arg(results_.size()));
  QSet<int> marks;
  for (int n : results_) marks.insert(n);
  scene_->setHighlighted(marks);
  if (!results_.empty()) {
    resultIndex_ = 0;
    selectNode(results_[0]);
  }
}

void GraphView::goToResult(int delta) {
  if (results_.empty()) return;
  const int n = static_cast<int>(results_.size());
  resultIndex_ = ((resultIndex_ + delta) % n + n) % n;
  searchCount_->setText(QString("%1 of %2").arg(resultIndex_ + 1).arg(n));
  selectNode(results_[static_cast<size_t>(resultIndex_)]);
}

void GraphView::selectNode(int node) {
  if (!graph_ || node < 0 || static_cast<size_t>(node) >= graph_->nodes().size()) return;
  selected_ = node;
  showNodePanel(node);
  const std::set<int> reveal = groupsToReveal(*graph_, node);
  bool visible = true;
  for (int g : reveal) visible = visible && expanded_.count(g);
  if (visible) {
    const QRectF r = scene_->selectNode(node);
    if (!r.isNull()) view_->centerOn(r.center());
  } else {
    std::set<int> wanted = expanded_;
    wanted.insert(reveal.begin(), reveal.end());
    int units = 0;
    {
      std::set<int> probe = wanted;
      const int last = *reveal.rbegin();
      probe.erase(last);
      units = unitsIfExpanded(*graph_, probe, last);
    }
    expanded_ = units > kMaxLayoutUnits ? reveal : wanted;
    relayout();
  }
  emit nodeSelected(node);
}

void GraphView::onUnitClicked(int node, int group) {
  if (group >= 0) expandGroup(group);
  else if (node >= 0) selectNode(node);
}

void GraphView::showNodePanel(int node) {
  const InspectNode& n = graph_->node(node);
  QString h = "<h3>" + esc(n.name) + "</h3><table>";
  auto row = [&h](const QString& k, const QString& v) {
    h += "<tr><td><b>" + k + "</b></td><td>" + v + "</td></tr>";
  };
  row("op", esc(n.op));
  row(n.op == "placeholder" ? "source" : "target", esc(n.target));
  row("category", esc(std::string(opCategoryName(n.category))));
  if (!n.args.empty()) row("args", "<code>" + esc(n.args) + "</code>");
  if (!n.tensorDetail.empty())
    row("tensor", esc(n.tensorDetail) + (n.tensorBytes > 0 ? " (" + esc(formatBytes(n.tensorBytes)) + ")" : QString()));
  if (!n.symbolicShape.empty()) {
    QString sym = esc(n.symbolicShape);
    for (const std::string& line : n.symbols) sym += "<br>" + esc(line);
    row("dynamic sizes", sym);
  }
  if (n.partition != PartitionRole::kNone) row("partition", esc(std::string(partitionRoleName(n.partition))));
  row("module", n.modulePath.empty() ? QString("(top level)") : esc(n.modulePath));
  if (n.location.known()) row("source", locationText(n.location));
  h += "</table>";
  if (!n.changes.empty()) {
    h += "<p><b>changed</b><ul>";
    for (const std::string& c : n.changes) h += "<li>" + esc(c) + "</li>";
    h += "</ul></p>";
  }
  if (n.diff == DiffStatus::kAdded) h += "<p><b>added</b> (not in the first graph)</p>";
  if (n.diff == DiffStatus::kRemoved) h += "<p><b>removed</b> (only in the first graph)</p>";
  auto links = [&](const char* title, const std::vector<int>& nodes) {
    if (nodes.empty()) return;
    h += QString("<p><b>%1</b>: ").arg(title);
    for (size_t i = 0; i < nodes.size() && i < 30; ++i)
      h += QString("<a href=\"node:%1\">%2</a> ").arg(nodes[i]).arg(esc(graph_->node(nodes[i]).name));
    if (nodes.size() > 30) h += QString("... (%1 more)").arg(nodes.size() - 30);
    h += "</p>";
  };
  links("inputs", n.inputs);
  links("users", n.users);
  if (!n.userStack.empty()) {
    h += "<p><b>user stack</b> (outermost first)<br>";
    for (size_t i = 0; i < n.userStack.size(); ++i)
      h += QString("<a href=\"frame:%1\">%2</a><br>").arg(i).arg(locationText(n.userStack[i]));
    h += "</p>";
  }
  kernelSection(h, n);
  h += "<p><code>" + esc(n.printed) + "</code></p>";
  panel_->setHtml(h);
  source_->showLocation(n.location);
  if (!n.kernels.empty()) showKernel(n.kernels.front());
  else if (!graph_->kernels().empty())
    kernelSource_->clearLocation(QString("%1 is computed by no generated kernel (%2)")
                                     .arg(QString::fromStdString(n.name),
                                          n.op == "placeholder" || n.op == "output" ? QString("not an op")
                                                                                    : QString("an ATen call")));
}

void GraphView::kernelSection(QString& h, const InspectNode& n) const {
  if (graph_->kernels().empty()) return;
  if (n.kernels.empty()) {
    if (n.op != "placeholder" && n.op != "output")
      h += "<p><b>kernel</b>: none (the backend calls ATen for this node)</p>";
    return;
  }
  for (size_t i = 0; i < n.kernels.size(); ++i) {
    const InspectKernel& k = graph_->kernels()[static_cast<size_t>(n.kernels[i])];
    h += QString("<p><b>%1</b> <a href=\"kernel:%2\">%3</a> (%4; %5; %6)<br>fusion group: ")
             .arg(i == 0 ? "kernel" : "also inlined into")
             .arg(n.kernels[i]).arg(esc(k.name)).arg(esc(k.language + ", " + k.loops))
             .arg(k.cacheHit ? QString("loaded from the disk cache")
                             : QString("compiled in %1 ms").arg(k.compileMs, 0, 'f', 0))
             .arg(QString("graph lowered in %1 ms").arg(k.lowerMs, 0, 'f', 1) +
                  "; " + QString::fromStdString(kernelRunText(k.runUs, k.runCalls)));
    for (size_t j = 0; j < k.nodes.size() && j < 30; ++j)
      h += QString("<a href=\"node:%1\">%2</a> ").arg(k.nodes[j]).arg(esc(graph_->node(k.nodes[j]).name));
    if (k.nodes.size() > 30) h += QString("... (%1 more)").arg(k.nodes.size() - 30);
    h += "</p>";
  }
}

void GraphView::showKernel(int kernel) {
  if (!graph_ || kernel < 0 || static_cast<size_t>(kernel) >= graph_->kernels().size()) return;
  const InspectKernel& k = graph_->kernels()[static_cast<size_t>(kernel)];
  const QString text = QString::fromStdString(k.source);
  // The entry point ("extern \"C\" void k0_add(void* const* args) {"), past the shared prelude.
  int line = 0;
  const QStringList lines = text.split('\n');
  const QString entry = QString::fromStdString(" " + k.name + "(");
  for (int i = 0; i < lines.size() && line == 0; ++i)
    if (lines[i].contains(entry) && !lines[i].startsWith("//")) line = i + 1;
  kernelSource_->showText(QString("kernel %1 (%2 source, %3 lines)")
                              .arg(QString::fromStdString(k.name), QString::fromStdString(k.language))
                              .arg(lines.size()),
                          text, line);
  kernelSource_->show();
}

}  // namespace dynamo::gui
