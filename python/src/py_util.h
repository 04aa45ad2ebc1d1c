// Small helpers for writing the dynamo._C extension with the CPython C API directly.
//
// - PyRef: an owning reference (RAII). Every raw PyObject* in binding code either lives in a
//   PyRef or carries a comment saying whether it is borrowed.
// - translateException(): maps a C++ exception to the matching Python exception (user errors to
//   dynamo.UserError subclasses, internal errors to dynamo.InternalError), for use in the
//   DYNAMO_PY_TRY / DYNAMO_PY_CATCH pair around every binding body.
#pragma once

#include <Python.h>

#include <string>
#include <utility>

namespace dynamo::py {

/// An owned (strong) reference to a Python object; releases it on destruction.
class PyRef {
 public:
  PyRef() = default;
  /// Takes ownership of a new reference (may be NULL).
  static PyRef steal(PyObject* o) { return PyRef(o); }
  /// Takes a new reference to a borrowed object.
  static PyRef borrow(PyObject* o) {
    Py_XINCREF(o);
    return PyRef(o);
  }
  PyRef(const PyRef& other) : obj_(other.obj_) { Py_XINCREF(obj_); }
  PyRef(PyRef&& other) noexcept : obj_(std::exchange(other.obj_, nullptr)) {}
  PyRef& operator=(PyRef other) noexcept {
    std::swap(obj_, other.obj_);
    return *this;
  }
  ~PyRef() { Py_XDECREF(obj_); }

  PyObject* get() const { return obj_; }
  /// Gives up ownership: the caller now owns the reference.
  PyObject* release() { return std::exchange(obj_, nullptr); }
  explicit operator bool() const { return obj_ != nullptr; }

 private:
  explicit PyRef(PyObject* o) : obj_(o) {}
  PyObject* obj_ = nullptr;
};

/// Thrown by binding code when a Python error is already set (a C API call returned NULL/-1).
struct PythonErrorAlreadySet {};

/// Returns o, or throws PythonErrorAlreadySet when it is NULL.
inline PyObject* check(PyObject* o) {
  if (o == nullptr) throw PythonErrorAlreadySet{};
  return o;
}

/// UTF-8 view of a str object; throws PythonErrorAlreadySet on failure.
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
