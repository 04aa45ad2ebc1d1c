// buildProfileReport: recompiles, their guard failures, cache-limit hits and suggestions
// (profile_report.h).
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "dynamo/common/error.h"
#include "dynamo/explain/render_util.h"
#include "dynamo/profiler/profile_report.h"

namespace dynamo::profiler {

using storage::CompileRecord;
using storage::GuardFailureRecord;
using storage::TraceReader;

int FunctionProfile::recompileCount() const {
  int n = 0;
  for (const Recompile& r : recompiles) n += r.status == "cache_limit" ? 0 : 1;
  return n;
}

namespace {

// The compile of `compiles` whose failures these are: the one the failure names (schema v3);
// in an older store, the one ending at the failure's time (the Python recorder wrote the
// compile's end time), else the last one that ended before it.
const CompileRecord* recompileOf(const GuardFailureRecord& f,
                                 const std::vector<CompileRecord>& compiles) {
  if (f.causedCompileId != 0) {
    for (const CompileRecord& c : compiles)
      if (c.id == f.causedCompileId) return &c;
    return nullptr;
  }
  const CompileRecord* best = nullptr;
  for (const CompileRecord& c : compiles) {
    if (c.attempt == 0 && c.status != "cache_limit") continue;
    std::int64_t end = c.startTimeUs + c.durationUs;
    if (end == f.timeUs) return &c;
    if (end <= f.timeUs && (best == nullptr || end > best->startTimeUs + best->durationUs))
      best = &c;
  }
  return best;
}

// A failure row as the report's struct: the fields the guard recorded (schema v3); an older
// store has only the reason text, and the kind, source and line come from the guard row.
GuardFailureInfo failureInfo(const TraceReader& reader, const GuardFailureRecord& f,
                             std::map<RowId, std::vector<storage::GuardRecord>>& guardCache) {
  GuardFailureInfo info;
  info.reason = f.reason;
  info.guardKind = f.guardKind;
  info.source = f.guardSource;
  info.property = f.property;
  info.dim = f.dim;
  info.expected = f.expected;
  info.seen = f.seen;
  info.createdAt = f.location;
  info.failedEntry = f.compileId;
  if (f.guardId == 0) return info;
  auto it = guardCache.find(f.compileId);
  if (it == guardCache.end()) it = guardCache.emplace(f.compileId, reader.guards(f.compileId)).first;
  for (const storage::GuardRecord& g : it->second) {
    if (g.id != f.guardId) continue;
    if (info.guardKind.empty()) info.guardKind = g.kind;
    if (info.source.empty()) info.source = g.source;
    if (!info.createdAt.known() && g.location.known()) info.createdAt = g.location;
  }
  return info;
}

bool isInteger(const std::string& s) {
  if (s.empty()) return false;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

// A Python float's repr ("0.1", "1e-05", "inf", "nan"), not an int's.
bool isFloat(const std::string& s) {
  if (s.empty() || isInteger(s)) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

// Values in first-seen order, without repeats.
void addValue(std::vector<std::string>& values, const std::string& v) {
  if (!v.empty() && std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
}

std::string joinValues(const std::vector<std::string>& values) {
  std::string out;
  size_t shown = std::min<size_t>(values.size(), 8);
  for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + values[i];
  if (values.size() > shown) out += ", ...";
  return out;
}

// A recompile pattern seen across recompiles: which, on what value, in how many, values seen.
struct Pattern {
  std::string id;
  GuardFailureInfo example;
  std::set<int> attempts;
  std::vector<std::string> values;
};

std::string patternId(const GuardFailureInfo& f) {
  bool global = f.source.rfind("G[", 0) == 0;
  if (f.guardKind == "TENSOR_MATCH" && f.property == "size" && f.dim >= 0) return "changing-size";
  if (f.guardKind == "SHAPE_ENV" && !f.source.empty()) return "shape-guard";
  if ((f.guardKind == "EQUALS_MATCH" || f.guardKind == "ID_MATCH") && global) return "global-rebound";
  // A resume function's argument: a value the code computed before a graph break.
  if (f.guardKind == "EQUALS_MATCH" && f.source.rfind("___stack", 0) == 0) return "value-across-break";
  if (f.guardKind == "EQUALS_MATCH" && !global && isInteger(f.expected) && isInteger(f.seen))
    return "varying-int";
  if (f.guardKind == "EQUALS_MATCH" && !global && isFloat(f.expected) && isFloat(f.seen))
    return "varying-float";
  return "";
}

std::string globalName(const std::string& source) {
  // G['SCALE'] -> SCALE
  size_t a = source.find("['"), b = source.rfind("']");
  return a == std::string::npos || b == std::string::npos || b <= a ? source
                                                                     : source.substr(a + 2, b - a - 2);
}

// A dynamic entry's shape guard failed in several recompiles: say which kind of shape guard and
// what keeps the size (or int) symbolic.
Suggestion shapeGuardSuggestion(const Pattern& p, const std::string& n) {
  const GuardFailureInfo& f = p.example;
  std::string what = f.dim >= 0 ? "dim " + std::to_string(f.dim) + " of tensor '" + f.source + "'" : "int '" + f.source + "'";
  std::string head = what + " fails a shape guard of a dynamic entry from call to call (" + n + " recompiles; " +
                     "guard: " + f.expected + "; seen: " + joinValues(p.values) + "): ";
  size_t at = f.reason.find("(specialised: ");
  if (at != std::string::npos) {
    std::string why = f.reason.substr(at + 14);
    if (!why.empty() && why.back() == ')') why.pop_back();
    return {p.id,
            head + "it was specialised (" + why + "), so every value compiles its own entry; read sizes one by "
                   "one (x.size(0), x.shape[0], b, t = x.shape) or use tensor ops whose sizes follow the input "
                   "(x.flatten(1)), keep them out of Python code (loop counts, lists), or pad or bucket the input "
                   "to a few sizes",
            f.createdAt};
  }
  if (f.expected.rfind("in [", 0) == 0) {
    return {p.id,
            head + "the value left the range of its symbol (sizes 0 and 1, and values outside a mark_dynamic "
                   "range, are specialised); widen the range given to dynamo.mark_dynamic(" +
                (f.dim >= 0 ? f.source + ", " + std::to_string(f.dim) : f.source) + ", min=..., max=...) or expect one "
                "compile per such value",
            f.createdAt};
  }
  return {p.id,
          head + "a relation traced on it holds for some calls and not for others, and each outcome compiles its "
                 "own entry; give independent sizes their own symbols (dynamo.mark_dynamic on each input: sizes "
                 "equal at the first compile share one) or move the branch out of the compiled function",
          f.createdAt};
}

Suggestion suggestionFor(const Pattern& p) {
  const GuardFailureInfo& f = p.example;
  std::string n = std::to_string(p.attempts.size());
  std::string values = joinValues(p.values);
  if (p.id == "changing-size") {
    return {p.id,
            "tensor '" + f.source + "' changes size at dim " + std::to_string(f.dim) + " from call to call (" + n +
                " recompiles; sizes seen: " + values +
                "): automatic dynamic shapes did not apply (turned off, dynamic=False, or the size is read as a "
                "Python int); call dynamo.mark_dynamic(" + f.source + ", " + std::to_string(f.dim) +
                ") before the call, or pad or bucket the input to a few sizes",
            f.createdAt};
  }
  if (p.id == "shape-guard") return shapeGuardSuggestion(p, n);
  if (p.id == "global-rebound") {
    return {p.id,
            "global '" + globalName(f.source) + "' is rebound from call to call (" + n +
                " recompiles; values seen: " + values +
                "): pass it as an argument or make it constant",
            f.createdAt};
  }
  if (p.id == "value-across-break") {
    std::string what = f.createdAt.sourceLine.empty() ? "the code at the break" : "`" + f.createdAt.sourceLine + "`";
    return {p.id,
            "a Python value computed by " + what + " before a graph break changes from call to call (" + n +
                " recompiles; values seen: " + values +
                "): keep it a tensor (drop .item() / float()), or do the conversion outside the compiled function",
            f.createdAt};
  }
  if (p.id == "varying-float") {
    return {p.id,
            "Python float '" + f.source + "' varies from call to call (" + n + " recompiles; values seen: " + values +
                "): it is guarded by value because a use needs its value (a comparison or branch, int(), str(), "
                "math of it: the compile record's dynamic shapes name the line), or automatic dynamic is off "
                "(dynamic=False, a backend that specialises); move that use out of the compiled function, or pass "
                "it as a tensor (torch.tensor(" + f.source + "))",
            f.createdAt};
  }
  return {p.id,
          "Python int '" + f.source + "' varies from call to call (" + n +
              " recompiles; values seen: " + values + "): automatic dynamic did not make it symbolic (turned off, "
              "dynamic=False, a backend that specialises, or the value is needed as a Python value); pass it as a "
              "tensor (torch.tensor(" +
              f.source + ")) or hoist it out of the compiled function",
          f.createdAt};
}

void addSuggestions(FunctionProfile& fn) {
  std::vector<Pattern> patterns;
  for (const Recompile& r : fn.recompiles) {
    for (const GuardFailureInfo& f : r.failures) {
      std::string id = patternId(f);
      if (id.empty()) continue;
      auto it = std::find_if(patterns.begin(), patterns.end(), [&](const Pattern& p) {
        return p.id == id && p.example.source == f.source && p.example.dim == f.dim;
      });
      if (it == patterns.end()) it = patterns.insert(patterns.end(), Pattern{id, f, {}, {}});
      it->attempts.insert(r.attempt);
      if (id != "shape-guard") addValue(it->values, f.expected);  // a shape guard's is a relation
      addValue(it->values, f.seen);
    }
  }
  for (const Pattern& p : patterns)
    if (p.attempts.size() >= 2) fn.suggestions.push_back(suggestionFor(p));
  if (fn.cacheLimitHits > 0) {
    std::string counted = fn.eagerRuns < 0 ? "" : " (" + explain::plural(fn.eagerRuns, "call") + " counted)";
    fn.suggestions.push_back(
        {"cache-limit",
         "hit cache_size_limit with " + std::to_string(fn.entriesAtLimit) +
             " compiled entries; from then on every call ran eagerly" + counted + ": remove the recompile "
             "causes above, or raise dynamo.config.cache_size_limit above " +
             std::to_string(fn.entriesAtLimit),
         {fn.file, fn.firstLine, ""}});
  }
}

// Failures of one recompile, without exact repeats (several entries can fail the same way).
void addFailure(Recompile& r, GuardFailureInfo info) {
  for (const GuardFailureInfo& f : r.failures)
    if (f.reason == info.reason && f.createdAt.line == info.createdAt.line) return;
  r.failures.push_back(std::move(info));
}

// compile id -> calls run eagerly after that cache-limit hit, from the run's newest
// kEagerRunsArtifact (profile_report.h).
std::map<RowId, std::int64_t> eagerRunsOf(const TraceReader& reader, RowId runId) {
  std::map<RowId, std::int64_t> runs;
  for (const storage::ArtifactRecord& a : reader.artifacts(runId)) {
    if (a.name != kEagerRunsArtifact) continue;
    runs.clear();
    std::istringstream in(a.data);
    RowId compileId = 0;
    std::int64_t count = 0;
    while (in >> compileId >> count) runs[compileId] = count;
  }
  return runs;
}

std::int64_t endOf(const CompileRecord& c) { return c.startTimeUs + c.durationUs; }

// The compiles of `window` (cache-limit hits counted with the entries alive before them,
// whether compiled in the window or not) and the recompiles among them.
std::vector<CompileRecord> addCompiles(FunctionProfile& fn, const std::vector<CompileRecord>& compiles,
                                       const ProfileWindow& window,
                                       const std::map<RowId, std::int64_t>& eagerRuns) {
  std::vector<CompileRecord> inWindow;
  int liveEntries = 0;
  for (const CompileRecord& c : compiles) {
    if (c.attempt == 0 && c.status != "cache_limit") liveEntries = 0;
    bool counted = window.contains(endOf(c));
    if (c.status == "cache_limit" && counted) {
      ++fn.cacheLimitHits;
      fn.entriesAtLimit = liveEntries;
    }
    if (c.status == "ok" || c.status == "graph_break") ++liveEntries;
    if (!counted) continue;
    inWindow.push_back(c);
    ++fn.compiles;
    fn.compileUs += c.durationUs;
    if (c.attempt == 0 && c.status != "cache_limit") continue;
    auto eager = eagerRuns.find(c.id);
    std::int64_t runs = c.status == "cache_limit" && eager != eagerRuns.end() ? eager->second : -1;
    fn.recompiles.push_back({c.id, c.attempt, c.status, c.durationUs, {}, runs});
    if (runs >= 0) fn.eagerRuns = std::max<std::int64_t>(fn.eagerRuns, 0) + runs;
  }
  return inWindow;
}

FunctionProfile buildFunction(const TraceReader& reader, const storage::FrameRecord& frame,
                              const std::vector<CompileRecord>& allCompiles,
                              const std::vector<GuardFailureRecord>& failures,
                              const ProfileWindow& window,
                              const std::map<RowId, std::int64_t>& eagerRuns,
                              const std::map<RowId, std::vector<explain::AotSizeCompile>>& perSize) {
  FunctionProfile fn;
  fn.name = frame.name;
  fn.file = frame.file;
  fn.firstLine = frame.firstLine;
  std::vector<CompileRecord> compiles = addCompiles(fn, allCompiles, window, eagerRuns);
  for (const CompileRecord& c : compiles) {
    auto it = perSize.find(c.id);
    if (it != perSize.end()) fn.backendCompiles.insert(fn.backendCompiles.end(), it->second.begin(), it->second.end());
  }
  std::map<RowId, std::vector<storage::GuardRecord>> guardCache;
  for (const GuardFailureRecord& f : failures) {
    if (!window.contains(f.timeUs)) continue;
    const CompileRecord* c = recompileOf(f, compiles);
    if (c == nullptr) continue;
    for (Recompile& r : fn.recompiles) {
      if (r.compileId != c->id) continue;
      addFailure(r, failureInfo(reader, f, guardCache));
      break;
    }
  }
  addSuggestions(fn);
  return fn;
}

// "<resume in <resume in f>>" -> "f"; "" when `name` is not a resume function's.
std::string resumeRoot(const std::string& name) {
  static const std::string kPrefix = "<resume in ";
  std::string root = name;
  bool resume = false;
  while (root.size() > kPrefix.size() && root.compare(0, kPrefix.size(), kPrefix) == 0 &&
         root.back() == '>') {
    root = root.substr(kPrefix.size(), root.size() - kPrefix.size() - 1);
    resume = true;
  }
  return resume ? root : "";
}

// Counts each resume function's compiles with its function (see buildProfileReport); drops the
// resume functions that have nothing of their own to show.
void foldResumeFunctions(std::vector<FunctionProfile>& functions) {
  std::vector<bool> drop(functions.size(), false);
  for (size_t i = 0; i < functions.size(); ++i) {
    const FunctionProfile& r = functions[i];
    std::string root = resumeRoot(r.name);
    if (root.empty()) continue;
    FunctionProfile* parent = nullptr;
    auto better = [&](const FunctionProfile& f) {
      if (parent == nullptr) return true;
      bool before = f.firstLine <= r.firstLine, parentBefore = parent->firstLine <= r.firstLine;
      if (before != parentBefore) return before;
      return before && f.firstLine > parent->firstLine;
    };
    for (FunctionProfile& f : functions)
      if (f.name == root && f.file == r.file && better(f)) parent = &f;
    if (parent == nullptr) continue;
    parent->resumeCompiles += r.compiles;
    parent->resumeFunctions += 1;
    parent->resumeCompileUs += r.compileUs;
    drop[i] = r.recompiles.empty();
  }
  std::vector<FunctionProfile> kept;
  for (size_t i = 0; i < functions.size(); ++i)
    if (!drop[i]) kept.push_back(std::move(functions[i]));
  functions = std::move(kept);
}

RunProfile buildRun(const TraceReader& reader, const storage::RunRecord& run,
                    const ProfileWindow& window) {
  RunProfile rp;
  rp.run = run;
  std::map<RowId, std::vector<GuardFailureRecord>> failuresByFrame;
  for (const GuardFailureRecord& f : reader.guardFailures(run.id))
    failuresByFrame[f.frameId].push_back(f);
  std::map<RowId, std::int64_t> eagerRuns = eagerRunsOf(reader, run.id);
  std::map<RowId, std::vector<explain::AotSizeCompile>> perSize = explain::aotSizeCompilesOfRun(reader, run.id);
  for (const storage::FrameRecord& frame : reader.frames(run.id)) {
    std::vector<CompileRecord> compiles = reader.compilesOfFrame(frame.id);
    if (compiles.empty()) continue;
    FunctionProfile fn =
        buildFunction(reader, frame, compiles, failuresByFrame[frame.id], window, eagerRuns, perSize);
    if (fn.compiles == 0) continue;  // compiled outside the window only
    rp.compiles += fn.compiles;
    rp.recompiles += fn.recompileCount();
    rp.cacheLimitHits += fn.cacheLimitHits;
    rp.compileUs += fn.compileUs;
    rp.functions.push_back(std::move(fn));
  }
  foldResumeFunctions(rp.functions);
  std::stable_sort(rp.functions.begin(), rp.functions.end(),
                   [](const FunctionProfile& a, const FunctionProfile& b) {
                     return a.totalCompiles() > b.totalCompiles();
                   });
  return rp;
}

}  // namespace

ProfileReport buildProfileReport(const TraceReader& reader, RowId runId, const ProfileWindow& window) {
  ProfileReport report;
  report.storePath = reader.path();
  for (const storage::RunRecord& run : reader.runs())
    if (runId == 0 || run.id == runId) report.runs.push_back(buildRun(reader, run, window));
  if (runId != 0 && report.runs.empty()) {
    throw UserError(UserErrorKind::kTraceStore,
                    dynamo::detail::concat("trace store '", reader.path(), "' has no run ", runId),
                    {}, "", dynamo::detail::concat("list its runs with: dynamo-trace runs ", reader.path()));
  }
  return report;
}

}  // namespace dynamo::profiler
