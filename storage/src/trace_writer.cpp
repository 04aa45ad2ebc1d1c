// TraceWriter: an in-memory queue drained by one background thread that commits batches, or by
// flush() on the caller's thread; whoever commits holds commitMu (see the diagram in
// trace_writer.h and "Durability" in docs/trace-store.md). Opening also merges the crash markers
// of earlier runs and arms this run's (crash_marker.h).
#include "dynamo/storage/trace_writer.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <thread>
#include <variant>

#include "dynamo/common/error.h"
#include "dynamo/storage/trace_store.h"
#include "row_journal.h"
#include "store_file.h"
#include "string_list.h"

namespace dynamo::storage {

namespace {


// The INSERTs of the columns a file of schema `version` has (the test hook writes older ones).
const char* graphBreakInsert(int version) {
  return version >= 3
             ? "INSERT INTO graph_breaks(break_id, run_id, compile_id, kind, user_file, "
               "user_line, source_line, explanation, hints, user_stack, detail) "
               "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
             : "INSERT INTO graph_breaks(break_id, run_id, compile_id, kind, user_file, "
               "user_line, source_line, explanation, hints, user_stack) "
               "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";
}

const char* failureInsert(int version) {
  return version >= 3
             ? "INSERT INTO guard_failures(failure_id, run_id, compile_id, frame_id, guard_id, "
               "time_us, reason, guard_kind, guard_source, property, dim, expected, seen, "
               "user_file, user_line, source_line, caused_compile_id) VALUES (?1, ?2, ?3, ?4, "
               "?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)"
             : "INSERT INTO guard_failures(failure_id, run_id, compile_id, frame_id, guard_id, "
               "time_us, reason) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
}

// The prepared INSERTs, owned by whoever holds commitMu. Prepared once per writer: a commit per
// compile then only binds and steps.
struct Inserts {
  int version;
  sql::Statement frame, compile, phase, graph, graphBreak, guard, failure, code, artifact, runEnd;
  std::optional<sql::Statement> hits;  // v3 and later

  Inserts(sql::Database& db, int fileVersion)
      : version(fileVersion),
        frame(db, "INSERT INTO frames(frame_id, run_id, file, first_line, name) "
                  "VALUES (?1, ?2, ?3, ?4, ?5)"),
        compile(db, "INSERT INTO compiles(compile_id, run_id, frame_id, attempt, status, reason, "
                    "start_time_us, duration_us) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"),
        phase(db, "INSERT INTO compile_phases(compile_id, seq, name, duration_us) "
                  "VALUES (?1, ?2, ?3, ?4)"),
        graph(db, "INSERT INTO graphs(graph_id, run_id, compile_id, graph_index, format, "
                  "serialized, printed, num_nodes, inputs, outputs) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"),
        graphBreak(db, graphBreakInsert(fileVersion)),
        guard(db, "INSERT INTO guards(guard_id, run_id, compile_id, kind, checks, source, "
                  "user_file, user_line, source_line) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"),
        failure(db, failureInsert(fileVersion)),
        code(db, "INSERT INTO code(code_id, run_id, compile_id, kind, language, name, content) "
                 "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"),
        artifact(db, "INSERT INTO artifacts(artifact_id, run_id, compile_id, name, media_type, "
                     "data, time_us) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"),
        runEnd(db, "UPDATE runs SET end_time_us = ?2 WHERE run_id = ?1") {
    if (version >= 3)
      hits.emplace(db, "INSERT OR REPLACE INTO cache_entry_hits(compile_id, run_id, hits, "
                       "time_us) VALUES (?1, ?2, ?3, ?4)");
  }

  void insert(const FrameRecord& r) {
    frame.bind(1, r.id).bind(2, r.runId).bindText(3, r.file).bind(4, r.firstLine)
        .bindText(5, r.name).run();
  }
  void insert(const CompileRecord& r) {
    compile.bind(1, r.id).bind(2, r.runId).bind(3, r.frameId).bind(4, r.attempt)
        .bindText(5, r.status).bindText(6, r.reason).bind(7, r.startTimeUs)
        .bind(8, r.durationUs).run();
    for (size_t i = 0; i < r.phases.size(); ++i)
      phase.bind(1, r.id).bind(2, static_cast<std::int64_t>(i)).bindText(3, r.phases[i].name)
          .bind(4, r.phases[i].durationUs).run();
  }
  void insert(const GraphRecord& r) {
    graph.bind(1, r.id).bind(2, r.runId).bind(3, r.compileId).bind(4, r.index)
        .bindText(5, r.format).bindBlob(6, r.serialized).bindText(7, r.printed)
        .bind(8, r.numNodes).bindText(9, encodeStringList(r.inputs))
        .bindText(10, encodeStringList(r.outputs)).run();
  }
  void insert(const GraphBreakRecord& r) {
    graphBreak.bind(1, r.id).bind(2, r.runId).bind(3, r.compileId).bindText(4, r.kind)
        .bindText(5, r.location.file).bind(6, r.location.line).bindText(7, r.location.sourceLine)
        .bindText(8, r.explanation).bindText(9, encodeStringList(r.hints))
        .bindText(10, encodeStringList(r.userStack));
    if (version >= 3) graphBreak.bindText(11, r.detail);
    graphBreak.run();
  }
  void insert(const GuardRecord& r) {
    guard.bind(1, r.id).bind(2, r.runId).bind(3, r.compileId).bindText(4, r.kind)
        .bindText(5, r.checks).bindText(6, r.source).bindText(7, r.location.file)
        .bind(8, r.location.line).bindText(9, r.location.sourceLine).run();
  }
  void insert(const GuardFailureRecord& r) {
    failure.bind(1, r.id).bind(2, r.runId).bind(3, r.compileId).bindIdOrNull(4, r.frameId)
        .bindIdOrNull(5, r.guardId).bind(6, r.timeUs).bindText(7, r.reason);
    if (version >= 3)
      failure.bindText(8, r.guardKind).bindText(9, r.guardSource).bindText(10, r.property)
          .bind(11, r.dim).bindText(12, r.expected).bindText(13, r.seen)
          .bindText(14, r.location.file).bind(15, r.location.line)
          .bindText(16, r.location.sourceLine).bindIdOrNull(17, r.causedCompileId);
    failure.run();
  }
  void insert(const CacheEntryHitsRecord& r) {
    if (!hits) return;  // an older file has no table for them (the test hook only)
    hits->bind(1, r.compileId).bind(2, r.runId).bind(3, r.hits).bind(4, r.timeUs).run();
  }
  void insert(const CodeRecord& r) {
    code.bind(1, r.id).bind(2, r.runId).bindIdOrNull(3, r.compileId)
        .bindText(4, codeKindName(r.kind)).bindText(5, codeKindLanguage(r.kind))
        .bindText(6, r.name);
    if (r.kind == CodeKind::kOriginalBytecode || r.kind == CodeKind::kTransformedBytecode)
      code.bindBlob(7, r.content);
    else
      code.bindText(7, r.content);
    code.run();
  }
  void insert(const ArtifactRecord& r) {
    artifact.bind(1, r.id).bind(2, r.runId).bindIdOrNull(3, r.compileId).bindText(4, r.name)
        .bindText(5, r.mediaType).bindBlob(6, r.data).bind(7, r.timeUs).run();
  }
  void insert(RowId runId, const RunEnd& r) { runEnd.bind(1, runId).bind(2, r.endTimeUs).run(); }
};

// Inserts the run row and returns its id (synchronously, at open).
RowId insertRun(sql::Database& db, RunRecord& run, int version) {
  const char* sqlV1 =
      "INSERT INTO runs(pid, hostname, argv, python_version, torch_version, dynamo_version, "
      "start_time_us) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
  const char* sqlV2 =
      "INSERT INTO runs(pid, hostname, argv, python_version, torch_version, dynamo_version, "
      "start_time_us, rank, world_size) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";
  sql::Statement insert(db, version >= 2 ? sqlV2 : sqlV1);
  insert.bind(1, run.pid).bindText(2, run.hostname).bindText(3, encodeStringList(run.argv))
      .bindText(4, run.pythonVersion).bindText(5, run.torchVersion).bindText(6, run.dynamoVersion)
      .bind(7, run.startTimeUs);
  if (version >= 2) insert.bind(8, run.rank).bind(9, run.worldSize);
  beginImmediate(db);
  try {
    insert.run();
    db.exec("COMMIT", "committing the run row");
  } catch (...) {
    sqlite3_exec(db.get(), "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  return sqlite3_last_insert_rowid(db.get());
}

// The files "<base>-rows-<N>" (or "-crash-<N>") beside the store, as paths to open.
std::vector<std::string> filesBeside(const std::string& path, const std::string& infix) {
  std::string dir = ".", base = path, dirPrefix;
  if (std::size_t slash = path.rfind('/'); slash != std::string::npos) {
    dir = slash == 0 ? "/" : path.substr(0, slash);
    base = path.substr(slash + 1);
    dirPrefix = path.substr(0, slash + 1);
  }
  std::string prefix = base + infix;
  std::vector<std::string> found;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
          name.find_first_not_of("0123456789", prefix.size()) == std::string::npos)
        found.push_back(dirPrefix + name);
    }
    closedir(d);
  }
  return found;
}

// Writes all of `bytes` to `fd`; false on an error (the file may then end with a partial record,
// which decodeRows ignores).
bool writeAll(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// Merges the crash markers that runs of this store left beside it (crash_marker.h) as their
// "dynamo.crash" artifacts, then removes the marker files. Each marker is merged in its own
// transaction, only for a run that exists, never closed and has no crash artifact yet, so two
// writers opening at once merge it once. Failures leave the marker for the next opener.
void mergeCrashMarkers(sql::Database& db, const std::string& path, RowId newRunId,
                       std::uint32_t& seq) {
  for (const std::string& file : filesBeside(path, "-crash-")) {
    std::ifstream in(file, std::ios::binary);
    std::string text(std::istreambuf_iterator<char>(in), {});
    std::optional<CrashMarker> marker = parseCrashMarker(text);
    // Only the marker of the run it names ("t.db-crash-3" holds run 3).
    if (!marker || file != crashMarkerPath(path, marker->runId)) continue;
    try {
      beginImmediate(db);
      sql::Statement wanted(db, "SELECT count(*) FROM runs WHERE run_id = ?1 AND end_time_us "
                                "IS NULL AND NOT EXISTS (SELECT 1 FROM artifacts WHERE run_id "
                                "= ?1 AND name = 'dynamo.crash')");
      wanted.bind(1, marker->runId);
      if (wanted.step() && wanted.columnInt(0) == 1) {
        sql::Statement insert(db, "INSERT INTO artifacts(artifact_id, run_id, compile_id, name, "
                                  "media_type, data, time_us) VALUES (?1, ?2, ?3, ?4, "
                                  "'text/plain', ?5, ?6)");
        insert.bind(1, (newRunId << 32) | ++seq).bind(2, marker->runId)
            .bindIdOrNull(3, marker->compileId).bindText(4, kCrashArtifactName)
            .bindBlob(5, formatCrashMarker(*marker)).bind(6, marker->timeUs).run();
      }
      db.exec("COMMIT", "merging a crash marker");
      std::remove(file.c_str());
    } catch (const std::exception&) {
      sqlite3_exec(db.get(), "ROLLBACK", nullptr, nullptr, nullptr);
    }
  }
}

}  // namespace

// Row journals of writers that died (row_journal.h): a journal whose lock nobody holds belongs
// to a process that ended without closing its writer. Its rows that the store lacks (those the
// writer thread had not committed) are inserted in one transaction, then the file is removed.
// A journal still locked (its writer is alive) or that cannot be read is left alone.
bool hasRowJournals(const std::string& path) { return !filesBeside(path, "-rows-").empty(); }

void recoverRowJournals(sql::Database& db, const std::string& path, int version) {
  for (const std::string& file : filesBeside(path, "-rows-")) {
    int fd = ::open(file.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {  // its writer is alive
      ::close(fd);
      continue;
    }
    std::string data;
    char buf[1 << 16];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      data.append(buf, static_cast<std::size_t>(n));
    }
    // Whose journal: the run it names must be in this store, with the same pid and start time
    // (else it was left beside a store that was since replaced: dropped, never inserted).
    std::optional<JournalHeader> header = decodeJournalHeader(data);
    std::vector<Row> rows;
    if (header && file == rowJournalPath(path, header->runId)) {
      try {
        sql::Statement run(db, "SELECT pid, start_time_us FROM runs WHERE run_id = ?1");
        run.bind(1, header->runId);
        if (run.step() && run.columnInt(0) == header->pid &&
            run.columnInt(1) == header->startTimeUs) {
          rows = decodeRows(std::string_view(data).substr(kJournalHeaderSize));
          rows.erase(std::remove_if(rows.begin(), rows.end(),
                                    [&](const Row& row) {
                                      return std::visit(
                                          [&](const auto& r) {
                                            if constexpr (std::is_same_v<
                                                              std::decay_t<decltype(r)>, RunEnd>)
                                              return true;
                                            else
                                              return r.runId != header->runId;
                                          },
                                          row);
                                    }),
                     rows.end());
        }
      } catch (const std::exception&) {
        ::close(fd);  // left for the next opener
        continue;
      }
    }
    try {
      if (!rows.empty()) {
        beginImmediate(db);
        try {
          Inserts inserts(db, version);
          for (const Row& row : rows) {
            std::visit(
                [&](const auto& r) {
                  if constexpr (!std::is_same_v<std::decay_t<decltype(r)>, RunEnd>) {
                    try {
                      inserts.insert(r);
                    } catch (const UserError&) {
                      // Already committed by the writer thread (the same id): nothing to add.
                    }
                  }
                },
                row);

          }
        } catch (...) {
          sqlite3_exec(db.get(), "ROLLBACK", nullptr, nullptr, nullptr);
          throw;
        }
        db.exec("COMMIT", "recovering the rows of a writer that stopped");
      }
      std::remove(file.c_str());
    } catch (const std::exception&) {
      // Left for the next opener.
    }
    ::close(fd);  // releases the lock
  }
}

namespace {

// Incremented in the child of every fork(). A writer belongs to the process that opened it: its
// thread does not survive a fork, and SQLite connections must not be used across one.
std::atomic<int> gForkGeneration{0};

int currentForkGeneration() {
  static const bool registered = [] {
    pthread_atfork(nullptr, nullptr, [] { gForkGeneration.fetch_add(1); });
    return true;
  }();
  (void)registered;
  return gForkGeneration.load(std::memory_order_relaxed);
}

}  // namespace

struct TraceWriter::Impl {
  std::string path;
  WriterOptions options;
  int version = 0;
  RowId runId = 0;
  std::int64_t pid = 0;          // the run's, for the row journal's header
  std::int64_t startTimeUs = 0;  // ditto
  sql::Database db;  // once the writer thread runs: used only under commitMu
  std::atomic<std::uint32_t> nextSeq{0};

  mutable std::mutex mu;
  std::condition_variable wake;      // to the writer thread: rows, flush or stop
  std::condition_variable progress;  // from the writer thread: a batch is done
  std::vector<Row> queue;            // guarded by mu
  std::uint64_t enqueued = 0;        // guarded by mu
  std::uint64_t committed = 0;       // rows committed or dropped, guarded by mu
  std::uint64_t realCommitted = 0;   // rows committed, guarded by mu
  std::uint64_t batches = 0;         // guarded by mu
  std::uint64_t dropped = 0;         // guarded by mu
  std::optional<UserError> error;    // first error, guarded by mu
  bool stopping = false;             // guarded by mu
  bool closed = false;               // guarded by mu
  std::thread thread;
  int forkGeneration = 0;  // currentForkGeneration() at open

  // The committing side: whoever holds commitMu (the writer thread or a flush()) uses these.
  std::mutex commitMu;               // taken before mu, never after it
  bool walFull = false;              // set by the WAL hook during a commit, guarded by commitMu
  std::atomic<int> walPages{0};      // frames in the WAL after the last commit (the WAL hook)
  bool checkpointWanted = false;     // guarded by mu: the writer thread should checkpoint
  sql::Database checkpointDb;        // the writer thread's own connection for checkpoints
  // Held by whichever thread checkpoints (SQLite answers a second checkpointer SQLITE_BUSY at
  // once, without a busy handler): a committer past kBlockingCheckpointPages waits here for the
  // writer thread's pass instead of committing on. Taken after commitMu, never before it.
  std::mutex checkpointMu;
  std::optional<Inserts> inserts;    // the prepared INSERTs, guarded by commitMu
  std::vector<Row> batch;            // rows being committed, guarded by commitMu

  // The row journal (row_journal.h), from the first persist() on. Lock order: journalMu, then mu.
  bool journaling = false;           // guarded by mu: record*() encode their rows
  std::string journalPending;        // guarded by mu: encoded rows not yet written
  std::mutex journalMu;
  int journalFd = -1;                // guarded by journalMu; holds the file's lock (flock)
  std::uint64_t journalBytes = 0;    // guarded by journalMu: bytes in the file
  bool journalBroken = false;        // guarded by journalMu: persist() commits instead

  bool inheritedThroughFork() const {
    return gForkGeneration.load(std::memory_order_relaxed) != forkGeneration;
  }

  [[noreturn]] void failInherited() const {
    throw UserError(UserErrorKind::kTraceStore,
                    detail::concat("trace store '", path,
                                   "': this writer was opened by the parent process before "
                                   "fork()"),
                    SourceLocation{}, "its writer thread and SQLite connection stay with the parent",
                    "open a new writer in the child process");
  }

  RowId allocate() {
    std::uint32_t seq = nextSeq.fetch_add(1, std::memory_order_relaxed) + 1;
    return (runId << 32) | seq;
  }

  template <typename R>
  RowId enqueue(R record) {
    record.id = allocate();
    record.runId = runId;
    RowId id = record.id;
    if (inheritedThroughFork()) return id;  // the parent's writer: the child's rows go nowhere
    std::lock_guard<std::mutex> lock(mu);
    if (closed)
      throw UserError(UserErrorKind::kTraceStore,
                      detail::concat("trace store '", path, "': record after close()"), {},
                      "the writer was closed", "keep the writer open while the program records");
    ++enqueued;
    if (error || queue.size() >= options.maxQueuedRows) {
      if (!error)
        error.emplace(UserErrorKind::kTraceStore,
                      detail::concat("trace store '", path, "': rows were dropped: more than ",
                                     options.maxQueuedRows, " rows waited for the disk"),
                      SourceLocation{}, "the disk is slower than the program records",
                      "write the trace to a faster disk, or record less");
      ++dropped;
      ++committed;  // accounted for, so flush() does not wait for it
      return id;
    }
    queue.push_back(std::move(record));
    if (journaling) encodeRow(journalPending, queue.back());
    if (queue.size() == 1 || queue.size() == options.batchRows) wake.notify_one();
    return id;
  }

  void commitBatch(Inserts& inserts, const std::vector<Row>& batch) {
    beginImmediate(db);
    try {
      for (const Row& row : batch) {
        std::visit(
            [&](const auto& r) {
              if constexpr (std::is_same_v<std::decay_t<decltype(r)>, RunEnd>)
                inserts.insert(runId, r);
              else
                inserts.insert(r);
            },
            row);
      }
      db.exec("COMMIT", "committing a batch");
    } catch (...) {
      sqlite3_exec(db.get(), "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }

  // Takes the waiting rows and commits them, on whichever thread calls it (the writer thread, or
  // a flush() that commits itself instead of waking the writer thread: one commit, no thread
  // hand-off). Called with commitMu held and `lock` (on mu) held; returns with both held.
  void commitQueued(std::unique_lock<std::mutex>& lock) {
    if (queue.empty()) return;
    batch.swap(queue);
    lock.unlock();
    std::optional<UserError> failure;
    try {
      if (!inserts) inserts.emplace(db, version);
      commitBatch(*inserts, batch);
      if (walPages.load(std::memory_order_relaxed) >= kBlockingCheckpointPages) blockingCheckpoint();
    } catch (const UserError& e) {
      failure = e;
    } catch (const std::exception& e) {
      failure.emplace(UserErrorKind::kTraceStore,
                      detail::concat("trace store '", path, "': writing failed: ", e.what()));
    }
    lock.lock();
    if (walFull) {
      walFull = false;
      checkpointWanted = true;
      wake.notify_one();
    }
    committed += batch.size();
    // Everything recorded is in the store: the encoded rows waiting for a persist() are too.
    if (committed == enqueued && !failure && !error) journalPending.clear();
    if (failure) {
      dropped += batch.size();
      if (!error) error = std::move(failure);
    } else {
      realCommitted += batch.size();
      ++batches;
    }
    batch.clear();
    progress.notify_all();
  }

  // SQLite's automatic checkpoint would run in whichever thread commits, and it syncs the file:
  // with a commit per compile that would put an fsync on the compile's critical path every few
  // megabytes. The writer's connection reports the WAL size instead (walHook), and the writer
  // thread checkpoints on a connection of its own (PASSIVE: never blocks a commit, ours or
  // another process's). The WAL file is reused from its start once a checkpoint has copied every
  // frame before the next commit begins. If commits come faster than the writer thread can
  // checkpoint and the WAL passes kBlockingCheckpointPages (16 MB), the committing thread
  // checkpoints after its commit, as SQLite's automatic checkpoint would, and the writer thread
  // stays out of its way: the WAL stays bounded.
  static constexpr int kCheckpointPages = 1000;  // SQLite's default autocheckpoint threshold
  static constexpr int kBlockingCheckpointPages = TraceWriter::kWalLimitPages;

  static int walHook(void* self, sqlite3*, const char*, int pages) {
    auto* impl = static_cast<Impl*>(self);  // commitMu held: called inside a commit
    impl->walPages.store(pages, std::memory_order_relaxed);
    if (pages >= kCheckpointPages) impl->walFull = true;
    return SQLITE_OK;
  }

  // The committing thread's checkpoint, commitMu held (no commit can start meanwhile): waits
  // for a pass of the writer thread that is running, then copies what is left, so the next
  // commit starts the WAL over. Without the wait its checkpoint met SQLITE_BUSY whenever the
  // writer thread's pass was running, and commits went on growing the WAL for as long as that
  // pass took (under load: 30 to 105 MB instead of 16).
  void blockingCheckpoint() {
    std::lock_guard<std::mutex> checkpointLock(checkpointMu);
    int logFrames = 0, copied = 0;
    int rc = sqlite3_wal_checkpoint_v2(db.get(), nullptr, SQLITE_CHECKPOINT_PASSIVE, &logFrames,
                                       &copied);
    // A reader of another connection still on older frames keeps them (copied < logFrames):
    // the WAL cannot start over until it moves on; the next commit tries again.
    if (rc == SQLITE_OK && copied == logFrames) walPages.store(0, std::memory_order_relaxed);
  }

  void checkpoint() {
    std::unique_lock<std::mutex> checkpointLock(checkpointMu, std::try_to_lock);
    if (!checkpointLock.owns_lock()) return;  // the committing thread is checkpointing
    try {
      if (checkpointDb.get() == nullptr) {
        checkpointDb = sql::Database(path, SQLITE_OPEN_READWRITE, options.busyTimeoutMs);
        // A connection learns that the file is in WAL mode when it first reads it.
        checkpointDb.queryInt("PRAGMA user_version");
      }
      // Past kBlockingCheckpointPages the committing thread checkpoints (commitQueued); a pass
      // here would only hold the checkpoint lock it needs.
      if (walPages.load(std::memory_order_relaxed) >= kBlockingCheckpointPages) return;
      // Passes until one finds no frame that the previous did not copy (a few at most).
      int previousLog = -1;
      for (int pass = 0; pass < 4; ++pass) {
        if (pass > 0 && walPages.load(std::memory_order_relaxed) >= kBlockingCheckpointPages)
          break;
        int logFrames = 0, copied = 0;
        int rc = sqlite3_wal_checkpoint_v2(checkpointDb.get(), nullptr,
                                           SQLITE_CHECKPOINT_PASSIVE, &logFrames, &copied);
        if (rc != SQLITE_OK || copied < logFrames || logFrames == previousLog) break;
        previousLog = logFrames;
      }
    } catch (const std::exception&) {
      // A failed checkpoint loses nothing: the rows are in the WAL, and the next one retries.
    }
  }

  void run() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      wake.wait(lock, [&] { return stopping || checkpointWanted || !queue.empty(); });
      if (checkpointWanted) {
        checkpointWanted = false;
        lock.unlock();
        checkpoint();
        lock.lock();
        continue;
      }
      if (queue.empty() && stopping) break;
      // Let a batch fill up (a flush() commits by itself).
      wake.wait_for(lock, options.maxDelay, [&] {
        return stopping || checkpointWanted || queue.size() >= options.batchRows;
      });
      if (checkpointWanted || queue.empty()) continue;
      // Lock order: commitMu, then mu. A flush() may have committed the rows meanwhile.
      lock.unlock();
      {
        std::lock_guard<std::mutex> commitLock(commitMu);
        lock.lock();
        commitQueued(lock);
        lock.unlock();
      }
      truncateJournalIfCommitted();
      lock.lock();
    }
  }

  // Empties the journal file once every row recorded is in the store (called by the writer
  // thread after a batch, without mu). A persist() that took rows before the check writes them
  // after the truncation: they are committed already, and recovery skips rows the store has.
  void truncateJournalIfCommitted() {
    std::lock_guard<std::mutex> journalLock(journalMu);
    if (journalFd < 0 || journalBytes == 0) return;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (committed != enqueued || dropped != 0) return;
    }
    if (ftruncate(journalFd, static_cast<off_t>(kJournalHeaderSize)) == 0) journalBytes = 0;
  }

  // Creates this run's journal, locked (the lock tells a recovering opener that this writer is
  // alive; it goes with the process), emptied and headed. An opener may have removed the file
  // between our open and our lock (it found it unlocked and empty): then it is made again.
  int openJournal() {
    std::string file = rowJournalPath(path, runId);
    for (int attempt = 0; attempt < 5; ++attempt) {
      int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0) return -1;
      struct stat opened {}, named {};
      if (flock(fd, LOCK_EX | LOCK_NB) != 0 || fstat(fd, &opened) != 0) {
        ::close(fd);
        return -1;
      }
      if (stat(file.c_str(), &named) != 0 || named.st_ino != opened.st_ino ||
          named.st_dev != opened.st_dev) {
        ::close(fd);
        continue;
      }
      if (ftruncate(fd, 0) != 0 || !writeAll(fd, encodeJournalHeader({runId, pid, startTimeUs}))) {
        ::close(fd);
        return -1;
      }
      return fd;
    }
    return -1;
  }

  // Makes every row recorded before the call survive the process ending: one write() of the
  // encoded rows to the journal (no SQLite commit, no fsync). The first call commits instead
  // (flush) and turns the journal on; so does any call once the journal cannot be written.
  void persist() {
    if (inheritedThroughFork()) failInherited();
    // journalMu from the swap to the write: a persist() returns only once every row recorded
    // before it is written, also those another thread's persist() took first.
    std::unique_lock<std::mutex> journalLock(journalMu);
    if (journalBroken) {
      journalLock.unlock();
      return flush();
    }
    std::string bytes;
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (error) throw *error;
      first = !journaling;
      journaling = true;  // rows recorded from now on are encoded; flush() commits the rest
      bytes.swap(journalPending);
    }
    if (first) {
      journalLock.unlock();
      return flush();
    }
    if (bytes.empty()) return;  // nothing new, or the writer thread committed it meanwhile
    if (journalFd < 0 && !journalBroken) {
      journalFd = openJournal();
      if (journalFd < 0) journalBroken = true;
    }
    if (!journalBroken && writeAll(journalFd, bytes)) {
      journalBytes += bytes.size();
      return;
    }
    journalBroken = true;
    journalLock.unlock();
    {
      std::lock_guard<std::mutex> lock(mu);
      journaling = false;
      journalPending.clear();
    }
    flush();  // commits every row recorded before the call
  }

  // Blocks until every row enqueued before the call is committed. The caller commits them
  // itself (under commitMu, after any batch the writer thread has in flight), which is what
  // makes a commit per compile cheap: no wake-up of the writer thread on the critical path.
  void flush() {
    if (inheritedThroughFork()) failInherited();
    std::unique_lock<std::mutex> lock(mu);
    std::uint64_t target = enqueued;
    if (committed < target) {
      lock.unlock();
      std::lock_guard<std::mutex> commitLock(commitMu);
      lock.lock();
      if (committed < target) commitQueued(lock);
      // Rows recorded before the call are committed now: those the writer thread had in flight
      // finished before commitMu was ours, and the rest were in the queue.
      DYNAMO_INTERNAL_ASSERT(committed >= target, "flush left rows behind: ", committed, " < ",
                             target);
    }
    if (error) throw *error;
  }
};

TraceWriter::TraceWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<TraceWriter> TraceWriter::open(const std::string& path, RunRecord run,
                                               WriterOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->forkGeneration = currentForkGeneration();
  impl->path = path;
  impl->options = options;
  if (impl->options.batchRows == 0) impl->options.batchRows = 1;
  // The queue and the writer thread's batch swap buffers; with this reserve the hot path does
  // not allocate for the queue while the disk keeps up.
  impl->queue.reserve(std::min<std::size_t>(impl->options.batchRows, 4096));
  int target = options.schemaVersionForTesting > 0 ? options.schemaVersionForTesting
                                                   : kSchemaVersion;
  impl->db = openStoreForWriting(path, target, options.busyTimeoutMs, impl->version);
  if (run.pid == 0) run.pid = static_cast<std::int64_t>(getpid());
  if (run.startTimeUs == 0) run.startTimeUs = nowMicros();
  if (run.hostname.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) == 0) run.hostname = host;
  }
  impl->runId = insertRun(impl->db, run, impl->version);
  impl->pid = run.pid;
  impl->startTimeUs = run.startTimeUs;
  DYNAMO_INTERNAL_ASSERT(impl->runId > 0 && impl->runId < (RowId{1} << 31),
                         "run id out of range: ", impl->runId);
  // Replaces SQLite's automatic checkpoint (see Impl::walHook).
  sqlite3_wal_hook(impl->db.get(), &Impl::walHook, impl.get());
  std::uint32_t seq = 0;
  mergeCrashMarkers(impl->db, path, impl->runId, seq);
  impl->nextSeq.store(seq);
  recoverRowJournals(impl->db, path, impl->version);
  armCrashMarker(path, impl->runId);
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<TraceWriter>(new TraceWriter(std::move(impl)));
}

TraceWriter::~TraceWriter() {
  if (impl_->inheritedThroughFork()) {
    // Destroying the parent's thread handle or connection here would abort or damage the file.
    (void)impl_.release();
    return;
  }
  try {
    close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dynamo: warning: %s\n", e.what());
  }
}

RowId TraceWriter::runId() const { return impl_->runId; }
const std::string& TraceWriter::path() const { return impl_->path; }
int TraceWriter::schemaVersion() const { return impl_->version; }

RowId TraceWriter::recordFrame(FrameRecord frame) { return impl_->enqueue(std::move(frame)); }
RowId TraceWriter::recordCompile(CompileRecord compile) {
  if (compile.startTimeUs == 0) compile.startTimeUs = nowMicros();
  return impl_->enqueue(std::move(compile));
}
RowId TraceWriter::recordGraph(GraphRecord graph) { return impl_->enqueue(std::move(graph)); }
RowId TraceWriter::recordGraphBreak(GraphBreakRecord graphBreak) {
  return impl_->enqueue(std::move(graphBreak));
}
RowId TraceWriter::recordGuard(GuardRecord guard) { return impl_->enqueue(std::move(guard)); }
RowId TraceWriter::recordGuardFailure(GuardFailureRecord failure) {
  if (failure.timeUs == 0) failure.timeUs = nowMicros();
  return impl_->enqueue(std::move(failure));
}
RowId TraceWriter::recordCacheEntryHits(CacheEntryHitsRecord hits) {
  if (hits.timeUs == 0) hits.timeUs = nowMicros();
  return impl_->enqueue(std::move(hits));
}
RowId TraceWriter::recordCode(CodeRecord code) { return impl_->enqueue(std::move(code)); }
RowId TraceWriter::recordArtifact(ArtifactRecord artifact) {
  if (artifact.timeUs == 0) artifact.timeUs = nowMicros();
  return impl_->enqueue(std::move(artifact));
}

void TraceWriter::flush() { impl_->flush(); }
void TraceWriter::persist() { impl_->persist(); }

void TraceWriter::close() {
  if (impl_->inheritedThroughFork()) impl_->failInherited();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->closed) return;
  }
  // The run-end row goes through the queue so that it commits after every other row.
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    ++impl_->enqueued;
    if (impl_->error) {
      ++impl_->committed;
      ++impl_->dropped;
    } else {
      impl_->queue.push_back(RunEnd{nowMicros()});
      impl_->wake.notify_one();
    }
  }
  std::optional<UserError> failure;
  try {
    impl_->flush();
  } catch (const UserError& e) {
    failure = e;
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->closed = true;
    impl_->stopping = true;
    impl_->wake.notify_one();
  }
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->inserts.reset();  // statements before their connection
  impl_->checkpointDb.close();
  impl_->db.close();
  if (impl_->journalFd >= 0) {
    // Every row is in the store (else the journal stays for a recovering opener).
    if (!failure) std::remove(rowJournalPath(impl_->path, impl_->runId).c_str());
    ::close(impl_->journalFd);
    impl_->journalFd = -1;
  }
  disarmCrashMarker(impl_->runId);
  if (failure) throw *failure;
}

void TraceWriter::noteCrashStage(CrashStage stage, RowId compileId) {
  if (!impl_->inheritedThroughFork()) storage::noteCrashStage(stage, compileId);
}

WriterStats TraceWriter::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return {impl_->enqueued, impl_->realCommitted, impl_->batches, impl_->dropped};
}

}  // namespace dynamo::storage
