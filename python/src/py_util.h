// Small helpers for writing the dynamo._C extension with the CPython C API directly.
//
// - PyRef: an owning reference (RAII), the same type as core's PyObjectRef. Every raw PyObject* in binding code either lives in a
//   PyRef or carries a comment saying whether it is borrowed.
// - translateException(): maps a C++ exception to the matching Python exception (user errors to
//   dynamo.UserError subclasses, internal errors to dynamo.InternalError), for use in the
//   DYNAMO_PY_TRY / DYNAMO_PY_CATCH pair around every binding body.
#pragma once

#include <Python.h>

#include <string>
#include <type_traits>
#include <utility>

#include "dynamo/core/frame_cache.h"
#include "dynamo/core/graph_pyref.h"

namespace dynamo::py {

/// An owned (strong) reference: the core's type, shared by every layer.
using PyRef = core::PyObjectRef;

/// Thrown when a Python error is already set (a C API call returned NULL/-1): core's one type,
/// so errors thrown in core code and in binding code keep their pending Python error alike.
using core::PythonError;
/// Returns o, or throws PythonError when it is NULL.
using core::checkPy;

/// Runs fn with the GIL released; C++ exceptions propagate after the GIL is taken back.
template <typename Fn>
auto withoutGil(Fn&& fn) -> decltype(fn()) {
  PyThreadState* state = PyEval_SaveThread();  // borrowed ref: restored below
  try {
    if constexpr (std::is_void_v<decltype(fn())>) {
      fn();
      PyEval_RestoreThread(state);
    } else {
      auto result = fn();
      PyEval_RestoreThread(state);
      return result;
    }
  } catch (...) {
    PyEval_RestoreThread(state);
    throw;
  }
}

/// UTF-8 view of a str object; throws PythonError on failure.
std::string toString(PyObject* str);

/// Sets the Python error matching the exception in flight. Call only inside a catch block.
void translateException();

/// The dynamo exception classes, created at module init (borrowed refs, owned by the module).
struct ExceptionTypes {
  PyObject* error = nullptr;          ///< dynamo.DynamoError (base)
  PyObject* userError = nullptr;      ///< dynamo.UserError
  PyObject* internalError = nullptr;  ///< dynamo.InternalError
  PyObject* traceStoreError = nullptr;///< dynamo.TraceStoreError (a UserError)
  PyObject* unsupported = nullptr;    ///< dynamo.Unsupported (a UserError): fullgraph breaks
  PyObject* backendError = nullptr;   ///< dynamo.BackendCompilerFailed (a UserError)
};
ExceptionTypes& exceptionTypes();

}  // namespace dynamo::py

/// Wrap the body of every binding function: C++ exceptions become Python exceptions.
#define DYNAMO_PY_TRY try {
#define DYNAMO_PY_CATCH(failure_value)      \
  }                                         \
  catch (...) {                             \
    ::dynamo::py::translateException();     \
    return failure_value;                   \
  }
