// Graphviz layout off the UI thread: each layout runs in a dynamo-inspect-layout process
// (Graphviz is neither thread-safe nor interruptible), so a layout is cancelled by killing its
// process, and the UI thread only writes DOT and reads positions back through QProcess signals.
// Results are cached by a hash of the DOT text (which names the graph, via its hash, and what is
// expanded) in the inspector's own cache directory, never beside the user's store.
//
//   GraphView --request(dot)--> LayoutEngine --cache hit--> finished (next event-loop turn)
//                                    \--QProcess dynamo-inspect-layout (stdin DOT, stdout positions)
//                                        --finished--> parseLayout --> cache.put --> finished
#pragma once

#include <QObject>
#include <QProcess>
#include <QString>
#include <QTimer>

#include <memory>
#include <optional>
#include <string>

#include "dynamo/gui/visible_graph.h"

namespace dynamo::gui {

/// Layout results on disk: one file per key under a directory of the inspector's own
/// ($DYNAMO_INSPECT_CACHE, else the user's cache location + "/dynamo-inspect/layouts").
class LayoutCache {
 public:
  explicit LayoutCache(QString dir = defaultDir());
  static QString defaultDir();
  /// The key of a DOT text (SHA-1 of the layout format version and the text).
  static std::string keyOf(const std::string& dot);
  /// The cached layout output, if any.
  std::optional<std::string> get(const std::string& key) const;
  /// Whether a layout with this key is cached (no read).
  bool contains(const std::string& key) const;
  /// Stores a layout output (written to a temporary file and renamed: safe across processes).
  /// A cache that cannot be written is skipped silently: it only saves time.
  void put(const std::string& key, const std::string& text) const;
  const QString& dir() const { return dir_; }

 private:
  QString dir_;
};

/// Runs layouts, one at a time: a new request cancels the one running.
class LayoutEngine : public QObject {
  Q_OBJECT
 public:
  /// `program`: the dynamo-inspect-layout executable (locateLayoutProgram() by default).
  explicit LayoutEngine(QString program = locateLayoutProgram(),
                        std::shared_ptr<LayoutCache> cache = std::make_shared<LayoutCache>(),
                        QObject* parent = nullptr);
  ~LayoutEngine() override;

  /// $DYNAMO_INSPECT_LAYOUT, else dynamo-inspect-layout beside the running program, else the
  /// installed one.
  static QString locateLayoutProgram();

  /// Starts laying out `dot`; returns the request's ticket. Answers with finished() or failed()
  /// on a later turn of the event loop, never synchronously.
  int request(const std::string& dot);
  /// Kills the running layout (canceled() is emitted for it).
  void cancel();
  /// True while a layout process runs.
  bool busy() const;
  /// Layouts that took longer than this are killed and reported (ms).
  void setTimeoutMs(int ms) { timeoutMs_ = ms; }
  /// The cache key of the running layout ("" when none).
  const std::string& runningKey() const { return running_ ? runningKey_ : kNoKey; }
  /// Counters, for tests and the status bar.
  int cacheHits() const { return hits_; }
  int processRuns() const { return runs_; }

  /// Lays `dot` out in the calling thread, waiting for the process (export mode, no UI).
  /// False with `error` set when it fails.
  static bool layoutBlocking(const QString& program, LayoutCache* cache, const std::string& dot,
                             LayoutResult& out, QString& error, int timeoutMs = 60000);

 signals:
  void finished(int ticket, std::shared_ptr<const LayoutResult> result, bool fromCache);
  void failed(int ticket, const QString& message);
  void canceled(int ticket);

 private:
  void onProcessFinished(int exitCode, QProcess::ExitStatus status);
  void onTimeout();
  void stopProcess();

  QString program_;
  std::shared_ptr<LayoutCache> cache_;
  QProcess* process_ = nullptr;
  QTimer timeout_;
  int timeoutMs_ = 30000;
  int ticket_ = 0;
  int running_ = 0;          ///< ticket of the running process, 0 when none
  std::string runningKey_;
  int hits_ = 0, runs_ = 0;
  static inline const std::string kNoKey;
};

/// Lays out, in the background and one at a time, views the user is likely to open next (the
/// graph view asks for the expansions of the largest collapsed modules on screen), so that the
/// click finds them in the cache. A process of its own (LayoutEngine), the same cache; the view
/// stops it whenever it needs a layout of its own, unless this one is laying out that very view.
class LayoutPrefetcher : public QObject {
  Q_OBJECT
 public:
  LayoutPrefetcher(QString program, std::shared_ptr<LayoutCache> cache, QObject* parent = nullptr);
  /// Replaces the queue with these DOT texts (in order); those already cached are skipped.
  void prefetch(std::vector<std::string> dots);
  /// Stops the running layout and empties the queue.
  void stop();
  /// Whether the layout with this cache key is running now.
  bool laysOut(const std::string& key) const { return !key.empty() && engine_->runningKey() == key; }
  /// Layouts run and stored in the cache so far (tests).
  int done() const { return done_; }

 signals:
  /// The layout with this key ended: it is in the cache now, unless it failed.
  void ready(const std::string& key);

 private:
  void next();
  std::shared_ptr<LayoutCache> cache_;
  LayoutEngine* engine_;
  std::vector<std::string> queue_;
  std::string current_;  ///< key of the running layout
  int ticket_ = 0;
  int done_ = 0;
};

}  // namespace dynamo::gui
