// Plain-text reports over a trace store, for the `dynamo-trace` CLI and golden tests. Pure
// functions of the reader: they return text and write nothing (the store itself, storage/, holds
// no reports: they live here with the explain and profile reports).
#pragma once

#include <string>
#include <vector>

#include "dynamo/storage/trace_reader.h"

namespace dynamo::explain {

using storage::TraceReader;

/// Options shared by the reports.
struct ReportOptions {
  bool maskVolatile = false;  ///< replace times, pids and hostnames by "<masked>" (golden tests)
};

/// One block per run: who ran it, versions, and row counts.
std::string renderSummary(const TraceReader& reader, const ReportOptions& options = {});
/// One line per run.
std::string renderRuns(const TraceReader& reader, const ReportOptions& options = {});
/// Graph breaks grouped by kind and location, most frequent first, with explanation and hints.
std::string renderGraphBreaks(const TraceReader& reader, const ReportOptions& options = {});
/// Every compile of every frame, with status, reason and phase timings.
std::string renderCompiles(const TraceReader& reader, const ReportOptions& options = {});
/// Guard failures in time order with their verbose reasons.
std::string renderGuardFailures(const TraceReader& reader, const ReportOptions& options = {});

/// A report the CLI can print.
struct ReportCommand {
  std::string name;     ///< "summary"
  std::string summary;  ///< one-line description
  std::string (*render)(const TraceReader&, const ReportOptions&);  ///< the report
};
/// Every report, for the CLI's usage text and dispatch.
const std::vector<ReportCommand>& reportCommands();

}  // namespace dynamo::explain
