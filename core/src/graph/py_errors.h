// Taking and restoring the pending Python exception, on every supported CPython version
// (PyErr_Fetch is deprecated from 3.12 on; PyErr_GetRaisedException is 3.12+ only).
#pragma once

#include <Python.h>

namespace dynamo::core {

/// Takes the pending exception, normalized, with its traceback attached: a new ref, or NULL when
/// none is pending. The error indicator is cleared.
inline PyObject* takePythonException() {
#if PY_VERSION_HEX >= 0x030C0000
  return PyErr_GetRaisedException();  // new ref
#else
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);  // new refs
  if (type == nullptr) return nullptr;
  PyErr_NormalizeException(&type, &value, &traceback);
  if (traceback != nullptr) {
    PyException_SetTraceback(value, traceback);
    Py_DECREF(traceback);
  }
  Py_DECREF(type);
  return value;  // new ref
#endif
}

/// Makes exc (a new ref, stolen; may be NULL) the pending exception again.
inline void restorePythonException(PyObject* exc) {
  if (exc == nullptr) return;
#if PY_VERSION_HEX >= 0x030C0000
  PyErr_SetRaisedException(exc);  // steals exc
#else
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(exc));  // borrowed ref
  Py_INCREF(type);
  PyErr_Restore(type, exc, PyException_GetTraceback(exc));  // steals all three (tb: new ref)
#endif
}

}  // namespace dynamo::core
