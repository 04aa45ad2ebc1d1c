// Value constructors and descriptions (see value.h).
#include "value.h"

#include "torch_api.h"

namespace dynamo::core::interp {

ValueRef makeConst(PyObject* o) {
  auto v = std::make_shared<Value>();
  v->kind = ValueKind::kConst;
  v->obj = PyObjectRef::borrow(o);
  return v;
}

ValueRef makeObject(PyObject* o, Source source) {
  auto v = std::make_shared<Value>();
  v->kind = ValueKind::kObject;
  v->obj = PyObjectRef::borrow(o);
  v->source = std::move(source);
  return v;
}

ValueRef makeNull() {
  auto v = std::make_shared<Value>();
  v->kind = ValueKind::kNull;
  return v;
}

ValueRef makeTuple(std::vector<ValueRef> items) {
  auto v = std::make_shared<Value>();
  v->kind = ValueKind::kTuple;
  v->items = std::move(items);
  return v;
}

ValueRef makeList(std::vector<ValueRef> items) {
  auto v = std::make_shared<Value>();
  v->kind = ValueKind::kList;
  v->items = std::move(items);
  return v;
}

ValueRef makeSlice(ValueRef start, ValueRef stop, ValueRef step) {
  auto v = std::make_shared<Value>();
  v->kind = ValueKind::kSlice;
  v->items = {std::move(start), std::move(stop), std::move(step)};
  return v;
}

ValueRef makeTensor(NodeRef node, PyObjectRef example, PyObjectRef device, Source source) {
  auto v = std::make_shared<Value>();
  v->kind = ValueKind::kTensor;
  v->obj = std::move(example);
  TensorData data;
  data.node = std::move(node);
  data.device = std::move(device);
  v->data = std::move(data);
  v->source = std::move(source);
  return v;
}

ValueRef makeIterator(const ValueRef& v, std::vector<ValueRef> snapshot) {
  auto it = std::make_shared<Value>();
  it->kind = ValueKind::kIterator;
  IteratorData data;
  if (v && v->kind == ValueKind::kList) {
    data.list = v;
  } else {
    it->items = std::move(snapshot);
  }
  // Python raises if a dict (or a set made in the trace, whose keys are its members) changes size.
  if (v && (v->kind == ValueKind::kDict || (v->kind == ValueKind::kObject && v->name == "__made_in_trace__"))) {
    data.watched = v;
    data.watchedSize = v->keys.size();
  }
  it->data = std::move(data);
  return it;
}

const std::vector<ValueRef>& iteratorItems(const Value& it) {
  const IteratorData& data = it.as<IteratorData>();
  return data.list ? data.list->items : it.items;
}

ValueRef makeLazyIterator(std::shared_ptr<LazyIterator> lazy) {
  auto it = std::make_shared<Value>();
  it->kind = ValueKind::kIterator;
  IteratorData data;
  data.lazy = std::move(lazy);
  it->data = std::move(data);
  return it;
}

ValueRef makeLazy(PyObject* o, Source source) {
  auto v = std::make_shared<Value>();
  v->kind = ValueKind::kLazy;
  v->obj = PyObjectRef::borrow(o);
  v->source = std::move(source);
  return v;
}

bool isConstantObject(PyObject* o) {
  if (o == Py_None || o == Py_Ellipsis || PyBool_Check(o) || PyLong_CheckExact(o) ||
      PyFloat_CheckExact(o) || PyComplex_CheckExact(o) || PyUnicode_CheckExact(o) ||
      PyBytes_CheckExact(o) || PyCode_Check(o))
    return true;
  if (PyTuple_CheckExact(o) || PyFrozenSet_CheckExact(o) ||
      (PyTuple_Check(o) && std::string(Py_TYPE(o)->tp_name) == "torch.Size")) {
    PyObject* it = PyObject_GetIter(o);  // new ref
    if (it == nullptr) {
      PyErr_Clear();
      return false;
    }
    bool all = true;
    while (PyObject* item = PyIter_Next(it)) {  // new ref
      all = all && isConstantObject(item);
      Py_DECREF(item);
    }
    Py_DECREF(it);
    PyErr_Clear();
    return all;
  }
  const TorchApi& api = torchApi();
  PyTypeObject* t = Py_TYPE(o);
  if ((PyObject*)t == api.dtypeType || (PyObject*)t == api.deviceType) return true;
  // torch.layout, torch.memory_format, torch.qscheme: C types of torch with no state.
  const char* name = t->tp_name;
  return std::string(name) == "torch.layout" || std::string(name) == "torch.memory_format";
}

bool containsTensor(const ValueRef& v) {
  if (v->isTensor()) return true;
  for (const ValueRef& i : v->items)
    if (i && containsTensor(i)) return true;
  return false;
}

std::string describe(const Value& v) {
  switch (v.kind) {
    case ValueKind::kConst: {
      PyObject* r = PyObject_Repr(v.py());  // new ref
      std::string s = r ? PyUnicode_AsUTF8(r) : "?";
      Py_XDECREF(r);
      PyErr_Clear();
      if (s.size() > 40) s = s.substr(0, 37) + "...";
      return std::string(Py_TYPE(v.py())->tp_name) + " " + s;
    }
    case ValueKind::kTensor:
      return v.source ? "tensor '" + v.source.name() + "'" : "tensor %" + v.as<TensorData>().node->name();
    case ValueKind::kTuple: return "tuple of " + std::to_string(v.items.size());
    case ValueKind::kList: return "list of " + std::to_string(v.items.size());
    case ValueKind::kDict: return "dict of " + std::to_string(v.items.size());
    case ValueKind::kSlice: return "slice";
    case ValueKind::kNull: return "NULL";
    case ValueKind::kObject: {
      std::string s = std::string(Py_TYPE(v.py())->tp_name);
      if (v.source) s += " '" + v.source.name() + "'";
      return s;
    }
    case ValueKind::kFunction: return "function " + v.name;
    case ValueKind::kMethod: return "bound method";
    case ValueKind::kTensorAttr: return "tensor method ." + v.name;
    case ValueKind::kCell: return "cell";
    case ValueKind::kIterator: return "iterator";
    case ValueKind::kGradMode: return "grad-mode context manager";
    case ValueKind::kLazy: return "'" + v.source.name() + "'";
    case ValueKind::kSymInt: return "symbolic int " + v.as<SymIntData>().expr.str() + (v.source ? " '" + v.source.name() + "'" : std::string());
    case ValueKind::kSymFloat: return "symbolic float" + (v.source ? " '" + v.source.name() + "'" : std::string());
  }
  return "value";
}

const NodeRef& Value::graphNode() const {
  switch (kind) {
    case ValueKind::kTensor: return as<TensorData>().node;
    case ValueKind::kSymInt: return as<SymIntData>().node;
    case ValueKind::kSymFloat: return as<SymFloatData>().node;
    default: break;
  }
  DYNAMO_INTERNAL_ASSERT(false, "a ", valueKindName(kind), " value has no graph node");
  static const NodeRef kNone;
  return kNone;
}

const char* valueKindName(ValueKind kind) {
  switch (kind) {
    case ValueKind::kConst: return "constant";
    case ValueKind::kTensor: return "tensor";
    case ValueKind::kTuple: return "tuple";
    case ValueKind::kList: return "list";
    case ValueKind::kDict: return "dict";
    case ValueKind::kSlice: return "slice";
    case ValueKind::kNull: return "NULL";
    case ValueKind::kObject: return "object";
    case ValueKind::kFunction: return "function";
    case ValueKind::kMethod: return "bound method";
    case ValueKind::kTensorAttr: return "tensor method";
    case ValueKind::kCell: return "cell";
    case ValueKind::kIterator: return "iterator";
    case ValueKind::kGradMode: return "grad-mode context manager";
    case ValueKind::kLazy: return "lazy";
    case ValueKind::kSymInt: return "symbolic int";
    case ValueKind::kSymFloat: return "symbolic float";
  }
  return "value";
}

ValueRef makeCell(std::shared_ptr<CellBox> box, int slot) {
  auto v = std::make_shared<Value>();
  v->kind = ValueKind::kCell;
  v->data = CellData{box ? std::move(box) : std::make_shared<CellBox>(), slot};
  return v;
}

ValueRef makeFunction(PyObject* code, std::vector<ValueRef> defaults, std::string qualname, FunctionData data) {
  auto v = std::make_shared<Value>();
  v->kind = ValueKind::kFunction;
  v->obj = PyObjectRef::borrow(code);
  v->items = std::move(defaults);
  v->name = std::move(qualname);
  v->data = std::move(data);
  return v;
}

ValueRef makeGradMode(GradModeData data) {
  auto v = std::make_shared<Value>();
  v->kind = ValueKind::kGradMode;
  v->data = data;
  return v;
}

}  // namespace dynamo::core::interp
