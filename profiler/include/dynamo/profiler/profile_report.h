// The recompilation profiler's report: per compiled function, how many compiles and why each
// recompile happened, cache-limit hits, compile time, and suggestions for the known patterns.
// Pure functions over the trace store, rendered in dynamo::explain's formats.
//
//   TraceReader --buildProfileReport--> ProfileReport --renderProfile(format)--> text
//
// A recompile's guard failures are the store's guard_failures rows that name it
// (caused_compile_id, schema v3), each with the failing guard's kind, source, what differed,
// expected and seen, and the user line that created the guard, as the guard itself recorded
// them. A store of schema v1-v2 joins them by time and has only the reason text.
//
// dynamo.profile_recompiles() (python/dynamo/profiling.py) records into a store and renders this
// report: it asks for the compiles of a time window (ProfileWindow) and writes the calls that
// ran eagerly after a cache-limit hit as the kEagerRunsArtifact artifact.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dynamo/explain/explain_report.h"
#include "dynamo/explain/format.h"
#include "dynamo/storage/trace_reader.h"

namespace dynamo::profiler {

using storage::RowId;

/// A guard failure, as the guard recorded it (trace store schema v3; an older store has only
/// the reason, and the kind, source and line of the guard row).
struct GuardFailureInfo {
  std::string reason;       ///< the reason, e.g. "tensor 'x' size mismatch at dim 0: expected..."
  std::string guardKind;    ///< TENSOR_MATCH, EQUALS_MATCH, ID_MATCH, ... ("" when unknown)
  std::string source;       ///< the value checked: "x", "G['SCALE']", "n"
  std::string property;     ///< what differed: "size", "stride", "dtype", "value", "object", ...
  int dim = -1;             ///< the dimension for size/stride mismatches, else -1
  std::string expected;     ///< the value the cache entry was compiled for
  std::string seen;         ///< the value of this call
  SourceLocation createdAt; ///< the user line that made the guard necessary
  RowId failedEntry = 0;    ///< the cache entry (compile id) whose guard failed
};

/// The artifact holding the calls that ran eagerly after a cache-limit hit (text/plain, one
/// "compile_id calls" line per cache_limit compile; the run's newest such artifact counts),
/// written by dynamo.profile_recompiles(), which counts them.
inline constexpr const char* kEagerRunsArtifact = "dynamo.eager_runs";

/// One recompile (attempt >= 1) or cache-limit hit.
struct Recompile {
  RowId compileId = 0;                     ///< the compile's row
  int attempt = 0;                         ///< the compile's attempt
  std::string status;                      ///< "ok", "graph_break", "cache_limit", ...
  std::int64_t durationUs = 0;             ///< its compile time
  std::vector<GuardFailureInfo> failures;  ///< why no entry matched, newest entry first
  std::int64_t eagerRuns = -1;             ///< cache_limit: calls run eagerly after it, -1 unknown
};

/// A concrete suggestion for a known recompile pattern.
struct Suggestion {
  std::string id;           ///< "changing-size", "shape-guard", "global-rebound", "varying-int", "varying-float", ...
  std::string message;      ///< what happens and what to do
  SourceLocation where;     ///< the user line to change (the guard's creation), may be unknown
};

/// One compiled function.
struct FunctionProfile {
  std::string name;                       ///< co_qualname
  std::string file;                       ///< co_filename
  int firstLine = 0;                      ///< co_firstlineno
  int compiles = 0;                       ///< compile attempts (cache-limit hits included)
  std::vector<Recompile> recompiles;      ///< attempts >= 1, in order
  int cacheLimitHits = 0;                 ///< compiles refused by cache_size_limit
  int entriesAtLimit = 0;                 ///< compiled entries when the limit was hit
  std::int64_t compileUs = 0;             ///< total compile time
  std::int64_t eagerRuns = -1;            ///< calls run eagerly after cache-limit hits, -1 unknown
  std::vector<Suggestion> suggestions;    ///< for the patterns found
  /// Compiles of its resume functions ("<resume in f>", nested ones too: the code that runs the
  /// rest of f after a graph break), counted with f; a resume function without recompiles is
  /// not listed on its own (see buildProfileReport).
  int resumeCompiles = 0;
  int resumeFunctions = 0;                ///< how many resume functions those compiles were of
  /// What an AOT backend compiled per input signature for its entries with dynamic sizes (once
  /// per distinct input sizes, on calls: no recompile of the function), in order.
  std::vector<explain::AotSizeCompile> backendCompiles;
  std::int64_t resumeCompileUs = 0;       ///< their compile time (not in compileUs)
  int recompileCount() const;             ///< recompiles that compiled (cache-limit hits excluded)
  int totalCompiles() const { return compiles + resumeCompiles; }  ///< own + resume functions'
};

/// One run.
struct RunProfile {
  storage::RunRecord run;                  ///< who ran it
  std::vector<FunctionProfile> functions;  ///< most compiles first, then first-compile order
  std::int64_t compiles = 0;               ///< compiles
  std::int64_t recompiles = 0;             ///< recompiles (cache-limit hits excluded)
  std::int64_t cacheLimitHits = 0;         ///< cache-limit hits
  std::int64_t compileUs = 0;              ///< total compile time
};

/// The report over a store.
struct ProfileReport {
  std::string storePath;         ///< the file read
  std::vector<RunProfile> runs;  ///< oldest first
};

/// Which compiles a report covers: those that ended in [sinceUs, untilUs] (a bound of 0 is
/// open), with the guard failures recorded in that window. The compiles before the window still
/// count the cache entries alive when the limit is hit.
struct ProfileWindow {
  std::int64_t sinceUs = 0;  ///< compiles that ended at or after this time (us since the epoch)
  std::int64_t untilUs = 0;  ///< compiles that ended at or before this time; 0: no bound
  bool contains(std::int64_t timeUs) const {
    return timeUs >= sinceUs && (untilUs == 0 || timeUs <= untilUs);
  }
};

/// Builds the report for run `runId`, or every run when 0 (UserError when there is no such run),
/// over the compiles of `window`. A function with no compile in the window is left out. The
/// compiles of a resume function "<resume in f>" count for f (same file; the f that starts
/// last at or before it); it stays listed on its own only when it recompiled or hit the cache
/// limit. Functions are listed most compiles first (totalCompiles).
ProfileReport buildProfileReport(const storage::TraceReader& reader, RowId runId = 0,
                                 const ProfileWindow& window = {});

/// Renders the report in `format`: text, JSON, JUnit (one case per function; a failure per
/// recompile cause and cache-limit hit), Markdown, SARIF (results at the guard-creating lines).
std::string renderProfile(const ProfileReport& report, explain::Format format,
                          const explain::RenderOptions& options = {});

/// CI policy: fail when a function recompiled more than maxRecompiles times, or hit the cache
/// limit when failOnCacheLimit.
struct ProfilePolicy {
  std::optional<std::int64_t> maxRecompiles;  ///< per function
  bool failOnCacheLimit = false;              ///< any cache-limit hit fails
};
explain::PolicyResult checkProfilePolicy(const ProfileReport& report, const ProfilePolicy& policy,
                                         const explain::RenderOptions& options = {});

}  // namespace dynamo::profiler
