// MainWindow: dynamo-inspect's window.
//
//   +-------------------+---------------------------------------------------------------+
//   | runs              | [Compiles] [Graph] [Breaks] [Recompiles] [Diff]                |
//   |  file.py          |  compiles of the frame: attempt, status, reason, time, entry   |
//   |   forward :12  3  |  -------------------------------------------------------------- |
//   |   ...             |  [Graphs] [Breaks] [Guards] [Why recompiled] [Details]         |
//   |                   |  of the compile (Graphs: Dynamo's and the AOT joint / forward  |
//   |                   |  / backward graphs; Details: AOT summary, dynamic shapes)      |
//   +-------------------+---------------------------------------------------------------+
//   | message banner (bad input, deleted store, ...), also printed on stderr             |
//
// Everything is read through StoreSession (storage queries and the shared reports); the
// store-wide reports and every graph are built off the UI thread.
#pragma once

#include <QFutureWatcher>
#include <QLabel>
#include <QMainWindow>
#include <QTabWidget>
#include <QTableView>
#include <QTextBrowser>
#include <QTreeView>

#include <memory>

#include "dynamo/gui/graph_view.h"
#include "dynamo/gui/panels.h"
#include "dynamo/gui/store_models.h"
#include "dynamo/gui/store_reports.h"
#include "dynamo/gui/store_session.h"

namespace dynamo::gui {

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  /// Opens a store; false (with the message in the banner and on stderr) when it cannot.
  bool openStore(const QString& path);
  /// Shows a message in the banner and on stderr ("dynamo-inspect: ...").
  void showError(const QString& message);
  /// The banner's text ("" when hidden).
  QString bannerText() const;

  /// Selects a frame in the run tree (and its compiles in the Compiles tab).
  bool selectFrame(RowId frameId);
  /// Selects the compile in row `row` of the compiles table.
  void selectCompileRow(int row);
  /// Opens a graph in the Graph tab (loaded off the UI thread; graphLoaded() when shown).
  void openGraph(RowId compileId, int index);

  StoreSession* session() const { return session_.get(); }
  RunTreeModel* runTree() const { return runModel_; }
  QTreeView* runTreeView() const { return runView_; }
  QTabWidget* tabs() const { return tabs_; }
  QTabWidget* compileTabs() const { return compileTabs_; }
  CompilesModel* compiles() const { return compilesModel_; }
  QTableView* compilesView() const { return compilesView_; }
  GraphsModel* graphs() const { return graphsModel_; }
  QTableView* graphsView() const { return graphsView_; }
  BreaksModel* breaks() const { return breaksModel_; }
  GuardsModel* guards() const { return guardsModel_; }
  FailuresModel* failures() const { return failuresModel_; }
  /// The Details tab of the selected compile (AOT summary, dynamic shapes, other artifacts).
  QTextBrowser* detailsView() const { return detailsView_; }
  GraphView* graphView() const { return graphView_; }
  BreaksPanel* breaksPanel() const { return breaksPanel_; }
  RecompilesPanel* recompilesPanel() const { return recompilesPanel_; }
  DiffPanel* diffPanel() const { return diffPanel_; }
  /// True once the store-wide reports of the current store are shown (or their error is).
  bool reportsReady() const { return reportsReady_; }
  /// True while the compiles of the selected frame or the tables of the selected compile are
  /// being read (off the UI thread).
  bool storeReadsPending() const { return frameReadPending_ || compileReadPending_; }
  /// How many times the views reloaded because the store changed.
  int liveReloads() const { return liveReloads_; }

 signals:
  void graphLoaded();
  void reportsLoaded();
  /// The tables of the selected compile show what was read for it.
  void compileShown();

 private:
  void reload(bool keepSelection);
  void onFrameSelected(const QModelIndex& index);
  void onCompileSelected(int row);
  void onFrameRead();
  void onCompileRead();
  void showCompile(std::shared_ptr<const CompileContents> data);
  void onGraphLoaded();
  void onReportsLoaded();
  void onStoreChanged();
  void onStoreLost(const QString& message);

  std::unique_ptr<StoreSession> session_;
  std::shared_ptr<LayoutCache> cache_;
  QLabel* banner_;
  RunTreeModel* runModel_;
  QTreeView* runView_;
  QTabWidget* tabs_;
  CompilesModel* compilesModel_;
  QTableView* compilesView_;
  QTabWidget* compileTabs_;
  GraphsModel* graphsModel_;
  QTableView* graphsView_;
  BreaksModel* breaksModel_;
  QTableView* breaksView_;
  GuardsModel* guardsModel_;
  QTableView* guardsView_;
  FailuresModel* failuresModel_;
  QTableView* failuresView_;
  QLabel* reasonLabel_;
  QTextBrowser* detailsView_;
  SourceView* compileSource_;
  GraphView* graphView_;
  BreaksPanel* breaksPanel_;
  RecompilesPanel* recompilesPanel_;
  DiffPanel* diffPanel_;
  /// A read of the store done off the UI thread, with its error.
  struct FrameRead {
    FrameCompiles data;
    QString error;
  };
  struct CompileRead {
    std::shared_ptr<const CompileContents> data;
    QString error;
  };
  QFutureWatcher<FrameRead> frameWatcher_;
  QFutureWatcher<CompileRead> compileWatcher_;
  RowId wantCompile_ = 0;  ///< the compile to select when its frame's compiles arrive (0: the first)
  bool frameReadPending_ = false;    ///< a frame's compiles are being read
  bool compileReadPending_ = false;  ///< a compile's tables are being read
  QFutureWatcher<GraphLoad> graphWatcher_;
  QFutureWatcher<StoreReports> reportsWatcher_;
  StoreReports reports_;
  bool reportsReady_ = false;
  RowId currentFrame_ = 0;
  RowId currentCompile_ = 0;
  RowId loadingCompile_ = 0;
  int loadingIndex_ = -1;
  int liveReloads_ = 0;
};

}  // namespace dynamo::gui
