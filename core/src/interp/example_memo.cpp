// The per-process memo of example results (example_memo.h).
#include "example_memo.h"

#include <unordered_map>

#include "torch_api.h"

namespace dynamo::core::interp {

namespace {

/// One memoized result: what a new meta tensor like it needs.
struct MemoEntry {
  PyObjectRef fn;        ///< the function called (null for a Tensor method): kept alive, compared on a hit
  int returnsArg = -1;   ///< an in-place op: the index of the argument it returned unchanged; else -1
  PyObjectRef sizes;     ///< the result's sizes (a tuple)
  PyObjectRef strides;   ///< the result's strides (a tuple)
  PyObjectRef dtype;     ///< the result's dtype
};

/// Entries beyond this clear the memo (a long session compiling many shapes).
constexpr size_t kMaxEntries = 4096;

std::unordered_map<std::string, MemoEntry>& memo() {
  static auto* m = new std::unordered_map<std::string, MemoEntry>();  // never destroyed: holds PyObjects
  return *m;
}

PyObjectRef attr(PyObject* o, const char* name) {
  PyObjectRef r = PyObjectRef::steal(PyObject_GetAttrString(o, name));  // new ref
  if (!r) PyErr_Clear();
  return r;
}

PyObjectRef callMethod(PyObject* o, const char* name) {
  PyObjectRef r = PyObjectRef::steal(PyObject_CallMethod(o, name, nullptr));  // new ref
  if (!r) PyErr_Clear();
  return r;
}

bool isTrue(const PyObjectRef& o) { return o && o.get() == Py_True; }

/// Appends a tuple of Python ints ("(8,64,56,56)"); false for anything else (a SymInt).
bool appendInts(std::string& out, PyObject* tup) {
  if (tup == nullptr || !PyTuple_Check(tup)) return false;
  out += '(';
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tup); ++i) {
    PyObject* v = PyTuple_GET_ITEM(tup, i);  // borrowed ref
    if (!PyLong_CheckExact(v)) return false;
    long long n = PyLong_AsLongLong(v);
    if (n == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    out += std::to_string(n) + ',';
  }
  out += ')';
  return true;
}

bool appendRepr(std::string& out, PyObject* o) {
  PyObjectRef r = PyObjectRef::steal(PyObject_Repr(o));  // new ref
  if (!r) {
    PyErr_Clear();
    return false;
  }
  const char* s = PyUnicode_AsUTF8(r.get());
  if (s == nullptr) {
    PyErr_Clear();
    return false;
  }
  out += s;
  return true;
}

/// A meta example tensor: exact torch.Tensor type, sizes, strides, offset, dtype, requires_grad.
bool appendTensor(std::string& out, PyObject* t) {
  const TorchApi& api = torchApi();
  if (Py_TYPE(t) != (PyTypeObject*)api.tensorType && Py_TYPE(t) != (PyTypeObject*)api.parameterType) return false;
  // A conjugate or negative view (z.conj(), z.conj().imag) has the metadata of a plain tensor but
  // not its behaviour (resolve_conj returns a plain tensor unchanged and copies a conj view):
  // not keyed.
  if (!isTrue(attr(t, "is_meta")) || isTrue(callMethod(t, "has_names")) || isTrue(callMethod(t, "is_conj")) ||
      isTrue(callMethod(t, "is_neg")) || isTrue(callMethod(t, "_is_zerotensor")))
    return false;
  PyObjectRef shape = attr(t, "shape"), stride = callMethod(t, "stride"), offset = callMethod(t, "storage_offset");
  PyObjectRef dtype = attr(t, "dtype"), rg = attr(t, "requires_grad");
  if (!shape || !stride || !offset || !dtype || !rg || !PyLong_CheckExact(offset.get())) return false;
  out += Py_TYPE(t) == (PyTypeObject*)api.tensorType ? "T" : "P";
  if (!appendInts(out, shape.get()) || !appendInts(out, stride.get())) return false;
  out += '+';
  if (!appendRepr(out, offset.get())) return false;
  out += ' ';
  if (!appendRepr(out, dtype.get())) return false;
  out += isTrue(rg) ? " rg" : " -";
  out += isTrue(callMethod(t, "is_inference")) ? " inf" : "";  // an in-place update of one outside the mode raises
  return true;
}

/// An argument's example: a tensor, a constant of a type whose repr says all a kernel reads, or a
/// list/tuple of them.
bool appendValue(std::string& out, PyObject* o, int depth) {
  const TorchApi& api = torchApi();
  if (depth > 4) return false;
  if (PyObject_TypeCheck(o, (PyTypeObject*)api.tensorType)) return appendTensor(out, o);
  if (PyTuple_Check(o) || PyList_Check(o)) {
    if (!PyTuple_CheckExact(o) && !PyList_CheckExact(o) && Py_TYPE(o) != (PyTypeObject*)api.sizeType) return false;
    out += PyList_Check(o) ? "[" : "(";
    PyObjectRef fast = PyObjectRef::steal(PySequence_Fast(o, ""));  // new ref
    if (!fast) {
      PyErr_Clear();
      return false;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast.get()); ++i) {
      if (!appendValue(out, PySequence_Fast_GET_ITEM(fast.get(), i), depth + 1)) return false;  // borrowed
      out += ',';
    }
    out += PyList_Check(o) ? "]" : ")";
    return true;
  }
  // Exact types only: a subclass of int or float may carry more than its repr shows.
  const bool constant = o == Py_None || PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o) ||
                        PyUnicode_CheckExact(o) || Py_TYPE(o) == (PyTypeObject*)api.dtypeType ||
                        Py_TYPE(o) == (PyTypeObject*)api.deviceType;
  if (!constant) return false;
  out += Py_TYPE(o)->tp_name;
  out += ':';
  return appendRepr(out, o);
}

/// The number of tensors among `args` (a tuple) and the values of `kwargs`, in lists and tuples too.
int countTensors(PyObject* o) {
  if (PyObject_TypeCheck(o, (PyTypeObject*)torchApi().tensorType)) return 1;
  PyObject *k, *v;  // borrowed refs
  Py_ssize_t pos = 0;
  int n = 0;
  if (PyDict_Check(o))
    while (PyDict_Next(o, &pos, &k, &v)) n += countTensors(v);
  if (PyTuple_Check(o) || PyList_Check(o))
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); ++i) n += countTensors(PySequence_Fast_GET_ITEM(o, i));
  return n;
}

/// torch.<name> (a new ref kept for the process), or null.
PyObject* torchFunction(const char* name) {
  PyObject* f = PyObject_GetAttrString(torchApi().torch, name);  // new ref
  if (!f) PyErr_Clear();
  return f;
}

}  // namespace

std::string exampleMemoKey(PyObject* fn, const std::string& method, PyObject* args, PyObject* kwargs, bool grad) {
  if (method.empty() && fn == nullptr) return {};
  const std::string name = method.empty() ? callableName(fn) : method;
  if (name.empty()) return {};
  if (kwargs && PyDict_GetItemString(kwargs, "out")) return {};  // borrowed ref
  // torch.get_default_dtype (integer / 2 reads it) and torch.is_inference_mode_enabled.
  static PyObject* getDefaultDtype = torchFunction("get_default_dtype");
  static PyObject* inferenceMode = torchFunction("is_inference_mode_enabled");
  if (getDefaultDtype == nullptr || inferenceMode == nullptr) return {};
  PyObjectRef defaultDtype = PyObjectRef::steal(PyObject_CallNoArgs(getDefaultDtype));  // new ref
  PyObjectRef inference = PyObjectRef::steal(PyObject_CallNoArgs(inferenceMode));       // new ref
  if (!defaultDtype || !inference) {
    PyErr_Clear();
    return {};
  }
  if (isTrue(inference)) return {};  // results are inference tensors: not stored
  std::string key;
  key.reserve(256);
  if (method.empty()) {
    char ptr[32];
    snprintf(ptr, sizeof ptr, "%p", (void*)fn);
    key += std::string("fn ") + ptr + " " + name;
  } else {
    key += "Tensor." + method;
  }
  key += grad ? " grad " : " nograd ";
  if (!appendRepr(key, defaultDtype.get())) return {};
  key += " | ";
  if (!appendValue(key, args, 0)) return {};
  if (kwargs) {
    PyObject *k, *v;  // borrowed refs
    Py_ssize_t pos = 0;
    while (PyDict_Next(kwargs, &pos, &k, &v)) {
      const char* name = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : nullptr;
      if (name == nullptr) {
        PyErr_Clear();
        return {};
      }
      key += std::string(" ") + name + "=";
      if (!appendValue(key, v, 0)) return {};
    }
  }
  return key;
}

void exampleMemoClear() { memo().clear(); }

PyObjectRef exampleMemoLookup(const std::string& key, PyObject* fn, PyObject* args) {
  auto it = memo().find(key);
  if (it == memo().end() || it->second.fn.get() != fn) {
    return {};
  }
  const TorchApi& api = torchApi();
  const MemoEntry& e = it->second;
  if (e.returnsArg >= 0)
    return e.returnsArg < PyTuple_GET_SIZE(args) ? PyObjectRef::borrow(PyTuple_GET_ITEM(args, e.returnsArg))
                                                 : PyObjectRef{};
  PyObjectRef sizeArgs = PyObjectRef::steal(PyTuple_Pack(2, e.sizes.get(), e.strides.get()));  // new ref
  PyObjectRef kw = PyObjectRef::steal(PyDict_New());                                          // new ref
  if (!sizeArgs || !kw) {
    PyErr_Clear();
    return {};
  }
  PyDict_SetItemString(kw.get(), "dtype", e.dtype.get());
  PyDict_SetItemString(kw.get(), "device", api.metaDevice);
  PyObjectRef out = PyObjectRef::steal(PyObject_Call(api.emptyStrided, sizeArgs.get(), kw.get()));  // new ref
  if (!out) {
    PyErr_Clear();
    return {};
  }
  return out;
}

void exampleMemoStore(const std::string& key, PyObject* fn, const std::string& method, PyObject* result,
                      PyObject* args, PyObject* kwargs, bool grad) {
  const TorchApi& api = torchApi();
  if (key.empty() || result == nullptr || Py_TYPE(result) != (PyTypeObject*)api.tensorType) return;
  if (memo().size() >= kMaxEntries) memo().clear();
  PyObject *k, *v;  // borrowed refs
  Py_ssize_t pos = 0;
  while (kwargs && PyDict_Next(kwargs, &pos, &k, &v))
    if (v == result) return;  // returned a keyword argument
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); ++i) {
    if (PyTuple_GET_ITEM(args, i) != result) continue;
    // An in-place op returns its input: memoized only when no example's metadata changed (the
    // key made again after the call is the same), so that a hit, which does not run it, returns
    // the input as the call would have left it; and only with that one tensor (whether the
    // written tensor overlaps another input is not in the key) and no autograd (an in-place
    // update of a leaf that requires grad raises, and leafness is not in the key either).
    if (countTensors(args) + (kwargs ? countTensors(kwargs) : 0) != 1) return;
    if (grad && isTrue(attr(result, "requires_grad"))) return;
    if (exampleMemoKey(fn, method, args, kwargs, grad) != key) return;
    MemoEntry e;
    if (fn != nullptr) e.fn = PyObjectRef::borrow(fn);
    e.returnsArg = static_cast<int>(i);
    memo()[key] = std::move(e);
    return;
  }
  if (!isTrue(attr(result, "is_meta")) || isTrue(attr(result, "requires_grad")) || isTrue(callMethod(result, "is_complex")) ||
      isTrue(callMethod(result, "_is_view")) || isTrue(callMethod(result, "is_inference")))
    return;
  PyObjectRef offset = callMethod(result, "storage_offset");
  if (!offset || !PyLong_CheckExact(offset.get()) || PyLong_AsLong(offset.get()) != 0) return;
  PyObjectRef shape = attr(result, "shape"), stride = callMethod(result, "stride"), dtype = attr(result, "dtype");
  if (!shape || !stride || !dtype) return;
  PyObjectRef sizes = PyObjectRef::steal(PySequence_Tuple(shape.get()));  // new ref
  if (!sizes) {
    PyErr_Clear();
    return;
  }
  std::string check;
  if (!appendInts(check, sizes.get()) || !appendInts(check, stride.get())) return;
  MemoEntry e;
  if (fn != nullptr) e.fn = PyObjectRef::borrow(fn);
  e.sizes = std::move(sizes);
  e.strides = std::move(stride);
  e.dtype = std::move(dtype);
  memo()[key] = std::move(e);
}

}  // namespace dynamo::core::interp
