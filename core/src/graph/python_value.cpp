// Python objects of graph arguments (graph_python.h).
#include <map>

#include "dynamo/common/error.h"
#include "dynamo/core/graph_python.h"

namespace dynamo::core {
namespace {

// Torch constants by (kind, name), made once. Leaked on purpose: the entries are Python objects
// and must not be released after the interpreter is gone.
PyObjectRef torchConstant(ArgKind kind, const std::string& name) {
  static auto* cache = new std::map<std::pair<ArgKind, std::string>, PyObjectRef>();
  auto key = std::make_pair(kind, name);
  if (auto it = cache->find(key); it != cache->end()) return it->second;

  PyObjectRef torch = PyObjectRef::steal(checkPy(PyImport_ImportModule("torch")));  // new ref
  PyObjectRef value;
  if (kind == ArgKind::kDevice) {
    PyObjectRef deviceType =
        PyObjectRef::steal(checkPy(PyObject_GetAttrString(torch.get(), "device")));  // new ref
    value = PyObjectRef::steal(
        checkPy(PyObject_CallFunction(deviceType.get(), "s", name.c_str())));  // new ref
  } else {
    // "torch.float32" -> getattr(torch, "float32")
    const std::string prefix = "torch.";
    std::string attr = name.compare(0, prefix.size(), prefix) == 0 ? name.substr(prefix.size())
                                                                   : name;
    value = PyObjectRef::steal(checkPy(PyObject_GetAttrString(torch.get(), attr.c_str())));
  }
  cache->emplace(key, value);
  return value;
}

PyObjectRef sequenceToPython(const Arg& arg, const NodeValueFn& nodeValue) {
  const std::vector<Arg>& items = arg.items();
  Py_ssize_t n = static_cast<Py_ssize_t>(items.size());
  bool isTuple = arg.kind() == ArgKind::kTuple;
  PyObjectRef out = PyObjectRef::steal(checkPy(isTuple ? PyTuple_New(n) : PyList_New(n)));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = argToPython(items[static_cast<size_t>(i)], nodeValue).release();  // new
    if (isTuple) PyTuple_SET_ITEM(out.get(), i, item);  // steals item
    else PyList_SET_ITEM(out.get(), i, item);           // steals item
  }
  return out;
}

}  // namespace

PyObjectRef argToPython(const Arg& arg, const NodeValueFn& nodeValue) {
  switch (arg.kind()) {
    case ArgKind::kNode: {
      PyObject* value = nodeValue(arg.asNode());  // borrowed ref
      DYNAMO_INTERNAL_ASSERT(value != nullptr, "no value for node '", arg.asNode()->name(), "'");
      return PyObjectRef::borrow(value);
    }
    case ArgKind::kNone: return PyObjectRef::borrow(Py_None);
    case ArgKind::kBool: return PyObjectRef::borrow(arg.asBool() ? Py_True : Py_False);
    case ArgKind::kInt: return PyObjectRef::steal(checkPy(PyLong_FromLongLong(arg.asInt())));
    case ArgKind::kFloat: return PyObjectRef::steal(checkPy(PyFloat_FromDouble(arg.asFloat())));
    case ArgKind::kStr:
      return PyObjectRef::steal(checkPy(PyUnicode_FromStringAndSize(
          arg.asString().data(), static_cast<Py_ssize_t>(arg.asString().size()))));
    case ArgKind::kDtype:
    case ArgKind::kDevice:
    case ArgKind::kMemoryFormat:
    case ArgKind::kLayout: return torchConstant(arg.kind(), arg.asString());
    case ArgKind::kEllipsis: return PyObjectRef::borrow(Py_Ellipsis);
    case ArgKind::kSlice: {
      PyObjectRef start = argToPython(arg.items()[0], nodeValue);
      PyObjectRef stop = argToPython(arg.items()[1], nodeValue);
      PyObjectRef step = argToPython(arg.items()[2], nodeValue);
      return PyObjectRef::steal(checkPy(PySlice_New(start.get(), stop.get(), step.get())));
    }
    case ArgKind::kTuple:
    case ArgKind::kList: return sequenceToPython(arg, nodeValue);
    case ArgKind::kDict: {
      PyObjectRef out = PyObjectRef::steal(checkPy(PyDict_New()));  // new ref
      for (size_t i = 0; i < arg.items().size(); ++i) {
        PyObjectRef value = argToPython(arg.items()[i], nodeValue);
        if (PyDict_SetItemString(out.get(), arg.keys()[i].c_str(), value.get()) < 0) {
          throw PythonError{};
        }
      }
      return out;
    }
  }
  DYNAMO_INTERNAL_ASSERT(false, "unknown ArgKind");
  return {};
}

PyObjectRef constantToPython(const Arg& arg) {
  DYNAMO_INTERNAL_ASSERT(!arg.containsNode(), "constantToPython of an Arg with nodes");
  return argToPython(arg, [](const NodeRef&) -> PyObject* { return nullptr; });
}

}  // namespace dynamo::core
