// renderExplainSummary: the text of dynamo.explain()'s ExplainOutput (explain_report.h), from the
// same RunExplain that dynamo-explain renders, so both name ops, group breaks and count
// occurrences the one way (BreakTally, graphOpKey).
//
//   Graph Count: 3
//   Graph Break Count: 2
//   Op Count: 5
//   Break Reasons (2 distinct):
//     1. print at model.py:12 (4 times)
//          print("step", i)
//        why: call to print(): ...
//        hint: ...
//        user stack (first occurrence, outermost first):     only for a break in a callee
//          model.py:20: x = stepper(x, i)
//   Not compiled: looped (model.py:18) skipped: graph break inside a loop ...
//   Ops per Graph:
//     1. two_breaks: torch.Tensor.sin x1                     in compile order
//   Guards: 13 (TENSOR_MATCH 3, ...)                         most frequent first
//   Compile Time: 1.234 ms (capture 0.800, guards 0.100, backend 0.200)
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <tuple>

#include "dynamo/explain/explain_report.h"
#include "dynamo/explain/render_util.h"

namespace dynamo::explain {

namespace {

std::string strip(const std::string& s) {
  size_t first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  size_t last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

std::string ms(std::int64_t us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(us) / 1000.0);
  return buf;
}

void summaryBreak(std::ostringstream& out, size_t index, const BreakGroup& b,
                  const RenderOptions& o) {
  out << "  " << index << ". " << b.kind << " at "
      << displayWhere(b.location.file, b.location.line, o);
  if (b.occurrences > 1) out << " (" << b.occurrences << " times)";
  out << "\n";
  std::string source = strip(b.location.sourceLine);
  if (!source.empty()) out << "       " << source << "\n";
  if (!b.explanation.empty()) out << "     why: " << b.explanation << "\n";
  if (!b.hints.empty() && !b.hints.front().empty()) out << "     hint: " << b.hints.front() << "\n";
  // The stack says more than the location only when the break sits in a called function.
  if (b.userStack.size() > 1) {
    out << "     user stack (first occurrence, outermost first):\n";
    for (const std::string& s : b.userStack) out << "       " << stackEntry(s, o) << "\n";
  }
}

std::int64_t phaseUs(const RunExplain& run, const std::string& name) {
  std::int64_t us = 0;
  for (const FunctionReport& f : run.functions)
    for (const storage::CompilePhase& p : f.phases)
      if (p.name == name) us += p.durationUs;
  return us;
}

}  // namespace

std::string renderExplainSummary(const RunExplain& run, const RenderOptions& o) {
  std::ostringstream out;
  std::int64_t occurrences = 0;
  for (const BreakGroup& b : run.breaks) occurrences += b.occurrences;
  out << "Graph Count: " << run.graphs << "\n"
      << "Graph Break Count: " << occurrences << "\n"
      << "Op Count: " << run.ops << "\n";
  if (run.breaks.empty()) {
    out << "Break Reasons: none\n";
  } else {
    out << "Break Reasons (" << run.breaks.size() << " distinct):\n";
    size_t i = 0;
    for (const BreakGroup& b : run.breaks) summaryBreak(out, ++i, b, o);
  }
  for (const FunctionReport& f : run.functions) {
    for (const auto& [status, reason] : f.notCompiled) {
      std::string first = reason.substr(0, reason.find('\n'));
      out << strip("Not compiled: " + f.name + " (" + displayWhere(f.file, f.firstLine, o) + ") " +
                   status + ": " + strip(first))
          << "\n";
    }
  }
  // Graphs in compile order (compile ids grow with time), whichever function they belong to.
  std::vector<std::tuple<RowId, int, const std::string*, const GraphSummary*>> graphs;
  for (const FunctionReport& f : run.functions)
    for (const GraphSummary& g : f.graphs) graphs.emplace_back(g.compileId, g.index, &f.name, &g);
  std::sort(graphs.begin(), graphs.end());
  if (!graphs.empty()) {
    out << "Ops per Graph:\n";
    size_t i = 0;
    for (const auto& [id, index, name, g] : graphs) {
      std::string ops;
      for (const auto& [op, n] : g->opCounts)
        ops += (ops.empty() ? "" : ", ") + op + " x" + std::to_string(n);
      out << "  " << ++i << ". " << *name << ": " << (ops.empty() ? "(no ops)" : ops) << "\n";
    }
  }
  std::map<std::string, std::int64_t> kinds;
  std::int64_t guards = 0;
  for (const FunctionReport& f : run.functions) {
    guards += f.guards;
    for (const auto& [kind, n] : f.guardKinds) kinds[kind] += n;
  }
  if (guards == 0) {
    out << "Guards: none\n";
  } else {
    std::vector<std::pair<std::string, std::int64_t>> byCount(kinds.begin(), kinds.end());
    std::stable_sort(byCount.begin(), byCount.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    out << "Guards: " << guards << " (";
    for (size_t i = 0; i < byCount.size(); ++i)
      out << (i ? ", " : "") << byCount[i].first << " " << byCount[i].second;
    out << ")\n";
  }
  out << "Compile Time: " << ms(run.compileUs) << " ms (capture " << ms(phaseUs(run, "capture"))
      << ", guards " << ms(phaseUs(run, "guards")) << ", backend " << ms(phaseUs(run, "backend"))
      << ")\n";
  return out.str();
}

}  // namespace dynamo::explain
