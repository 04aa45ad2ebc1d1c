// Entry points of the binding files of _dynamo_testing, the test-only extension module (built
// beside dynamo._C in the build tree, never installed). module.cpp calls each once at import;
// each adds one submodule and returns -1 with a Python error set on failure.
//
// The module links its own copy of dynamo::core: its frame hook, code caches and guard objects
// are not the ones dynamo._C's compiler uses. Tests drive the hook through `frame` with a Python
// compiler of their own; what dynamo._C compiled is read through dynamo._C._compiler.
#pragma once

#include <Python.h>

namespace dynamo::py {

/// frame_bindings.cpp: the PEP 523 frame hook driven by a Python callback (`frame`).
int initFrameBindings(PyObject* module);
/// bytecode_bindings.cpp: decoding and assembling code objects (`bytecode`).
int initBytecodeBindings(PyObject* module);
/// guard_bindings.cpp: sources and guards (`guards`).
int initGuardBindings(PyObject* module);

}  // namespace dynamo::py
