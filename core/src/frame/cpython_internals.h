// CPython internals used by the frame hook: the internal headers, and our own copies of the
// functions CPython does not export (frame clear, data-stack push/pop, frame-object creation).
//
// Include this header from C files only: internal/pycore_pystate.h and friends do not compile as
// C++ (pycore_atomic.h uses C11 atomics). The implementations live in cpython_internals.c, which
// is version-locked: it supports CPython 3.11 and 3.12 and refuses to build on anything else, so
// that every new minor version forces a re-audit against that version's sources.
#ifndef DYNAMO_FRAME_CPYTHON_INTERNALS_H
#define DYNAMO_FRAME_CPYTHON_INTERNALS_H

#ifdef __cplusplus
#error "cpython_internals.h is for C files only (CPython internal headers are not C++-clean)"
#endif

#include <Python.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030D0000
#error "dynamo's frame hook supports CPython 3.11 and 3.12 only; re-audit cpython_internals.c"
#endif

#ifndef Py_BUILD_CORE
#define Py_BUILD_CORE 1
#endif
#if PY_VERSION_HEX >= 0x030C0000
// 3.12: objimpl.h and pycore_gc.h both define _PyGC_FINALIZED (cpython #105268).
#undef _PyGC_FINALIZED
#endif
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

/// The frame's function object, as a PyObject* (3.11: f_func, 3.12: f_funcobj). Borrowed ref.
static inline PyObject* dynamo_frame_function(_PyInterpreterFrame* frame) {
#if PY_VERSION_HEX >= 0x030C0000
  return frame->f_funcobj;
#else
  return (PyObject*)frame->f_func;
#endif
}

/// Number of PyObject* slots a frame running `code` needs on the data stack (specials included).
static inline size_t dynamo_frame_size(PyCodeObject* code) {
#if PY_VERSION_HEX >= 0x030C0000
  return (size_t)code->co_framesize;
#else
  return (size_t)(code->co_nlocalsplus + code->co_stacksize) + FRAME_SPECIALS_SIZE;
#endif
}

/// Allocates `size` slots for a frame on the thread's data stack (our copy of
/// _PyThreadState_BumpFramePointer[Slow] / _PyThreadState_PushFrame). Returns NULL with
/// MemoryError set on failure. Release it with dynamo_pop_frame().
_PyInterpreterFrame* dynamo_push_frame(PyThreadState* tstate, size_t size);

/// Releases the topmost frame's slots on the data stack (our copy of _PyThreadState_PopFrame).
/// The frame must already be cleared.
void dynamo_pop_frame(PyThreadState* tstate, _PyInterpreterFrame* frame);

/// Drops every reference the frame holds, code object included (our copy of 3.11 _PyFrame_Clear;
/// on 3.12 _PyFrame_ClearExceptCode followed by the code decref). If a frame object outlives the
/// frame (a traceback holds it), the frame data moves into that frame object instead.
/// The frame must be owned by the thread and no longer be the thread's current frame.
void dynamo_clear_frame(_PyInterpreterFrame* frame);

#endif  // DYNAMO_FRAME_CPYTHON_INTERNALS_H
