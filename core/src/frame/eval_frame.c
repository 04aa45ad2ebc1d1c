// The PEP 523 half of the frame hook, in C because it touches CPython's internal frame layout.
//
// - dynamo_eval_install/uninstall: put our shim in the interpreter's eval_frame slot, remembering
//   (and later restoring) whatever was there. frame_hook.cpp reference-counts the users.
// - dynamo_eval_shim: for each frame, filter out what we never touch (unwinding, tracing,
//   generators/coroutines, non-optimized code, frames already started), describe the frame in a
//   DynamoFrameInfo and ask the C++ side (dynamo_frame_dispatch) what to do.
// - eval_shadow: run a transformed code object in a "shadow" frame pushed on the thread's data
//   stack, with the original frame's arguments moved into it. Cleanup differs per version:
//     3.11: the shadow is an entry frame, the eval loop does not pop it: we clear + pop it, and
//           _PyEval_Vector later clears + pops the original frame.
//     3.12: every frame pops itself, and _PyEval_Vector does not pop the original: the shadow is
//           gone when the eval loop returns, and we clear + pop the ORIGINAL frame ourselves
//           whenever we do not hand it to the default evaluator (error paths included).
// See README.md for the whole flow.
#include "cpython_internals.h"
#include "eval_frame.h"

// The eval-frame function that was installed before ours (never NULL: CPython reports the
// default evaluator as _PyEval_EvalFrameDefault). Only touched with the GIL held.
static _PyFrameEvalFunction previous_eval_frame = _PyEval_EvalFrameDefault;
// The interpreter we installed into (one interpreter only; see README.md). Remembered so that
// uninstalling works while a thread state is being torn down.
static PyInterpreterState* hooked_interp = NULL;

// FrameView (frame_view.cpp) reads slot kinds with its own copies of these constants.
_Static_assert(CO_FAST_LOCAL == 0x20 && CO_FAST_CELL == 0x40 && CO_FAST_FREE == 0x80,
               "frame_view.cpp's slot-kind constants are out of date");

static PyObject* eval_default(PyThreadState* tstate, _PyInterpreterFrame* frame, int throwflag) {
  return previous_eval_frame(tstate, frame, throwflag);
}

// 3.12: the original frame is ours to clear and pop once we decided not to evaluate it by
// default. 3.11: _PyEval_Vector clears and pops it after we return; nothing to do.
static void release_original(PyThreadState* tstate, _PyInterpreterFrame* frame) {
#if PY_VERSION_HEX >= 0x030C0000
  frame->previous = NULL;  // never linked into the frame chain; keep take_ownership safe
  dynamo_clear_frame(frame);
  dynamo_pop_frame(tstate, frame);
#else
  (void)tstate;
  (void)frame;
#endif
}

// Number of argument slots at the start of localsplus: positional, keyword-only, *args, **kw.
static int total_arg_count(PyCodeObject* code) {
  return code->co_argcount + code->co_kwonlyargcount + ((code->co_flags & CO_VARARGS) ? 1 : 0) +
         ((code->co_flags & CO_VARKEYWORDS) ? 1 : 0);
}

// Runs `code` instead of `frame`'s code, in a shadow frame. The transformed code has the same
// argument layout, cellvars and freevars as the original, and starts with its own prologue
// (MAKE_CELL, COPY_FREE_VARS), so only the argument slots are carried over: at hook time the
// original frame's cell and free slots are still empty (its prologue has not run). Pre-filling
// free slots from the closure would leak, since COPY_FREE_VARS overwrites without a decref.
static PyObject* eval_shadow(PyThreadState* tstate, _PyInterpreterFrame* frame, PyCodeObject* code,
                             int throwflag) {
  _PyInterpreterFrame* shadow = dynamo_push_frame(tstate, dynamo_frame_size(code));
  if (shadow == NULL) {
    release_original(tstate, frame);
    return NULL;
  }
  // The shadow shares the original function object (closure, globals, builtins); only its code
  // differs. Both versions' frames keep f_code separately from the function.
  PyFunctionObject* func = (PyFunctionObject*)dynamo_frame_function(frame);
  Py_INCREF(func);  // new ref, consumed by the shadow frame
#if PY_VERSION_HEX >= 0x030C0000
  _PyFrame_Initialize(shadow, func, NULL, code, 0);  // also NULLs every local slot
#else
  _PyFrame_InitializeSpecials(shadow, func, NULL, code->co_nlocalsplus);
  Py_INCREF(code);  // new ref, owned by the shadow frame
  Py_SETREF(shadow->f_code, code);  // drops the ref to func->func_code taken above
  shadow->prev_instr = _PyCode_CODE(code) - 1;
  for (int i = 0; i < code->co_nlocalsplus; i++) shadow->localsplus[i] = NULL;
#endif
  // Move (not copy) the arguments: the original frame must not keep them alive while the
  // transformed code runs (the code may `del` a large tensor argument).
  int nargs = total_arg_count(frame->f_code);
  for (int i = 0; i < nargs; i++) {
    shadow->localsplus[i] = frame->localsplus[i];  // strong ref moved
    frame->localsplus[i] = NULL;
  }
  PyObject* result = eval_default(tstate, shadow, throwflag);  // new ref or NULL
#if PY_VERSION_HEX >= 0x030C0000
  // The shadow popped itself on return or unwind.
  release_original(tstate, frame);
#else
  // The shadow was an entry frame: the eval loop unlinked it but left it on the data stack.
  dynamo_clear_frame(shadow);
  dynamo_pop_frame(tstate, shadow);
#endif
  return result;
}

enum {
  kUntouchedFlags = CO_GENERATOR | CO_COROUTINE | CO_ITERABLE_COROUTINE | CO_ASYNC_GENERATOR,
};

// Frames the hook never looks at: they run by the default evaluator unchanged.
static int is_eligible(PyThreadState* tstate, _PyInterpreterFrame* frame, int throwflag) {
  PyCodeObject* code = frame->f_code;
  return !throwflag                                   // unwinding into a frame: never ours
         && tstate->tracing == 0                      // inside a trace/profile function
         && frame->owner == FRAME_OWNED_BY_THREAD     // generator frames resume through here
         && (code->co_flags & kUntouchedFlags) == 0   // generators, coroutines: left alone
         && (code->co_flags & CO_OPTIMIZED) != 0      // module / class bodies, exec()
         && frame->f_locals == NULL                   // same: no fast locals
         && frame->prev_instr == _PyCode_CODE(code) - 1;  // has not started
}

static PyObject* dynamo_eval_shim(PyThreadState* tstate, _PyInterpreterFrame* frame,
                                  int throwflag) {
  if (!is_eligible(tstate, frame, throwflag)) return eval_default(tstate, frame, throwflag);
  // Another PEP 523 hook was installed over ours (torch.compile's, a debugger's) and hands us the
  // frames it does not take: they are its business, never captured by us as well.
  if (_PyInterpreterState_GetEvalFrameFunc(tstate->interp) != dynamo_eval_shim)
    return eval_default(tstate, frame, throwflag);
  PyObject* function = dynamo_frame_function(frame);  // borrowed ref
  DynamoFrameInfo info;
  info.code = frame->f_code;
  info.function = function;
  info.globals = frame->f_globals;
  info.builtins = frame->f_builtins;
  info.closure = ((PyFunctionObject*)function)->func_closure;  // borrowed ref, may be NULL
  info.localsplus = frame->localsplus;
  PyObject* new_code = NULL;
  switch (dynamo_frame_dispatch(&info, &new_code)) {
    case DYNAMO_DISPATCH_DEFAULT:
      return eval_default(tstate, frame, throwflag);
    case DYNAMO_DISPATCH_RUN: {
      // new_code is a new ref: it stays alive even if a reset() drops the cache entry mid-run.
      PyObject* result = eval_shadow(tstate, frame, (PyCodeObject*)new_code, throwflag);
      Py_DECREF(new_code);
      return result;
    }
    case DYNAMO_DISPATCH_ERROR:
    default:
      release_original(tstate, frame);
      return NULL;
  }
}

void dynamo_eval_install(void) {
  PyInterpreterState* interp = PyInterpreterState_Get();  // borrowed
  _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
  if (current == dynamo_eval_shim) return;
  previous_eval_frame = current;
  hooked_interp = interp;
  _PyInterpreterState_SetEvalFrameFunc(interp, dynamo_eval_shim);
}

void dynamo_eval_uninstall(void) {
  if (hooked_interp == NULL) return;
  // If someone installed their own hook over ours, leave theirs in place.
  if (_PyInterpreterState_GetEvalFrameFunc(hooked_interp) != dynamo_eval_shim) return;
  // previous_eval_frame stays set: frames already inside the shim still chain to it.
  _PyInterpreterState_SetEvalFrameFunc(hooked_interp, previous_eval_frame);
}

int dynamo_eval_foreign_installed(void) {
  _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(PyInterpreterState_Get());
  return current != dynamo_eval_shim && current != _PyEval_EvalFrameDefault;
}

int dynamo_eval_installed(void) {
  return hooked_interp != NULL &&
         _PyInterpreterState_GetEvalFrameFunc(hooked_interp) == dynamo_eval_shim;
}
