// dynamo._C._reports: the explain and profile reports over a trace store (dynamo::explain,
// dynamo::profiler), for dynamo.profile_recompiles() and other Python callers.
//
//   explain_report(db_path, fmt="text", run_id=None, masked=False) -> str
//   profile_report(db_path, fmt="text", run_id=None, masked=False, since_us=0, until_us=0,
//                  root_dir="") -> str
//   explain_policy(db_path, max_breaks=None, fullgraph=False, run_id=None) -> (code, message)
//   explain_run(db_path, run_id=None, root_dir="") -> dict   dynamo.explain()'s data and text
//
// fmt is one of text, json, junit, markdown, sarif. A path that is not a trace store raises
// dynamo.TraceStoreError; an unknown format or a negative number raises dynamo.UserError.
// The store is read with the GIL released.
#include "bindings.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>
#include <vector>
#include <string>

#include "dynamo/common/error.h"
#include "dynamo/explain/explain_report.h"
#include "dynamo/profiler/profile_report.h"
#include "py_util.h"

namespace dynamo::py {

namespace {

using explain::Format;
using explain::RenderOptions;


Format parseFormat(const char* name) {
  std::optional<Format> f = explain::formatFromName(name);
  if (!f)
    throw UserError(UserErrorKind::kInvalidArgument, detail::concat("unknown report format '", name, "'"),
                    {}, "", "use one of: text, json, junit, markdown, sarif");
  return *f;
}

// run_id: None or a positive int. `o` is a borrowed ref.
storage::RowId parseRunId(PyObject* o) {
  if (o == nullptr || o == Py_None) return 0;
  long long id = PyLong_AsLongLong(o);
  if (id == -1 && PyErr_Occurred()) throw PythonError{};
  if (id <= 0)
    throw UserError(UserErrorKind::kInvalidArgument, detail::concat("run_id must be positive, got ", id));
  return id;
}

template <typename Render>
PyObject* report(PyObject* args, PyObject* kwargs, Render render) {
  static const char* kw[] = {"db_path", "fmt", "run_id", "masked", nullptr};
  const char* path = "";
  const char* fmt = "text";
  PyObject* runId = nullptr;  // borrowed ref
  int masked = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|sOp", const_cast<char**>(kw), &path, &fmt,
                                   &runId, &masked))
    return nullptr;
  DYNAMO_PY_TRY
  Format format = parseFormat(fmt);
  storage::RowId run = parseRunId(runId);
  std::string file = path;
  RenderOptions options{masked != 0, ""};
  return newStr(withoutGil([&] {
    auto reader = storage::TraceReader::open(file);
    return render(*reader, run, format, options);
  }));
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* explainReport(PyObject*, PyObject* args, PyObject* kwargs) {
  return report(args, kwargs, [](const storage::TraceReader& r, storage::RowId run, Format f,
                                 const RenderOptions& o) {
    return explain::renderExplain(explain::buildExplainReport(r, run), f, o);
  });
}

// since_us / until_us: the compiles that ended in that window (0: open); root_dir: files under
// it are shown relative to it.
PyObject* profileReport(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* kw[] = {"db_path", "fmt", "run_id", "masked", "since_us", "until_us", "root_dir",
                             nullptr};
  const char* path = "";
  const char* fmt = "text";
  PyObject* runId = nullptr;  // borrowed ref
  int masked = 0;
  long long sinceUs = 0, untilUs = 0;
  const char* rootDir = "";
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|sOpLLs", const_cast<char**>(kw), &path, &fmt,
                                   &runId, &masked, &sinceUs, &untilUs, &rootDir))
    return nullptr;
  DYNAMO_PY_TRY
  Format format = parseFormat(fmt);
  storage::RowId run = parseRunId(runId);
  std::string file = path;
  RenderOptions options{masked != 0, rootDir};
  profiler::ProfileWindow window{sinceUs, untilUs};
  return newStr(withoutGil([&] {
    auto reader = storage::TraceReader::open(file);
    return profiler::renderProfile(profiler::buildProfileReport(*reader, run, window), format, options);
  }));
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* breakDict(const explain::BreakGroup& b) {
  PyRef d = PyRef::steal(checkPy(PyDict_New()));
  setItem(d.get(), "kind", newStr(b.kind));
  setItem(d.get(), "file", newStr(b.location.file));
  setItem(d.get(), "line", PyLong_FromLong(b.location.line));
  setItem(d.get(), "source", newStr(b.location.sourceLine));
  setItem(d.get(), "explanation", newStr(b.explanation));
  setItem(d.get(), "hint", newStr(b.hints.empty() ? "" : b.hints.front()));
  setItem(d.get(), "user_stack", newStrList(b.userStack));
  setItem(d.get(), "count", PyLong_FromLongLong(b.occurrences));
  setItem(d.get(), "compiles", PyLong_FromLongLong(b.compiles));
  setItem(d.get(), "functions", newStrList(b.functions));
  return d.release();
}

PyObject* graphDict(const explain::FunctionReport& f, const explain::GraphSummary& g) {
  PyRef d = PyRef::steal(checkPy(PyDict_New()));
  setItem(d.get(), "function", newStr(f.name));
  setItem(d.get(), "compile_id", PyLong_FromLongLong(g.compileId));
  setItem(d.get(), "text", newStr(g.printed));
  setItem(d.get(), "num_nodes", PyLong_FromLong(g.numNodes));
  PyRef ops = PyRef::steal(checkPy(PyDict_New()));
  for (const auto& [op, n] : g.opCounts) setItem(ops.get(), op.c_str(), PyLong_FromLong(n));
  setItem(d.get(), "op_counts", ops.release());
  return d.release();
}

// The run's data as dynamo.explain() exposes it, and its text (renderExplainSummary).
PyObject* runDict(const explain::RunExplain& run, const RenderOptions& options) {
  PyRef d = PyRef::steal(checkPy(PyDict_New()));
  setItem(d.get(), "summary", newStr(explain::renderExplainSummary(run, options)));
  PyRef breaks = PyRef::steal(checkPy(PyList_New(0)));
  std::int64_t occurrences = 0;
  for (const explain::BreakGroup& b : run.breaks) {
    appendItem(breaks.get(), breakDict(b));
    occurrences += b.occurrences;
  }
  setItem(d.get(), "breaks", breaks.release());
  setItem(d.get(), "break_occurrences", PyLong_FromLongLong(occurrences));
  // Graphs in compile order, whichever function they belong to.
  PyRef graphList = PyRef::steal(checkPy(PyList_New(0)));
  std::vector<std::tuple<storage::RowId, int, const explain::FunctionReport*, const explain::GraphSummary*>> order;
  for (const explain::FunctionReport& f : run.functions)
    for (const explain::GraphSummary& g : f.graphs) order.emplace_back(g.compileId, g.index, &f, &g);
  std::sort(order.begin(), order.end());
  for (const auto& [id, index, f, g] : order) {
    appendItem(graphList.get(), graphDict(*f, *g));
  }
  setItem(d.get(), "graphs", graphList.release());
  setItem(d.get(), "ops", PyLong_FromLongLong(run.ops));
  PyRef notCompiled = PyRef::steal(checkPy(PyList_New(0)));
  PyRef guardKinds = PyRef::steal(checkPy(PyDict_New()));
  std::map<std::string, std::int64_t> phases;
  for (const explain::FunctionReport& f : run.functions) {
    for (const auto& [status, reason] : f.notCompiled) {
      appendItem(notCompiled.get(), Py_BuildValue("(NNiNN)", newStr(f.name), newStr(f.file), f.firstLine,
                                                  newStr(status), newStr(reason)));
    }
    for (const auto& [kind, n] : f.guardKinds) {
      PyObject* old = PyDict_GetItemString(guardKinds.get(), kind.c_str());  // borrowed ref
      setItem(guardKinds.get(), kind.c_str(), PyLong_FromLongLong(n + (old ? PyLong_AsLongLong(old) : 0)));
    }
    for (const storage::CompilePhase& p : f.phases) phases[p.name] += p.durationUs;
  }
  setItem(d.get(), "not_compiled", notCompiled.release());
  setItem(d.get(), "guard_kinds", guardKinds.release());
  PyRef times = PyRef::steal(checkPy(PyDict_New()));
  setItem(times.get(), "capture_ms", PyFloat_FromDouble(phases["capture"] / 1000.0));
  setItem(times.get(), "guard_ms", PyFloat_FromDouble(phases["guards"] / 1000.0));
  setItem(times.get(), "backend_ms", PyFloat_FromDouble(phases["backend"] / 1000.0));
  setItem(times.get(), "total_ms", PyFloat_FromDouble(run.compileUs / 1000.0));
  setItem(d.get(), "compile_times", times.release());
  return d.release();
}

// explain_run(db_path, run_id=None, root_dir=""): one run (default: the newest) of a store.
PyObject* explainRun(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* kw[] = {"db_path", "run_id", "root_dir", nullptr};
  const char* path = "";
  PyObject* runId = nullptr;  // borrowed ref
  const char* rootDir = "";
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|Os", const_cast<char**>(kw), &path, &runId, &rootDir))
    return nullptr;
  DYNAMO_PY_TRY
  storage::RowId run = parseRunId(runId);
  std::string file = path;
  explain::ExplainReport report = withoutGil([&] {
    auto reader = storage::TraceReader::open(file);
    return explain::buildExplainReport(*reader, run);
  });
  if (report.runs.empty())
    throw UserError(UserErrorKind::kTraceStore, detail::concat("trace store '", file, "' holds no runs"));
  return runDict(report.runs.back(), RenderOptions{false, rootDir});
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* explainPolicy(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* kw[] = {"db_path", "max_breaks", "fullgraph", "run_id", nullptr};
  const char* path = "";
  PyObject* maxBreaks = nullptr;  // borrowed ref
  int fullgraph = 0;
  PyObject* runId = nullptr;  // borrowed ref
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|OpO", const_cast<char**>(kw), &path,
                                   &maxBreaks, &fullgraph, &runId))
    return nullptr;
  DYNAMO_PY_TRY
  explain::ExplainPolicy policy;
  policy.fullgraph = fullgraph != 0;
  if (maxBreaks != nullptr && maxBreaks != Py_None) {
    long long n = PyLong_AsLongLong(maxBreaks);
    if (n == -1 && PyErr_Occurred()) throw PythonError{};
    if (n < 0)
      throw UserError(UserErrorKind::kInvalidArgument,
                      detail::concat("max_breaks must be a non-negative int, got ", n));
    policy.maxBreaks = n;
  }
  storage::RowId run = parseRunId(runId);
  std::string file = path;
  explain::PolicyResult result = withoutGil([&] {
    auto reader = storage::TraceReader::open(file);
    return explain::checkExplainPolicy(explain::buildExplainReport(*reader, run), policy);
  });
  return Py_BuildValue("(is)", result.code, result.message.c_str());  // new ref
  DYNAMO_PY_CATCH(nullptr)
}

#define DYNAMO_KW(name, fn, doc) \
  {name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(fn)), METH_VARARGS | METH_KEYWORDS, doc}

PyMethodDef reportMethods[] = {
    DYNAMO_KW("explain_report", explainReport,
              "explain_report(db_path, fmt='text', run_id=None, masked=False) -> str\n\n"
              "The dynamo-explain report of a trace store (every run, or run_id)."),
    DYNAMO_KW("profile_report", profileReport,
              "profile_report(db_path, fmt='text', run_id=None, masked=False, since_us=0, until_us=0, "
              "root_dir='') -> str\n\n"
              "The dynamo-profile (recompilation) report of a trace store; since_us/until_us: only\n"
              "the compiles that ended in that window (0: open); root_dir: files under it are shown\n"
              "relative to it."),
    DYNAMO_KW("explain_policy", explainPolicy,
              "explain_policy(db_path, max_breaks=None, fullgraph=False, run_id=None) -> (code, message)\n\n"
              "dynamo-explain's CI policy: code 0 passes, 1 fails; message says why."),
    DYNAMO_KW("explain_run", explainRun,
              "explain_run(db_path, run_id=None, root_dir='') -> dict\n\n"
              "One run (default: the newest) as dynamo.explain() shows it: summary (the text),\n"
              "graphs, breaks, break_occurrences, ops, not_compiled, guard_kinds, compile_times.\n"
              "Files under root_dir are shown relative to it in the summary."),
    {nullptr, nullptr, 0, nullptr},
};

#undef DYNAMO_KW

PyModuleDef reportModuleDef = {
    PyModuleDef_HEAD_INIT, "dynamo._C._reports",
    "The explain and profile reports over a trace store.", -1, reportMethods,
    nullptr, nullptr, nullptr, nullptr,
};

}  // namespace

int initReportBindings(PyObject* module) {
  return addSubmodule(module, "_reports", PyModule_Create(&reportModuleDef));
}

}  // namespace dynamo::py
