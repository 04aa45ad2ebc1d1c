// The PEP 523 frame hook: how the capture engine plugs into CPython's frame evaluation.
//
// Each thread has a mode: off, run-only (use cached entries, never compile) or compile (with a
// FrameCompiler). While any thread's mode is not off, our eval-frame function is installed
// interpreter-wide; when the last such thread turns it off (or exits), the previous function is
// restored, because any installed hook slows every Python call.
//
// For each new frame of an eligible code object (not a generator/coroutine, optimized, not
// unwinding, not traced, not skipped/disabled), the hook runs the guards of the code's cache
// entries; on a hit it runs that entry's transformed code in a shadow frame, on a miss it asks the
// thread's FrameCompiler (compile mode only). Guards and the compiler run with the hook suspended
// on that thread, so Python code they call is never captured.
//
// Errors: an exception raised by a guard or by the compiler propagates to the caller of the
// intercepted function (the function body does not run). A compiler that prefers to fall back
// catches its own errors and returns CompileResult::runDefault().
//
// All functions need the GIL. See core/src/frame/README.md for the flow and version notes.
#pragma once

#include <Python.h>

#include <cstdint>
#include <memory>
#include <string>

#include "dynamo/core/frame_cache.h"
#include "dynamo/core/frame_view.h"

namespace dynamo::core {

/// What the compiler decided for a frame that missed the cache.
struct CompileResult {
  enum class Action {
    kRunDefault,  ///< run the original code this time; try again on the next call
    kSkipCode,    ///< run the original code and never try to compile this code again
    kAddEntry,    ///< add `entry` at the front of the cache and run its code now
  };
  Action action = Action::kRunDefault;  ///< the decision
  std::shared_ptr<CacheEntry> entry;    ///< the new entry (kAddEntry only)

  static CompileResult runDefault() { return {Action::kRunDefault, nullptr}; }
  static CompileResult skipCode() { return {Action::kSkipCode, nullptr}; }
  static CompileResult addEntry(std::shared_ptr<CacheEntry> e) {
    return {Action::kAddEntry, std::move(e)};
  }
};

/// Turns a frame into a cache entry. Implemented by the symbolic interpreter (and, for tests,
/// by the Python callback adapter in _dynamo_testing.frame).
class FrameCompiler {
 public:
  virtual ~FrameCompiler() = default;
  /// Called on a cache miss, with the hook suspended on this thread. `state` shows the existing
  /// entries and lastMissReasons(). The entry's code must be compatible with frame.code() (see
  /// checkCompatibleCode()). Throw PythonError (or any C++ exception) to fail the call.
  virtual CompileResult compile(const FrameView& frame, CodeState& state) = 0;
  /// A process-unique id; the hook runs only entries made by the thread's current compiler (or
  /// entries with no owner). 0: no ownership (entries of any compiler run).
  virtual uint64_t ownerId() const { return 0; }
};

/// The hook's behaviour on one thread.
enum class HookMode {
  kOff,      ///< frames run normally
  kRunOnly,  ///< cached entries run when their guards pass; the compiler is never called
  kCompile,  ///< like kRunOnly, and misses go to the thread's FrameCompiler
};

/// Sets the calling thread's mode. kCompile needs a compiler (throws UserError otherwise); the
/// compiler is kept for the thread until the next call. Installs or removes the eval-frame
/// function as the number of threads with a mode other than kOff goes above or back to zero.
void setHookMode(HookMode mode, std::shared_ptr<FrameCompiler> compiler = nullptr);
/// The calling thread's mode.
HookMode hookMode();
/// The calling thread's compiler (may be null).
std::shared_ptr<FrameCompiler> hookCompiler();
/// True while our eval-frame function is installed in the interpreter.
bool hookInstalled();
/// True while another PEP 523 hook is the interpreter's eval-frame function (torch.compile's
/// while it is active on some thread, a debugger's); frames it hands on are left to it.
bool foreignHookInstalled();
/// Number of threads whose mode is not kOff.
int activeHookThreads();

/// Suspends the hook on the calling thread for its lifetime (nests). The hook does this itself
/// around guards and the compiler; use it to run Python helpers that must never be captured.
class HookSuspension {
 public:
  HookSuspension();
  ~HookSuspension();
  HookSuspension(const HookSuspension&) = delete;
  HookSuspension& operator=(const HookSuspension&) = delete;
};

/// Marks `code` (a borrowed code object) as never to be compiled, until reset().
void skipCode(PyObject* code);
/// Marks `code` as never to be captured at all, surviving reset(): for our generated code and
/// the compiler's own functions. Transformed code added to a cache is disabled automatically.
void disableCode(PyObject* code);
/// Drops every cache entry, skip mark and counter of every code object.
void resetFrameCaches();

/// Empty when `transformed` may replace `original` in a shadow frame; otherwise a sentence
/// saying what differs. Required: the same argument count, kinds and names, the same
/// co_cellvars and co_freevars, an optimized non-generator code object.
std::string checkCompatibleCode(PyCodeObject* original, PyCodeObject* transformed);

/// Sets the Python error for the C++ exception in flight; called inside a catch block when a
/// guard or compiler throws something other than PythonError. The Python bindings install
/// their mapping (user errors to dynamo.UserError, ...); the default raises RuntimeError.
using ErrorTranslator = void (*)();
void setErrorTranslator(ErrorTranslator translator);

}  // namespace dynamo::core
