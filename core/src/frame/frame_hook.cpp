// The C++ half of the frame hook: per-thread modes, installation reference counting, and the
// dispatch that eval_frame.c calls for every eligible frame (cache lookup, compiler call).
//
// Per-thread state lives in a capsule in the Python thread-state dict, so it is destroyed with
// the GIL held when the thread state is cleared (the compiler it holds may own Python objects);
// a plain thread_local pointer to it keeps the per-frame check cheap.
#include "dynamo/core/frame_hook.h"

#include <exception>
#include <utility>

#include "dynamo/common/error.h"
#include "eval_frame.h"
#include "interp/example_memo.h"

namespace dynamo::core {

namespace {

struct ThreadHookState {
  HookMode mode = HookMode::kOff;
  int suspended = 0;  // > 0 while guards or the compiler run on this thread
  std::shared_ptr<FrameCompiler> compiler;
};

constexpr const char* kCapsuleName = "dynamo.frame_hook.ThreadHookState";
constexpr const char* kThreadDictKey = "__dynamo_frame_hook__";

thread_local ThreadHookState* tlsState = nullptr;  // owned by the capsule in the thread dict
int gActiveThreads = 0;                            // threads with mode != kOff; GIL-protected

void defaultTranslator() {
  try {
    throw;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception in the frame hook");
  }
}
ErrorTranslator gTranslator = defaultTranslator;

void activeThreadsChanged(int delta) {
  gActiveThreads += delta;
  if (delta > 0 && gActiveThreads == 1) dynamo_eval_install();
  if (delta < 0 && gActiveThreads == 0) dynamo_eval_uninstall();
}

// Capsule destructor: the thread state is being cleared (thread exit or finalization), GIL held.
// May run on another thread than the owner during interpreter finalization.
void destroyThreadState(PyObject* capsule) {
  auto* state = static_cast<ThreadHookState*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (state == nullptr) {
    PyErr_Clear();
    return;
  }
  if (state->mode != HookMode::kOff) activeThreadsChanged(-1);
  if (tlsState == state) tlsState = nullptr;
  delete state;  // drops the compiler with the GIL held
}

ThreadHookState& threadState() {
  if (tlsState != nullptr) return *tlsState;
  PyObject* dict = PyThreadState_GetDict();  // borrowed ref
  DYNAMO_INTERNAL_ASSERT(dict != nullptr, "frame hook used without a Python thread state");
  auto owned = std::make_unique<ThreadHookState>();
  PyObject* capsule = PyCapsule_New(owned.get(), kCapsuleName, destroyThreadState);  // new ref
  if (capsule == nullptr) throw PythonError{};
  ThreadHookState* state = owned.release();  // the capsule owns it now
  int rc = PyDict_SetItemString(dict, kThreadDictKey, capsule);
  Py_DECREF(capsule);
  if (rc < 0) throw PythonError{};
  tlsState = state;
  return *state;
}

// Suspends the hook on one thread for a scope.
class Suspend {
 public:
  explicit Suspend(ThreadHookState& state) : state_(state) { ++state_.suspended; }
  ~Suspend() { --state_.suspended; }
  Suspend(const Suspend&) = delete;
  Suspend& operator=(const Suspend&) = delete;

 private:
  ThreadHookState& state_;
};

// Handles a miss in compile mode. Returns the code to run (new ref) or nullptr for "default".
PyObject* compileMiss(ThreadHookState& thread, CodeState& state, const FrameView& view) {
  std::shared_ptr<FrameCompiler> compiler = thread.compiler;  // kept alive across the call
  if (!state.entries().empty()) state.explainMiss(view);
  CompileResult result;
  try {
    result = compiler->compile(view, state);
  } catch (...) {
    ++state.mutableStats().compileErrors;
    throw;
  }
  switch (result.action) {
    case CompileResult::Action::kRunDefault:
      ++state.mutableStats().declined;
      return nullptr;
    case CompileResult::Action::kSkipCode:
      state.skipFor(compiler->ownerId());
      return nullptr;
    case CompileResult::Action::kAddEntry:
      break;
  }
  DYNAMO_INTERNAL_ASSERT(result.entry && result.entry->guard && result.entry->code,
                         "FrameCompiler returned kAddEntry without a complete entry");
  DYNAMO_INTERNAL_ASSERT(PyCode_Check(result.entry->code),
                         "FrameCompiler returned a cache entry whose code is not a code object");
  std::string mismatch = checkCompatibleCode(view.code(), (PyCodeObject*)result.entry->code);
  DYNAMO_INTERNAL_ASSERT(mismatch.empty(), "FrameCompiler produced incompatible code: ", mismatch);
  disableCode(result.entry->code);
  ++state.mutableStats().compiles;
  state.addEntry(result.entry);
  Py_INCREF(result.entry->code);
  return result.entry->code;  // new ref
}

DynamoDispatch dispatch(ThreadHookState& thread, const DynamoFrameInfo& info, PyObject** codeOut) {
  PyObject* code = reinterpret_cast<PyObject*>(info.code);
  CodeState* state =
      thread.mode == HookMode::kCompile ? &CodeState::getOrCreate(code) : CodeState::find(code);
  if (state == nullptr || state->disabled()) return DYNAMO_DISPATCH_DEFAULT;
  const uint64_t owner = thread.mode == HookMode::kCompile && thread.compiler ? thread.compiler->ownerId() : 0;
  // A skipped code never compiles again (for the compiler that skipped it), but the entries it
  // already has still run (after the cache-size limit, for instance).
  if (state->skippedFor(owner) && state->entries().empty()) return DYNAMO_DISPATCH_DEFAULT;
  FrameView view(info.code, info.function, info.globals, info.builtins, info.closure,
                 info.localsplus);
  Suspend suspend(thread);
  if (std::shared_ptr<CacheEntry> hit = state->lookup(view, owner)) {
    Py_INCREF(hit->code);
    *codeOut = hit->code;  // new ref
    return DYNAMO_DISPATCH_RUN;
  }
  if (thread.mode != HookMode::kCompile || !thread.compiler || state->skippedFor(owner)) return DYNAMO_DISPATCH_DEFAULT;
  *codeOut = compileMiss(thread, *state, view);
  return *codeOut != nullptr ? DYNAMO_DISPATCH_RUN : DYNAMO_DISPATCH_DEFAULT;
}

// Compares two tuples of names; true when equal. Throws PythonError on error.
bool sameTuple(PyObject* a, PyObject* b) {
  int eq = PyObject_RichCompareBool(a, b, Py_EQ);
  if (eq < 0) throw PythonError{};
  return eq == 1;
}

}  // namespace

extern "C" DynamoDispatch dynamo_frame_dispatch(const DynamoFrameInfo* info, PyObject** codeOut) {
  ThreadHookState* thread = tlsState;
  if (thread == nullptr || thread->mode == HookMode::kOff || thread->suspended > 0) {
    return DYNAMO_DISPATCH_DEFAULT;
  }
  try {
    return dispatch(*thread, *info, codeOut);
  } catch (const PythonError&) {
    if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_SystemError, "dynamo frame hook: error reported but none set");
    }
  } catch (...) {
    gTranslator();
  }
  return DYNAMO_DISPATCH_ERROR;
}

void setHookMode(HookMode mode, std::shared_ptr<FrameCompiler> compiler) {
  DYNAMO_USER_CHECK(mode != HookMode::kCompile || compiler != nullptr,
                    UserErrorKind::kInvalidArgument,
                    "the frame hook's compile mode needs a compiler; set one first");
  ThreadHookState& state = threadState();
  bool wasActive = state.mode != HookMode::kOff;
  bool isActive = mode != HookMode::kOff;
  std::shared_ptr<FrameCompiler> old = std::exchange(state.compiler, std::move(compiler));
  state.mode = mode;
  if (wasActive != isActive) activeThreadsChanged(isActive ? 1 : -1);
  old.reset();  // last: may run Python (releasing a Python callback)
}

HookMode hookMode() { return tlsState != nullptr ? tlsState->mode : HookMode::kOff; }

std::shared_ptr<FrameCompiler> hookCompiler() {
  return tlsState != nullptr ? tlsState->compiler : nullptr;
}

bool hookInstalled() { return dynamo_eval_installed() != 0; }

bool foreignHookInstalled() { return dynamo_eval_foreign_installed() != 0; }

int activeHookThreads() { return gActiveThreads; }

HookSuspension::HookSuspension() { ++threadState().suspended; }
HookSuspension::~HookSuspension() {
  if (tlsState != nullptr) --tlsState->suspended;
}

void skipCode(PyObject* code) { CodeState::getOrCreate(code).setSkipped(true); }

void disableCode(PyObject* code) { CodeState::getOrCreate(code).setDisabled(true); }

void resetFrameCaches() {
  CodeState::resetAll();
  interp::exampleMemoClear();
}

void setErrorTranslator(ErrorTranslator translator) {
  gTranslator = translator != nullptr ? translator : defaultTranslator;
}

std::string checkCompatibleCode(PyCodeObject* original, PyCodeObject* transformed) {
  constexpr int kArgFlags = CO_VARARGS | CO_VARKEYWORDS;
  constexpr int kUntouched = CO_GENERATOR | CO_COROUTINE | CO_ITERABLE_COROUTINE |
                             CO_ASYNC_GENERATOR;
  const PyCodeObject* a = original;
  const PyCodeObject* b = transformed;
  if (a->co_argcount != b->co_argcount || a->co_posonlyargcount != b->co_posonlyargcount ||
      a->co_kwonlyargcount != b->co_kwonlyargcount ||
      (a->co_flags & kArgFlags) != (b->co_flags & kArgFlags)) {
    return "the argument counts or *args/**kwargs flags differ";
  }
  if ((b->co_flags & kUntouched) != 0 || (b->co_flags & CO_OPTIMIZED) == 0) {
    return "the transformed code is a generator/coroutine or not optimized";
  }
  int nargs = a->co_argcount + a->co_kwonlyargcount + ((a->co_flags & CO_VARARGS) ? 1 : 0) +
              ((a->co_flags & CO_VARKEYWORDS) ? 1 : 0);
  for (int i = 0; i < nargs; ++i) {
    PyObject* nameA = PyTuple_GET_ITEM(a->co_localsplusnames, i);  // borrowed ref
    PyObject* nameB = PyTuple_GET_ITEM(b->co_localsplusnames, i);  // borrowed ref
    if (PyUnicode_Compare(nameA, nameB) != 0) {
      if (PyErr_Occurred()) throw PythonError{};
      return "argument names differ";
    }
  }
  PyObject* cellsA = PyCode_GetCellvars(original);     // new ref
  PyObject* cellsB = PyCode_GetCellvars(transformed);  // new ref
  PyObject* freesA = PyCode_GetFreevars(original);     // new ref
  PyObject* freesB = PyCode_GetFreevars(transformed);  // new ref
  std::string mismatch;
  bool failed = !cellsA || !cellsB || !freesA || !freesB;
  try {
    if (!failed && !sameTuple(cellsA, cellsB)) mismatch = "co_cellvars differ";
    if (!failed && mismatch.empty() && !sameTuple(freesA, freesB)) mismatch = "co_freevars differ";
  } catch (const PythonError&) {
    failed = true;
  }
  Py_XDECREF(cellsA);
  Py_XDECREF(cellsB);
  Py_XDECREF(freesA);
  Py_XDECREF(freesB);
  if (failed) throw PythonError{};
  return mismatch;
}

}  // namespace dynamo::core
