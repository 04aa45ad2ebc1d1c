// Text helpers for guard descriptions and failure reasons (see py_text.h).
#include "py_text.h"

#include <cstdio>

namespace dynamo::core::guards_detail {

static std::string utf8(PyObject* str) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(str, &size);  // borrowed buffer, owned by str
  if (data == nullptr) {
    PyErr_Clear();
    return "<undecodable>";
  }
  return std::string(data, static_cast<std::size_t>(size));
}

std::string safeRepr(PyObject* o, std::size_t maxLen) {
  if (o == nullptr) return "<NULL>";
  ErrorSaver saved;
  PyObject* r = PyObject_Repr(o);  // new ref
  if (r == nullptr) {
    PyErr_Clear();
    return "<unprintable " + typeName(o) + ">";
  }
  std::string text = utf8(r);
  Py_DECREF(r);
  if (text.size() > maxLen) text = text.substr(0, maxLen) + "...";
  return text;
}

std::string typeName(PyObject* o) {
  if (o == nullptr) return "<NULL>";
  // tp_name is "module.Name" for static types and "Name" for heap types: keep the last part.
  std::string name = Py_TYPE(o)->tp_name;
  std::size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

std::string objectLabel(PyObject* o) {
  if (o == nullptr) return "<NULL>";
  ErrorSaver saved;
  PyObject* qualname = nullptr;
  const char* what = nullptr;
  if (PyType_Check(o)) {
    what = "class";
  } else if (PyFunction_Check(o) || PyCFunction_Check(o)) {
    what = "function";
  } else if (PyModule_Check(o)) {
    what = "module";
  }
  if (what != nullptr) {
    qualname = PyObject_GetAttrString(o, PyModule_Check(o) ? "__name__" : "__qualname__");  // new ref
    if (qualname != nullptr && PyUnicode_Check(qualname)) {
      std::string label = std::string(what) + " " + utf8(qualname);
      Py_DECREF(qualname);
      return label;
    }
    Py_XDECREF(qualname);
    PyErr_Clear();
  }
  char address[32];
  std::snprintf(address, sizeof(address), "%p", static_cast<void*>(o));
  return typeName(o) + " object at " + address;
}

std::string takeErrorText() {
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);  // new refs (each may be NULL)
  if (type == nullptr) return "unknown error";
  PyErr_NormalizeException(&type, &value, &tb);
  std::string text = (type != nullptr && PyType_Check(type))
                         ? std::string(reinterpret_cast<PyTypeObject*>(type)->tp_name)
                         : std::string("error");
  if (value != nullptr) {
    PyObject* s = PyObject_Str(value);  // new ref
    if (s != nullptr) {
      std::string msg = utf8(s);
      if (!msg.empty()) text += ": " + msg;
      Py_DECREF(s);
    } else {
      PyErr_Clear();
    }
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return text;
}

}  // namespace dynamo::core::guards_detail
