// The CPython helpers of the binding files (makers, fillers, submodules) and the exception
// translation between C++ and Python, for dynamo._C and _dynamo_testing (see py_util.h).
#include "py_util.h"

#include <exception>
#include <new>

#include "dynamo/common/error.h"
#include "dynamo/core/compiler.h"

namespace dynamo::py {

ExceptionTypes& exceptionTypes() {
  static ExceptionTypes types;
  return types;
}

std::string toString(PyObject* str) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(str, &size);  // borrowed buffer, owned by str
  if (data == nullptr) throw PythonError{};
  return std::string(data, static_cast<size_t>(size));
}

PyObject* newStr(std::string_view text) {
  return checkPy(PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace"));
}

PyObject* newBytes(std::string_view data) {
  return checkPy(PyBytes_FromStringAndSize(data.data(), static_cast<Py_ssize_t>(data.size())));
}

PyObject* newInt(long long value) { return checkPy(PyLong_FromLongLong(value)); }

PyObject* newStrList(const std::vector<std::string>& items) {
  PyRef list = PyRef::steal(checkPy(PyList_New(static_cast<Py_ssize_t>(items.size()))));
  for (size_t i = 0; i < items.size(); ++i)
    PyList_SET_ITEM(list.get(), static_cast<Py_ssize_t>(i), newStr(items[i]));  // steals
  return list.release();
}

PyObject* newIntList(const std::vector<int64_t>& items) {
  PyRef list = PyRef::steal(checkPy(PyList_New(static_cast<Py_ssize_t>(items.size()))));
  for (size_t i = 0; i < items.size(); ++i)
    PyList_SET_ITEM(list.get(), static_cast<Py_ssize_t>(i), newInt(items[i]));  // steals
  return list.release();
}

PyObject* newStrTuple(const std::vector<std::string>& items) {
  PyRef tuple = PyRef::steal(checkPy(PyTuple_New(static_cast<Py_ssize_t>(items.size()))));
  for (size_t i = 0; i < items.size(); ++i)
    PyTuple_SET_ITEM(tuple.get(), static_cast<Py_ssize_t>(i), newStr(items[i]));  // steals
  return tuple.release();
}

void setItem(PyObject* dict, const char* key, PyObject* value) {
  setItem(dict, key, PyRef::steal(checkPy(value)));
}

void setItem(PyObject* dict, const char* key, PyRef value) {
  if (!value || PyDict_SetItemString(dict, key, value.get()) < 0) throw PythonError{};
}

void appendItem(PyObject* list, PyObject* value) {
  PyRef owned = PyRef::steal(checkPy(value));
  if (PyList_Append(list, owned.get()) < 0) throw PythonError{};
}

int addSubmodule(PyObject* module, const char* name, PyObject* sub) {
  if (sub == nullptr) return -1;
  if (PyModule_AddObject(module, name, sub) < 0) {  // steals sub on success only
    Py_DECREF(sub);
    return -1;
  }
  return 0;
}

CallArgs::CallArgs(const char* function, PyObject* args, PyObject* kwargs)
    : function_(function), args_(args), kwargs_(kwargs) {}

PyObject* CallArgs::take(const char* key, int pos, bool required) {
  keys_.push_back(key);
  if (pos > positions_) positions_ = pos;
  PyObject* positional = pos > 0 && pos <= PyTuple_GET_SIZE(args_) ? PyTuple_GET_ITEM(args_, pos - 1)
                                                                    : nullptr;  // borrowed ref
  PyObject* keyword = kwargs_ ? PyDict_GetItemString(kwargs_, key) : nullptr;     // borrowed ref
  if (positional && keyword) {
    PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s' (pos %d)",
                 function_, key, pos);
    throw PythonError{};
  }
  PyObject* value = positional ? positional : keyword;
  if (!value && required) {
    if (pos > 0)
      PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos %d)", function_, key, pos);
    else
      PyErr_Format(PyExc_TypeError, "%s() missing required keyword argument '%s'", function_, key);
    throw PythonError{};
  }
  return value;
}

void CallArgs::finish() const {
  if (PyTuple_GET_SIZE(args_) > positions_) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %d positional arguments (%zd given)",
                 function_, positions_, PyTuple_GET_SIZE(args_));
    throw PythonError{};
  }
  if (!kwargs_) return;
  PyObject* name = nullptr;  // borrowed ref
  PyObject* value = nullptr;  // borrowed ref
  Py_ssize_t at = 0;
  while (PyDict_Next(kwargs_, &at, &name, &value)) {
    const std::string key = PyUnicode_Check(name) ? toString(name) : std::string();
    bool known = false;
    for (const char* k : keys_) known = known || key == k;
    if (!known) {
      PyErr_Format(PyExc_TypeError, "'%U' is an invalid keyword argument for %s()", name, function_);
      throw PythonError{};
    }
  }
}

static PyObject* typeForUserError(const UserError& e) {
  const ExceptionTypes& t = exceptionTypes();
  switch (e.kind()) {
    case UserErrorKind::kTraceStore: return t.traceStoreError;
    case UserErrorKind::kUnsupported: return t.unsupported;
    case UserErrorKind::kBackend: return t.backendError;
    case UserErrorKind::kInvalidArgument:
    case UserErrorKind::kConfig: return t.userError;
  }
  return t.userError;
}

void translateException() {
  try {
    throw;
  } catch (const PythonError&) {
    // The error is already set by the failing C API call.
  } catch (const UserError& e) {
    PyObject* type = typeForUserError(e);  // borrowed ref
    PyRef args = PyRef::steal(Py_BuildValue("(s)", e.what()));
    if (!args) return;
    PyRef exc = PyRef::steal(PyObject_Call(type, args.get(), nullptr));
    if (!exc) return;
    // Structured fields, so Python code (explain, tests) need not parse the text.
    PyRef summary = PyRef::steal(PyUnicode_FromString(e.summary().c_str()));
    PyRef file = PyRef::steal(PyUnicode_FromString(e.where().file.c_str()));
    PyRef line = PyRef::steal(PyLong_FromLong(e.where().line));
    PyRef hint = PyRef::steal(PyUnicode_FromString(e.hint().c_str()));
    if (summary) PyObject_SetAttrString(exc.get(), "summary", summary.get());
    if (file) PyObject_SetAttrString(exc.get(), "user_file", file.get());
    if (line) PyObject_SetAttrString(exc.get(), "user_line", line.get());
    if (hint) PyObject_SetAttrString(exc.get(), "hint", hint.get());
    PyErr_Clear();
    if (e.kind() == UserErrorKind::kBackend) {
      // Chain the backend's own exception: `raise BackendCompilerFailed(...) from err`.
      core::PyObjectRef cause = core::takeBackendFailureCause();
      if (cause) PyException_SetCause(exc.get(), cause.release());  // steals the cause
    }
    PyErr_SetObject(type, exc.get());
  } catch (const InternalError& e) {
    PyErr_SetString(exceptionTypes().internalError, e.what());
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    std::string msg = std::string("internal error: unexpected C++ exception: ") + e.what() +
                      "\nThis is a bug in Dynamo, not in your code. Please report it.";
    PyErr_SetString(exceptionTypes().internalError, msg.c_str());
  } catch (...) {
    PyErr_SetString(exceptionTypes().internalError,
                    "internal error: unknown C++ exception. This is a bug in Dynamo.");
  }
}

}  // namespace dynamo::py
