// StoreSession: one open trace store, read-only, for the whole inspector.
//
// It owns the TraceReader the models query on the UI thread (small queries: runs, frames,
// compiles of one frame, ...), loads graphs off the UI thread (each load opens its own reader:
// SQLite connections are not shared across threads), and watches the file:
//   - a writer still running (WAL): when the file or its -wal changes and the row counts moved,
//     `changed()` is emitted and the views reload (live refresh, no reopening);
//   - the file deleted while open: `lost()` with a message; the views keep what they read.
// It never writes: not to the store, not beside it (SQLite's read-only connection may create the
// -shm index of a WAL file, as every reader does).
#pragma once

#include <QFuture>
#include <QObject>
#include <QString>
#include <QTimer>

#include <memory>
#include <string>

#include "dynamo/gui/inspect_graph.h"
#include "dynamo/storage/trace_reader.h"

namespace dynamo::gui {

/// Graphs larger than this many nodes are not read at all (the message says so).
inline constexpr int kMaxGraphNodes = 500000;

/// The result of loading one graph.
struct GraphLoad {
  InspectGraphPtr graph;            ///< null on error
  QString error;                    ///< why it could not be loaded
  storage::GraphRecord record;      ///< the row (serialized text dropped)
  double readMs = 0, buildMs = 0;   ///< time to read the row, and to parse and build
};

/// Loads graph `index` of compile `compileId` from the store at `path` (any thread). A negative
/// index is an AOT graph of the compile (compile_artifacts.h), with its partition roles.
GraphLoad loadGraph(const std::string& path, storage::RowId compileId, int index);

/// The message of an exception thrown while opening or reading a store ("summary (hint: ...)").
QString describeError(const std::exception& e);

class StoreSession : public QObject {
  Q_OBJECT
 public:
  /// Opens `path` read-only. Null with `error` set when it cannot be opened (not a store, newer
  /// schema, missing, ...): the TraceReader's message and hint.
  static std::unique_ptr<StoreSession> open(const QString& path, QString& error);
  ~StoreSession() override;

  const storage::TraceReader& reader() const { return *reader_; }
  const QString& path() const { return path_; }
  /// True once the file was found deleted.
  bool lost() const { return lost_; }
  /// A message for a store with nothing to show yet ("holds no runs"), or empty.
  QString emptyMessage() const;
  /// Loads a graph off the UI thread.
  QFuture<GraphLoad> loadGraphAsync(storage::RowId compileId, int index) const;
  /// Polls the file now (the timer does it every `intervalMs`); tests call it directly.
  void poll();
  /// Starts watching (interval in ms).
  void watch(int intervalMs = 500);

 signals:
  /// The store holds new rows (a writer is still running).
  void changed();
  /// The file is gone; the message says what the views still show.
  void lostFile(const QString& message);

 private:
  StoreSession(QString path, std::unique_ptr<storage::TraceReader> reader);
  QString stamp() const;
  QString path_;
  std::unique_ptr<storage::TraceReader> reader_;
  QTimer timer_;
  QString lastStamp_;
  storage::StoreCounts lastCounts_;
  bool lost_ = false;
};

}  // namespace dynamo::gui
