// Entry points of the binding files that make up dynamo._C, declared from bindings.def (the
// list, in import order). module.cpp calls each once at import; each adds its functions and
// types to the module (or one submodule) and returns -1 with a Python error set on failure. One
// file per component, named <component>_bindings.cpp. The test-only bindings (bytecode, frame
// hook, guards) are in python/testing/, the _dynamo_testing module.
#pragma once

#include <Python.h>

namespace dynamo::py {

#define DYNAMO_BINDING(init, adds) int init(PyObject* module);
#include "bindings.def"

}  // namespace dynamo::py
