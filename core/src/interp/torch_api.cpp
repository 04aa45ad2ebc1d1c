// Well-known Python objects for the interpreter (see torch_api.h).
#include "torch_api.h"

#include "py_lookup.h"

#include <cstring>

namespace dynamo::core::interp {

namespace {

PyObject* importAttr(const char* module, const char* attr) {
  PyObjectRef mod = PyObjectRef::steal(checkPy(PyImport_ImportModule(module)));
  return checkPy(PyObject_GetAttrString(mod.get(), attr));  // new ref, kept for the process
}

TorchApi load() {
  TorchApi api{};
  api.torch = checkPy(PyImport_ImportModule("torch"));  // new ref, kept for the process
  api.tensorType = importAttr("torch", "Tensor");
  api.parameterType = importAttr("torch.nn", "Parameter");
  api.moduleType = importAttr("torch.nn", "Module");
  api.sequentialType = importAttr("torch.nn", "Sequential");
  api.moduleListType = importAttr("torch.nn", "ModuleList");
  api.moduleDictType = importAttr("torch.nn", "ModuleDict");
  api.dtypeType = importAttr("torch", "dtype");
  api.deviceType = importAttr("torch", "device");
  api.sizeType = importAttr("torch", "Size");
  api.emptyStrided = importAttr("torch", "empty_strided");
  api.noGrad = importAttr("torch", "no_grad");
  api.enableGrad = importAttr("torch", "enable_grad");
  api.setGradEnabled = importAttr("torch._C", "_set_grad_enabled");
  api.isGradEnabled = importAttr("torch", "is_grad_enabled");
  api.setGradEnabledCm = importAttr("torch", "set_grad_enabled");
  api.getRngState = importAttr("torch", "get_rng_state");
  api.setRngState = importAttr("torch", "set_rng_state");
  api.operatorModule = checkPy(PyImport_ImportModule("operator"));
  api.getitem = importAttr("operator", "getitem");
  api.builtinsModule = checkPy(PyImport_ImportModule("builtins"));
  api.metaDevice = checkPy(PyObject_CallFunction(api.deviceType, "s", "meta"));
  api.functionType = importAttr("types", "FunctionType");
  api.methodType = importAttr("types", "MethodType");
  api.moduleTypeType = importAttr("types", "ModuleType");
  api.orderedDictType = importAttr("collections", "OrderedDict");
  return api;
}

}  // namespace

PyObject* lookupAttr(const char* module, const char* name) {
  PyObjectRef m = PyObjectRef::steal(PyImport_ImportModule(module));
  PyObject* o = m ? PyObject_GetAttrString(m.get(), name) : nullptr;  // new ref, kept
  PyErr_Clear();
  return o;
}

const TorchApi& torchApi() {
  static TorchApi api = load();
  return api;
}

bool isTensor(PyObject* o) {
  int r = PyObject_IsInstance(o, torchApi().tensorType);
  if (r < 0) PyErr_Clear();
  return r > 0;
}

bool isModule(PyObject* o) {
  int r = PyObject_IsInstance(o, torchApi().moduleType);
  if (r < 0) PyErr_Clear();
  return r > 0;
}

PyObjectRef metaExample(PyObject* t) {
  const TorchApi& api = torchApi();
  PyObjectRef size = PyObjectRef::steal(checkPy(PyObject_CallMethod(t, "size", nullptr)));
  PyObjectRef stride = PyObjectRef::steal(checkPy(PyObject_CallMethod(t, "stride", nullptr)));
  PyObjectRef dtype = PyObjectRef::steal(checkPy(PyObject_GetAttrString(t, "dtype")));
  PyObjectRef rg = PyObjectRef::steal(checkPy(PyObject_GetAttrString(t, "requires_grad")));
  PyObjectRef args = PyObjectRef::steal(checkPy(PyTuple_Pack(2, size.get(), stride.get())));
  PyObjectRef kwargs = PyObjectRef::steal(checkPy(PyDict_New()));
  PyDict_SetItemString(kwargs.get(), "dtype", dtype.get());
  PyDict_SetItemString(kwargs.get(), "device", api.metaDevice);
  PyDict_SetItemString(kwargs.get(), "requires_grad", rg.get());
  return PyObjectRef::steal(checkPy(PyObject_Call(api.emptyStrided, args.get(), kwargs.get())));
}

std::string moduleOf(PyObject* callable) {
  PyObject* mod = PyObject_GetAttrString(callable, "__module__");  // new ref
  if (mod == nullptr) {
    PyErr_Clear();
    // Methods of builtin types (torch.Tensor.add) have no __module__: use the owner's.
    PyObject* owner = PyObject_GetAttrString(callable, "__objclass__");  // new ref
    if (owner == nullptr) {
      PyErr_Clear();
      PyObject* self = PyObject_GetAttrString(callable, "__self__");  // new ref
      if (self == nullptr) {
        PyErr_Clear();
        return {};
      }
      std::string r;
      if (PyModule_Check(self)) {
        const char* n = PyModule_GetName(self);
        if (n) r = n; else PyErr_Clear();
      } else {
        PyObject* t = (PyObject*)Py_TYPE(self);  // borrowed ref
        PyObject* m = PyObject_GetAttrString(t, "__module__");  // new ref
        if (m && PyUnicode_Check(m)) r = PyUnicode_AsUTF8(m);
        Py_XDECREF(m);
        PyErr_Clear();
      }
      Py_DECREF(self);
      return r;
    }
    std::string r = moduleOf(owner);
    Py_DECREF(owner);
    return r;
  }
  std::string r;
  if (PyUnicode_Check(mod)) r = PyUnicode_AsUTF8(mod);
  Py_DECREF(mod);
  PyErr_Clear();
  return r;
}

static bool startsWith(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

bool isTorchOp(PyObject* callable) {
  // Bound methods (autocast.__exit__, Module methods) and classes are Python to trace, not ops.
  if (PyType_Check(callable) || PyMethod_Check(callable)) return false;
  std::string mod = moduleOf(callable);
  if (mod.empty()) return false;
  // The namespaces whose callables compute on tensors without other effects. Anything else in the
  // torch package is Python like user code: it is inlined, and what it calls is judged in turn.
  static const char* kOpModules[] = {"torch", "torch.functional", "torch.nn.functional", "torch._tensor",
                                     "torch.nn.init", "torch._ops"};
  for (const char* m : kOpModules)
    if (mod == m) return true;
  static const char* kOpPrefixes[] = {"torch._C", "torch.linalg", "torch.fft", "torch.special", "torch.ops"};
  for (const char* p : kOpPrefixes)
    if (startsWith(mod, p)) return true;
  return false;
}

PyObject* binaryOperator(int nbOp, std::string* name) {
  static const char* kNames[] = {"add",     "and_", "floordiv", "lshift", "matmul",
                                 "mul",     "mod",  "or_",      "pow",    "rshift",
                                 "sub",     "truediv", "xor"};
  static const char* kInplace[] = {"iadd",  "iand", "ifloordiv", "ilshift", "imatmul",
                                   "imul",  "imod", "ior",       "ipow",    "irshift",
                                   "isub",  "itruediv", "ixor"};
  bool inplace = nbOp >= 13;
  int base = inplace ? nbOp - 13 : nbOp;
  if (base < 0 || base > 12) return nullptr;
  const char* n = inplace ? kInplace[base] : kNames[base];
  if (name) *name = n;
  static PyObject* cache[26] = {};
  PyObject*& slot = cache[(inplace ? 13 : 0) + base];
  if (slot == nullptr) slot = checkPy(PyObject_GetAttrString(torchApi().operatorModule, n));
  return slot;
}

PyObject* compareOperator(int cmpIndex) {
  static const char* kNames[] = {"lt", "le", "eq", "ne", "gt", "ge"};
  if (cmpIndex < 0 || cmpIndex > 5) return nullptr;
  static PyObject* cache[6] = {};
  if (cache[cmpIndex] == nullptr)
    cache[cmpIndex] = checkPy(PyObject_GetAttrString(torchApi().operatorModule, kNames[cmpIndex]));
  return cache[cmpIndex];
}

bool overridesMapping(PyTypeObject* type) {
  static const char* kMappingNames[] = {
      "__setitem__", "__getitem__", "__delitem__", "__iter__", "__len__", "__contains__", "__missing__",
      "keys", "values", "items", "get", "update", "pop", "popitem", "setdefault", "clear", "copy",
      "__eq__", "__or__", "__ior__", "__reversed__", "__setattr__", "__getattr__", "__getattribute__"};
  PyObject* mro = type->tp_mro;  // borrowed ref
  if (mro == nullptr) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
    auto* t = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i));  // borrowed ref
    if (!(t->tp_flags & Py_TPFLAGS_HEAPTYPE) || t->tp_dict == nullptr) continue;  // builtins' own
    for (const char* n : kMappingNames)
      if (PyDict_GetItemString(t->tp_dict, n) != nullptr) return true;  // borrowed ref
  }
  return false;
}

std::string callableName(PyObject* callable) {
  PyObjectRef n = PyObjectRef::steal(PyObject_GetAttrString(callable, "__name__"));
  PyErr_Clear();
  return n && PyUnicode_Check(n.get()) ? PyUnicode_AsUTF8(n.get()) : "";
}

bool isNoOpContextManagerClass(PyObject* cls) {
  static PyObject* kinds[2] = {nullptr, nullptr};
  static bool looked = false;
  if (!looked) {
    looked = true;
    kinds[0] = importAttr("contextlib", "nullcontext");               // new ref, kept
    kinds[1] = importAttr("torch.autograd.profiler", "record_function");  // new ref, kept
    PyErr_Clear();
  }
  return cls != nullptr && (cls == kinds[0] || cls == kinds[1]);
}

}  // namespace dynamo::core::interp
