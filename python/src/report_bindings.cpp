// dynamo._C._reports: the explain and profile reports over a trace store (dynamo::explain,
// dynamo::profiler), for dynamo.profile_recompiles() and other Python callers.
//
//   explain_report(db_path, fmt="text", run_id=None, masked=False) -> str
//   profile_report(db_path, fmt="text", run_id=None, masked=False, since_us=0, until_us=0,
//                  root_dir="") -> str
//   explain_policy(db_path, max_breaks=None, fullgraph=False, run_id=None) -> (code, message)
//
// fmt is one of text, json, junit, markdown, sarif. A path that is not a trace store raises
// dynamo.TraceStoreError; an unknown format or a negative number raises dynamo.UserError.
// The store is read with the GIL released.
#include "bindings.h"

#include <optional>
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
  if (id == -1 && PyErr_Occurred()) throw PythonErrorAlreadySet{};
  if (id <= 0)
    throw UserError(UserErrorKind::kInvalidArgument, detail::concat("run_id must be positive, got ", id));
  return id;
}

PyObject* newStr(const std::string& s) {
  return check(PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace"));
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
    if (n == -1 && PyErr_Occurred()) throw PythonErrorAlreadySet{};
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
  PyObject* sub = PyModule_Create(&reportModuleDef);  // new ref
  if (sub == nullptr) return -1;
  if (PyModule_AddObject(module, "_reports", sub) < 0) {  // steals sub on success
    Py_DECREF(sub);
    return -1;
  }
  return 0;
}

}  // namespace dynamo::py
