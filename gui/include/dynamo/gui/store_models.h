// The navigation models: Qt item models over storage queries and the explainer's and
// profiler's reports (the structs every tool shares). They keep plain records; none holds SQL or
// a connection. What the Compiles table and the tables of a compile show is read by
// readFrameCompiles / readCompileContents, which the window runs off the UI thread (a reader of
// their own) and hands to the models as immutable results; the overloads taking a TraceReader
// read and apply in one call (tests, small queries).
//
//   RunTreeModel        runs -> source files -> frames (compile count, status colour)
//   CompilesModel       the compiles of a frame (attempt, status, reason, time, phases, entry)
//   GraphsModel         the graphs of a compile (Dynamo's, then its AOT graphs)
//   BreaksModel         the graph breaks of a compile
//   GuardsModel         the guards of a compile
//   FailuresModel       why a compile happened: the failing guards of the entries it replaced
//   BreakGroupsModel    distinct breaks over the store, with counts (dynamo::explain)
//   RecompilesModel     per function, its recompiles with the failing guard and suggestion
//                       (dynamo::profiler)
#pragma once

#include <QAbstractItemModel>
#include <QAbstractTableModel>
#include <QColor>

#include <memory>
#include <vector>

#include "dynamo/explain/explain_report.h"
#include "dynamo/gui/compile_artifacts.h"
#include "dynamo/profiler/profile_report.h"
#include "dynamo/storage/trace_reader.h"

namespace dynamo::gui {

using storage::RowId;

/// Roles every model answers besides the Qt ones.
enum ModelRole {
  kRowIdRole = Qt::UserRole + 1,  ///< the row's id (run, frame, compile, ...) as qlonglong
  kKindRole,                      ///< RunTreeModel: "run", "file" or "frame"
  kIndexRole,                     ///< GraphsModel: the graph's index in its compile
};

/// The status colour of a compile status or frame summary ("ok", "graph_break", "recompiled",
/// "failed", ...).
QColor statusColour(const QString& status);

/// Runs -> files -> frames.
class RunTreeModel : public QAbstractItemModel {
  Q_OBJECT
 public:
  explicit RunTreeModel(QObject* parent = nullptr);
  ~RunTreeModel() override;
  void reload(const storage::TraceReader& reader);

  QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
  QModelIndex parent(const QModelIndex& child) const override;
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation o, int role) const override;

  /// The index of a frame (column 0), or invalid.
  QModelIndex frameIndex(RowId frameId) const;
  /// The first frame whose name contains `name`, or invalid.
  QModelIndex findFrame(const QString& name) const;
  /// The frame record behind an index of kind "frame".
  const storage::FrameRecord* frame(const QModelIndex& index) const;

  struct Item;

 private:
  std::unique_ptr<Item> root_;
};

/// A table over a vector of records, with columns described once.
class RecordTable : public QAbstractTableModel {
  Q_OBJECT
 public:
  using QAbstractTableModel::QAbstractTableModel;
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant headerData(int section, Qt::Orientation o, int role) const override;
  QVariant data(const QModelIndex& index, int role) const override;

 protected:
  struct Cell {
    QString text;
    QString tooltip;
    QColor background;
  };
  /// Sets the columns and rows (cells[row][column]) and the row ids.
  void setRows(QStringList headers, std::vector<std::vector<Cell>> cells, std::vector<qlonglong> ids,
               std::vector<int> extra = {});
  QStringList headers_;
  std::vector<std::vector<Cell>> cells_;
  std::vector<qlonglong> ids_;
  std::vector<int> extra_;
};

/// The compiles of a frame with their graph and break counts (readFrameCompiles).
struct FrameCompiles {
  RowId frameId = 0;
  std::vector<storage::CompileRecord> compiles;
  std::vector<size_t> graphCounts;  ///< per compile
  std::vector<size_t> breakCounts;  ///< per compile
};
/// Reads what the Compiles table shows (any thread: the reader must be its own).
FrameCompiles readFrameCompiles(const storage::TraceReader& reader, RowId frameId);

/// What the tables under the Compiles table show of one compile (readCompileContents).
struct CompileContents {
  RowId compileId = 0;
  std::vector<storage::GraphRecord> graphs;         ///< serialized text dropped
  std::vector<storage::ArtifactRecord> artifacts;   ///< the Details tab reads them
  std::vector<AotRecord> aot;                       ///< aotRecords(artifacts)
  std::vector<storage::GraphBreakRecord> breaks;
  std::vector<storage::GuardRecord> guards;
  std::string details;                              ///< compileDetailsText(artifacts)
};
/// Reads (and parses) what the tables of a compile show (any thread: the reader must be its own).
CompileContents readCompileContents(const storage::TraceReader& reader, RowId compileId);

class CompilesModel : public RecordTable {
  Q_OBJECT
 public:
  using RecordTable::RecordTable;
  void setFrame(const storage::TraceReader& reader, RowId frameId);
  void setFrame(const FrameCompiles& data);
  const std::vector<storage::CompileRecord>& compiles() const { return compiles_; }

 private:
  std::vector<storage::CompileRecord> compiles_;
};

/// The graphs of a compile: Dynamo's (index 0, 1, ...), then the AOT graphs stored as its
/// artifacts (negative indexes, compile_artifacts.h).
class GraphsModel : public RecordTable {
  Q_OBJECT
 public:
  using RecordTable::RecordTable;
  void setCompile(const storage::TraceReader& reader, RowId compileId);
  void setCompile(std::shared_ptr<const CompileContents> data);
  /// The compile's artifacts, read by the last setCompile (the Details tab shows them).
  const std::vector<storage::ArtifactRecord>& artifacts() const { return data_->artifacts; }
  /// The Details text of the compile (compileDetailsText of its artifacts).
  const std::string& details() const { return data_->details; }

 private:
  std::shared_ptr<const CompileContents> data_ = std::make_shared<CompileContents>();
};

class BreaksModel : public RecordTable {
  Q_OBJECT
 public:
  using RecordTable::RecordTable;
  void setCompile(const storage::TraceReader& reader, RowId compileId);
  void setCompile(const CompileContents& data);
  const std::vector<storage::GraphBreakRecord>& breaks() const { return breaks_; }

 private:
  std::vector<storage::GraphBreakRecord> breaks_;
};

class GuardsModel : public RecordTable {
  Q_OBJECT
 public:
  using RecordTable::RecordTable;
  void setCompile(const storage::TraceReader& reader, RowId compileId);
  void setCompile(const CompileContents& data);
  const std::vector<storage::GuardRecord>& guards() const { return guards_; }

 private:
  std::vector<storage::GuardRecord> guards_;
};

class FailuresModel : public RecordTable {
  Q_OBJECT
 public:
  using RecordTable::RecordTable;
  /// The failing guards that made `compile` happen (from the profiler's report).
  void setCompile(const profiler::ProfileReport& report, const storage::CompileRecord& compile);
  const std::vector<profiler::GuardFailureInfo>& failures() const { return failures_; }

 private:
  std::vector<profiler::GuardFailureInfo> failures_;
};

/// One distinct break of the store, with the compiles that met it.
struct BreakSite {
  explain::BreakGroup group;       ///< kind, location, explanation, hints, stack, counts
  std::vector<RowId> compiles;     ///< compiles that recorded it, in id order
  RowId graphBefore = 0;           ///< compile whose last graph runs up to the break (0 none)
  int graphBeforeIndex = -1;       ///< ... that graph's index
  RowId graphAfter = 0;            ///< compile of the resume function that runs after it (0 none)
  int graphAfterIndex = -1;        ///< ... its first graph's index
};

/// The distinct breaks of a report, with their compiles and the graphs around them (queries
/// the store: call it off the UI thread, store_reports.h does).
std::vector<BreakSite> computeBreakSites(const storage::TraceReader& reader,
                                         const explain::ExplainReport& report);

class BreakGroupsModel : public RecordTable {
  Q_OBJECT
 public:
  using RecordTable::RecordTable;
  void setSites(std::vector<BreakSite> sites);
  const std::vector<BreakSite>& sites() const { return sites_; }

 private:
  std::vector<BreakSite> sites_;
};

/// Functions -> recompiles.
class RecompilesModel : public QAbstractItemModel {
  Q_OBJECT
 public:
  using QAbstractItemModel::QAbstractItemModel;
  void reload(const profiler::ProfileReport& report);

  QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
  QModelIndex parent(const QModelIndex& child) const override;
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation o, int role) const override;

  /// The function and recompile behind an index (recompile null for a function row).
  const profiler::FunctionProfile* function(const QModelIndex& index) const;
  const profiler::Recompile* recompile(const QModelIndex& index) const;

 private:
  std::vector<profiler::FunctionProfile> functions_;
};

}  // namespace dynamo::gui
