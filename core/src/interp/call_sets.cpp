// Sets made in the function (see call_constructs.h): a real set made at trace time and changed by
// the same operations as eager, so iteration follows CPython's order; each member keeps the Value
// it was added as.
#include "call_constructs.h"

namespace dynamo::core::interp {

namespace {

using Kw = std::vector<std::pair<std::string, ValueRef>>;

// ---- sets ----------------------------------------------------------------------------------------

using Known = std::vector<std::pair<PyObjectRef, ValueRef>>;  // member object -> the Value it came as

// The object a Value stands for as a set member; a break when it is not known exactly.
PyObjectRef memberObject(CompileContext& ctx, const ValueRef& item) {
  PyObjectRef c = containsTensor(item) ? PyObjectRef{} : concrete(item);
  if (!c)
    ctx.breakHere(BreakKind::kUnsupported, "a set member that is not known while capturing (" + describe(*item) + ")");
  if (PyObject_Hash(c.get()) == -1) {
    PyErr_Clear();
    ctx.breakHere(BreakKind::kException, "unhashable type in a set: " + std::string(Py_TYPE(c.get())->tp_name));
  }
  return c;
}

Known knownOf(const ValueRef& set) {
  Known known;
  for (size_t i = 0; i < set->keys.size() && i < set->items.size(); ++i) known.emplace_back(set->keys[i], set->items[i]);
  return known;
}

// Pairs the members of the real set, in its iteration order, with the Values they came as.
void syncMembers(const ValueRef& set, const Known& known) {
  std::vector<PyObjectRef> keys;
  std::vector<ValueRef> items;
  PyObjectRef it = PyObjectRef::steal(checkPy(PyObject_GetIter(set->obj.get())));
  while (PyObject* m = PyIter_Next(it.get())) {  // new ref
    PyObjectRef member = PyObjectRef::steal(m);
    ValueRef v;
    for (const auto& [obj, value] : known)
      if (obj.get() == m) v = value;
    if (!v) v = isConstantObject(m) ? makeConst(m) : makeObject(m);
    keys.push_back(member);
    items.push_back(v);
  }
  if (PyErr_Occurred()) throw PythonError{};
  set->keys = std::move(keys);
  set->items = std::move(items);
}

// The Python object CPython would receive for `v` as an iterable argument of set(), set.update()
// and the like, of the same kind where it matters: set_update_internal merges a set's or
// frozenset's table and pre-sizes for a dict, which decides the result's iteration order. Members
// are registered in `known`.
PyObjectRef iterableObject(CompileContext& ctx, const ValueRef& v, Known& known) {
  if (isTraceSet(*v)) {
    for (const auto& kv : knownOf(v)) known.push_back(kv);
    return v->obj;
  }
  if (v->isConst()) return v->obj;  // frozenset, tuple, str of constants
  if (v->kind == ValueKind::kDict && v->name != "dict_view") {
    PyObjectRef d = PyObjectRef::steal(checkPy(PyDict_New()));
    for (const PyObjectRef& k : v->keys) checkPy(PyDict_SetItem(d.get(), k.get(), Py_None) == 0 ? Py_None : nullptr);
    return d;
  }
  if (v->kind == ValueKind::kObject) {
    PyObjectRef c = concrete(v);
    if (c && (PyRange_Check(c.get()) || PyAnySet_Check(c.get()))) return c;
  }
  PyObjectRef list = PyObjectRef::steal(checkPy(PyList_New(0)));  // iterated member by member
  for (const ValueRef& item : iterateValue(ctx, v)) {
    PyObjectRef c = memberObject(ctx, item);
    checkPy(PyList_Append(list.get(), c.get()) == 0 ? Py_None : nullptr);
    known.emplace_back(c, item);
  }
  return list;
}

bool elementMethod(const std::string& name) {
  return name == "add" || name == "discard" || name == "remove";
}

bool mutatingSetMethod(const std::string& name) {
  static const char* kMutating[] = {"add", "discard", "remove", "update", "clear", "pop", "difference_update",
                                    "intersection_update", "symmetric_difference_update"};
  for (const char* m : kMutating)
    if (name == m) return true;
  return false;
}

}  // namespace

bool isTraceSet(const Value& v) {
  return v.kind == ValueKind::kObject && !v.source && v.name == kMadeInTrace && v.obj &&
         PyAnySet_CheckExact(v.obj.get()) && !PyFrozenSet_Check(v.obj.get());
}

ValueRef makeTraceSet(PyObject* set, const std::vector<ValueRef>& members) {
  ValueRef v = makeObject(set);
  v->name = kMadeInTrace;
  Known known;
  for (const ValueRef& m : members)
    if (PyObjectRef c = concrete(m)) known.emplace_back(c, m);
  syncMembers(v, known);
  return v;
}

ValueRef buildSet(CompileContext& ctx, const std::vector<ValueRef>& items) {
  PyObjectRef set = PyObjectRef::steal(checkPy(PySet_New(nullptr)));
  Known known;
  for (const ValueRef& item : items) {
    PyObjectRef c = memberObject(ctx, item);
    checkPy(PySet_Add(set.get(), c.get()) == 0 ? Py_None : nullptr);
    known.emplace_back(c, item);
  }
  ValueRef v = makeObject(set.get());
  v->name = kMadeInTrace;
  syncMembers(v, known);
  return v;
}

void setAdd(CompileContext& ctx, const ValueRef& set, const ValueRef& item) {
  if (!isTraceSet(*set)) ctx.breakHere(BreakKind::kUnsupported, "adding to " + describe(*set));
  Known known = knownOf(set);
  PyObjectRef c = memberObject(ctx, item);
  checkPy(PySet_Add(set->obj.get(), c.get()) == 0 ? Py_None : nullptr);
  known.emplace_back(c, item);
  syncMembers(set, known);
}

void setUpdate(CompileContext& ctx, const ValueRef& set, const ValueRef& iterable) {
  if (!isTraceSet(*set)) ctx.breakHere(BreakKind::kUnsupported, "adding to " + describe(*set));
  Known known = knownOf(set);
  PyObjectRef obj = iterableObject(ctx, iterable, known);
  PyObjectRef r = PyObjectRef::steal(PyObject_CallMethod(set->obj.get(), "update", "(O)", obj.get()));
  if (!r) {
    PyErr_Clear();
    ctx.breakHere(BreakKind::kException, "set update raised (an unhashable member)");
  }
  syncMembers(set, known);
}

std::vector<ValueRef> setMembers(const ValueRef& set) {
  // The real set is the truth (an in-place operator folded on it, s |= t, changes it directly).
  syncMembers(set, knownOf(set));
  return set->items;
}

ValueRef setInPlaceOperator(CompileContext& ctx, const ValueRef& set, const ValueRef& other, PyObject* fn,
                            const std::string& name) {
  Known known = knownOf(set);
  PyObjectRef b = isTraceSet(*other) ? other->obj : (other->isConst() ? other->obj : PyObjectRef{});
  if (isTraceSet(*other))
    for (const auto& kv : knownOf(other)) known.push_back(kv);
  if (!b || !PyAnySet_Check(b.get()))
    ctx.breakHere(BreakKind::kUnsupported, "operator " + name + " of a set and " + describe(*other));
  PyObjectRef r = PyObjectRef::steal(PyObject_CallFunctionObjArgs(fn, set->obj.get(), b.get(), nullptr));
  if (!r || r.get() != set->obj.get()) {
    PyErr_Clear();
    ctx.breakHere(BreakKind::kException, "operator " + name + " of two sets raised");
  }
  syncMembers(set, known);
  return set;
}

ValueRef callSetMethod(Tracer& tr, const ValueRef& self, const std::string& name, std::vector<ValueRef>& args,
                       Kw& kwargs) {
  CompileContext& ctx = tr.ctx();
  if (self->kind != ValueKind::kObject || !PyAnySet_CheckExact(self->py())) return nullptr;
  if (!isTraceSet(*self) && (mutatingSetMethod(name) || !self->source))
    ctx.breakHere(BreakKind::kUnsupported, "method ." + name + "() of " + describe(*self) + " made outside the compiled function");
  if (!isTraceSet(*self)) return nullptr;  // a set from the frame: its members are not guarded
  if (!kwargs.empty()) ctx.breakHere(BreakKind::kException, "set." + name + "() takes no keyword arguments");
  Known known = knownOf(self);
  PyObjectRef pyArgs = PyObjectRef::steal(checkPy(PyTuple_New(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    PyObjectRef a;
    if (elementMethod(name) || name == "__contains__") {
      a = memberObject(ctx, args[i]);
      known.emplace_back(a, args[i]);
    } else {
      a = iterableObject(ctx, args[i], known);
    }
    PyTuple_SET_ITEM(pyArgs.get(), i, a.release());
  }
  PyObjectRef method = PyObjectRef::steal(PyObject_GetAttrString(self->py(), name.c_str()));
  if (!method) {
    PyErr_Clear();
    ctx.breakHere(BreakKind::kUnsupportedAttribute, "set has no attribute ." + name);
  }
  PyObjectRef r = PyObjectRef::steal(PyObject_Call(method.get(), pyArgs.get(), nullptr));
  if (!r) {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObjectRef msg = PyObjectRef::steal(ev ? PyObject_Repr(ev) : nullptr);
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
    PyErr_Clear();
    ctx.breakHere(BreakKind::kException, "set." + name + "() raised " + (msg ? PyUnicode_AsUTF8(msg.get()) : "?"));
  }
  syncMembers(self, known);
  if (PyAnySet_CheckExact(r.get()) && !PyFrozenSet_Check(r.get())) {
    std::vector<ValueRef> members;
    for (const auto& kv : known) members.push_back(kv.second);
    return makeTraceSet(r.get(), members);
  }
  for (const auto& [obj, value] : known)  // set.pop(): the member itself
    if (obj.get() == r.get() && !isConstantObject(r.get())) return value;
  if (isConstantObject(r.get())) return makeConst(r.get());
  return makeObject(r.get());
}

ValueRef setFromIterable(CompileContext& ctx, const std::vector<ValueRef>& args) {
  if (args.size() > 1) return nullptr;
  ValueRef set = buildSet(ctx, {});
  if (!args.empty()) setUpdate(ctx, set, args[0]);  // set(x) is set_update_internal(x), as update
  return set;
}

}  // namespace dynamo::core::interp
