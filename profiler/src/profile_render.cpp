// The recompilation profiler's renderers and policy (profile_report.h), in dynamo::explain's
// formats.
#include <sstream>

#include "dynamo/explain/render_util.h"
#include "dynamo/profiler/profile_report.h"

namespace dynamo::profiler {

using explain::displayDuration;
using explain::displayPath;
using explain::displayWhere;
using explain::Format;
using explain::JsonWriter;
using explain::markdownCell;
using explain::plural;
using explain::RenderOptions;

namespace {

std::string runTitle(const RunProfile& r, const RenderOptions& o) {
  std::string cmd = explain::commandLine(r.run, o);
  return "run " + std::to_string(r.run.id) + (cmd.empty() ? "" : " (" + cmd + ")");
}

std::string runTotals(const RunProfile& r, const RenderOptions& o) {
  return plural(static_cast<std::int64_t>(r.functions.size()), "function") + ": " +
         plural(r.compiles, "compile") + ", " + plural(r.recompiles, "recompile") + ", " +
         plural(r.cacheLimitHits, "cache-limit hit") + ", compile time " +
         displayDuration(r.compileUs, o);
}

std::string functionTitle(const FunctionProfile& f, const RenderOptions& o) {
  return f.name + " (" + displayWhere(f.file, f.firstLine, o) + ")";
}

// "1 + 2 in resume functions after graph breaks", or "" when it has none.
std::string resumeSplit(const FunctionProfile& f) {
  if (f.resumeCompiles == 0) return "";
  return std::to_string(f.compiles) + " + " + std::to_string(f.resumeCompiles) + " in " +
         plural(f.resumeFunctions, "resume function") + " after graph breaks";
}

std::string functionTotals(const FunctionProfile& f, const RenderOptions& o) {
  std::string split = resumeSplit(f);
  std::string out = plural(f.totalCompiles(), "compile") + " (" + (split.empty() ? "" : split + "; ") +
                    plural(f.recompileCount(), "recompile");
  if (f.cacheLimitHits) out += ", " + plural(f.cacheLimitHits, "cache-limit hit");
  return out + "), " + displayDuration(f.compileUs + f.resumeCompileUs, o) + " compiling";
}

// "guard TENSOR_MATCH on x (dim 0): expected 1, seen 2"
std::string guardLine(const GuardFailureInfo& f) {
  std::string out = "guard " + (f.guardKind.empty() ? std::string("?") : f.guardKind);
  if (!f.source.empty()) out += " on " + f.source;
  if (f.dim >= 0) out += " (" + f.property + " at dim " + std::to_string(f.dim) + ")";
  else if (!f.property.empty()) out += " (" + f.property + ")";
  if (!f.expected.empty() || !f.seen.empty()) out += ": expected " + f.expected + ", seen " + f.seen;
  return out;
}

std::string createdLine(const GuardFailureInfo& f, const RenderOptions& o) {
  if (!f.createdAt.known()) return "";
  std::string out = "created at " + displayWhere(f.createdAt.file, f.createdAt.line, o);
  return f.createdAt.sourceLine.empty() ? out : out + ": " + f.createdAt.sourceLine;
}

// Recompiles shown per function in the text form (the cache-limit hits always are); the JSON
// form lists all.
constexpr int kMaxRecompilesShown = 5;

std::string recompileHeadline(const Recompile& r) {
  if (r.status == "cache_limit") {
    std::string out = "cache_size_limit hit: not compiled; the function runs eagerly from now on";
    return r.eagerRuns < 0 ? out : out + " (then " + plural(r.eagerRuns, "eager run") + ")";
  }
  if (r.failures.empty()) return "no guard failure recorded";
  return r.failures.front().reason;
}

void textFunction(std::ostringstream& out, const FunctionProfile& f, const RenderOptions& o) {
  out << "\n" << functionTitle(f, o) << ": " << functionTotals(f, o) << "\n";
  int shown = 0, hidden = 0;
  for (const Recompile& r : f.recompiles) {
    if (r.status != "cache_limit" && shown == kMaxRecompilesShown) {
      ++hidden;
      continue;
    }
    if (hidden > 0) {
      out << "  ... " << plural(hidden, "more recompile") << " (the JSON form lists all)\n";
      hidden = 0;
    }
    if (r.status != "cache_limit") ++shown;
    out << "  #" << r.attempt << " " << recompileHeadline(r) << "\n";
    if (r.failures.empty()) continue;
    const GuardFailureInfo& first = r.failures.front();
    out << "       " << guardLine(first) << "\n";
    std::string created = createdLine(first, o);
    if (!created.empty()) out << "       " << created << "\n";
    if (r.status == "cache_limit") out << "       last reason: " << first.reason << "\n";
    if (r.failures.size() > 1)
      out << "       + " << plural(static_cast<std::int64_t>(r.failures.size() - 1), "more guard failure")
          << " against older entries\n";
  }
  if (hidden > 0) out << "  ... " << plural(hidden, "more recompile") << " (the JSON form lists all)\n";
  if (!f.backendCompiles.empty()) {
    std::int64_t us = 0;
    std::string sigs;
    std::vector<std::vector<std::string>> varying = explain::varyingSignatures(f.backendCompiles);
    for (size_t i = 0; i < varying.size(); ++i) {
      us += f.backendCompiles[i].compileUs;
      std::string sig;
      for (const std::string& e : varying[i]) sig += (sig.empty() ? "" : ", ") + e;
      sigs += (i ? "; " : "") + sig;
    }
    out << "  " << f.backendCompiles.front().backend << " compiled a graph with dynamic sizes once per input signature, "
        << "without recompiling the function: " << plural(static_cast<std::int64_t>(f.backendCompiles.size()), "compile")
        << " (" << sigs << "), " << displayDuration(us, o) << "\n";
    for (const explain::AotSizeCompile& c : f.backendCompiles)  // the fused backend's: kernels per size
      if (c.lowering >= 0) out << "    " << explain::sizeLoweringLine(c, o) << "\n";
  }
  if (!f.suggestions.empty()) {
    out << "  suggestions:\n";
    for (const Suggestion& s : f.suggestions) {
      out << "    - " << s.message;
      if (s.where.known()) out << " [" << displayWhere(s.where.file, s.where.line, o) << "]";
      out << "\n";
    }
  }
}

std::string renderText(const ProfileReport& report, const RenderOptions& o) {
  std::ostringstream out;
  if (report.runs.empty())
    return "dynamo-profile: " + displayPath(report.storePath, o) + " holds no runs: nothing was compiled\n";
  bool firstRun = true;
  for (const RunProfile& r : report.runs) {
    if (!firstRun) out << "\n";
    firstRun = false;
    out << "dynamo-profile: " << runTitle(r, o) << "\n";
    std::string unfinished = explain::unfinishedRunNote(r.run, o);
    if (!unfinished.empty()) out << unfinished << ".\n";
    if (r.functions.empty()) {
      // Advice only when the run is complete: else the compiles may simply be missing.
      if (unfinished.empty())
        out << "No function was compiled. If the script does not call dynamo itself, run it with "
               "--capture-all.\n";
      else
        out << "No compile was recorded.\n";
      continue;
    }
    out << runTotals(r, o) << "\n";
    std::int64_t once = 0, resumed = 0;
    for (const FunctionProfile& f : r.functions) {
      if (!f.recompiles.empty()) textFunction(out, f, o);
      else if (f.totalCompiles() == 1) ++once;
      else ++resumed;
    }
    if (resumed > 0) {
      out << "\n" << plural(resumed, "function") << " without recompiles, compiled more than once "
          << "(resume functions after graph breaks):\n";
      for (const FunctionProfile& f : r.functions)
        if (f.recompiles.empty() && f.totalCompiles() > 1)
          out << "  " << functionTitle(f, o) << ": compiled " << f.totalCompiles() << " times ("
              << resumeSplit(f) << "), " << displayDuration(f.compileUs + f.resumeCompileUs, o)
              << " compiling\n";
    }
    if (once > 0) {
      out << "\n" << plural(once, "function") << " compiled once:";
      for (const FunctionProfile& f : r.functions)
        if (f.recompiles.empty() && f.totalCompiles() == 1)
          out << " " << f.name << " (" << displayDuration(f.compileUs, o) << ")";
      out << "\n";
    }
  }
  return out.str();
}

// ---- JSON -----------------------------------------------------------------------------------

void jsonLocation(JsonWriter& w, const SourceLocation& loc, const RenderOptions& o) {
  if (!loc.known()) {
    w.null();
    return;
  }
  w.beginObject();
  w.key("file").value(displayPath(loc.file, o));
  w.key("line").value(loc.line);
  w.key("source_line").value(loc.sourceLine);
  w.endObject();
}

void jsonFailure(JsonWriter& w, const GuardFailureInfo& f, const RenderOptions& o) {
  w.beginObject();
  w.key("reason").value(f.reason);
  w.key("guard_kind").value(f.guardKind);
  w.key("source").value(f.source);
  w.key("property").value(f.property);
  w.key("dim");
  if (f.dim >= 0) w.value(f.dim);
  else w.null();
  w.key("expected").value(f.expected);
  w.key("seen").value(f.seen);
  w.key("created_at");
  jsonLocation(w, f.createdAt, o);
  w.endObject();
}

void jsonFunction(JsonWriter& w, const FunctionProfile& f, const RenderOptions& o) {
  w.beginObject();
  w.key("name").value(f.name);
  w.key("file").value(displayPath(f.file, o));
  w.key("line").value(f.firstLine);
  w.key("compiles").value(f.compiles);
  w.key("resume_compiles").value(f.resumeCompiles);
  w.key("resume_functions").value(f.resumeFunctions);
  w.key("compiles_with_resume").value(f.totalCompiles());
  w.key("recompiles").value(f.recompileCount());
  w.key("cache_limit_hits").value(f.cacheLimitHits);
  w.key("ran_eagerly_after_cache_limit").value(f.cacheLimitHits > 0);
  if (f.eagerRuns >= 0) w.key("eager_runs").value(f.eagerRuns);  // counted by profile_recompiles()
  w.key("compile_time_us");
  explain::jsonTime(w, f.compileUs, o);
  if (!f.backendCompiles.empty()) {
    w.key("backend_compiles_per_size");
    explain::jsonAotSizeCompiles(w, f.backendCompiles, o);
  }
  w.key("recompile_reasons").beginArray();
  for (const Recompile& r : f.recompiles) {
    w.beginObject();
    w.key("attempt").value(r.attempt);
    w.key("status").value(r.status);
    if (r.eagerRuns >= 0) w.key("eager_runs").value(r.eagerRuns);
    w.key("compile_time_us");
    explain::jsonTime(w, r.durationUs, o);
    w.key("failures").beginArray();
    for (const GuardFailureInfo& g : r.failures) jsonFailure(w, g, o);
    w.endArray();
    w.endObject();
  }
  w.endArray();
  w.key("suggestions").beginArray();
  for (const Suggestion& s : f.suggestions) {
    w.beginObject();
    w.key("id").value(s.id);
    w.key("message").value(s.message);
    w.key("where");
    jsonLocation(w, s.where, o);
    w.endObject();
  }
  w.endArray();
  w.endObject();
}

std::string renderJson(const ProfileReport& report, const RenderOptions& o) {
  JsonWriter w;
  w.beginObject();
  w.key("tool").value("dynamo-profile");
  w.key("store").value(displayPath(report.storePath, o));
  w.key("runs").beginArray();
  for (const RunProfile& r : report.runs) {
    w.beginObject();
    explain::jsonRun(w, r.run, o);
    w.key("compiles").value(r.compiles);
    w.key("recompiles").value(r.recompiles);
    w.key("cache_limit_hits").value(r.cacheLimitHits);
    w.key("compile_time_us");
    explain::jsonTime(w, r.compileUs, o);
    w.key("functions").beginArray();
    for (const FunctionProfile& f : r.functions) jsonFunction(w, f, o);
    w.endArray();
    w.endObject();
  }
  w.endArray();
  w.endObject();
  return w.str();
}

// ---- JUnit / Markdown / SARIF ---------------------------------------------------------------

std::string renderJunitReport(const ProfileReport& report, const RenderOptions& o) {
  std::vector<explain::JunitSuite> suites;
  for (const RunProfile& r : report.runs) {
    explain::JunitSuite suite = explain::junitSuite("dynamo-profile", "dynamo-profile: " + runTitle(r, o),
                                                    r.run, r.compileUs, o);
    for (const FunctionProfile& f : r.functions) {
      explain::JunitCase c;
      c.className = displayPath(f.file, o);
      c.name = functionTitle(f, o);
      c.timeUs = f.compileUs;
      // One failure per suggestion (a recompile cause with a known fix, or a cache-limit hit);
      // recompiles without a known pattern are listed in system-out.
      for (const Suggestion& s : f.suggestions)
        c.failures.push_back({s.id + ": " + s.message, s.id,
                              s.where.known() ? "at " + displayWhere(s.where.file, s.where.line, o) +
                                                    (s.where.sourceLine.empty() ? "" : ": " + s.where.sourceLine)
                                              : ""});
      std::ostringstream sysout;
      sysout << functionTotals(f, o) << "\n";
      for (const Recompile& rc : f.recompiles) sysout << "#" << rc.attempt << " " << recompileHeadline(rc) << "\n";
      c.systemOut = sysout.str();
      suite.cases.push_back(std::move(c));
    }
    suites.push_back(std::move(suite));
  }
  return explain::renderJunit("dynamo-profile", suites, o);
}

std::string renderMarkdown(const ProfileReport& report, const RenderOptions& o) {
  std::ostringstream out;
  std::int64_t recompiles = 0;
  for (const RunProfile& r : report.runs) recompiles += r.recompiles;
  out << "### dynamo-profile: " << plural(recompiles, "recompile") << "\n";
  for (const RunProfile& r : report.runs) {
    out << "\n**" << markdownCell(runTitle(r, o)) << "**: " << markdownCell(runTotals(r, o)) << "\n";
    std::string unfinished = explain::unfinishedRunNote(r.run, o);
    if (!unfinished.empty()) out << "\n> **Warning:** " << markdownCell(unfinished) << ".\n";
    if (r.functions.empty()) continue;
    out << "\n| Function | Compiles | Recompiles | Cache-limit hits | Compile time | Main reason |\n"
           "|---|---:|---:|---:|---:|---|\n";
    for (const FunctionProfile& f : r.functions) {
      std::string reason = f.recompiles.empty() ? "" : recompileHeadline(f.recompiles.front());
      out << "| `" << markdownCell(f.name) << "` (" << markdownCell(displayWhere(f.file, f.firstLine, o))
          << ") | " << f.totalCompiles()
          << (f.resumeCompiles ? " (" + std::to_string(f.compiles) + " + " + std::to_string(f.resumeCompiles) + " resume)" : "")
          << " | " << f.recompileCount() << " | " << f.cacheLimitHits << " | "
          << displayDuration(f.compileUs, o) << " | " << markdownCell(reason) << " |\n";
    }
    for (const FunctionProfile& f : r.functions) {
      if (f.suggestions.empty()) continue;
      out << "\n**Suggestions for `" << markdownCell(f.name) << "`**\n\n";
      for (const Suggestion& s : f.suggestions) {
        out << "- " << markdownCell(s.message);
        if (s.where.known()) out << " (`" << markdownCell(displayWhere(s.where.file, s.where.line, o)) << "`)";
        out << "\n";
      }
    }
  }
  return out.str();
}

std::string renderSarifReport(const ProfileReport& report, const RenderOptions& o) {
  static const std::vector<explain::SarifRule> rules = {
      {"changing-size", "recompile: a tensor size changes from call to call",
       "automatic dynamic shapes did not apply: call dynamo.mark_dynamic(x, dim), or pad or bucket the input to a few sizes"},
      {"shape-guard", "recompile: a shape guard of a dynamic entry fails from call to call",
       "keep the size symbolic (tensor ops rather than Python ints), widen the mark_dynamic range, or give independent sizes their own symbols"},
      {"global-rebound", "recompile: a global is rebound from call to call",
       "pass it as an argument or make it constant"},
      {"value-across-break", "recompile: a Python value computed before a graph break varies",
       "keep it a tensor (drop .item() / float()), or do the conversion outside the compiled function"},
      {"varying-int", "recompile: a Python int argument varies",
       "automatic dynamic did not make it symbolic: pass it as a tensor (torch.tensor(n)) or hoist it out of the compiled function"},
      {"cache-limit", "the function hit cache_size_limit and runs eagerly",
       "remove the recompile causes, or raise dynamo.config.cache_size_limit"},
  };
  std::vector<explain::SarifResult> results;
  for (const RunProfile& r : report.runs)
    for (const FunctionProfile& f : r.functions)
      for (const Suggestion& s : f.suggestions)
        results.push_back({s.id, s.id == "cache-limit" ? "error" : "warning",
                           f.name + ": " + s.message, s.where.file, s.where.line, s.where.sourceLine});
  return explain::renderSarif("dynamo-profile", rules, results, o);
}

}  // namespace

std::string renderProfile(const ProfileReport& report, Format format, const RenderOptions& o) {
  switch (format) {
    case Format::kText: return renderText(report, o);
    case Format::kJson: return renderJson(report, o);
    case Format::kJunit: return renderJunitReport(report, o);
    case Format::kMarkdown: return renderMarkdown(report, o);
    case Format::kSarif: return renderSarifReport(report, o);
  }
  return renderText(report, o);
}

explain::PolicyResult checkProfilePolicy(const ProfileReport& report, const ProfilePolicy& policy,
                                         const RenderOptions& o) {
  explain::PolicyResult result;
  for (const RunProfile& r : report.runs) {
    for (const FunctionProfile& f : r.functions) {
      if (policy.maxRecompiles && f.recompileCount() > *policy.maxRecompiles) {
        result.code = 1;
        result.message += "dynamo-profile: " + functionTitle(f, o) + " recompiled " +
                          std::to_string(f.recompileCount()) + " times, more than --max-recompiles " +
                          std::to_string(*policy.maxRecompiles) + "\n";
      }
      if (policy.failOnCacheLimit && f.cacheLimitHits > 0) {
        result.code = 1;
        result.message += "dynamo-profile: " + functionTitle(f, o) + " hit cache_size_limit\n";
      }
    }
  }
  return result;
}

}  // namespace dynamo::profiler
