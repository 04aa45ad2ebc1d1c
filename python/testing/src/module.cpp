// _dynamo_testing: the test-only bindings of core (bytecode, frame hook, guards), kept out of the
// production module dynamo._C (python/src/) so they are not installed with it.
//
//   from _dynamo_testing import bytecode, frame, guards
//
// It raises dynamo's own exception classes: they are taken from dynamo._C at import.
#include <Python.h>

#include "py_util.h"
#include "testing_bindings.h"

namespace {

// Fills py_util's exception table with dynamo._C's classes (borrowed refs kept alive by the
// module object, which the module holds in `_dynamo_C`).
int takeExceptionTypes(PyObject* module) {
  PyObject* c = PyImport_ImportModule("dynamo._C");  // new ref
  if (c == nullptr) return -1;
  if (PyModule_AddObject(module, "_dynamo_C", c) < 0) {  // steals c on success
    Py_DECREF(c);
    return -1;
  }
  auto& t = dynamo::py::exceptionTypes();
  struct {
    PyObject** slot;
    const char* name;
  } rows[] = {{&t.error, "DynamoError"},         {&t.userError, "UserError"},
              {&t.internalError, "InternalError"}, {&t.traceStoreError, "TraceStoreError"},
              {&t.unsupported, "Unsupported"},     {&t.backendError, "BackendCompilerFailed"}};
  for (auto& row : rows) {
    PyObject* type = PyObject_GetAttrString(c, row.name);  // new ref
    if (type == nullptr) return -1;
    *row.slot = type;  // borrowed from here on: dynamo._C holds it
    Py_DECREF(type);
  }
  return 0;
}

// The binding files' init functions, in the order of testing_bindings.def.
using InitFn = int (*)(PyObject*);
constexpr InitFn kBindings[] = {
#define DYNAMO_TESTING_BINDING(init, submodule) dynamo::py::init,
#include "testing_bindings.def"
};

int initBindings(PyObject* module) {
  for (InitFn init : kBindings)
    if (init(module) < 0) return -1;
  return 0;
}

PyModuleDef moduleDef = {
    PyModuleDef_HEAD_INIT,
    "_dynamo_testing",
    "Test-only bindings of Dynamo's core (not installed): bytecode, frame, guards.",
    -1,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
};

}  // namespace

PyMODINIT_FUNC PyInit__dynamo_testing(void) {
  PyObject* module = PyModule_Create(&moduleDef);  // new ref
  if (module == nullptr) return nullptr;
  if (takeExceptionTypes(module) < 0 || initBindings(module) < 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
