// lookupAttr: a Python module attribute looked up once, for the interpreter's handlers that
// recognise optional objects (torch.autocast, numpy.ndarray, ...). Defined in torch_api.cpp.
#pragma once

#include <Python.h>

namespace dynamo::core::interp {

/// module.name imported and looked up, or null when either fails (the Python error cleared): a
/// new reference that callers keep for the process (`static PyObject* x = lookupAttr(...)`).
PyObject* lookupAttr(const char* module, const char* name);

}  // namespace dynamo::core::interp
