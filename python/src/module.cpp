// dynamo._C: the extension module behind the `dynamo` Python package.
//
// It creates the exception hierarchy, records the versions it was built with, and calls each
// binding file's init function, in the order of bindings.def. The Python package
// (python/dynamo/) is a thin layer over it.
#include <Python.h>

#include "bindings.h"
#include "dynamo_version.h"
#include "py_util.h"

namespace {

// Creates `name` as a subclass of base, stores it on the module; returns a borrowed ref.
PyObject* addException(PyObject* module, const char* name, PyObject* base, const char* doc) {
  std::string qualified = std::string("dynamo.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);  // new ref
  if (type == nullptr) return nullptr;
  if (PyModule_AddObject(module, name, type) < 0) {  // steals type on success
    Py_DECREF(type);
    return nullptr;
  }
  return type;  // borrowed ref: the module owns it
}

int initExceptions(PyObject* module) {
  auto& t = dynamo::py::exceptionTypes();
  t.error = addException(module, "DynamoError", PyExc_RuntimeError,
                         "Base class of every error Dynamo raises.");
  if (!t.error) return -1;
  t.userError = addException(module, "UserError", t.error,
                             "Your code or input is at fault; the message names the cause, "
                             "your file and line where there is one, and a fix.");
  if (!t.userError) return -1;
  t.internalError = addException(module, "InternalError", t.error,
                                 "A bug in Dynamo itself; the message names our file and line.");
  if (!t.internalError) return -1;
  t.traceStoreError = addException(module, "TraceStoreError", t.userError,
                                   "The trace store file cannot be opened or written.");
  if (!t.traceStoreError) return -1;
  t.unsupported = addException(module, "Unsupported", t.userError,
                               "The code cannot be captured whole (raised with fullgraph=True).");
  if (!t.unsupported) return -1;
  t.backendError = addException(module, "BackendCompilerFailed", t.userError,
                                "A backend failed to compile a captured graph.");
  if (!t.backendError) return -1;
  return 0;
}

// The binding files' init functions, in the order of bindings.def.
using InitFn = int (*)(PyObject*);
constexpr InitFn kBindings[] = {
#define DYNAMO_BINDING(init, adds) dynamo::py::init,
#include "bindings.def"
};

int initBindings(PyObject* module) {
  for (InitFn init : kBindings)
    if (init(module) < 0) return -1;
  return 0;
}

PyModuleDef moduleDef = {
    PyModuleDef_HEAD_INIT,
    "dynamo._C",
    "Dynamo's native core: the trace store, the frame hook and the capture engine.",
    -1,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
};

}  // namespace

PyMODINIT_FUNC PyInit__C(void) {
  PyObject* module = PyModule_Create(&moduleDef);  // new ref
  if (module == nullptr) return nullptr;
  if (initExceptions(module) < 0 ||
      PyModule_AddStringConstant(module, "__version__", DYNAMO_VERSION) < 0 ||
      PyModule_AddStringConstant(module, "BUILD_PYTHON_VERSION", PY_VERSION) < 0 || initBindings(module) < 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
