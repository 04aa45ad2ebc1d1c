// The store-wide panels of the main window, each a widget over one model:
//   BreaksPanel      distinct graph breaks: counts, kind, explanation, hints, user stack, the
//                    source line highlighted, and buttons to the graphs before and after
//   RecompilesPanel  per function, a timeline of its compiles and each recompile's failing
//                    guard (expected vs seen), the line that created the guard, the suggestion
//   DiffPanel        two graph pickers, the computed diff drawn (added / removed / changed
//                    coloured) and the list of changes
#pragma once

#include <QComboBox>
#include <QFutureWatcher>
#include <QLabel>
#include <QPushButton>
#include <QTableView>
#include <QTextBrowser>
#include <QTreeView>
#include <QTreeWidget>
#include <QWidget>

#include "dynamo/gui/graph_diff.h"
#include "dynamo/gui/graph_view.h"
#include "dynamo/gui/source_view.h"
#include "dynamo/gui/store_models.h"
#include "dynamo/gui/store_reports.h"
#include "dynamo/gui/store_session.h"

namespace dynamo::gui {

class BreaksPanel : public QWidget {
  Q_OBJECT
 public:
  explicit BreaksPanel(QWidget* parent = nullptr);
  void setSites(std::vector<BreakSite> sites);
  /// Selects break site `row` (shows its detail and source line).
  void selectSite(int row);
  QTableView* table() const { return table_; }
  QTextBrowser* detail() const { return detail_; }
  SourceView* source() const { return source_; }
  BreakGroupsModel* model() const { return model_; }
  QPushButton* beforeButton() const { return before_; }
  QPushButton* afterButton() const { return after_; }

 signals:
  void openGraph(qlonglong compileId, int index);

 private:
  BreakGroupsModel* model_;
  QTableView* table_;
  QTextBrowser* detail_;
  SourceView* source_;
  QPushButton* before_;
  QPushButton* after_;
  int current_ = -1;
};

/// The compiles of one function along time, coloured by status.
class CompileTimeline : public QWidget {
  Q_OBJECT
 public:
  explicit CompileTimeline(QWidget* parent = nullptr);
  void setCompiles(std::vector<storage::CompileRecord> compiles, RowId current);
  const std::vector<storage::CompileRecord>& compiles() const { return compiles_; }

 protected:
  void paintEvent(QPaintEvent*) override;

 private:
  std::vector<storage::CompileRecord> compiles_;
  RowId current_ = 0;
};

class RecompilesPanel : public QWidget {
  Q_OBJECT
 public:
  explicit RecompilesPanel(QWidget* parent = nullptr);
  /// `reader` answers the compiles of each function for the timeline (UI thread, light).
  void setReport(const profiler::ProfileReport& report, const storage::TraceReader* reader);
  /// Selects recompile `row` of function `function` (tree rows).
  void selectRecompile(int function, int row);
  QTreeView* tree() const { return tree_; }
  QTextBrowser* detail() const { return detail_; }
  SourceView* source() const { return source_; }
  CompileTimeline* timeline() const { return timeline_; }
  RecompilesModel* model() const { return model_; }

 private:
  void showIndex(const QModelIndex& index);
  RecompilesModel* model_;
  QTreeView* tree_;
  CompileTimeline* timeline_;
  QTextBrowser* detail_;
  SourceView* source_;
  const storage::TraceReader* reader_ = nullptr;
};

/// The result of a diff computed off the UI thread.
struct DiffJob {
  GraphDiff diff;
  InspectGraphPtr before, after;
  QString error;
};

class DiffPanel : public QWidget {
  Q_OBJECT
 public:
  explicit DiffPanel(std::shared_ptr<LayoutCache> cache, QWidget* parent = nullptr);
  void setStore(const QString& path, std::vector<GraphEntry> graphs);
  /// Picks the two graphs (indexes into the entries) and starts the diff.
  void diff(int before, int after);
  const std::vector<GraphEntry>& entries() const { return entries_; }
  GraphView* view() const { return view_; }
  QTreeWidget* changes() const { return changes_; }
  QLabel* summary() const { return summary_; }
  QComboBox* beforeBox() const { return beforeBox_; }
  QComboBox* afterBox() const { return afterBox_; }
  /// The last diff, once computed (null before).
  const GraphDiff* result() const { return job_ ? &job_->diff : nullptr; }

 signals:
  void diffShown();

 private:
  void onDone();
  QString path_;
  std::vector<GraphEntry> entries_;
  QComboBox* beforeBox_;
  QComboBox* afterBox_;
  QPushButton* run_;
  QLabel* summary_;
  GraphView* view_;
  QTreeWidget* changes_;
  QFutureWatcher<DiffJob> watcher_;
  std::shared_ptr<DiffJob> job_;
};

}  // namespace dynamo::gui
