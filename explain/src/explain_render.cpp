// The explainer's renderers: text, JSON, JUnit XML, Markdown and SARIF (explain_report.h).
#include <regex>
#include <sstream>

#include "dynamo/explain/explain_report.h"
#include "dynamo/explain/render_util.h"

namespace dynamo::explain {


namespace {

std::int64_t occurrences(const std::vector<BreakGroup>& groups) {
  std::int64_t n = 0;
  for (const BreakGroup& g : groups) n += g.occurrences;
  return n;
}

// The run as the "did not finish cleanly" note shows it: a crash's file displayed like every
// other path of the report (relative to the root, masked).
storage::RunRecord runForNote(const storage::RunRecord& run, const RenderOptions& o) {
  storage::RunRecord shown = run;
  shown.crash.frameFile = displayPath(run.crash.frameFile, o);
  return shown;
}

std::string runTitle(const RunExplain& r, const RenderOptions& o) {
  std::string cmd = commandLine(r.run, o);
  return "run " + std::to_string(r.run.id) + (cmd.empty() ? "" : " (" + cmd + ")");
}

std::string runTotals(const RunExplain& r, const RenderOptions& o) {
  return plural(static_cast<std::int64_t>(r.functions.size()), "function") + ", " +
         plural(r.compiles, "compile") + ": " + plural(r.graphs, "graph") + " (" +
         plural(r.ops, "op") + "), " + plural(static_cast<std::int64_t>(r.breaks.size()),
                                             "distinct graph break") +
         " (" + plural(occurrences(r.breaks), "occurrence") + "), compile time " +
         displayDuration(r.compileUs, o);
}

std::string statusList(const FunctionReport& f) {
  std::string out;
  for (const auto& [status, n] : f.statuses) out += (out.empty() ? "" : ", ") + std::to_string(n) + " " + status;
  return out;
}

std::string phaseList(const FunctionReport& f, const RenderOptions& o) {
  std::string out;
  for (const storage::CompilePhase& p : f.phases)
    out += (out.empty() ? "" : ", ") + p.name + " " + displayDuration(p.durationUs, o);
  return out;
}

std::string opList(const GraphSummary& g) {
  std::string out;
  for (const auto& [op, n] : g.opCounts) out += (out.empty() ? "" : ", ") + op + " x" + std::to_string(n);
  return out;
}

std::string breakTitle(const BreakGroup& b, const RenderOptions& o) {
  return b.kind + " at " + displayWhere(b.location.file, b.location.line, o);
}

std::string times(std::int64_t n) { return n == 1 ? "once" : std::to_string(n) + " times"; }

void textBreak(std::ostringstream& out, size_t index, const BreakGroup& b, const RenderOptions& o) {
  out << "  " << index << ". " << breakTitle(b, o) << ", " << times(b.occurrences) << " (met in "
      << plural(b.compiles, "compile") << ")\n";
  if (!b.location.sourceLine.empty()) out << "       |  " << b.location.sourceLine << "\n";
  if (!b.explanation.empty()) out << "     = why: " << b.explanation << "\n";
  for (const std::string& h : b.hints) out << "     = hint: " << h << "\n";
  if (b.userStack.size() > 1) {
    out << "     = first seen from:\n";
    for (const std::string& s : b.userStack) out << "         " << stackEntry(s, o) << "\n";
  }
}

// "dynamic: x.size()[0] as s0 in [2, inf] (why), ...; 2 shape guards", then what was
// specialised and why sizes stayed static (the newest compile's record).
// A dynamic-shape line with its "at file.py:12" locations shown by displayWhere.
std::string shapeLine(const std::string& line, const RenderOptions& o) {
  static const std::regex kAt(R"(( at )(\S+\.py):(\d+))");
  std::string out;
  auto begin = std::sregex_iterator(line.begin(), line.end(), kAt);
  size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    out += line.substr(last, m.position(0) - last) + m[1].str() + displayWhere(m[2].str(), std::stoi(m[3].str()), o);
    last = m.position(0) + m.length(0);
  }
  return out + line.substr(last);
}

void textDynamicShapes(std::ostringstream& out, const DynamicShapes& d, const RenderOptions& o) {
  if (!d.dynamic.empty()) {
    out << "     dynamic: ";
    for (size_t i = 0; i < d.dynamic.size(); ++i) {
      const DynamicDim& dim = d.dynamic[i];
      out << (i ? ", " : "") << dim.source << " as " << dim.symbol << (dim.range.empty() ? "" : " in " + dim.range)
          << " (" << dim.why << ")";
    }
    out << "; " << plural(static_cast<std::int64_t>(d.guards.size()), "shape guard") << "\n";
  }
  for (const std::string& s : d.specialised) out << "     specialised: " << shapeLine(s, o) << "\n";
  for (const std::string& n : d.notes) out << "     static: " << shapeLine(n, o) << "\n";
}

void textFunction(std::ostringstream& out, const FunctionReport& f, const RenderOptions& o) {
  out << "  " << f.name << " (" << displayWhere(f.file, f.firstLine, o) << "): "
      << plural(f.compiles, "compile") << " (" << statusList(f) << "), "
      << plural(static_cast<std::int64_t>(f.graphs.size()), "graph") << ", "
      << plural(f.guards, "guard") << ", " << displayDuration(f.compileUs, o);
  std::string phases = phaseList(f, o);
  out << (phases.empty() ? "" : " (" + phases + ")") << "\n";
  if (!f.notCompiledReason.empty()) out << "     not compiled: " << f.notCompiledReason << "\n";
  for (const GraphSummary& g : f.graphs) {
    out << "     graph " << g.index << " of compile #" << g.attempt << ": "
        << plural(g.ops(), "op");
    std::string ops = opList(g);
    out << (ops.empty() ? "" : " (" + ops + ")") << "\n";
    if (g.aot) out << "       aot: " << aotLine(*g.aot, o) << "\n";
    if (!g.aotPerSize.empty()) {
      std::int64_t us = 0;
      std::string sigs;
      std::vector<std::vector<std::string>> varying = varyingSignatures(g.aotPerSize);
      for (size_t i = 0; i < varying.size(); ++i) {
        us += g.aotPerSize[i].compileUs;
        std::string sig;
        for (const std::string& e : varying[i]) sig += (sig.empty() ? "" : ", ") + e;
        sigs += (i ? "; " : "") + sig;
      }
      // The AOT backends trace per signature; "fused" lowers per signature (its kernels shared).
      const bool fused = g.aotPerSize.front().backend == "fused";
      out << (fused ? "       fused lowering per input signature: " : "       aot per input signature: ")
          << plural(static_cast<std::int64_t>(g.aotPerSize.size()), "compile")
          << " (" << sigs << "), " << displayDuration(us, o) << "\n";
      for (const AotSizeCompile& c : g.aotPerSize)
        if (c.lowering >= 0) out << "         " << sizeLoweringLine(c, o) << "\n";
    }
  }
  for (const BreakGroup& b : f.breaks)
    out << "     break: " << breakTitle(b, o) << ", " << times(b.occurrences) << "\n";
  textDynamicShapes(out, f.dynamicShapes, o);
}

}  // namespace

std::string renderExplainText(const ExplainReport& report, const RenderOptions& o) {
  std::ostringstream out;
  if (report.runs.empty()) {
    out << "dynamo-explain: " << displayPath(report.storePath, o)
        << " holds no runs: nothing was compiled\n";
    return out.str();
  }
  bool firstRun = true;
  for (const RunExplain& r : report.runs) {
    if (!firstRun) out << "\n";
    firstRun = false;
    out << "dynamo-explain: " << runTitle(r, o) << "\n";
    std::string unfinished = unfinishedRunNote(runForNote(r.run, o));
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
    if (!r.breaks.empty()) {
      out << "\nGraph breaks (distinct, most frequent first):\n";
      size_t i = 0;
      for (const BreakGroup& b : r.breaks) textBreak(out, ++i, b, o);
    }
    out << "\nFunctions:\n";
    for (const FunctionReport& f : r.functions) textFunction(out, f, o);
  }
  return out.str();
}

// ---- JSON -----------------------------------------------------------------------------------

namespace {

void jsonBreak(JsonWriter& w, const BreakGroup& b, const RenderOptions& o) {
  w.beginObject();
  w.key("kind").value(b.kind);
  w.key("file").value(displayPath(b.location.file, o));
  w.key("line").value(b.location.line);
  w.key("source_line").value(b.location.sourceLine);
  w.key("occurrences").value(b.occurrences);
  w.key("compiles").value(b.compiles);
  w.key("explanation").value(b.explanation);
  w.key("hints").beginArray();
  for (const std::string& h : b.hints) w.value(h);
  w.endArray();
  w.key("user_stack").beginArray();
  for (const std::string& s : b.userStack) w.value(stackEntry(s, o));
  w.endArray();
  w.endObject();
}

void jsonFunction(JsonWriter& w, const FunctionReport& f, const RenderOptions& o) {
  w.beginObject();
  w.key("name").value(f.name);
  w.key("file").value(displayPath(f.file, o));
  w.key("line").value(f.firstLine);
  w.key("compiles").value(f.compiles);
  w.key("statuses").beginObject();
  for (const auto& [status, n] : f.statuses) w.key(status).value(n);
  w.endObject();
  if (!f.notCompiledReason.empty()) w.key("not_compiled_reason").value(f.notCompiledReason);
  w.key("graphs").beginArray();
  for (const GraphSummary& g : f.graphs) {
    w.beginObject();
    w.key("attempt").value(g.attempt);
    w.key("index").value(g.index);
    w.key("nodes").value(g.numNodes);
    w.key("ops").value(g.ops());
    w.key("op_counts").beginObject();
    for (const auto& [op, n] : g.opCounts) w.key(op).value(n);
    w.endObject();
    if (!g.aotPerSize.empty()) {
      w.key("aot_per_size");
      jsonAotSizeCompiles(w, g.aotPerSize, o);
    }
    w.key("aot");
    if (g.aot) jsonAot(w, *g.aot, o);
    else w.null();
    w.endObject();
  }
  w.endArray();
  w.key("breaks").beginArray();
  for (const BreakGroup& b : f.breaks) jsonBreak(w, b, o);
  w.endArray();
  w.key("guards").value(f.guards);
  if (!f.dynamicShapes.empty()) {
    const DynamicShapes& d = f.dynamicShapes;
    w.key("dynamic_shapes").beginObject();
    w.key("dynamic").beginArray();
    for (const DynamicDim& dim : d.dynamic) {
      w.beginObject();
      w.key("source").value(dim.source);
      w.key("symbol").value(dim.symbol);
      w.key("range").value(dim.range);
      w.key("why").value(dim.why);
      w.endObject();
    }
    w.endArray();
    for (const auto& [key, list] : {std::pair<const char*, const std::vector<std::string>*>{"specialised", &d.specialised},
                                    {"guards", &d.guards}, {"notes", &d.notes}}) {
      w.key(key).beginArray();
      for (const std::string& s : *list) w.value(shapeLine(s, o));
      w.endArray();
    }
    w.endObject();
  }
  w.key("compile_time_us");
  jsonTime(w, f.compileUs, o);
  w.key("phases_us").beginObject();
  for (const storage::CompilePhase& p : f.phases) {
    w.key(p.name);
    jsonTime(w, p.durationUs, o);
  }
  w.endObject();
  w.endObject();
}

}  // namespace

std::string renderExplainJson(const ExplainReport& report, const RenderOptions& o) {
  JsonWriter w;
  w.beginObject();
  w.key("tool").value("dynamo-explain");
  w.key("store").value(displayPath(report.storePath, o));
  w.key("distinct_breaks").value(report.distinctBreaks());
  w.key("runs").beginArray();
  for (const RunExplain& r : report.runs) {
    w.beginObject();
    jsonRun(w, r.run, o);
    w.key("functions_compiled").value(static_cast<std::int64_t>(r.functions.size()));
    w.key("compiles").value(r.compiles);
    w.key("graphs").value(r.graphs);
    w.key("ops").value(r.ops);
    w.key("distinct_breaks").value(static_cast<std::int64_t>(r.breaks.size()));
    w.key("break_occurrences").value(occurrences(r.breaks));
    w.key("runtime_hits_recorded").value(r.hitsRecorded);
    w.key("compile_time_us");
    jsonTime(w, r.compileUs, o);
    w.key("breaks").beginArray();
    for (const BreakGroup& b : r.breaks) jsonBreak(w, b, o);
    w.endArray();
    w.key("functions").beginArray();
    for (const FunctionReport& f : r.functions) jsonFunction(w, f, o);
    w.endArray();
    w.endObject();
  }
  w.endArray();
  w.endObject();
  return w.str();
}

// ---- JUnit ----------------------------------------------------------------------------------

std::string renderExplainJunit(const ExplainReport& report, const RenderOptions& o) {
  std::vector<JunitSuite> suites;
  for (const RunExplain& r : report.runs) {
    JunitSuite suite =
        junitSuite("dynamo-explain", "dynamo-explain: " + runTitle(r, o), r.run, r.compileUs, o);
    for (const FunctionReport& f : r.functions) {
      JunitCase c;
      c.className = displayPath(f.file, o);
      c.name = f.name + " (" + displayWhere(f.file, f.firstLine, o) + ")";
      c.timeUs = f.compileUs;
      for (const BreakGroup& b : f.breaks) {
        std::ostringstream body;
        body << breakTitle(b, o) << ", " << times(b.occurrences) << "\n";
        if (!b.location.sourceLine.empty()) body << "  |  " << b.location.sourceLine << "\n";
        if (!b.explanation.empty()) body << "why: " << b.explanation << "\n";
        for (const std::string& h : b.hints) body << "hint: " << h << "\n";
        for (const std::string& s : b.userStack) body << "  at " << stackEntry(s, o) << "\n";
        c.failures.push_back({"graph break: " + breakTitle(b, o) + " (" + times(b.occurrences) + ")",
                              b.kind, body.str()});
      }
      std::ostringstream sysout;
      sysout << plural(f.compiles, "compile") << ", " << plural(f.guards, "guard") << "\n";
      for (const GraphSummary& g : f.graphs)
        sysout << "graph " << g.index << " of compile #" << g.attempt << ": " << plural(g.ops(), "op")
               << (g.opCounts.empty() ? "" : " (" + opList(g) + ")") << "\n";
      if (!f.notCompiledReason.empty()) sysout << "not compiled: " << f.notCompiledReason << "\n";
      c.systemOut = sysout.str();
      suite.cases.push_back(std::move(c));
    }
    suites.push_back(std::move(suite));
  }
  return renderJunit("dynamo-explain", suites, o);
}

// ---- Markdown -------------------------------------------------------------------------------

std::string renderExplainMarkdown(const ExplainReport& report, const RenderOptions& o) {
  std::ostringstream out;
  std::int64_t distinct = report.distinctBreaks();
  out << "### dynamo-explain: " << plural(distinct, "distinct graph break") << "\n";
  for (const RunExplain& r : report.runs) {
    out << "\n**" << markdownCell(runTitle(r, o)) << "**: " << markdownCell(runTotals(r, o)) << "\n";
    std::string unfinished = unfinishedRunNote(runForNote(r.run, o));
    if (!unfinished.empty()) out << "\n> **Warning:** " << markdownCell(unfinished) << ".\n";
    if (!r.breaks.empty()) {
      out << "\n| # | Break | Location | Count | Source |\n|---|---|---|---:|---|\n";
      size_t i = 0;
      for (const BreakGroup& b : r.breaks)
        out << "| " << ++i << " | " << markdownCell(b.kind) << " | `"
            << markdownCell(displayWhere(b.location.file, b.location.line, o)) << "` | " << b.occurrences
            << " | `" << markdownCell(b.location.sourceLine) << "` |\n";
      i = 0;
      for (const BreakGroup& b : r.breaks) {
        out << "\n<details><summary>" << ++i << ". " << xmlEscape(breakTitle(b, o))
            << "</summary>\n\n";
        if (!b.explanation.empty()) out << "- **Why:** " << markdownCell(b.explanation) << "\n";
        for (const std::string& h : b.hints) out << "- **Hint:** " << markdownCell(h) << "\n";
        if (!b.userStack.empty()) {
          out << "\n```\n";
          for (const std::string& s : b.userStack) out << stackEntry(s, o) << "\n";
          out << "```\n";
        }
        out << "\n</details>\n";
      }
    }
    if (!r.functions.empty()) {
      out << "\n| Function | Compiles | Graphs | Ops | Breaks | Guards | Compile time |\n"
             "|---|---:|---:|---:|---:|---:|---:|\n";
      for (const FunctionReport& f : r.functions) {
        int ops = 0;
        for (const GraphSummary& g : f.graphs) ops += g.ops();
        out << "| `" << markdownCell(f.name) << "` (" << markdownCell(displayWhere(f.file, f.firstLine, o))
            << ") | " << f.compiles << " | " << f.graphs.size() << " | " << ops << " | "
            << f.breaks.size() << " | " << f.guards << " | " << displayDuration(f.compileUs, o)
            << " |\n";
      }
    }
  }
  return out.str();
}

// ---- SARIF ----------------------------------------------------------------------------------

std::string renderExplainSarif(const ExplainReport& report, const RenderOptions& o) {
  std::vector<SarifRule> rules;
  std::vector<SarifResult> results;
  for (const RunExplain& r : report.runs) {
    for (const BreakGroup& b : r.breaks) {
      bool known = false;
      for (const SarifRule& rule : rules) known = known || rule.id == b.kind;
      if (!known) {
        std::string why = b.explanation;
        size_t colon = why.find(": ");
        rules.push_back({b.kind, "graph break: " + b.kind,
                         b.hints.empty() ? (colon == std::string::npos ? why : why.substr(colon + 2))
                                         : b.hints.front()});
      }
      std::string message = "graph break (" + b.kind + "), " + times(b.occurrences) + ": " +
                            b.explanation;
      if (!b.hints.empty()) message += ". Hint: " + b.hints.front();
      results.push_back({b.kind, "warning", message, b.location.file, b.location.line,
                         b.location.sourceLine});
    }
  }
  return renderSarif("dynamo-explain", rules, results, o);
}

std::string renderExplain(const ExplainReport& report, Format format, const RenderOptions& o) {
  switch (format) {
    case Format::kText: return renderExplainText(report, o);
    case Format::kJson: return renderExplainJson(report, o);
    case Format::kJunit: return renderExplainJunit(report, o);
    case Format::kMarkdown: return renderExplainMarkdown(report, o);
    case Format::kSarif: return renderExplainSarif(report, o);
  }
  return renderExplainText(report, o);
}

// ---- policy ---------------------------------------------------------------------------------

PolicyResult checkExplainPolicy(const ExplainReport& report, const ExplainPolicy& policy,
                                const RenderOptions& o) {
  PolicyResult result;
  std::int64_t distinct = report.distinctBreaks();
  if (policy.fullgraph && distinct > 0) {
    result.code = 1;
    result.message += "dynamo-explain: --fullgraph: the script has " +
                      plural(distinct, "distinct graph break") + "; the first is ";
    for (const RunExplain& r : report.runs) {
      if (r.breaks.empty()) continue;
      const BreakGroup& b = r.breaks.front();
      result.message += breakTitle(b, o) +
                        (b.location.sourceLine.empty() ? "" : ": " + b.location.sourceLine);
      break;
    }
    result.message += "\n";
  }
  if (policy.maxBreaks && distinct > *policy.maxBreaks) {
    result.code = 1;
    result.message += "dynamo-explain: " + plural(distinct, "distinct graph break") +
                      ", more than --max-breaks " + std::to_string(*policy.maxBreaks) + "\n";
  }
  return result;
}

}  // namespace dynamo::explain
