// Entry points of the binding files of _dynamo_testing, the test-only extension module (built
// beside dynamo._C in the build tree, never installed), declared from testing_bindings.def (the
// list, in import order). module.cpp calls each once at import; each adds one submodule and
// returns -1 with a Python error set on failure.
//
// The module links its own copy of dynamo::core: its frame hook, code caches and guard objects
// are not the ones dynamo._C's compiler uses. Tests drive the hook through `frame` with a Python
// compiler of their own; what dynamo._C compiled is read through dynamo._C._compiler.
#pragma once

#include <Python.h>

namespace dynamo::py {

#define DYNAMO_TESTING_BINDING(init, submodule) int init(PyObject* module);
#include "testing_bindings.def"

}  // namespace dynamo::py
