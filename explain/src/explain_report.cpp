// buildExplainReport: the explainer's report model over a trace store (explain_report.h).
#include <algorithm>
#include <sstream>
#include <tuple>

#include "dynamo/common/error.h"
#include "dynamo/common/op_key.h"
#include "dynamo/explain/explain_report.h"

#include <nlohmann/json.hpp>

namespace dynamo::explain {

using storage::CompileRecord;
using storage::TraceReader;

int GraphSummary::ops() const {
  int total = 0;
  for (const auto& [name, count] : opCounts) total += count;
  return total;
}

std::int64_t ExplainReport::distinctBreaks() const {
  std::vector<std::tuple<std::string, std::string, int>> keys;
  for (const RunExplain& run : runs)
    for (const BreakGroup& b : run.breaks)
      keys.emplace_back(b.kind, b.location.file, b.location.line);
  std::sort(keys.begin(), keys.end());
  return std::unique(keys.begin(), keys.end()) - keys.begin();
}

std::map<std::string, int> graphOpCounts(const std::string& serialized) {
  std::map<std::string, int> counts;
  // No exceptions: text that is not JSON parses to a "discarded" value.
  nlohmann::json doc = nlohmann::json::parse(serialized, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return counts;
  auto nodes = doc.find("nodes");
  if (nodes == doc.end() || !nodes->is_array()) return counts;
  auto str = [](const nlohmann::json& node, const char* key) {
    auto it = node.find(key);
    return it != node.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  for (const nlohmann::json& node : *nodes) {
    if (!node.is_object()) continue;
    std::string op = str(node, "op"), target = str(node, "target");
    if (op == "call_function" || op == "call_method" || op == "call_module")
      ++counts[graphOpKey(op, target)];
  }
  return counts;
}

namespace {

bool sameSite(const BreakGroup& g, const std::string& kind, const SourceLocation& where) {
  return g.kind == kind && g.location.file == where.file && g.location.line == where.line;
}

// Adds `count` occurrences (met in `compiles` compiles) of a break to `groups`.
void addBreak(std::vector<BreakGroup>& groups, const BreakGroup& b) {
  for (BreakGroup& g : groups) {
    if (sameSite(g, b.kind, b.location)) {
      g.tally.merge(b.tally);
      g.compiles += b.compiles;
      for (const std::string& f : b.functions)
        if (std::find(g.functions.begin(), g.functions.end(), f) == g.functions.end())
          g.functions.push_back(f);
      return;
    }
  }
  groups.push_back(b);
}

// Occurrences from the tallies; most frequent first, ties in file and line order.
void finishGroups(std::vector<BreakGroup>& groups) {
  for (BreakGroup& g : groups) g.occurrences = g.tally.occurrences();
  std::stable_sort(groups.begin(), groups.end(), [](const BreakGroup& a, const BreakGroup& b) {
    return std::tie(b.occurrences, a.location.file, a.location.line, a.kind) <
           std::tie(a.occurrences, b.location.file, b.location.line, b.kind);
  });
}

void addPhases(std::vector<storage::CompilePhase>& total,
               const std::vector<storage::CompilePhase>& phases) {
  for (const storage::CompilePhase& p : phases) {
    auto it = std::find_if(total.begin(), total.end(),
                           [&](const storage::CompilePhase& t) { return t.name == p.name; });
    if (it == total.end()) total.push_back(p);
    else it->durationUs += p.durationUs;
  }
}

// The symbols and shape guards of the newest compile that has symbols; every specialisation and
// note of every compile (they say why later compiles stayed static), each once.
void mergeDynamicShapes(DynamicShapes& into, const DynamicShapes& d) {
  if (!d.dynamic.empty()) {
    into.dynamic = d.dynamic;
    into.guards = d.guards;
  }
  auto addAll = [](std::vector<std::string>& to, const std::vector<std::string>& from) {
    for (const std::string& s : from)
      if (std::find(to.begin(), to.end(), s) == to.end()) to.push_back(s);
  };
  addAll(into.specialised, d.specialised);
  addAll(into.notes, d.notes);
}

FunctionReport buildFunction(const TraceReader& reader, const storage::FrameRecord& frame,
                             const std::vector<CompileRecord>& compiles,
                             const storage::EntryHits& hits,
                             const std::map<RowId, std::vector<GraphAot>>& aot,
                             const std::map<RowId, std::vector<AotSizeCompile>>& aotPerSize,
                             const std::map<RowId, std::string>& dynamicShapes,
                             std::vector<BreakGroup>& rawRunBreaks) {
  FunctionReport f;
  f.name = frame.name;
  f.file = frame.file;
  f.firstLine = frame.firstLine;
  for (const CompileRecord& c : compiles) {
    ++f.compiles;
    ++f.statuses[c.status];
    f.compileUs += c.durationUs;
    addPhases(f.phases, c.phases);
    if (!storage::compileMadeEntry(c)) {
      f.notCompiledReason = c.reason;
      f.notCompiled.emplace_back(c.status, c.reason);
    }
    auto dyn = dynamicShapes.find(c.id);
    if (dyn != dynamicShapes.end()) mergeDynamicShapes(f.dynamicShapes, parseDynamicShapes(dyn->second));
    auto aotOfCompile = aot.find(c.id);
    size_t k = 0;
    for (const storage::GraphRecord& g : reader.graphs(c.id)) {
      f.graphs.push_back({c.id, c.attempt, g.index, g.numNodes, graphOpCounts(g.serialized), g.printed, {}});
      // The k-th AOT record of a compile is its k-th graph's (aot_report.h).
      if (aotOfCompile != aot.end() && k < aotOfCompile->second.size())
        f.graphs.back().aot = aotOfCompile->second[k];
      // A compile has one graph: its per-signature compiles are that graph's.
      auto sizes = aotPerSize.find(c.id);
      if (k == 0 && sizes != aotPerSize.end()) f.graphs.back().aotPerSize = sizes->second;
      ++k;
    }
    for (const storage::GuardRecord& g : reader.guards(c.id)) {
      ++f.guards;
      ++f.guardKinds[g.kind];
    }
    for (const storage::GraphBreakRecord& b : reader.graphBreaks(c.id)) {
      BreakGroup one{b.kind, b.location, b.explanation, b.hints, b.userStack, 0, 1, {}, {frame.name}};
      one.tally.add(c, b, hits);
      addBreak(f.breaks, one);
      addBreak(rawRunBreaks, one);
    }
  }
  finishGroups(f.breaks);
  return f;
}

RunExplain buildRun(const TraceReader& reader, const storage::RunRecord& run) {
  RunExplain r;
  r.run = run;
  storage::EntryHits hits = reader.entryHits(run.id);
  r.hitsRecorded = hits.recorded;
  std::map<RowId, std::vector<GraphAot>> aot = aotRecordsOfRun(reader, run.id);
  std::map<RowId, std::vector<AotSizeCompile>> aotPerSize = aotSizeCompilesOfRun(reader, run.id);
  std::map<RowId, std::string> dynamicShapes;  // compile id -> its dynamic-shape record
  for (const storage::ArtifactRecord& a : reader.artifacts(run.id))
    if (a.name == kDynamicShapesArtifact && a.compileId != 0) dynamicShapes[a.compileId] = a.data;
  for (const storage::FrameRecord& frame : reader.frames(run.id)) {
    std::vector<CompileRecord> compiles = reader.compilesOfFrame(frame.id);
    if (compiles.empty()) continue;
    r.functions.push_back(buildFunction(reader, frame, compiles, hits, aot, aotPerSize, dynamicShapes, r.breaks));
    const FunctionReport& f = r.functions.back();
    r.compiles += f.compiles;
    r.graphs += static_cast<std::int64_t>(f.graphs.size());
    for (const GraphSummary& g : f.graphs) r.ops += g.ops();
    r.compileUs += f.compileUs;
  }
  finishGroups(r.breaks);
  return r;
}

}  // namespace

ExplainReport buildExplainReport(const TraceReader& reader, RowId runId) {
  ExplainReport report;
  report.storePath = reader.path();
  for (const storage::RunRecord& run : reader.runs()) {
    if (runId == 0 || run.id == runId) report.runs.push_back(buildRun(reader, run));
  }
  if (runId != 0 && report.runs.empty()) {
    throw UserError(UserErrorKind::kTraceStore,
                    dynamo::detail::concat("trace store '", reader.path(), "' has no run ", runId), {}, "",
                    dynamo::detail::concat("list its runs with: dynamo-trace runs ", reader.path()));
  }
  return report;
}

}  // namespace dynamo::explain
