// Plain-text reports over a trace store (trace_report.h). Pure: they return text.
#include "dynamo/explain/trace_report.h"

#include "dynamo/explain/aot_report.h"

#include "dynamo/common/format.h"
#include "dynamo/storage/crash_marker.h"

#include <cstdio>
#include <ctime>
#include <map>
#include <sstream>

namespace dynamo::explain {

using namespace dynamo::storage;

namespace {

std::string formatTime(std::int64_t us, const ReportOptions& options) {
  if (options.maskVolatile) return "<masked>";
  if (us == 0) return "-";
  std::time_t seconds = static_cast<std::time_t>(us / 1000000);
  std::tm tm {};
  gmtime_r(&seconds, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return std::string(buf) + "Z";
}

std::string formatDuration(std::int64_t us, const ReportOptions& options) {
  return options.maskVolatile ? "<masked>" : formatMicroseconds(us);
}

std::string joinArgv(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out;
}

std::string runHeader(const RunRecord& r, const ReportOptions& options) {
  std::ostringstream out;
  out << "run " << r.id << ": pid " << (options.maskVolatile ? std::string("<masked>")
                                                              : std::to_string(r.pid));
  if (r.rank >= 0) out << ", rank " << r.rank << "/" << r.worldSize;
  out << ", started " << formatTime(r.startTimeUs, options);
  if (r.endTimeUs != 0)
    out << ", ended " + formatTime(r.endTimeUs, options);
  else if (r.crash.signal != 0)
    out << ", " << describeCrash(r.crash, r.crash.frameFile);
  else
    out << ", did not close (still running, or killed)";
  return out.str();
}

}  // namespace

std::string renderSummary(const TraceReader& reader, const ReportOptions& options) {
  std::ostringstream out;
  out << "trace store " << reader.path() << " (schema version " << reader.schemaVersion()
      << ")\n";
  std::vector<RunRecord> runs = reader.runs();
  if (runs.empty()) out << "no runs\n";
  for (const RunRecord& r : runs) {
    StoreCounts c = reader.counts(r.id);
    out << "\n" << runHeader(r, options) << "\n";
    out << "  command: " << joinArgv(r.argv) << "\n";
    out << "  host: " << (options.maskVolatile ? std::string("<masked>") : r.hostname)
        << "  python " << (r.pythonVersion.empty() ? "-" : r.pythonVersion) << "  torch "
        << (r.torchVersion.empty() ? "-" : r.torchVersion) << "  dynamo "
        << (r.dynamoVersion.empty() ? "-" : r.dynamoVersion) << "\n";
    out << "  frames " << c.frames << ", compiles " << c.compiles << ", graphs " << c.graphs
        << ", graph breaks " << c.graphBreaks << ", guards " << c.guards
        << ", guard failures " << c.guardFailures << ", code " << c.code << ", artifacts "
        << c.artifacts << "\n";
  }
  return out.str();
}

std::string renderRuns(const TraceReader& reader, const ReportOptions& options) {
  std::ostringstream out;
  for (const RunRecord& r : reader.runs())
    out << runHeader(r, options) << ": " << joinArgv(r.argv) << "\n";
  return out.str();
}

std::string renderGraphBreaks(const TraceReader& reader, const ReportOptions&) {
  std::ostringstream out;
  std::vector<GraphBreakGroup> groups = reader.graphBreakGroups();
  std::int64_t total = 0;
  for (const GraphBreakGroup& g : groups) total += g.count;
  out << total << " graph break" << (total == 1 ? "" : "s") << " at " << groups.size()
      << " location" << (groups.size() == 1 ? "" : "s") << "\n";
  for (const GraphBreakGroup& g : groups) {
    out << "\n" << g.count << " x " << g.kind << " at " << g.location.str() << "\n";
    if (!g.location.sourceLine.empty()) out << "   |  " << g.location.sourceLine << "\n";
    if (!g.explanation.empty()) out << "  = why: " << g.explanation << "\n";
    for (const std::string& h : g.hints) out << "  = hint: " << h << "\n";
  }
  return out.str();
}

std::string renderCompiles(const TraceReader& reader, const ReportOptions& options) {
  std::ostringstream out;
  for (const RunRecord& r : reader.runs()) {
    out << runHeader(r, options) << "\n";
    for (const FrameRecord& f : reader.frames(r.id)) {
      out << "  " << f.name << " (" << f.file << ":" << f.firstLine << ")\n";
      for (const CompileRecord& c : reader.compilesOfFrame(f.id)) {
        out << "    #" << c.attempt << " " << c.status << " in "
            << formatDuration(c.durationUs, options) << ": " << c.reason << "\n";
        for (const CompilePhase& p : c.phases)
          out << "       " << p.name << " " << formatDuration(p.durationUs, options) << "\n";
      }
    }
  }
  return out.str();
}

std::string renderGuardFailures(const TraceReader& reader, const ReportOptions& options) {
  std::ostringstream out;
  std::map<RowId, FrameRecord> frames;
  for (const RunRecord& r : reader.runs())
    for (FrameRecord& f : reader.frames(r.id)) frames[f.id] = std::move(f);
  std::vector<GuardFailureRecord> failures = reader.guardFailures();
  out << failures.size() << " guard failure" << (failures.size() == 1 ? "" : "s") << "\n";
  for (const GuardFailureRecord& f : failures) {
    auto frame = frames.find(f.frameId);
    out << formatTime(f.timeUs, options) << " "
        << (frame != frames.end() ? frame->second.name : std::string("?")) << " cache entry "
        << f.compileId << ": " << f.reason << "\n";
  }
  return out.str();
}

const std::vector<ReportCommand>& reportCommands() {
  static const std::vector<ReportCommand> commands = {
      {"summary", "each run: command, versions, row counts", renderSummary},
      {"runs", "one line per run", renderRuns},
      {"breaks", "graph breaks grouped by kind and location, most frequent first",
       renderGraphBreaks},
      {"compiles", "every compile of every frame, with phase timings", renderCompiles},
      {"failures", "guard failures in time order, with reasons", renderGuardFailures},
      {"aot", "AOT compiles: graph sizes, partition (saved, recomputed, bytes), phase times",
       renderAot},
  };
  return commands;
}

}  // namespace dynamo::explain
