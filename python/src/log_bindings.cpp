// DYNAMO_LOGS: short, one-event-per-line compile logs on stderr, printed here from the compile
// record (log_bindings.h), with no Python dict in between:
//
//   Compiler::compile --compiled(record)--> TraceSink (recording_bindings.cpp)
//                                              |-- logCompile(record) --> sys.stderr
//                                              '-- trace store rows
//   python/dynamo/logs.py: parses DYNAMO_LOGS / set_logs() --_C._logs.set_levels--> levels here
//
// The lines (docs/logs.md; pinned by tests/python/test_logs.py):
//   [dynamo] graph break (print) at prog.py:7: print("step", i)  — call to print()
//   [dynamo] recompiling step (prog.py:5), attempt 1: 'i' changed: expected 0, got 1 (guard created at prog.py:6)
//   [dynamo] step (prog.py:5) hit cache_size_limit after 2 compiles; it runs eagerly from now on. Last reason: ...
//   [dynamo] guards of step (prog.py:5), attempt 0:            then the listing, indented 4
//   [dynamo] pass dce on step (prog.py:5), attempt 0 (unchanged) (4 -> 4 nodes)
//   [dynamo] graph 0 of step (prog.py:5), attempt 0 (2 nodes):  then the printed graph
//   [dynamo] transformed bytecode of step (prog.py:5), attempt 0:
// Files are shown relative to the working directory when they lie under it.
#include "log_bindings.h"

#include "bindings.h"

#include <unistd.h>

#include <climits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "dynamo/common/compile_status.h"
#include "py_util.h"

namespace dynamo::py {

namespace {

constexpr const char* kPrefix = "[dynamo] ";

using BreakKey = std::tuple<std::string, std::string, int>;  // kind, file, line

struct LogState {
  std::map<std::string, int> levels;   ///< log name -> 1 (on) or 2 (verbose); absent: off
  std::map<BreakKey, long long> breaks;  ///< graph breaks met while graph_breaks logs on
};

LogState& state() {
  static LogState s;  // GIL held
  return s;
}

int level(const char* name) {
  const auto& levels = state().levels;
  auto it = levels.find(name);
  return it == levels.end() ? 0 : it->second;
}

std::string strip(const std::string& s) {
  size_t first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

// `file` relative to the working directory when it lies under it (dynamo.utils.short_path).
std::string shortPath(const std::string& file) {
  if (file.empty()) return "?";
  if (file[0] == '<') return file;
  char buf[PATH_MAX];
  if (getcwd(buf, sizeof buf) == nullptr) return file;
  std::string cwd = buf;
  if (cwd != "/") cwd += '/';
  return file.compare(0, cwd.size(), cwd) == 0 ? file.substr(cwd.size()) : file;
}

std::string where(const std::string& file, int line) { return shortPath(file) + ":" + std::to_string(line); }

std::string functionTitle(const core::CompileRecord& r) {
  return r.function + " (" + where(r.where.file, r.where.line) + ")";
}

void block(std::vector<std::string>& out, const std::string& title, const std::string& body) {
  size_t end = body.find_last_not_of('\n');
  if (end == std::string::npos) return;
  out.push_back(kPrefix + title + ":");
  size_t start = 0;
  while (start <= end) {
    size_t nl = body.find('\n', start);
    if (nl == std::string::npos || nl > end) nl = end + 1;
    out.push_back("    " + body.substr(start, nl - start));
    start = nl + 1;
  }
}

void graphBreakLines(std::vector<std::string>& out, const core::CompileRecord& r) {
  for (const core::BreakRecord& b : r.breaks) {
    if (state().breaks[{b.kind, b.where.file, b.where.line}]++ > 0) continue;
    std::string line = std::string(kPrefix) + "graph break (" + b.kind + ") at " + where(b.where.file, b.where.line);
    std::string source = strip(b.where.sourceLine);
    if (!source.empty()) line += ": " + source;
    if (!b.detail.empty()) line += "  \u2014 " + b.detail;
    out.push_back(line);
    if (level("graph_breaks") > 1) {
      for (const SourceLocation& s : b.userStack) {
        std::string src = strip(s.sourceLine);
        out.push_back("    at " + where(s.file, s.line) + (src.empty() ? "" : ": " + src));
      }
    }
  }
}

// Where a failing guard was created: "file:line[: source]", "" when unknown.
std::string createdAt(const core::GuardFailure& f, bool withSource) {
  if (!f.where.known()) return "";
  std::string text = where(f.where.file, f.where.line);
  std::string source = strip(f.where.sourceLine);
  return withSource && !source.empty() ? text + ": " + source : text;
}

std::string reasonText(const core::GuardFailure& f) {
  std::string created = createdAt(f, false);
  return created.empty() ? f.reason : f.reason + " (guard created at " + created + ")";
}

void recompileLines(std::vector<std::string>& out, const core::CompileRecord& r) {
  std::vector<const core::GuardFailure*> failures;
  for (const core::EntryMiss& m : r.misses)
    for (const core::GuardFailure& f : m.failures) failures.push_back(&f);
  if (r.status == CompileStatus::kCacheLimit) {
    out.push_back(std::string(kPrefix) + functionTitle(r) + " hit cache_size_limit after " +
                  std::to_string(r.attempt) + " compiles; it runs eagerly from now on. Last reason: " +
                  (failures.empty() ? "?" : reasonText(*failures.front())));
    return;
  }
  if (!compileStatusMadeEntry(r.status) || r.attempt == 0 || failures.empty()) return;
  out.push_back(std::string(kPrefix) + "recompiling " + functionTitle(r) + ", attempt " +
                std::to_string(r.attempt) + ": " + reasonText(*failures.front()));
  if (level("recompiles") > 1) {
    for (const core::GuardFailure* f : failures) {
      std::string created = createdAt(*f, true);
      out.push_back("    - " + f->reason + (created.empty() ? "" : "  (guard created at " + created + ")"));
    }
  }
}

void listingLines(std::vector<std::string>& out, const core::CompileRecord& r) {
  std::string of = functionTitle(r) + ", attempt " + std::to_string(r.attempt);
  if (level("guards")) block(out, "guards of " + of, r.guardText);
  if (level("passes")) {
    for (const core::PassRecord& p : r.passes) {
      std::string nodes = " (" + std::to_string(p.nodesBefore) + " -> " + std::to_string(p.nodesAfter) + " nodes)";
      if (p.status == "changed")
        block(out, "pass " + p.name + " on " + of + ": changed" + nodes, p.graphText);
      else if (p.status == "unchanged")
        out.push_back(std::string(kPrefix) + "pass " + p.name + " on " + of + " (unchanged)" + nodes);
      else
        out.push_back(std::string(kPrefix) + "pass " + p.name + " on " + of + ": " + p.status + nodes);
      // Numbered as DYNAMO_BISECT_PASS=name:N counts them.
      for (const core::PassApplication& a : p.applications)
        out.push_back("    application " + std::to_string(a.index) + ": " + a.node + " (" + a.op + ")" +
                      (a.where.known() ? " at " + where(a.where.file, a.where.line) : "") +
                      (a.applied ? "" : " (skipped: past DYNAMO_BISECT_PASS)"));
    }
  }
  if (level("graph")) {
    for (size_t i = 0; i < r.graphs.size(); ++i) {
      std::string text = i < r.printedGraphs.size() ? r.printedGraphs[i] : "";
      block(out, "graph " + std::to_string(i) + " of " + of + " (" + std::to_string(r.graphs[i].body().size()) +
                     " nodes)", text);
    }
  }
  if (level("bytecode")) block(out, "transformed bytecode of " + of, r.bytecode);
}

void emit(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& l : lines) text += l + "\n";
  PyObject* err = PySys_GetObject("stderr");  // borrowed ref
  if (err == nullptr || err == Py_None) return;
  if (PyFile_WriteString(text.c_str(), err) < 0) {
    PyErr_Clear();
    return;
  }
  PyRef r = PyRef::steal(PyObject_CallMethod(err, "flush", nullptr));
  if (!r) PyErr_Clear();
}

// ---- dynamo._C._logs ----------------------------------------------------------------------------

// set_levels({name: level}): replaces the levels (1 on, 2 verbose) and forgets the breaks seen.
PyObject* setLevels(PyObject*, PyObject* levels) {
  if (!PyDict_Check(levels)) {
    PyErr_SetString(PyExc_TypeError, "set_levels: expected a dict {name: level}");
    return nullptr;
  }
  DYNAMO_PY_TRY
  std::map<std::string, int> parsed;
  PyObject *key, *value;  // borrowed refs
  Py_ssize_t pos = 0;
  while (PyDict_Next(levels, &pos, &key, &value)) {
    long n = PyLong_AsLong(value);
    if (n == -1 && PyErr_Occurred()) throw PythonError{};
    if (n > 0) parsed[toString(key)] = static_cast<int>(n);
  }
  state().levels = std::move(parsed);
  state().breaks.clear();
  Py_RETURN_NONE;
  DYNAMO_PY_CATCH(nullptr)
}

// graph_break_counts() -> {(kind, file, line): times met}
PyObject* graphBreakCounts(PyObject*, PyObject*) {
  DYNAMO_PY_TRY
  PyRef out = PyRef::steal(checkPy(PyDict_New()));
  for (const auto& [key, n] : state().breaks) {
    const auto& [kind, file, line] = key;
    PyRef k = PyRef::steal(checkPy(Py_BuildValue("(ssi)", kind.c_str(), file.c_str(), line)));
    PyRef v = PyRef::steal(checkPy(PyLong_FromLongLong(n)));
    if (PyDict_SetItem(out.get(), k.get(), v.get()) < 0) throw PythonError{};
  }
  return out.release();
  DYNAMO_PY_CATCH(nullptr)
}

PyMethodDef logMethods[] = {
    {"set_levels", setLevels, METH_O,
     "set_levels({name: level}): the compile logs to print (1 on, 2 verbose); forgets the breaks seen."},
    {"graph_break_counts", graphBreakCounts, METH_NOARGS,
     "graph_break_counts() -> {(kind, file, line): times met while graph_breaks logs on}."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef logModuleDef = {PyModuleDef_HEAD_INIT, "dynamo._C._logs",
                            "DYNAMO_LOGS: the compile logs printed from the compile records.", -1,
                            logMethods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

bool logsWantListings() {
  return level("guards") || level("passes") || level("graph") || level("bytecode");
}

void logCompile(const core::CompileRecord& r) {
  if (state().levels.empty()) return;
  try {
    std::vector<std::string> lines;
    if (level("graph_breaks")) graphBreakLines(lines, r);
    if (level("recompiles")) recompileLines(lines, r);
    if (compileStatusMadeEntry(r.status)) listingLines(lines, r);
    if (!lines.empty()) emit(lines);
  } catch (const std::exception&) {
    PyErr_Clear();  // a log line is never worth disturbing the compile
  }
}

int initLogBindings(PyObject* module) {
  return addSubmodule(module, "_logs", PyModule_Create(&logModuleDef));
}

}  // namespace dynamo::py
