// BreaksPanel, CompileTimeline, RecompilesPanel and DiffPanel (see panels.h).
#include "dynamo/gui/panels.h"

#include <QHBoxLayout>
#include <QPainter>
#include <QRegularExpression>
#include <QSplitter>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrent>

#include "record_table_view.h"

namespace dynamo::gui {
namespace {

QString esc(const std::string& s) { return QString::fromStdString(s).toHtmlEscaped(); }

/// "file.py:12: source" (a user-stack entry) -> location.
SourceLocation parseStackEntry(const std::string& entry) {
  static const QRegularExpression re("^(.+?):(\\d+)(?::\\s?(.*))?$");
  SourceLocation l;
  const QRegularExpressionMatch m = re.match(QString::fromStdString(entry));
  if (!m.hasMatch()) return l;
  l.file = m.captured(1).toStdString();
  l.line = m.captured(2).toInt();
  l.sourceLine = m.captured(3).trimmed().toStdString();
  return l;
}

}  // namespace

// ---------------------------------------------------------------- BreaksPanel

BreaksPanel::BreaksPanel(QWidget* parent) : QWidget(parent) {
  model_ = new BreakGroupsModel(this);
  table_ = makeRecordTableView(model_, "storeBreaksTable", this);
  detail_ = new QTextBrowser(this);
  detail_->setObjectName("breakDetail");
  detail_->setOpenLinks(false);
  source_ = new SourceView(this);
  source_->setObjectName("breakSource");
  before_ = new QPushButton("graph before the break", this);
  after_ = new QPushButton("graph after the break", this);
  before_->setObjectName("breakGraphBefore");
  after_->setObjectName("breakGraphAfter");
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(before_);
  buttons->addWidget(after_);
  buttons->addStretch(1);
  auto* right = new QWidget(this);
  auto* rl = new QVBoxLayout(right);
  rl->setContentsMargins(0, 0, 0, 0);
  rl->addWidget(detail_, 1);
  rl->addLayout(buttons);
  rl->addWidget(source_, 1);
  auto* split = new QSplitter(Qt::Vertical, this);
  split->addWidget(table_);
  split->addWidget(right);
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(split);
  connect(table_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& cur) { selectSite(cur.row()); });
  connect(detail_, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
    if (current_ < 0) return;
    const auto& stack = model_->sites()[static_cast<size_t>(current_)].group.userStack;
    const size_t i = url.toString().mid(6).toULongLong();
    if (i < stack.size()) source_->showLocation(parseStackEntry(stack[i]));
  });
  connect(before_, &QPushButton::clicked, this, [this] {
    if (current_ < 0) return;
    const BreakSite& s = model_->sites()[static_cast<size_t>(current_)];
    if (s.graphBefore) emit openGraph(s.graphBefore, s.graphBeforeIndex);
  });
  connect(after_, &QPushButton::clicked, this, [this] {
    if (current_ < 0) return;
    const BreakSite& s = model_->sites()[static_cast<size_t>(current_)];
    if (s.graphAfter) emit openGraph(s.graphAfter, s.graphAfterIndex);
  });
  selectSite(-1);
}

void BreaksPanel::setSites(std::vector<BreakSite> sites) {
  model_->setSites(std::move(sites));
  table_->resizeColumnsToContents();
  selectSite(model_->rowCount() > 0 ? 0 : -1);
}

void BreaksPanel::selectSite(int row) {
  const bool valid = row >= 0 && row < model_->rowCount();
  current_ = valid ? row : -1;
  before_->setEnabled(false);
  after_->setEnabled(false);
  if (!valid) {
    detail_->setHtml(model_->rowCount() == 0 ? "<p>No graph breaks in this store.</p>" : "");
    source_->clearLocation();
    return;
  }
  if (table_->currentIndex().row() != row) table_->selectRow(row);
  const BreakSite& s = model_->sites()[static_cast<size_t>(row)];
  const explain::BreakGroup& g = s.group;
  QString h = QString("<h3>%1 at %2</h3>").arg(esc(g.kind), esc(g.location.str()));
  h += QString("<p>%1 occurrence(s), met by %2 compile(s)</p>").arg(g.occurrences).arg(g.compiles);
  h += "<p><code>" + esc(g.location.sourceLine) + "</code></p>";
  h += "<p><b>why</b>: " + esc(g.explanation) + "</p>";
  if (!g.hints.empty()) {
    h += "<p><b>hints</b><ul>";
    for (const std::string& hint : g.hints) h += "<li>" + esc(hint) + "</li>";
    h += "</ul></p>";
  }
  if (!g.userStack.empty()) {
    h += "<p><b>user stack</b> (outermost first)<br>";
    for (size_t i = 0; i < g.userStack.size(); ++i)
      h += QString("<a href=\"frame:%1\">%2</a><br>").arg(i).arg(esc(g.userStack[i]));
    h += "</p>";
  }
  detail_->setHtml(h);
  source_->showLocation(g.location);
  before_->setEnabled(s.graphBefore != 0);
  after_->setEnabled(s.graphAfter != 0);
}

// ---------------------------------------------------------------- CompileTimeline

CompileTimeline::CompileTimeline(QWidget* parent) : QWidget(parent) {
  setObjectName("compileTimeline");
  setMinimumHeight(56);
}

void CompileTimeline::setCompiles(std::vector<storage::CompileRecord> compiles, RowId current) {
  compiles_ = std::move(compiles);
  current_ = current;
  QStringList tip;
  for (const auto& c : compiles_)
    tip << QString("#%1 %2: %3").arg(c.attempt).arg(QString::fromStdString(c.status), QString::fromStdString(c.reason));
  setToolTip(tip.join('\n'));
  update();
}

void CompileTimeline::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), QColor("#fafafa"));
  if (compiles_.empty()) {
    p.drawText(rect(), Qt::AlignCenter, "select a function to see its compiles along time");
    return;
  }
  std::int64_t t0 = compiles_.front().startTimeUs, t1 = t0 + 1;
  for (const auto& c : compiles_) {
    t0 = std::min(t0, c.startTimeUs);
    t1 = std::max(t1, c.startTimeUs + c.durationUs);
  }
  const double w = width() - 20.0;
  const double scale = w / static_cast<double>(std::max<std::int64_t>(1, t1 - t0));
  p.setPen(QColor("#999999"));
  p.drawLine(10, height() - 14, width() - 10, height() - 14);
  p.drawText(QRectF(10, height() - 13, w, 12), Qt::AlignLeft,
             QString("%1 compiles over %2 ms").arg(compiles_.size()).arg((t1 - t0) / 1000.0, 0, 'f', 1));
  for (const auto& c : compiles_) {
    const double x = 10 + static_cast<double>(c.startTimeUs - t0) * scale;
    const double bw = std::max(18.0, static_cast<double>(c.durationUs) * scale);
    const QRectF r(x, 6, bw, height() - 26.0);
    const QString status = c.status == "cache_limit" ? "cache limit"
                           : c.attempt > 0 && c.status == "ok" ? "recompiled"
                           : c.status == "graph_break" ? "graph break" : QString::fromStdString(c.status);
    p.setBrush(statusColour(status));
    p.setPen(QPen(c.id == current_ ? QColor("#1f4fd1") : QColor("#666666"), c.id == current_ ? 2 : 1));
    p.drawRect(r);
    p.setPen(Qt::black);
    p.drawText(r, Qt::AlignCenter, QString("#%1").arg(c.attempt));
  }
}

// ---------------------------------------------------------------- RecompilesPanel

RecompilesPanel::RecompilesPanel(QWidget* parent) : QWidget(parent) {
  model_ = new RecompilesModel(this);
  tree_ = new QTreeView(this);
  tree_->setObjectName("recompilesTree");
  tree_->setModel(model_);
  tree_->setSelectionBehavior(QAbstractItemView::SelectRows);
  timeline_ = new CompileTimeline(this);
  detail_ = new QTextBrowser(this);
  detail_->setObjectName("recompileDetail");
  source_ = new SourceView(this);
  source_->setObjectName("recompileSource");
  auto* split = new QSplitter(Qt::Vertical, this);
  split->addWidget(tree_);
  split->addWidget(timeline_);
  split->addWidget(detail_);
  split->addWidget(source_);
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(split);
  connect(tree_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& cur) { showIndex(cur); });
}

void RecompilesPanel::setReport(const profiler::ProfileReport& report, const storage::TraceReader* reader) {
  reader_ = reader;
  model_->reload(report);
  tree_->expandAll();
  for (int c = 0; c < model_->columnCount(); ++c) tree_->resizeColumnToContents(c);
  if (model_->rowCount() == 0) {
    detail_->setHtml("<p>No recompiles in this store.</p>");
    timeline_->setCompiles({}, 0);
    source_->clearLocation();
  } else {
    selectRecompile(0, 0);
  }
}

void RecompilesPanel::selectRecompile(int function, int row) {
  const QModelIndex f = model_->index(function, 0);
  const QModelIndex r = model_->index(row, 0, f);
  const QModelIndex target = r.isValid() ? r : f;
  tree_->setCurrentIndex(target);
  showIndex(target);
}

void RecompilesPanel::showIndex(const QModelIndex& index) {
  const profiler::FunctionProfile* f = model_->function(index);
  if (!f) return;
  const profiler::Recompile* r = model_->recompile(index);
  // Timeline: every compile of the function's frames.
  std::vector<storage::CompileRecord> compiles;
  if (reader_) {
    try {
      for (const storage::RunRecord& run : reader_->runs())
        for (const storage::FrameRecord& fr : reader_->frames(run.id))
          if (fr.file == f->file && fr.firstLine == f->firstLine && fr.name == f->name)
            for (storage::CompileRecord& c : reader_->compilesOfFrame(fr.id)) compiles.push_back(std::move(c));
    } catch (const std::exception&) {
      // The store went away: the timeline stays empty, the main window says why.
    }
  }
  timeline_->setCompiles(std::move(compiles), r ? r->compileId : 0);
  QString h = QString("<h3>%1</h3><p>%2:%3 \u2014 %4 compile(s), %5 recompile(s), %6 ms compiling</p>")
                  .arg(esc(f->name), esc(f->file)).arg(f->firstLine).arg(f->compiles)
                  .arg(f->recompileCount()).arg(static_cast<double>(f->compileUs) / 1000.0, 0, 'f', 1);
  SourceLocation where;
  if (r) {
    h += QString("<h4>compile #%1 (%2)</h4>").arg(r->attempt).arg(esc(r->status));
    for (const profiler::GuardFailureInfo& g : r->failures) {
      h += "<p><b>failing guard</b>: " + esc(g.guardKind) + " on <code>" + esc(g.source) + "</code> (" +
           esc(g.property) + (g.dim >= 0 ? QString(" at dim %1").arg(g.dim) : QString()) + ")<br>";
      h += "<b>expected</b> " + esc(g.expected) + " &nbsp; <b>seen</b> " + esc(g.seen) + "<br>";
      if (g.createdAt.known())
        h += "<b>guard created at</b> " + esc(g.createdAt.str()) + ": <code>" + esc(g.createdAt.sourceLine) + "</code><br>";
      h += "<small>" + esc(g.reason) + "</small></p>";
      if (!where.known()) where = g.createdAt;
    }
    if (r->failures.empty()) h += "<p>the failing guard was not recorded for this compile</p>";
  }
  if (!f->suggestions.empty()) {
    h += "<p><b>suggestions</b><ul>";
    for (const profiler::Suggestion& s : f->suggestions) {
      h += "<li>" + esc(s.message) + (s.where.known() ? " (" + esc(s.where.str()) + ")" : QString()) + "</li>";
      if (!where.known()) where = s.where;
    }
    h += "</ul></p>";
  }
  detail_->setHtml(h);
  if (where.known()) source_->showLocation(where);
  else source_->clearLocation("no guard-creating line recorded");
}

// ---------------------------------------------------------------- DiffPanel

DiffPanel::DiffPanel(std::shared_ptr<LayoutCache> cache, QWidget* parent) : QWidget(parent) {
  beforeBox_ = new QComboBox(this);
  afterBox_ = new QComboBox(this);
  beforeBox_->setObjectName("diffBefore");
  afterBox_->setObjectName("diffAfter");
  run_ = new QPushButton("diff", this);
  run_->setObjectName("diffRun");
  summary_ = new QLabel(this);
  summary_->setObjectName("diffSummary");
  view_ = new GraphView(std::move(cache), this);
  view_->setObjectName("diffView");
  changes_ = new QTreeWidget(this);
  changes_->setObjectName("diffChanges");
  changes_->setHeaderLabels({"node", "what"});
  auto* pick = new QHBoxLayout;
  pick->addWidget(new QLabel("before", this));
  pick->addWidget(beforeBox_, 1);
  pick->addWidget(new QLabel("after", this));
  pick->addWidget(afterBox_, 1);
  pick->addWidget(run_);
  auto* split = new QSplitter(Qt::Horizontal, this);
  split->addWidget(view_);
  split->addWidget(changes_);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 1);
  split->setSizes({900, 380});
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(pick);
  layout->addWidget(summary_);
  layout->addWidget(split, 1);
  connect(run_, &QPushButton::clicked, this, [this] { diff(beforeBox_->currentIndex(), afterBox_->currentIndex()); });
  connect(&watcher_, &QFutureWatcher<DiffJob>::finished, this, &DiffPanel::onDone);
  connect(changes_, &QTreeWidget::itemClicked, this, [this](QTreeWidgetItem* item) {
    const QVariant v = item->data(0, Qt::UserRole);
    if (v.isValid()) view_->selectNode(v.toInt());
  });
}

void DiffPanel::setStore(const QString& path, std::vector<GraphEntry> graphs) {
  path_ = path;
  entries_ = std::move(graphs);
  beforeBox_->clear();
  afterBox_->clear();
  for (const GraphEntry& e : entries_) {
    beforeBox_->addItem(e.label);
    afterBox_->addItem(e.label);
  }
  // Default: the first two compiles of a frame that recompiled, else the first two graphs.
  int a = entries_.size() > 1 ? 0 : -1, b = entries_.size() > 1 ? 1 : -1;
  for (size_t i = 0; i < entries_.size() && a >= 0; ++i)
    for (size_t j = i + 1; j < entries_.size(); ++j)
      if (entries_[j].frameId == entries_[i].frameId && entries_[j].compileId != entries_[i].compileId &&
          entries_[j].index == entries_[i].index) {
        a = static_cast<int>(i);
        b = static_cast<int>(j);
        i = entries_.size();
        break;
      }
  if (a >= 0) {
    beforeBox_->setCurrentIndex(a);
    afterBox_->setCurrentIndex(b);
  }
  summary_->setText(entries_.size() < 2 ? "the store needs two graphs to diff"
                                        : "pick two graphs and press diff");
}

void DiffPanel::diff(int before, int after) {
  if (before < 0 || after < 0 || static_cast<size_t>(before) >= entries_.size() ||
      static_cast<size_t>(after) >= entries_.size())
    return;
  beforeBox_->setCurrentIndex(before);
  afterBox_->setCurrentIndex(after);
  const GraphEntry a = entries_[static_cast<size_t>(before)];
  const GraphEntry b = entries_[static_cast<size_t>(after)];
  const std::string path = path_.toStdString();
  summary_->setText("reading and matching the two graphs...");
  watcher_.setFuture(QtConcurrent::run([path, a, b] {
    DiffJob job;
    GraphLoad la = loadGraph(path, a.compileId, a.index);
    GraphLoad lb = loadGraph(path, b.compileId, b.index);
    if (!la.graph || !lb.graph) {
      job.error = la.graph ? lb.error : la.error;
      return job;
    }
    job.before = la.graph;
    job.after = lb.graph;
    job.diff = diffGraphs(*la.graph, *lb.graph);
    return job;
  }));
}

void DiffPanel::onDone() {
  job_ = std::make_shared<DiffJob>(watcher_.result());
  changes_->clear();
  if (!job_->error.isEmpty()) {
    summary_->setText(job_->error);
    view_->showMessage(job_->error);
    emit diffShown();
    return;
  }
  const GraphDiff& d = job_->diff;
  summary_->setText(QString::fromStdString(diffSummary(d)) + "  (green added, red removed, orange changed)");
  const InspectGraph& m = *d.merged;
  auto* changed = new QTreeWidgetItem(changes_, {QString("changed (%1)").arg(d.changed.size())});
  auto* added = new QTreeWidgetItem(changes_, {QString("added (%1)").arg(d.added)});
  auto* removed = new QTreeWidgetItem(changes_, {QString("removed (%1)").arg(d.removed)});
  for (const InspectNode& n : m.nodes()) {
    QTreeWidgetItem* parent = n.diff == DiffStatus::kChanged ? changed
                              : n.diff == DiffStatus::kAdded ? added
                              : n.diff == DiffStatus::kRemoved ? removed : nullptr;
    if (!parent) continue;
    QStringList what;
    for (const std::string& c : n.changes) what << QString::fromStdString(c);
    if (what.isEmpty()) what << QString::fromStdString(n.target);
    auto* item = new QTreeWidgetItem(parent, {QString::fromStdString(n.name), what.join("; ")});
    item->setData(0, Qt::UserRole, n.index);
    item->setToolTip(1, what.join("\n"));
    item->setBackground(0, diffColour(n.diff));
  }
  changes_->expandAll();
  view_->setGraph(d.merged, beforeBox_->currentText() + "  \u2192  " + afterBox_->currentText(), Overlay::kDiff);
  emit diffShown();
}

}  // namespace dynamo::gui
