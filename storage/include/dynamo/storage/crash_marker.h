// Crash markers: how a run that never closed its writer ended, when the process could tell.
//
//   TraceWriter::open ---- armCrashMarker(store, run) ----> fatal-signal handler installed
//   recording: noteCrashStage(kFirstCall, compile) ------> two atomics the handler reads
//   SIGSEGV/SIGABRT/SIGBUS/SIGFPE/SIGILL --> handler: open/write/close "<store>-crash-<run>",
//                                            then the previous handler (or SIG_DFL) and re-raise
//   next TraceWriter::open of the store --> marker merged as the run's "dynamo.crash" artifact
//   TraceReader::runs() --> RunRecord::crash, from the artifact or a marker not merged yet
//
// SIGKILL and os._exit cannot be caught: such runs keep "did not close". The handler uses only
// async-signal-safe calls (getpid, clock_gettime, open, write, close, sigaction, raise) and
// buffers prepared when the marker was armed, so the process still dies with the same signal,
// and Python's faulthandler (if enabled) still prints its traceback.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "dynamo/storage/records.h"

namespace dynamo::storage {

/// Where a run was when it crashed (crash_stages.def).
enum class CrashStage {
#define DYNAMO_CRASH_STAGE(id, name, withCompile, without) id,
#include "dynamo/storage/crash_stages.def"
#undef DYNAMO_CRASH_STAGE
};

/// The stored name of a stage ("first_call").
std::string_view crashStageName(CrashStage stage);
/// Parses a stored name; nullopt when unknown.
std::optional<CrashStage> crashStageFromName(std::string_view name);

/// The name of the artifact that holds a merged crash marker (text, the marker file's content).
inline constexpr std::string_view kCrashArtifactName = "dynamo.crash";

/// The marker file of run `runId` of the store at `storePath`: "<storePath>-crash-<runId>".
std::string crashMarkerPath(const std::string& storePath, RowId runId);

/// Installs the fatal-signal handler (once per process) and points it at run `runId` of the store
/// at `storePath`. A later call re-points it (the process's newest writer wins). Only the process
/// that armed it writes a marker (a forked child does not).
void armCrashMarker(const std::string& storePath, RowId runId);
/// Stops writing markers for `runId` (its writer closed cleanly); the handler stays installed
/// and only chains to the previous one. Does nothing when another run is armed.
void disarmCrashMarker(RowId runId);
/// Records what the process is doing, for the marker: `compileId` is the compile whose code is
/// about to run (kFirstCall) or 0. Two relaxed atomic stores: cheap enough for every compile.
void noteCrashStage(CrashStage stage, RowId compileId);

/// The content of a marker, parsed. Markers are small text files:
///   "dynamo-crash 1\nrun 3\nsignal 11\nstage 1\ncompile 12884901889\ntime_us 1700000000\n"
struct CrashMarker {
  RowId runId = 0;                         ///< the run that crashed
  int signal = 0;                          ///< the fatal signal
  CrashStage stage = CrashStage::kUnknown; ///< where it was
  RowId compileId = 0;                     ///< the compile whose code ran, 0 unknown
  std::int64_t timeUs = 0;                 ///< when
};
/// Parses a marker's text; nullopt when it is not one (a torn write, another file).
std::optional<CrashMarker> parseCrashMarker(std::string_view text);
/// The text of a marker (the handler writes the same bytes without this function).
std::string formatCrashMarker(const CrashMarker& marker);
/// "crashed (SIGSEGV) during the first call of compile #0 of frame f (t.py:3)" for a run whose
/// crash is known, "" otherwise. `frameFile` is the file as the report shows it (masked, or
/// crash.frameFile).
std::string describeCrash(const RunCrash& crash, const std::string& frameFile);
/// How a run ended, in the words every report uses: "closed" for a run whose writer closed,
/// describeCrash(...) for one that left a crash marker, else "did not close (still running, or
/// killed)" (SIGKILL, os._exit, or still running: the store cannot tell which).
std::string describeRunEnd(const RunRecord& run, const std::string& frameFile);
/// "closed", "crashed" or "did_not_close": the same three cases, as a key for JSON reports.
std::string_view runEndKind(const RunRecord& run);
/// "SIGSEGV" for 11, "signal 42" for a number without a name here.
std::string signalName(int signal);

}  // namespace dynamo::storage
