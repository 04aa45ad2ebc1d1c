// dynamo._C._guard_bench: times the guard of one cache entry, for bench/ only (never on the hot path).
//
//   run(fn, args, n, repeats=5, entry=0) -> {"ns": [ns per check, one per repeat], "passed": bool,
//                                             "entries": number of cache entries of fn's code}
//   count(fn, args, n, label, entry=0)   -> bool: under callgrind, n checks counted alone and
//                                           dumped with `label`; False when not under valgrind
//
// Both build the frame the hook would see for `fn(*args)` (fn: a Python function, or a bound
// method: its __self__ comes first) and call the entry's GuardCheck::check, the very call that
// CodeState::lookup makes on every call of the compiled function: the GuardSet, then the entry's
// shape guards. `count` needs valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no:
// it switches instrumentation on, zeroes the counters, collects only inside the loop, and dumps
// (the dump's "summary:" line is then n checks' instructions, independent of the machine's load).
#include <Python.h>

#include <chrono>
#include <memory>
#include <vector>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define DYNAMO_HAVE_CALLGRIND 1
#else
#define DYNAMO_HAVE_CALLGRIND 0
#endif

#include "bindings.h"
#include "dynamo/common/error.h"
#include "dynamo/core/frame_cache.h"
#include "dynamo/core/frame_view.h"
#include "py_util.h"

namespace dynamo::py {

namespace {

/// The frame of `fn(*args)` as the hook sees it at entry, and the cache entry to check.
struct BenchFrame {
  PyRef function;                     ///< the plain function (a bound method's __func__)
  std::vector<PyObject*> localsplus;  ///< borrowed refs, kept alive by `args`/`self`
  PyRef args;                         ///< the argument tuple, self first for a bound method
  std::unique_ptr<core::FrameView> view;
  std::shared_ptr<core::CacheEntry> entry;
  std::size_t entries = 0;
};

BenchFrame benchFrame(PyObject* fn, PyObject* args, int entryIndex) {
  if (!PyTuple_Check(args)) throw UserError(UserErrorKind::kInvalidArgument, "guard bench: args must be a tuple");
  BenchFrame b;
  if (PyMethod_Check(fn)) {
    PyObject* self = PyMethod_GET_SELF(fn);  // borrowed ref
    PyRef selfTuple = PyRef::steal(checkPy(PyTuple_Pack(1, self)));
    b.args = PyRef::steal(checkPy(PySequence_Concat(selfTuple.get(), args)));
    fn = PyMethod_GET_FUNCTION(fn);  // borrowed ref
  } else {
    b.args = PyRef::borrow(args);
  }
  if (!PyFunction_Check(fn)) throw UserError(UserErrorKind::kInvalidArgument, "guard bench: fn must be a Python function or method");
  b.function = PyRef::borrow(fn);
  auto* code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(fn));  // borrowed ref
  auto* func = reinterpret_cast<PyFunctionObject*>(fn);
  Py_ssize_t nargs = PyTuple_GET_SIZE(b.args.get());
  if (nargs > code->co_argcount) throw UserError(UserErrorKind::kInvalidArgument, "guard bench: more args than the function takes");
  b.localsplus.assign(code->co_nlocalsplus, nullptr);
  for (Py_ssize_t i = 0; i < nargs; ++i) b.localsplus[i] = PyTuple_GET_ITEM(b.args.get(), i);  // borrowed ref
  b.view = std::make_unique<core::FrameView>(code, fn, func->func_globals, func->func_builtins, func->func_closure,
                                             b.localsplus.data());
  core::CodeState* state = core::CodeState::find(reinterpret_cast<PyObject*>(code));
  if (state == nullptr || entryIndex < 0 || static_cast<std::size_t>(entryIndex) >= state->entries().size())
    throw UserError(UserErrorKind::kInvalidArgument, "guard bench: the function's code has no cache entry " + std::to_string(entryIndex));
  b.entry = state->entries()[entryIndex];
  b.entries = state->entries().size();
  return b;
}

// The timed (and counted) loop: kept out of line so callgrind attributes it by name.
__attribute__((noinline)) bool checkLoop(core::GuardCheck& guard, const core::FrameView& view, long n) {
  bool all = true;
  for (long i = 0; i < n; ++i) all &= guard.check(view);
  return all;
}

PyObject* run(PyObject*, PyObject* args) {
  PyObject* fn;        // borrowed ref
  PyObject* fnArgs;    // borrowed ref
  long n = 0;
  int repeats = 5, entry = 0;
  if (!PyArg_ParseTuple(args, "OO!l|ii:run", &fn, &PyTuple_Type, &fnArgs, &n, &repeats, &entry)) return nullptr;
  DYNAMO_PY_TRY
  if (n <= 0 || repeats <= 0) throw UserError(UserErrorKind::kInvalidArgument, "guard bench: n and repeats must be positive");
  BenchFrame b = benchFrame(fn, fnArgs, entry);
  PyRef ns = PyRef::steal(checkPy(PyList_New(0)));
  bool passed = true;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    passed &= checkLoop(*b.entry->guard, *b.view, n);
    auto t1 = std::chrono::steady_clock::now();
    appendItem(ns.get(), PyFloat_FromDouble(std::chrono::duration<double, std::nano>(t1 - t0).count() / n));
  }
  PyRef out = PyRef::steal(checkPy(PyDict_New()));
  setItem(out.get(), "ns", std::move(ns));
  setItem(out.get(), "passed", PyBool_FromLong(passed));
  setItem(out.get(), "entries", PyLong_FromSize_t(b.entries));
  return out.release();
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* count(PyObject*, PyObject* args) {
  PyObject* fn;        // borrowed ref
  PyObject* fnArgs;    // borrowed ref
  long n = 0;
  const char* label = nullptr;
  int entry = 0;
  if (!PyArg_ParseTuple(args, "OO!ls|i:count", &fn, &PyTuple_Type, &fnArgs, &n, &label, &entry)) return nullptr;
  DYNAMO_PY_TRY
  BenchFrame b = benchFrame(fn, fnArgs, entry);
#if DYNAMO_HAVE_CALLGRIND
  if (!RUNNING_ON_VALGRIND) Py_RETURN_FALSE;
  checkLoop(*b.entry->guard, *b.view, 1);  // first-call effects (lazy statics) stay out of the count
  CALLGRIND_START_INSTRUMENTATION;
  CALLGRIND_ZERO_STATS;
  CALLGRIND_TOGGLE_COLLECT;
  bool passed = checkLoop(*b.entry->guard, *b.view, n);
  CALLGRIND_TOGGLE_COLLECT;
  CALLGRIND_DUMP_STATS_AT(label);
  CALLGRIND_STOP_INSTRUMENTATION;
  if (!passed) throw UserError(UserErrorKind::kInvalidArgument, "guard bench: the entry's guard failed for these args");
  Py_RETURN_TRUE;
#else
  (void)n;
  (void)label;
  Py_RETURN_FALSE;
#endif
  DYNAMO_PY_CATCH(nullptr)
}

PyMethodDef methods[] = {
    {"run", run, METH_VARARGS,
     "run(fn, args, n, repeats=5, entry=0) -> {ns: [ns per check per repeat], passed, entries}: the cache "
     "entry's guard (GuardCheck::check, as the frame hook runs it) evaluated n times for fn(*args)"},
    {"count", count, METH_VARARGS,
     "count(fn, args, n, label, entry=0) -> bool: under callgrind (--instr-atstart=no --collect-atstart=no), "
     "n guard checks counted alone and dumped with `label`; False when not under valgrind"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef moduleDef = {PyModuleDef_HEAD_INIT, "dynamo._C._guard_bench",
                         "Guard evaluation timed and counted (bench/ only).", -1, methods,
                         nullptr, nullptr, nullptr, nullptr};

}  // namespace

int initGuardBenchBindings(PyObject* module) {
  return addSubmodule(module, "_guard_bench", PyModule_Create(&moduleDef));
}

}  // namespace dynamo::py
