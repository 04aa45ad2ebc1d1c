// Text helpers shared by the explain and profile renderers: locations, user-stack entries,
// command lines, plurals and the JSON run header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dynamo/explain/format.h"
#include "dynamo/storage/records.h"

namespace dynamo::explain {

/// "file:line" of a user location, with displayPath.
std::string displayWhere(const std::string& file, int line, const RenderOptions& options);
/// A user-stack entry "file:line: source" with its file shown by displayPath.
std::string stackEntry(const std::string& entry, const RenderOptions& options);
/// The run's command line, files shown by displayPath.
std::string commandLine(const storage::RunRecord& run, const RenderOptions& options);
/// "the run did not finish cleanly: ..." for a run whose writer was never closed (os._exit, a
/// crash, a kill, or still running): its last records and runtime hits may be missing. "" for
/// a run that closed.
std::string unfinishedRunNote(const storage::RunRecord& run);
/// The same, with the crashing compile's file shown by displayPath (relative, masked).
std::string unfinishedRunNote(const storage::RunRecord& run, const RenderOptions& options);
/// "1 graph" / "2 graphs".
std::string plural(std::int64_t n, const std::string& one, const std::string& many = "");
/// A time in a JSON report: microseconds, or "<time>" when masked.
void jsonTime(JsonWriter& w, std::int64_t us, const RenderOptions& options);
/// A JUnit suite for `run` with the run's header: package (the script's name), host, start
/// time, and properties tool, command, pid, python_version, torch_version, dynamo_version
/// (volatile ones "<masked>" when masked).
JunitSuite junitSuite(const std::string& tool, const std::string& name,
                      const storage::RunRecord& run, std::int64_t timeUs,
                      const RenderOptions& options);
/// The run header fields shared by the JSON reports (run id, finished_cleanly, crash: how the
/// run ended, argv, pid, host, versions).
void jsonRun(JsonWriter& w, const storage::RunRecord& run, const RenderOptions& options);

}  // namespace dynamo::explain
