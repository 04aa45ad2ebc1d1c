// The boundary between the C half of the frame hook (eval_frame.c: the PEP 523 shim, shadow
// frames) and the C++ half (frame_hook.cpp: modes, caches, guards, the compiler interface).
//
// Plain C types only, so both languages can include it. The C side fills a DynamoFrameInfo from
// the _PyInterpreterFrame and asks the C++ side what to do with the frame.
#pragma once

#include <Python.h>

#ifdef __cplusplus
extern "C" {
#endif

/// What the hook reads from a frame that is about to start. All pointers are borrowed and valid
/// only while the hook runs for that frame.
typedef struct DynamoFrameInfo {
  PyCodeObject* code;           ///< the code about to run (borrowed ref)
  PyObject* function;           ///< the function object being called (borrowed ref)
  PyObject* globals;            ///< the function's globals dict (borrowed ref)
  PyObject* builtins;           ///< the builtins dict (borrowed ref)
  PyObject* closure;            ///< func_closure: tuple of cells, or NULL (borrowed ref)
  PyObject* const* localsplus;  ///< the frame's fast slots, co_nlocalsplus long (borrowed refs)
} DynamoFrameInfo;

/// The decision dynamo_frame_dispatch() returns.
typedef enum DynamoDispatch {
  DYNAMO_DISPATCH_ERROR = -1,   ///< a Python error is set; the call fails with it
  DYNAMO_DISPATCH_DEFAULT = 0,  ///< run the original frame normally
  DYNAMO_DISPATCH_RUN = 1,      ///< run *code_out (a new ref) in a shadow frame instead
} DynamoDispatch;

/// Implemented in C++ (frame_hook.cpp). Called by the shim for every eligible frame (a fresh,
/// thread-owned frame of an optimized, non-generator code object, not unwinding, not tracing).
/// On DYNAMO_DISPATCH_RUN stores a new ref to the transformed code object in *code_out.
DynamoDispatch dynamo_frame_dispatch(const DynamoFrameInfo* info, PyObject** code_out);

/// Installs the shim as the interpreter's eval-frame function if it is not installed. GIL held.
void dynamo_eval_install(void);
/// Restores the eval-frame function that was there before dynamo_eval_install(). GIL held.
void dynamo_eval_uninstall(void);
/// 1 when the shim is the interpreter's current eval-frame function.
int dynamo_eval_installed(void);
/// 1 when the interpreter's eval-frame function is another PEP 523 hook (neither ours nor
/// CPython's default): torch.compile's while it is active, a debugger's. GIL held.
int dynamo_eval_foreign_installed(void);

#ifdef __cplusplus
}  // extern "C"
#endif
