// MainWindow (see main_window.h).
#include "dynamo/gui/main_window.h"

#include <QFileInfo>
#include <QSplitter>
#include <QStatusBar>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrent>

#include <iostream>

#include "dynamo/gui/compile_artifacts.h"
#include "record_table_view.h"

namespace dynamo::gui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent), cache_(std::make_shared<LayoutCache>()) {
  setWindowTitle("dynamo-inspect");
  resize(1400, 900);
  banner_ = new QLabel(this);
  banner_->setObjectName("messageBanner");
  banner_->setWordWrap(true);
  banner_->setStyleSheet("QLabel { background: #ffe0e0; color: #800000; padding: 6px; }");
  banner_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  banner_->hide();

  runModel_ = new RunTreeModel(this);
  runView_ = new QTreeView(this);
  runView_->setObjectName("runTree");
  runView_->setModel(runModel_);
  runView_->setSelectionBehavior(QAbstractItemView::SelectRows);

  compilesModel_ = new CompilesModel(this);
  compilesView_ = makeRecordTableView(compilesModel_, "compilesTable", this);
  graphsModel_ = new GraphsModel(this);
  graphsView_ = makeRecordTableView(graphsModel_, "graphsTable", this);
  breaksModel_ = new BreaksModel(this);
  breaksView_ = makeRecordTableView(breaksModel_, "breaksTable", this);
  guardsModel_ = new GuardsModel(this);
  guardsView_ = makeRecordTableView(guardsModel_, "guardsTable", this);
  failuresModel_ = new FailuresModel(this);
  failuresView_ = makeRecordTableView(failuresModel_, "failuresTable", this);
  reasonLabel_ = new QLabel(this);
  reasonLabel_->setObjectName("compileReason");
  reasonLabel_->setWordWrap(true);
  detailsView_ = new QTextBrowser(this);
  detailsView_->setObjectName("compileDetails");
  detailsView_->setLineWrapMode(QTextEdit::NoWrap);
  compileSource_ = new SourceView(this);
  compileSource_->setObjectName("compileSource");

  auto* failuresPage = new QWidget(this);
  auto* fl = new QVBoxLayout(failuresPage);
  fl->addWidget(reasonLabel_);
  fl->addWidget(failuresView_, 1);
  compileTabs_ = new QTabWidget(this);
  compileTabs_->setObjectName("compileTabs");
  compileTabs_->addTab(graphsView_, "Graphs");
  compileTabs_->addTab(breaksView_, "Breaks");
  compileTabs_->addTab(guardsView_, "Guards");
  compileTabs_->addTab(failuresPage, "Why recompiled");
  compileTabs_->addTab(detailsView_, "Details");
  auto* lower = new QSplitter(Qt::Horizontal, this);
  lower->addWidget(compileTabs_);
  lower->addWidget(compileSource_);
  lower->setStretchFactor(0, 2);
  lower->setStretchFactor(1, 1);
  auto* compilesPage = new QSplitter(Qt::Vertical, this);
  compilesPage->addWidget(compilesView_);
  compilesPage->addWidget(lower);

  graphView_ = new GraphView(cache_, this);
  graphView_->setObjectName("graphView");
  breaksPanel_ = new BreaksPanel(this);
  recompilesPanel_ = new RecompilesPanel(this);
  diffPanel_ = new DiffPanel(cache_, this);

  tabs_ = new QTabWidget(this);
  tabs_->setObjectName("mainTabs");
  tabs_->addTab(compilesPage, "Compiles");
  tabs_->addTab(graphView_, "Graph");
  tabs_->addTab(breaksPanel_, "Breaks");
  tabs_->addTab(recompilesPanel_, "Recompiles");
  tabs_->addTab(diffPanel_, "Diff");

  auto* split = new QSplitter(Qt::Horizontal, this);
  split->addWidget(runView_);
  split->addWidget(tabs_);
  split->setStretchFactor(1, 3);
  split->setSizes({380, 1100});
  auto* central = new QWidget(this);
  auto* layout = new QVBoxLayout(central);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addWidget(banner_);
  layout->addWidget(split, 1);
  setCentralWidget(central);
  statusBar()->showMessage("no store open");

  connect(runView_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& cur) { onFrameSelected(cur); });
  connect(compilesView_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& cur) { onCompileSelected(cur.row()); });
  auto openRow = [this](const QModelIndex& i) {
    openGraph(graphsModel_->data(i, kRowIdRole).toLongLong(), graphsModel_->data(i, kIndexRole).toInt());
  };
  connect(graphsView_, &QTableView::activated, this, openRow);      // Enter (and double click on some styles)
  connect(graphsView_, &QTableView::doubleClicked, this, openRow);
  connect(breaksView_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& cur) {
            if (cur.row() >= 0 && static_cast<size_t>(cur.row()) < breaksModel_->breaks().size())
              compileSource_->showLocation(breaksModel_->breaks()[static_cast<size_t>(cur.row())].location);
          });
  connect(guardsView_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& cur) {
            if (cur.row() >= 0 && static_cast<size_t>(cur.row()) < guardsModel_->guards().size())
              compileSource_->showLocation(guardsModel_->guards()[static_cast<size_t>(cur.row())].location);
          });
  connect(failuresView_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& cur) {
            if (cur.row() >= 0 && static_cast<size_t>(cur.row()) < failuresModel_->failures().size())
              compileSource_->showLocation(failuresModel_->failures()[static_cast<size_t>(cur.row())].createdAt);
          });
  connect(breaksPanel_, &BreaksPanel::openGraph, this, [this](qlonglong c, int i) { openGraph(c, i); });
  connect(&graphWatcher_, &QFutureWatcher<GraphLoad>::finished, this, &MainWindow::onGraphLoaded);
  connect(&frameWatcher_, &QFutureWatcher<FrameRead>::finished, this, &MainWindow::onFrameRead);
  connect(&compileWatcher_, &QFutureWatcher<CompileRead>::finished, this, &MainWindow::onCompileRead);
  connect(&reportsWatcher_, &QFutureWatcher<StoreReports>::finished, this, &MainWindow::onReportsLoaded);
}

MainWindow::~MainWindow() {
  graphWatcher_.waitForFinished();
  reportsWatcher_.waitForFinished();
}

void MainWindow::showError(const QString& message) {
  banner_->setText(message);
  banner_->setVisible(!message.isEmpty());
  if (!message.isEmpty()) std::cerr << "dynamo-inspect: " << message.toStdString() << std::endl;
}

QString MainWindow::bannerText() const { return banner_->isHidden() ? QString() : banner_->text(); }

bool MainWindow::openStore(const QString& path) {
  QString error;
  std::unique_ptr<StoreSession> s = StoreSession::open(path, error);
  if (!s) {
    showError(error);
    statusBar()->showMessage("no store open");
    return false;
  }
  session_ = std::move(s);
  connect(session_.get(), &StoreSession::changed, this, &MainWindow::onStoreChanged);
  connect(session_.get(), &StoreSession::lostFile, this, &MainWindow::onStoreLost);
  session_->watch();
  setWindowTitle("dynamo-inspect: " + QFileInfo(path).fileName());
  showError(session_->emptyMessage());
  graphView_->showMessage("no graph selected: pick a compile and a graph");
  reload(false);
  return true;
}

void MainWindow::reload(bool keepSelection) {
  if (!session_) return;
  const RowId frame = currentFrame_;
  const RowId compile = currentCompile_;
  try {
    runModel_->reload(session_->reader());
  } catch (const std::exception& e) {
    showError("cannot read the store: " + describeError(e));
    return;
  }
  runView_->expandAll();
  runView_->resizeColumnToContents(0);
  currentFrame_ = 0;
  currentCompile_ = 0;
  frameReadPending_ = false;
  if (keepSelection && frame && selectFrame(frame)) {
    wantCompile_ = compile;  // selected when the frame's compiles arrive (onFrameRead)
  } else {
    compilesModel_->setFrame(FrameCompiles{});
    onCompileSelected(-1);
  }
  const storage::StoreCounts c = session_->reader().counts();
  statusBar()->showMessage(QString("%1: %2 run(s), %3 frame(s), %4 compile(s), %5 graph(s), %6 break(s)")
                               .arg(session_->path()).arg(c.runs).arg(c.frames).arg(c.compiles)
                               .arg(c.graphs).arg(c.graphBreaks));
  reportsReady_ = false;
  reportsWatcher_.setFuture(QtConcurrent::run(
      [path = session_->path().toStdString()] { return buildStoreReports(path); }));
}

bool MainWindow::selectFrame(RowId frameId) {
  const QModelIndex i = runModel_->frameIndex(frameId);
  if (!i.isValid()) return false;
  runView_->setCurrentIndex(i);
  if (currentFrame_ != frameId) onFrameSelected(i);
  return true;
}

void MainWindow::onFrameSelected(const QModelIndex& index) {
  if (!session_) return;
  const storage::FrameRecord* f = runModel_->frame(index);
  currentFrame_ = f ? f->id : 0;
  wantCompile_ = 0;
  tabs_->setCurrentIndex(0);
  if (!currentFrame_) {
    frameReadPending_ = false;
    compilesModel_->setFrame(FrameCompiles{});
    selectCompileRow(-1);
    return;
  }
  // The compiles and their graph and break counts are read off the UI thread (a reader of its
  // own: SQLite connections are not shared across threads); onFrameRead shows them. A deleted
  // store cannot be opened again: the session's reader, which still has it open, reads it here.
  frameReadPending_ = true;
  if (session_->lost()) {
    frameReadPending_ = false;
    try {
      compilesModel_->setFrame(session_->reader(), currentFrame_);
    } catch (const std::exception& e) {
      showError("cannot read the store: " + describeError(e));
      return;
    }
    selectCompileRow(compilesModel_->rowCount() > 0 ? 0 : -1);
    return;
  }
  frameWatcher_.setFuture(QtConcurrent::run([path = session_->path().toStdString(), frame = currentFrame_] {
    FrameRead r;
    try {
      r.data = readFrameCompiles(*storage::TraceReader::open(path), frame);
    } catch (const std::exception& e) {
      r.data.frameId = frame;
      r.error = "cannot read the store: " + describeError(e);
    }
    return r;
  }));
}

void MainWindow::onFrameRead() {
  const FrameRead r = frameWatcher_.result();
  if (!session_ || r.data.frameId != currentFrame_) return;  // another frame was selected since
  frameReadPending_ = false;
  if (!r.error.isEmpty()) {
    showError(r.error);
    return;
  }
  compilesModel_->setFrame(r.data);
  compilesView_->resizeColumnsToContents();
  int row = compilesModel_->rowCount() > 0 ? 0 : -1;
  for (int i = 0; i < compilesModel_->rowCount(); ++i)
    if (wantCompile_ && compilesModel_->compiles()[static_cast<size_t>(i)].id == wantCompile_) row = i;
  wantCompile_ = 0;
  currentCompile_ = 0;  // the rows are new: select even the same compile again
  selectCompileRow(row);
}

void MainWindow::selectCompileRow(int row) {
  if (row >= 0) compilesView_->selectRow(row);
  if (row < 0 || currentCompile_ != compilesModel_->compiles()[static_cast<size_t>(row)].id) onCompileSelected(row);
}

void MainWindow::onCompileSelected(int row) {
  if (!session_) return;
  const bool valid = row >= 0 && static_cast<size_t>(row) < compilesModel_->compiles().size();
  const storage::CompileRecord c = valid ? compilesModel_->compiles()[static_cast<size_t>(row)] : storage::CompileRecord{};
  currentCompile_ = c.id;
  failuresModel_->setCompile(reports_.profile, c);
  reasonLabel_->setText(valid ? QString("compile #%1 ran because: %2").arg(c.attempt).arg(QString::fromStdString(c.reason))
                              : QString());
  if (!valid) {
    compileReadPending_ = false;
    showCompile(std::make_shared<const CompileContents>());
    return;
  }
  // Its graphs (and AOT graphs' JSON, megabytes for a large model), breaks, guards and
  // artifacts are read and parsed off the UI thread; onCompileRead shows them.
  if (session_->lost()) {  // see onFrameSelected
    compileReadPending_ = false;
    try {
      showCompile(std::make_shared<const CompileContents>(readCompileContents(session_->reader(), c.id)));
    } catch (const std::exception& e) {
      showError("cannot read the store: " + describeError(e));
    }
    return;
  }
  compileReadPending_ = true;
  compileWatcher_.setFuture(QtConcurrent::run([path = session_->path().toStdString(), id = c.id] {
    CompileRead r;
    try {
      r.data = std::make_shared<const CompileContents>(readCompileContents(*storage::TraceReader::open(path), id));
    } catch (const std::exception& e) {
      auto empty = std::make_shared<CompileContents>();
      empty->compileId = id;
      r.data = std::move(empty);
      r.error = "cannot read the store: " + describeError(e);
    }
    return r;
  }));
}

void MainWindow::onCompileRead() {
  const CompileRead r = compileWatcher_.result();
  if (!session_ || r.data->compileId != currentCompile_) return;  // another compile was selected since
  compileReadPending_ = false;
  if (!r.error.isEmpty()) {
    showError(r.error);
    return;
  }
  showCompile(r.data);
}

void MainWindow::showCompile(std::shared_ptr<const CompileContents> data) {
  breaksModel_->setCompile(*data);
  guardsModel_->setCompile(*data);
  detailsView_->setPlainText(QString::fromStdString(data->details));
  graphsModel_->setCompile(std::move(data));
  for (QTableView* v : {graphsView_, breaksView_, guardsView_, failuresView_}) v->resizeColumnsToContents();
  compileSource_->clearLocation();
  emit compileShown();
}

void MainWindow::openGraph(RowId compileId, int index) {
  if (!session_) return;
  if (graphWatcher_.isRunning() && loadingCompile_ == compileId && loadingIndex_ == index) return;
  loadingCompile_ = compileId;
  loadingIndex_ = index;
  tabs_->setCurrentWidget(graphView_);
  graphView_->showMessage(QString("reading %1 of compile %2...")
                              .arg(QString::fromStdString(graphIndexLabel(index))).arg(compileId));
  graphWatcher_.setFuture(session_->loadGraphAsync(compileId, index));
}

void MainWindow::onGraphLoaded() {
  const GraphLoad load = graphWatcher_.result();
  if (!load.graph) {
    graphView_->showMessage(load.error);
    showError(load.error);
    emit graphLoaded();
    return;
  }
  QString frameName;
  if (session_) {
    try {
      for (const storage::RunRecord& run : session_->reader().runs())
        for (const storage::CompileRecord& c : session_->reader().compilesOfRun(run.id))
          if (c.id == load.record.compileId)
            for (const storage::FrameRecord& f : session_->reader().frames(run.id))
              if (f.id == c.frameId) frameName = QString("%1 compile #%2").arg(QString::fromStdString(f.name)).arg(c.attempt);
    } catch (const std::exception&) {
    }
  }
  // Graphs with generated kernels open coloured by fusion group, other AOT graphs by their
  // partition (saved, recomputed, forward, backward).
  graphView_->setGraph(load.graph, QString("%1 %2: %3 nodes (read %4 ms, built %5 ms)")
                                       .arg(frameName).arg(QString::fromStdString(graphIndexLabel(load.record.index)))
                                       .arg(load.graph->nodes().size())
                                       .arg(load.readMs, 0, 'f', 0).arg(load.buildMs, 0, 'f', 0),
                       defaultOverlay(*load.graph, load.record.index));
  emit graphLoaded();
}

void MainWindow::onReportsLoaded() {
  reports_ = reportsWatcher_.result();
  if (!reports_.error.isEmpty()) {
    reportsReady_ = true;
    if (session_ && !session_->lost()) showError(reports_.error);  // else the banner says why
    emit reportsLoaded();
    return;
  }
  breaksPanel_->setSites(reports_.breakSites);
  recompilesPanel_->setReport(reports_.profile, session_ ? &session_->reader() : nullptr);
  diffPanel_->setStore(session_ ? session_->path() : QString(), reports_.graphs);
  if (currentCompile_) {
    for (const storage::CompileRecord& c : compilesModel_->compiles())
      if (c.id == currentCompile_) failuresModel_->setCompile(reports_.profile, c);
  }
  reportsReady_ = true;
  emit reportsLoaded();
}

void MainWindow::onStoreChanged() {
  ++liveReloads_;
  if (session_ && !session_->lost()) showError(session_->emptyMessage());
  reload(true);
}

void MainWindow::onStoreLost(const QString& message) { showError(message); }

}  // namespace dynamo::gui
