// TraceWriter: records what the compiler does into a trace store, off the hot path.
//
//   caller threads                      writer thread (one per TraceWriter)
//   --------------                      -----------------------------------
//   recordX(row) --> [ queue ] -------> BEGIN IMMEDIATE; INSERT ... x N; COMMIT
//   flush() --- commits the queue itself, on the caller's thread (after any batch in flight)
//   persist() - one write() of the rows recorded since the last one to "<store>-rows-<run>"
//               (the row journal, emptied after each batch; replayed by the next opener if the
//               process dies first)
//
// record*() only assigns an id and appends to an in-memory queue: it never touches the disk and
// never throws for I/O problems. A batch is committed by the writer thread when batchRows rows
// are waiting or when the oldest has waited maxDelay, or by flush() at once (the compiler flushes
// after every compile, so a compile is in the store before its code runs; since the row journal
// it persist()s instead, see below). The writer thread
// also checkpoints the WAL, on a connection of its own. A row is *acknowledged* once a flush()
// that began after it was enqueued has returned: it is then in the WAL, and survives the process
// being killed (not necessarily a power loss: synchronous=NORMAL).
//
// open() also arms a fatal-signal handler that leaves a crash marker beside the store, and merges
// the markers that crashed runs left into the store (crash_marker.h); close() disarms it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "dynamo/storage/crash_marker.h"
#include "dynamo/storage/records.h"

namespace dynamo::storage {

/// Tuning knobs of a writer. The defaults suit a compiler writing a few thousand rows a second.
struct WriterOptions {
  std::size_t batchRows = 512;                          ///< commit once this many rows wait
  std::chrono::milliseconds maxDelay{100};              ///< ...or once the oldest waited this long
  std::size_t maxQueuedRows = std::size_t{1} << 20;     ///< beyond this, rows are dropped (error)
  int busyTimeoutMs = 30000;                            ///< wait this long for another writer
  int schemaVersionForTesting = 0;                      ///< test hook: create at this older version
};

/// Counters of a writer, for tests and the `dynamo-trace` CLI.
struct WriterStats {
  std::uint64_t enqueued = 0;   ///< rows handed to record*()
  std::uint64_t committed = 0;  ///< rows committed to the file
  std::uint64_t batches = 0;    ///< transactions committed
  std::uint64_t dropped = 0;    ///< rows lost to an error or a full queue
};

/// Writes one run into a trace store file. Thread-safe: record*() may be called from any thread.
class TraceWriter {
 public:
  /// Opens (creating or upgrading) the store at `path` and records `run` synchronously (this is
  /// the only call that waits for the disk besides flush/close). Throws UserError(kTraceStore)
  /// naming the file and the fix when the path is unusable; the file is then left untouched.
  static std::unique_ptr<TraceWriter> open(const std::string& path, RunRecord run,
                                           WriterOptions options = {});
  /// Closes the writer (see close()); errors are printed to stderr, never thrown.
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  /// The WAL's bound, in pages (SQLite's 4096 bytes; a WAL frame is a page and 24 bytes): a
  /// commit that leaves at least this many pages in the WAL checkpoints before it returns (after
  /// any checkpoint of the writer thread that is running), so the `-wal` file never holds more
  /// than this many pages plus one commit's, as long as no reader of another connection keeps a
  /// read transaction open on older pages (docs/trace-store.md, "Checkpoints").
  static constexpr int kWalLimitPages = 4000;

  /// The id of this writer's run.
  RowId runId() const;
  /// The file written.
  const std::string& path() const;
  /// The schema version of the file as written (kSchemaVersion unless the test hook is used).
  int schemaVersion() const;

  /// Enqueue a row and return its id. Never blocks on I/O, never throws for I/O errors (a failed
  /// batch is reported by the next flush()).
  RowId recordFrame(FrameRecord frame);
  RowId recordCompile(CompileRecord compile);  ///< see recordFrame
  RowId recordGraph(GraphRecord graph);        ///< see recordFrame
  RowId recordGraphBreak(GraphBreakRecord graphBreak);  ///< see recordFrame
  RowId recordGuard(GuardRecord guard);        ///< see recordFrame
  RowId recordGuardFailure(GuardFailureRecord failure);  ///< see recordFrame
  RowId recordCode(CodeRecord code);           ///< see recordFrame
  /// Records (or replaces) the hits of a compile's cache entry; see recordFrame. A file of an
  /// older schema than 3 (the test hook) drops them.
  RowId recordCacheEntryHits(CacheEntryHitsRecord hits);
  RowId recordArtifact(ArtifactRecord artifact);  ///< see recordFrame
  /// Records a kernel (records.h, KernelRecord): its source as a code row, the rest as a
  /// kKernelArtifact artifact naming that row. Returns the code row's id; see recordFrame.
  RowId recordKernel(KernelRecord kernel);
  /// Records the measured run time of the kernel whose code row is `kernelId` (recordKernel's
  /// result) of compile `compileId`: a kKernelRunArtifact artifact, which kernelsOfCompile reads
  /// into KernelRecord::runUs and runCalls (the last one of a kernel wins); see recordFrame.
  RowId recordKernelRunTime(RowId compileId, RowId kernelId, std::int64_t runUs, int calls);

  /// Blocks until every row enqueued before the call is committed, committing them on the
  /// calling thread (one transaction; no fsync unless the WAL outgrew its checkpoints). Throws
  /// UserError(kTraceStore) if any row was lost since the writer opened (disk full, queue
  /// overflow, ...).
  void flush();
  /// Makes every row enqueued before the call survive the process ending (SIGKILL, a crash,
  /// os._exit; not a power loss) without committing it: one write() appends the rows to the
  /// store's row journal "<store>-rows-<run>" (no fsync). The writer thread's next batch commits
  /// them as usual and the journal is emptied; if the process dies first, the next writer or
  /// reader that opens the store inserts them. The first call (and any call once the journal
  /// cannot be written) commits like flush() instead. Throws like flush(). The compiler calls it
  /// after every compile: a compile's rows then cost one write() before its code runs.
  void persist();
  /// Flushes, records the run's end time, stops the writer thread and closes the file.
  /// Idempotent. Throws like flush(). record*() after close() throws UserError.
  void close();

  /// Current counters.
  WriterStats stats() const;

  /// Tells the crash marker what runs next (crash_marker.h): kFirstCall with the compile whose
  /// code is about to run for the first time. Two atomic stores; no I/O.
  void noteCrashStage(CrashStage stage, RowId compileId);

  struct Impl;

 private:
  explicit TraceWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dynamo::storage
