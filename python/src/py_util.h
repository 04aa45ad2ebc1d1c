// Small helpers for writing the dynamo._C extension with the CPython C API directly.
//
// - PyRef: an owning reference (RAII), the same type as core's PyObjectRef. Every raw PyObject* in binding code either lives in a
//   PyRef or carries a comment saying whether it is borrowed.
// - the makers every binding file uses (newStr, newBytes, newInt, newStrList, newIntList, newStrTuple), the
//   dict/list fillers (setItem, appendItem) and addSubmodule(): one definition each, here.
// - translateException(): maps a C++ exception to the matching Python exception (user errors to
//   dynamo.UserError subclasses, internal errors to dynamo.InternalError), for use in the
//   DYNAMO_PY_TRY / DYNAMO_PY_CATCH pair around every binding body.
#pragma once

#include <Python.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

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

// ---- makers: each returns a new ref and throws PythonError when CPython fails ---------------

/// A str of UTF-8 text; invalid bytes become U+FFFD (text from files and users is not trusted).
PyObject* newStr(std::string_view text);
/// A bytes object of the same bytes.
PyObject* newBytes(std::string_view data);
/// An int.
PyObject* newInt(long long value);
/// A list of str (newStr each).
PyObject* newStrList(const std::vector<std::string>& items);
/// A list of int (newInt each).
PyObject* newIntList(const std::vector<int64_t>& items);
/// A tuple of str (newStr each).
PyObject* newStrTuple(const std::vector<std::string>& items);

// ---- fillers: each takes over `value`, a new ref or NULL from a failed C API call ------------

/// dict[key] = value. Throws PythonError when value is NULL or the store fails.
void setItem(PyObject* dict, const char* key, PyObject* value);
/// dict[key] = value, from an owned reference.
void setItem(PyObject* dict, const char* key, PyRef value);
/// list.append(value). Throws PythonError when value is NULL or the append fails.
void appendItem(PyObject* list, PyObject* value);

/// Adds `sub` (a new ref from PyModule_Create / PyModule_New, or NULL when that failed) to
/// `module` as attribute `name`. Returns 0, or -1 with a Python error set (sub released).
int addSubmodule(PyObject* module, const char* name, PyObject* sub);

/// The arguments of one call, read by name the way a generated parser asks for them (the trace
/// writer's record_* methods: storage_rows.def). Errors are Python's own TypeErrors: a missing
/// required argument, one passed twice, an unknown keyword, too many positional arguments.
class CallArgs {
 public:
  /// `function` names the call in messages; args and kwargs are borrowed (kwargs may be NULL).
  CallArgs(const char* function, PyObject* args, PyObject* kwargs);
  /// The argument `key` (borrowed ref): positional argument `pos` (1-based; 0: keyword only) or
  /// the keyword; NULL when not passed. Throws PythonError (TypeError) when it is required and
  /// missing, or passed both ways.
  PyObject* take(const char* key, int pos, bool required);
  /// Throws PythonError (TypeError) for a keyword no take() asked for, or more positional
  /// arguments than the positions asked for.
  void finish() const;

 private:
  const char* function_;
  PyObject* args_;
  PyObject* kwargs_;
  int positions_ = 0;              ///< the highest position asked for
  std::vector<const char*> keys_;  ///< the keys asked for
};

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
