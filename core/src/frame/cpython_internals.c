// ==================================================================================================
//  OUR RE-IMPLEMENTATIONS OF NON-EXPORTED CPYTHON INTERNALS  (version-locked: 3.11 and 3.12 only)
// ==================================================================================================
//
// The frame hook must push, clear and pop interpreter frames itself, but CPython does not export
// the functions that do it (_PyFrame_Clear / _PyFrame_ClearExceptCode, _PyThreadState_PopFrame,
// _PyThreadState_BumpFramePointerSlow / _PyThreadState_PushFrame, _PyFrame_MakeAndSetFrameObject,
// _PyFrame_New_NoTrack). This file holds our own versions, written from the behaviour of
// CPython 3.11.2 (Python/frame.c, Python/pystate.c, Objects/frameobject.c) and of 3.12.
//
// Every function here mirrors a CPython data-structure invariant (data-stack chunks, frame
// ownership, frame-object layout). When CPython changes minor version, these must be re-audited
// against that version's sources: cpython_internals.h #errors on anything but 3.11 and 3.12.
//
// Audit status: 3.11 paths verified by the test suite on CPython 3.11.2. 3.12 paths written from
// the 3.12 sources' behaviour, NOT compiled or run here (no 3.12 on the development machine).
#include "cpython_internals.h"

#include <limits.h>
#include <string.h>

// ---- data stack --------------------------------------------------------------------------------
// Layout (same in 3.11 and 3.12): tstate->datastack_chunk is the newest _PyStackChunk; frames are
// bump-allocated between datastack_top and datastack_limit. A full chunk gets a successor of at
// least 16 KiB; the root chunk reserves data[0] so that popping never frees it.

enum { kDataStackChunkSize = 16 * 1024, kMinimumOverhead = 1000 };

static _PyStackChunk* allocate_chunk(size_t size_in_bytes, _PyStackChunk* previous) {
  PyObjectArenaAllocator arena;
  PyObject_GetArenaAllocator(&arena);
  _PyStackChunk* chunk = (_PyStackChunk*)arena.alloc(arena.ctx, size_in_bytes);
  if (chunk == NULL) return NULL;
  chunk->previous = previous;
  chunk->size = size_in_bytes;
  chunk->top = 0;
  return chunk;
}

static void free_chunk(_PyStackChunk* chunk) {
  PyObjectArenaAllocator arena;
  PyObject_GetArenaAllocator(&arena);
  arena.free(arena.ctx, chunk, chunk->size);
}

static PyObject** push_chunk(PyThreadState* tstate, size_t size) {
  size_t allocate_size = kDataStackChunkSize;
  while (allocate_size < sizeof(PyObject*) * (size + kMinimumOverhead)) {
    allocate_size *= 2;
  }
  _PyStackChunk* chunk = allocate_chunk(allocate_size, tstate->datastack_chunk);
  if (chunk == NULL) {
    PyErr_NoMemory();
    return NULL;
  }
  if (tstate->datastack_chunk != NULL) {
    tstate->datastack_chunk->top =
        (size_t)(tstate->datastack_top - &tstate->datastack_chunk->data[0]);
  }
  tstate->datastack_chunk = chunk;
  tstate->datastack_limit = (PyObject**)((char*)chunk + allocate_size);
  // The root chunk skips data[0] so dynamo_pop_frame never frees it.
  PyObject** result = &chunk->data[chunk->previous == NULL];
  tstate->datastack_top = result + size;
  return result;
}

_PyInterpreterFrame* dynamo_push_frame(PyThreadState* tstate, size_t size) {
  if (tstate->datastack_top != NULL &&
      size < (size_t)(tstate->datastack_limit - tstate->datastack_top)) {
    _PyInterpreterFrame* frame = (_PyInterpreterFrame*)tstate->datastack_top;
    tstate->datastack_top += size;
    return frame;
  }
  if (size > INT_MAX / 2) {
    PyErr_NoMemory();
    return NULL;
  }
  return (_PyInterpreterFrame*)push_chunk(tstate, size);
}

void dynamo_pop_frame(PyThreadState* tstate, _PyInterpreterFrame* frame) {
  PyObject** base = (PyObject**)frame;
  _PyStackChunk* chunk = tstate->datastack_chunk;
  if (base == &chunk->data[0]) {
    // The frame opened this chunk: give the chunk back and return to the previous one.
    _PyStackChunk* previous = chunk->previous;
    tstate->datastack_top = &previous->data[previous->top];
    tstate->datastack_chunk = previous;
    tstate->datastack_limit = (PyObject**)((char*)previous + previous->size);
    free_chunk(chunk);
  } else {
    tstate->datastack_top = base;
  }
}

// ---- frame objects -----------------------------------------------------------------------------

// Our _PyFrame_New_NoTrack: an untracked frame object sized for `code`. New ref.
static PyFrameObject* new_frame_object(PyCodeObject* code) {
  Py_ssize_t slots = code->co_nlocalsplus + code->co_stacksize;
  PyFrameObject* f = PyObject_GC_NewVar(PyFrameObject, &PyFrame_Type, slots);  // new ref
  if (f == NULL) return NULL;
  f->f_back = NULL;
  f->f_trace = NULL;
  f->f_trace_lines = 1;
  f->f_trace_opcodes = 0;
  f->f_fast_as_locals = 0;
  f->f_lineno = 0;
  return f;
}

// Our _PyFrame_GetFrameObject for a complete frame: returns its frame object, creating it when
// needed. Borrowed ref (owned by the frame); NULL with an error set on failure.
static PyFrameObject* frame_object_of(_PyInterpreterFrame* frame) {
  if (frame->frame_obj != NULL) return frame->frame_obj;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);  // new refs, restored below
  PyFrameObject* f = new_frame_object(frame->f_code);  // new ref
  if (f == NULL) {
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    return NULL;
  }
  PyErr_Restore(type, value, traceback);  // steals the three refs
  if (frame->frame_obj != NULL) {
    // The allocation ran a GC that created the same frame object (CPython GH-97002). Keep that
    // one; make ours look like an owned, cleared frame so its dealloc touches nothing.
    f->f_frame = (_PyInterpreterFrame*)f->_f_frame_data;
    f->f_frame->owner = FRAME_OWNED_BY_THREAD;  // anything but "owned by frame object"
    f->f_frame->frame_obj = f;
    Py_DECREF(f);
    return frame->frame_obj;
  }
  f->f_frame = frame;
  frame->frame_obj = f;  // the frame owns the new ref
  return f;
}

// True for a frame that has passed its prologue and can own a frame object.
static int is_complete(_PyInterpreterFrame* frame) {
#if PY_VERSION_HEX >= 0x030C0000
  if (frame->owner == FRAME_OWNED_BY_CSTACK) return 0;  // 3.12 C-stack entry frames
#endif
  return !_PyFrame_IsIncomplete(frame);
}

// Moves the frame data into its frame object `f`, which outlives the frame (our take_ownership).
// The frame's references (code included) now belong to `f`.
static void take_ownership(PyFrameObject* f, _PyInterpreterFrame* frame) {
  size_t size = (size_t)((char*)&frame->localsplus[frame->stacktop] - (char*)frame);
  memcpy((_PyInterpreterFrame*)f->_f_frame_data, frame, size);
  frame = (_PyInterpreterFrame*)f->_f_frame_data;
  f->f_frame = frame;
  frame->owner = FRAME_OWNED_BY_FRAME_OBJECT;
  if (_PyFrame_IsIncomplete(frame)) {
    // A frame that never reached RESUME: it is dead anyway, pretend the prologue ran.
    PyCodeObject* code = frame->f_code;
    frame->prev_instr = _PyCode_CODE(code) + code->_co_firsttraceable;
  }
  _PyInterpreterFrame* prev = frame->previous;
  while (prev != NULL && !is_complete(prev)) prev = prev->previous;
  frame->previous = NULL;
  if (prev != NULL) {
    // Link f_back to the first complete caller, as CPython does.
    PyFrameObject* back = frame_object_of(prev);  // borrowed ref
    if (back == NULL) {
      PyErr_Clear();  // out of memory: the traceback just loses its f_back link
    } else {
      Py_INCREF(back);
      f->f_back = back;
    }
  }
  if (!PyObject_GC_IsTracked((PyObject*)f)) PyObject_GC_Track((PyObject*)f);
}

void dynamo_clear_frame(_PyInterpreterFrame* frame) {
  if (frame->frame_obj != NULL) {
    PyFrameObject* f = frame->frame_obj;  // strong ref held by the frame
    frame->frame_obj = NULL;
    if (Py_REFCNT(f) > 1) {
      take_ownership(f, frame);
      Py_DECREF(f);  // the frame's ref; the other holders keep f (and now the frame data)
      return;
    }
    Py_DECREF(f);
  }
  for (int i = 0; i < frame->stacktop; i++) {
    Py_XDECREF(frame->localsplus[i]);
  }
  Py_XDECREF(frame->f_locals);
  Py_DECREF(dynamo_frame_function(frame));
  Py_DECREF(frame->f_code);
}
