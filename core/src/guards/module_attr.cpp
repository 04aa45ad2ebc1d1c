// Fast attribute reads on nn.Module instances, and the trace-time check that they are valid.
//
// `self.conv1.weight` through Python's getattr runs object.__getattribute__ (a miss in the
// instance dict and the MRO) and then nn.Module.__getattr__, a Python function that looks in
// _parameters, _buffers and _modules. That is about a microsecond per step. fetchModuleAttr does
// the same dict lookups in C. It is valid while the class adds no attribute of that name (which
// would win over __getattr__) and keeps Module's __getattr__ / object's __getattribute__:
// planModuleAttr checks that at trace time, and the module's type or identity is guarded.
#include "module_attr.h"

#include "dynamo/core/source.h"
#include "py_text.h"

namespace dynamo::core {

namespace guards_detail {

namespace {

// Interned attribute names, created on first use and kept for the process (new refs, never freed).
struct ModuleNames {
  PyObject* parameters = PyUnicode_InternFromString("_parameters");
  PyObject* buffers = PyUnicode_InternFromString("_buffers");
  PyObject* modules = PyUnicode_InternFromString("_modules");
  PyObject* getattrName = PyUnicode_InternFromString("__getattr__");
  PyObject* getattributeName = PyUnicode_InternFromString("__getattribute__");
};

const ModuleNames& names() {
  static const ModuleNames n;  // initialised under the GIL on first use
  return n;
}

// d[name] when d is a dict; borrowed ref or NULL (with an error only when lookup raised).
PyObject* lookupIn(PyObject* d, PyObject* name) {
  if (d == nullptr || !PyDict_Check(d)) return nullptr;
  return PyDict_GetItemWithError(d, name);  // borrowed ref
}

}  // namespace

namespace {

// The interned key of the instance-dict entry holding `slot`'s dict; NULL for the instance dict.
PyObject* slotKey(ModuleSlot slot) {
  const ModuleNames& n = names();
  switch (slot) {
    case ModuleSlot::kParameters: return n.parameters;
    case ModuleSlot::kBuffers: return n.buffers;
    case ModuleSlot::kModules: return n.modules;
    case ModuleSlot::kInstanceDict:
    case ModuleSlot::kNone: return nullptr;
  }
  return nullptr;
}

// The full nn.Module lookup order; borrowed ref or NULL (error set only if a lookup raised).
PyObject* lookupInOrder(PyObject* dict, PyObject* name) {
  PyObject* found = lookupIn(dict, name);  // borrowed ref
  if (found != nullptr || PyErr_Occurred()) return found;
  const ModuleNames& n = names();
  for (PyObject* key : {n.parameters, n.buffers, n.modules}) {
    PyObject* slot = lookupIn(dict, key);  // borrowed ref
    if (slot == nullptr && PyErr_Occurred()) return nullptr;
    found = lookupIn(slot, name);  // borrowed ref
    if (found != nullptr || PyErr_Occurred()) return found;
  }
  return nullptr;
}

}  // namespace

PyObject* fetchModuleAttr(PyObject* module, PyObject* name, ModuleSlot slot) {
  PyObject* dict = PyObject_GenericGetDict(module, nullptr);  // new ref
  if (dict == nullptr) {
    PyErr_Clear();
    return PyObject_GetAttr(module, name);  // new ref
  }
  PyObject* found = nullptr;  // borrowed ref
  if (slot != ModuleSlot::kNone) {
    PyObject* key = slotKey(slot);                                       // borrowed ref
    found = lookupIn(key == nullptr ? dict : lookupIn(dict, key), name);  // borrowed ref
  }
  if (found == nullptr && !PyErr_Occurred()) found = lookupInOrder(dict, name);
  if (found == nullptr) {
    Py_DECREF(dict);
    if (PyErr_Occurred()) return nullptr;
    PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute '%U'",
                 Py_TYPE(module)->tp_name, name);
    return nullptr;
  }
  // _parameters may hold None for a registered-but-unset parameter; __getattr__ returns it too.
  Py_INCREF(found);  // new ref for the caller
  Py_DECREF(dict);
  return found;
}

}  // namespace guards_detail

const char* moduleSlotName(ModuleSlot slot) {
  switch (slot) {
    case ModuleSlot::kNone: return "none";
    case ModuleSlot::kInstanceDict: return "attribute";
    case ModuleSlot::kParameters: return "parameter";
    case ModuleSlot::kBuffers: return "buffer";
    case ModuleSlot::kModules: return "submodule";
  }
  return "none";
}

namespace {

// torch.nn.Module, imported on first use; borrowed ref kept for the process, or NULL.
PyObject* moduleBaseClass() {
  static PyObject* cls = [] {
    PyObject* nn = PyImport_ImportModule("torch.nn");  // new ref
    if (nn == nullptr) return static_cast<PyObject*>(nullptr);
    PyObject* c = PyObject_GetAttrString(nn, "Module");  // new ref, kept forever
    Py_DECREF(nn);
    return c;
  }();
  if (cls == nullptr) PyErr_Clear();
  return cls;
}

ModuleAttrPlan unsafe(std::string why) {
  ModuleAttrPlan plan;
  plan.whyNot = std::move(why);
  return plan;
}

// Where the attribute lives now (instance dict, _parameters, _buffers, _modules) or kNone.
ModuleSlot locate(PyObject* module, PyObject* nameObj) {
  PyObject* dict = PyObject_GenericGetDict(module, nullptr);  // new ref
  if (dict == nullptr) {
    PyErr_Clear();
    return ModuleSlot::kNone;
  }
  ModuleSlot where = ModuleSlot::kNone;
  if (PyDict_Check(dict) && PyDict_GetItemWithError(dict, nameObj) != nullptr) {  // borrowed
    where = ModuleSlot::kInstanceDict;
  } else {
    const char* slotNames[] = {"_parameters", "_buffers", "_modules"};
    const ModuleSlot slots[] = {ModuleSlot::kParameters, ModuleSlot::kBuffers,
                                ModuleSlot::kModules};
    for (int i = 0; i < 3 && where == ModuleSlot::kNone && !PyErr_Occurred(); ++i) {
      PyObject* d = PyDict_GetItemString(dict, slotNames[i]);  // borrowed ref
      if (d != nullptr && PyDict_Check(d) && PyDict_GetItemWithError(d, nameObj) != nullptr) {
        where = slots[i];
      }
    }
  }
  PyErr_Clear();
  Py_DECREF(dict);
  return where;
}

}  // namespace

ModuleAttrPlan planModuleAttr(PyObject* module, const std::string& name) {
  guards_detail::ErrorSaver saved;
  PyObject* base = moduleBaseClass();  // borrowed ref
  if (base == nullptr) return unsafe("torch.nn cannot be imported");
  int isModule = PyObject_IsInstance(module, base);
  if (isModule != 1) {
    PyErr_Clear();
    return unsafe("not an nn.Module instance (type " + guards_detail::typeName(module) + ")");
  }
  PyTypeObject* type = Py_TYPE(module);  // borrowed ref
  PyTypeObject* baseType = reinterpret_cast<PyTypeObject*>(base);
  const auto& n = guards_detail::names();
  // _PyType_Lookup: borrowed refs, no error set; in the CPython API of 3.11 and 3.12.
  if (_PyType_Lookup(type, n.getattrName) != _PyType_Lookup(baseType, n.getattrName)) {
    return unsafe("class " + guards_detail::typeName(module) + " overrides __getattr__");
  }
  if (_PyType_Lookup(type, n.getattributeName) != _PyType_Lookup(baseType, n.getattributeName)) {
    return unsafe("class " + guards_detail::typeName(module) + " overrides __getattribute__");
  }
  PyObject* nameObj = PyUnicode_InternFromString(name.c_str());  // new ref
  if (nameObj == nullptr) {
    PyErr_Clear();
    return unsafe("attribute name is not valid UTF-8");
  }
  PyObject* classAttr = _PyType_Lookup(type, nameObj);  // borrowed ref
  if (classAttr != nullptr) {
    Py_DECREF(nameObj);
    std::string what = PyObject_TypeCheck(classAttr, &PyProperty_Type) ? "a property"
                                                                      : "an attribute";
    return unsafe("class " + guards_detail::typeName(module) + " defines " + what + " '" + name +
                  "'");
  }
  ModuleAttrPlan plan;
  plan.foundIn = locate(module, nameObj);
  Py_DECREF(nameObj);
  plan.safe = plan.foundIn != ModuleSlot::kNone;
  if (!plan.safe) plan.whyNot = "'" + name + "' is not in the instance dict, _parameters, "
                                "_buffers or _modules";
  return plan;
}

}  // namespace dynamo::core
