// TraceReader: the read-only queries the tools run on a trace store.
//
// It opens the file read-only (it never creates, upgrades or locks out writers: WAL readers see
// the last committed state while writers go on). Every query returns plain records.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dynamo/storage/records.h"

namespace dynamo::storage {

/// Schema v1-v2: the artifact holding the runtime hits of the cache entries whose compiles had
/// graph breaks (text/plain, one "compile_id hits" line each; the run's newest one counts).
/// Schema v3 keeps them in cache_entry_hits (CacheEntryHitsRecord); entryHits() reads both.
inline constexpr const char* kEntryHitsArtifact = "dynamo.entry_hits";

/// The runtime hits of one run's cache entries (cache_entry_hits, or the v1-v2 artifact).
struct EntryHits {
  std::map<RowId, std::int64_t> byCompile;  ///< compile id -> hits of the entry it made
  bool recorded = false;                    ///< the run has the artifact
};

/// Break occurrences: the one definition every report uses (dynamo-trace breaks, dynamo-explain
/// in every format, dynamo.explain(); docs/explain.md "Occurrence counts").
///
/// One occurrence is one pass of the program through a break site at run time:
///   - a break recorded by a compile that made a cache entry happened on the compiling call and
///     on every later call that hit the entry: 1 + the entry's hits;
///   - a break recorded by a compile that made no entry (skipped, failed, cache limit): 1.
/// A break inside a called function is recorded by every compile that met it: the callee's own
/// (user stack of 1 frame) and each caller's that inlined the callee (its call chain, 2+ frames),
/// up to a skipped outer caller. The passes a chain sees are passes its shorter chains see too
/// (the caller's call runs the callee), while different chains of one length see different
/// passes. So the records form a tree keyed by the call chain, innermost caller first, and a node
/// counts the larger of its own records and the sum of its children: `main` -> `outer` ->
/// `helper`, 5 passes, counts 5 however many of the three compiles recorded it, never their total.
class BreakTally {
 public:
  /// Adds one recorded break: `b` recorded by compile `c`, with the run's entry hits.
  void add(const CompileRecord& c, const GraphBreakRecord& b, const EntryHits& hits);
  /// Adds another tally of the same site (the same run).
  void merge(const BreakTally& other);
  /// Occurrences of the site (see the class comment), at least 1.
  std::int64_t occurrences() const;
  /// Break rows counted (compiles that met the site).
  std::int64_t records() const { return records_; }

 private:
  /// The callers of the site (user stack without its last entry, innermost first) -> passes
  /// seen by the records with that chain.
  std::map<std::vector<std::string>, std::int64_t> passes_;
  std::int64_t records_ = 0;  ///< break rows
};

/// Whether a compile made a cache entry (status ok or graph_break).
bool compileMadeEntry(const CompileRecord& c);

/// Graph breaks that share a kind and a user location, with how often they happened.
struct GraphBreakGroup {
  std::string kind;         ///< graph-break kind name
  SourceLocation location;  ///< user file:line and source line
  std::string explanation;  ///< explanation of the first break in the group
  std::vector<std::string> hints;  ///< hints of the first break in the group
  std::int64_t count = 0;   ///< occurrences (BreakTally), summed over the runs asked for
  std::int64_t records = 0; ///< break rows in the group (compiles that met it)
};

/// Row counts of one run (or of the whole file when runId is 0).
struct StoreCounts {
  std::int64_t runs = 0;           ///< runs
  std::int64_t frames = 0;         ///< frames
  std::int64_t compiles = 0;       ///< compiles
  std::int64_t graphs = 0;         ///< graphs
  std::int64_t graphBreaks = 0;    ///< graph breaks
  std::int64_t guards = 0;         ///< guards
  std::int64_t guardFailures = 0;  ///< guard failures
  std::int64_t code = 0;           ///< code rows
  std::int64_t artifacts = 0;      ///< artifacts
};

/// Read-only view of a trace store file.
class TraceReader {
 public:
  /// Opens `path` read-only. Throws UserError(kTraceStore) naming the file and the fix when it
  /// is missing, not a trace store, newer than this build, or older (upgrade hint).
  static std::unique_ptr<TraceReader> open(const std::string& path);
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  /// The file read.
  const std::string& path() const;
  /// The file's schema version.
  int schemaVersion() const;

  /// Every run, oldest first. A run that did not close has `crash` filled when a crash marker
  /// (merged, or still a file beside the store) says how it ended.
  std::vector<RunRecord> runs() const;
  /// Frames of a run, in id order.
  std::vector<FrameRecord> frames(RowId runId) const;
  /// Compiles of a frame, by attempt.
  std::vector<CompileRecord> compilesOfFrame(RowId frameId) const;
  /// Compiles of a run, in id order.
  std::vector<CompileRecord> compilesOfRun(RowId runId) const;
  /// Graphs captured by a compile, by index.
  std::vector<GraphRecord> graphs(RowId compileId) const;
  /// Graph breaks of a compile, in id order.
  std::vector<GraphBreakRecord> graphBreaks(RowId compileId) const;
  /// Graph breaks grouped by kind and user location, counted as BreakTally says, most frequent
  /// first (runId 0: all runs).
  std::vector<GraphBreakGroup> graphBreakGroups(RowId runId = 0) const;
  /// The runtime hits of a run's cache entries: its cache_entry_hits rows (v3), else its newest
  /// kEntryHitsArtifact.
  EntryHits entryHits(RowId runId) const;
  /// Guards of a compile, in id order.
  std::vector<GuardRecord> guards(RowId compileId) const;
  /// Guard failures of a run in time order (runId 0: all runs).
  std::vector<GuardFailureRecord> guardFailures(RowId runId = 0) const;
  /// Guard failures of one cache entry, in time order.
  std::vector<GuardFailureRecord> guardFailuresOfCompile(RowId compileId) const;
  /// Code rows of a compile (compileId 0: code not tied to a compile), in id order.
  std::vector<CodeRecord> code(RowId runId, RowId compileId) const;
  /// Artifacts of a run, in id order.
  std::vector<ArtifactRecord> artifacts(RowId runId) const;
  /// Artifacts recorded with one compile (its AOT graphs and summary, its dynamic-shapes
  /// report, ...), in id order; none for an unknown compile.
  std::vector<ArtifactRecord> artifactsOfCompile(RowId compileId) const;
  /// The kernels recorded with one compile (TraceWriter::recordKernel), in the order recorded; a
  /// kernel whose metadata cannot be read keeps its code row's name, kind and source.
  std::vector<KernelRecord> kernelsOfCompile(RowId compileId) const;
  /// Row counts of a run, or of the file when runId is 0.
  StoreCounts counts(RowId runId = 0) const;
  /// The result of PRAGMA integrity_check: "ok" when the file is sound.
  std::string integrityCheck() const;

  struct Impl;

 private:
  explicit TraceReader(std::unique_ptr<Impl> impl);
  void readCrash(RunRecord& run) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dynamo::storage
