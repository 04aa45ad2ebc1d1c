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
/// "1 graph" / "2 graphs".
std::string plural(std::int64_t n, const std::string& one, const std::string& many = "");
/// A time in a JSON report: microseconds, or "<time>" when masked.
void jsonTime(JsonWriter& w, std::int64_t us, const RenderOptions& options);
/// The run header fields shared by the JSON reports (run id, argv, pid, host, versions).
void jsonRun(JsonWriter& w, const storage::RunRecord& run, const RenderOptions& options);

}  // namespace dynamo::explain
