// _dynamo_testing.frame: the test and debug API of the PEP 523 frame hook (core/frame_hook.h).
//
// Thin adapters so the hook can be driven from Python before the real C++ compiler exists:
//   set_python_compiler(cb)   cb(code, f_locals) -> None (run the original this time),
//                             False (never compile this code again), or (guard_fn, new_code):
//                             guard_fn(f_locals) -> bool, or None for "always passes".
//   set_mode("off" | "run_only" | "compile"), get_mode()       per thread
//   reset(), skip_code(code), disable_code(code)
//   code_stats(code), cache_entries(code), last_miss_reasons(code)
//   hook_installed(), active_threads(), live_code_states()
// Errors in cb or guard_fn propagate to the caller of the intercepted function.
#include <Python.h>

#include <memory>
#include <string>

#include "testing_bindings.h"
#include "dynamo/common/error.h"
#include "dynamo/core/frame_hook.h"
#include "py_util.h"

namespace dynamo::py {

namespace {

using core::CacheEntry;
using core::CodeState;
using core::CompileResult;
using core::FrameView;
using core::HookMode;

// "module.qualname" of a callable, for messages; never throws.
std::string describeCallable(PyObject* fn) {
  PyRef name = PyRef::steal(PyObject_GetAttrString(fn, "__qualname__"));
  if (!name || !PyUnicode_Check(name.get())) {
    PyErr_Clear();
    name = PyRef::steal(PyObject_Repr(fn));
  }
  if (!name) {
    PyErr_Clear();
    return "<guard>";
  }
  const char* text = PyUnicode_AsUTF8(name.get());  // borrowed buffer
  if (text == nullptr) {
    PyErr_Clear();
    return "<guard>";
  }
  return text;
}

/// A guard implemented by a Python callable guard_fn(f_locals) -> bool.
class PythonGuard : public core::GuardCheck {
 public:
  explicit PythonGuard(PyObject* fn) : fn_(PyRef::borrow(fn)) {}
  bool check(const FrameView& frame) override {
    PyRef locals = PyRef::steal(checkPy(frame.localsDict()));
    PyRef result = PyRef::steal(checkPy(PyObject_CallOneArg(fn_.get(), locals.get())));
    int truth = PyObject_IsTrue(result.get());
    if (truth < 0) throw PythonError{};
    return truth == 1;
  }
  std::string failureReason(const FrameView&) override {
    return describeCallable(fn_.get()) + "(f_locals) returned False";
  }
  PyObject* function() const { return fn_.get(); }  // borrowed ref

 private:
  PyRef fn_;
};

/// The guard of an entry whose guard_fn is None.
class AlwaysPass : public core::GuardCheck {
 public:
  bool check(const FrameView&) override { return true; }
  std::string failureReason(const FrameView&) override { return "never fails"; }
};

/// A FrameCompiler that calls a Python callback cb(code, f_locals).
class PythonCompiler : public core::FrameCompiler {
 public:
  explicit PythonCompiler(PyObject* cb) : cb_(PyRef::borrow(cb)) {}
  CompileResult compile(const FrameView& frame, CodeState&) override {
    PyRef locals = PyRef::steal(checkPy(frame.localsDict()));
    PyRef result = PyRef::steal(checkPy(PyObject_CallFunctionObjArgs(
        cb_.get(), reinterpret_cast<PyObject*>(frame.code()), locals.get(), nullptr)));
    if (result.get() == Py_None) return CompileResult::runDefault();
    if (result.get() == Py_False) return CompileResult::skipCode();
    if (!PyTuple_Check(result.get()) || PyTuple_GET_SIZE(result.get()) != 2 ||
        !PyCode_Check(PyTuple_GET_ITEM(result.get(), 1))) {
      throw UserError(UserErrorKind::kInvalidArgument,
                      "the set_python_compiler callback returned an unexpected value", {},
                      "it must return None (run the original), False (skip this code) or a "
                      "tuple (guard_fn, new_code)",
                      "return (guard_fn, fn.__code__.replace(...)) to add a cache entry");
    }
    PyObject* guardFn = PyTuple_GET_ITEM(result.get(), 0);  // borrowed ref
    PyObject* code = PyTuple_GET_ITEM(result.get(), 1);     // borrowed ref
    std::string mismatch = core::checkCompatibleCode(frame.code(), (PyCodeObject*)code);
    if (!mismatch.empty()) {
      throw UserError(UserErrorKind::kInvalidArgument,
                      "the code returned by the set_python_compiler callback cannot replace " +
                          toString(frame.code()->co_name) + ": " + mismatch,
                      {}, "the hook runs it with the original frame's arguments and closure",
                      "keep the signature, co_cellvars and co_freevars of the original");
    }
    std::unique_ptr<core::GuardCheck> guard;
    if (guardFn == Py_None) {
      guard = std::make_unique<AlwaysPass>();
    } else {
      guard = std::make_unique<PythonGuard>(guardFn);
    }
    return CompileResult::addEntry(std::make_shared<CacheEntry>(std::move(guard), code));
  }

 private:
  PyRef cb_;
};

HookMode parseMode(const std::string& name) {
  if (name == "off") return HookMode::kOff;
  if (name == "run_only") return HookMode::kRunOnly;
  if (name == "compile") return HookMode::kCompile;
  throw UserError(UserErrorKind::kInvalidArgument, "unknown frame hook mode '" + name + "'", {},
                  {}, "use one of 'off', 'run_only', 'compile'");
}

const char* modeName(HookMode mode) {
  switch (mode) {
    case HookMode::kOff: return "off";
    case HookMode::kRunOnly: return "run_only";
    case HookMode::kCompile: return "compile";
  }
  return "off";
}

PyObject* requireCode(PyObject* arg) {
  if (!PyCode_Check(arg)) {
    throw UserError(UserErrorKind::kInvalidArgument, "expected a code object", {}, {},
                    "pass fn.__code__");
  }
  return arg;
}

PyObject* setPythonCompiler(PyObject*, PyObject* cb) {
  DYNAMO_PY_TRY
  std::shared_ptr<core::FrameCompiler> compiler;
  if (cb != Py_None) {
    if (!PyCallable_Check(cb)) {
      throw UserError(UserErrorKind::kInvalidArgument, "the compiler must be callable or None");
    }
    compiler = std::make_shared<PythonCompiler>(cb);
  }
  core::setHookMode(core::hookMode(), std::move(compiler));
  Py_RETURN_NONE;
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* setMode(PyObject*, PyObject* arg) {
  DYNAMO_PY_TRY
  core::setHookMode(parseMode(toString(arg)), core::hookCompiler());
  Py_RETURN_NONE;
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* getMode(PyObject*, PyObject*) {
  return PyUnicode_FromString(modeName(core::hookMode()));  // new ref
}

PyObject* reset(PyObject*, PyObject*) {
  DYNAMO_PY_TRY
  core::resetFrameCaches();
  Py_RETURN_NONE;
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* skipCode(PyObject*, PyObject* code) {
  DYNAMO_PY_TRY
  core::skipCode(requireCode(code));
  Py_RETURN_NONE;
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* disableCode(PyObject*, PyObject* code) {
  DYNAMO_PY_TRY
  core::disableCode(requireCode(code));
  Py_RETURN_NONE;
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* codeStats(PyObject*, PyObject* code) {
  DYNAMO_PY_TRY
  CodeState* state = CodeState::find(requireCode(code));
  if (state == nullptr) Py_RETURN_NONE;
  const core::CodeStats& s = state->stats();
  PyRef dict = PyRef::steal(checkPy(PyDict_New()));
  setItem(dict.get(), "hits", PyLong_FromUnsignedLongLong(s.hits));
  setItem(dict.get(), "misses", PyLong_FromUnsignedLongLong(s.misses));
  setItem(dict.get(), "compiles", PyLong_FromUnsignedLongLong(s.compiles));
  setItem(dict.get(), "declined", PyLong_FromUnsignedLongLong(s.declined));
  setItem(dict.get(), "compile_errors", PyLong_FromUnsignedLongLong(s.compileErrors));
  setItem(dict.get(), "guard_errors", PyLong_FromUnsignedLongLong(s.guardErrors));
  setItem(dict.get(), "entries", PyLong_FromSize_t(state->entries().size()));
  setItem(dict.get(), "skipped", PyBool_FromLong(state->skipped()));
  setItem(dict.get(), "disabled", PyBool_FromLong(state->disabled()));
  return dict.release();
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* cacheEntries(PyObject*, PyObject* code) {
  DYNAMO_PY_TRY
  CodeState* state = CodeState::find(requireCode(code));
  PyRef list = PyRef::steal(checkPy(PyList_New(0)));
  if (state == nullptr) return list.release();
  for (const auto& entry : state->entries()) {
    PyRef dict = PyRef::steal(checkPy(PyDict_New()));
    setItem(dict.get(), "id", PyLong_FromUnsignedLongLong(entry->id));
    setItem(dict.get(), "hits", PyLong_FromUnsignedLongLong(entry->hits));
    setItem(dict.get(), "code", Py_NewRef(entry->code));
    auto* guard = dynamic_cast<PythonGuard*>(entry->guard.get());
    setItem(dict.get(), "guard", Py_NewRef(guard != nullptr ? guard->function() : Py_None));
    if (PyList_Append(list.get(), dict.get()) < 0) throw PythonError{};
  }
  return list.release();
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* lastMissReasons(PyObject*, PyObject* code) {
  DYNAMO_PY_TRY
  CodeState* state = CodeState::find(requireCode(code));
  PyRef list = PyRef::steal(checkPy(PyList_New(0)));
  if (state == nullptr) return list.release();
  for (const std::string& reason : state->lastMissReasons()) {
    PyRef text = PyRef::steal(checkPy(PyUnicode_FromString(reason.c_str())));
    if (PyList_Append(list.get(), text.get()) < 0) throw PythonError{};
  }
  return list.release();
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* hookInstalled(PyObject*, PyObject*) { return PyBool_FromLong(core::hookInstalled()); }

PyObject* activeThreads(PyObject*, PyObject*) {
  return PyLong_FromLong(core::activeHookThreads());  // new ref
}

PyObject* liveCodeStates(PyObject*, PyObject*) {
  return PyLong_FromSize_t(CodeState::liveCount());  // new ref
}

PyMethodDef frameMethods[] = {
    {"set_python_compiler", setPythonCompiler, METH_O,
     "set_python_compiler(cb): cb(code, f_locals) -> None | False | (guard_fn, new_code), for "
     "this thread; None removes it."},
    {"set_mode", setMode, METH_O, "set_mode('off' | 'run_only' | 'compile') for this thread."},
    {"get_mode", getMode, METH_NOARGS, "This thread's hook mode."},
    {"reset", reset, METH_NOARGS, "Drop every cache entry, skip mark and counter."},
    {"skip_code", skipCode, METH_O, "Never compile this code object (until reset())."},
    {"disable_code", disableCode, METH_O, "Never capture this code object, across reset()."},
    {"code_stats", codeStats, METH_O, "Counters of a code object, or None if it has no state."},
    {"cache_entries", cacheEntries, METH_O,
     "The cache entries of a code object, most recently hit first: [{id, hits, code, guard}]."},
    {"last_miss_reasons", lastMissReasons, METH_O,
     "Why each guard failed on the last miss that led to a compile."},
    {"hook_installed", hookInstalled, METH_NOARGS, "True while the eval-frame hook is installed."},
    {"active_threads", activeThreads, METH_NOARGS, "Threads whose mode is not 'off'."},
    {"live_code_states", liveCodeStates, METH_NOARGS, "Code objects that carry hook state."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef frameModuleDef = {
    PyModuleDef_HEAD_INIT, "_dynamo_testing.frame",
    "Test and debug API of the PEP 523 frame hook.", -1, frameMethods,
    nullptr, nullptr, nullptr, nullptr,
};

}  // namespace

int initFrameBindings(PyObject* module) {
  core::setErrorTranslator(translateException);
  PyObject* sub = PyModule_Create(&frameModuleDef);  // new ref
  if (sub == nullptr) return -1;
  if (PyModule_AddObject(module, "frame", sub) < 0) {  // steals sub on success
    Py_DECREF(sub);
    return -1;
  }
  return 0;
}

}  // namespace dynamo::py
