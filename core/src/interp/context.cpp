// CompileContext: wrapping frame objects into Values with their guards, and recording torch
// calls as graph nodes with meta-tensor shape inference (see tracer.h).
#include <cstring>
#include <functional>

#include "autocast.h"
#include "call_constructs.h"
#include "graph_call.h"
#include "inference_mode.h"
#include "dynamic.h"
#include "example_memo.h"
#include "sym_values.h"
#include "torch_api.h"
#include "tracer.h"

namespace dynamo::core::interp {

namespace {
// The compile running on this thread (compiles run under the GIL, one per thread at a time;
// a compile triggered while tracing nests and restores the outer one).
CompileContext*& currentContext() {
  thread_local CompileContext* ctx = nullptr;
  return ctx;
}
}  // namespace

CompileContext::CompileContext(const FrameValues& frame, PyCodeObject* rootCode,
                               TraceOptions opts)
    : options(std::move(opts)), frame_(frame), rootCode_(rootCode) {
  PyObjectRef enabled = PyObjectRef::steal(checkPy(PyObject_CallNoArgs(torchApi().isGradEnabled)));  // new ref
  int r = PyObject_IsTrue(enabled.get());
  gradEnabled = r == 1;
  initialGradEnabled = gradEnabled;
  guards.add(Source{}, makeGradModeFromCurrent());
  // Factory ops and dtype facts of their results follow the default dtype.
  guards.add(Source{}, makeDefaultDtypeFromCurrent());
}

CompileContext* CompileContext::current() { return currentContext(); }

ActiveCompile::ActiveCompile(CompileContext& ctx) : previous_(currentContext()) { currentContext() = &ctx; }

ActiveCompile::~ActiveCompile() { currentContext() = previous_; }

NodeRef CompileContext::addScalarInput(PyObject* obj, const Source& source) {
  NodeRef node = graph.placeholder(source.name(), metaHere(nullptr));
  inputs_.emplace_back(node, source);
  realInputs.push_back(PyObjectRef::borrow(obj));
  return node;
}

void CompileContext::breakHere(BreakKind kind, std::string detail) const {
  PyErr_Clear();
  GraphBreak b;
  b.kind = kind;
  b.detail = std::move(detail);
  b.where = here();
  b.userStack = userStack;
  throw b;
}

void CompileContext::breakWholeFrame(std::string detail, bool rootFrame) const {
  PyErr_Clear();
  GraphBreak b;
  b.kind = BreakKind::kUnsupportedCall;
  b.detail = std::move(detail);
  b.where = here();
  b.userStack = userStack;
  b.wholeFrame = true;
  b.rootFrame = rootFrame;
  throw b;
}

void CompileContext::recordEffect(SideEffect::Kind kind, ValueRef target, std::string name, int slot, ValueRef value) {
  SideEffect e;
  e.kind = kind;
  e.target = std::move(target);
  e.name = std::move(name);
  e.slot = slot;
  e.value = std::move(value);
  e.bodyBefore = graph.bodySize();
  if ((e.kind == SideEffect::Kind::kListContents || e.kind == SideEffect::Kind::kDictContents) && e.target) {
    auto snap = std::make_shared<Value>(*e.target);  // items and keys as they are now
    snap->source = Source{};
    snap->real = PyObjectRef{};
    snap->mutated = false;
    e.snapshot = std::move(snap);
  }
  effects.push_back(std::move(e));
}

void CompileContext::recordContents(const ValueRef& container) {
  if (!container->external()) return;
  container->mutated = true;
  recordEffect(container->kind == ValueKind::kList ? SideEffect::Kind::kListContents : SideEffect::Kind::kDictContents,
                container, "", -1, nullptr);
}

void CompileContext::guard(const Source& source, LeafGuardPtr leaf) {
  if (!source) return;
  guards.add(source, std::move(leaf), here());
}

namespace {
// Whether a tensor's meta example is a view (Tensor._is_view()); an error counts as a view.
bool isViewExample(PyObject* example) {
  if (example == nullptr) return true;
  PyObjectRef r = PyObjectRef::steal(PyObject_CallMethod(example, "_is_view", nullptr));
  if (!r) {
    PyErr_Clear();
    return true;
  }
  return PyObject_IsTrue(r.get()) != 0;
}
}  // namespace

NodeMeta CompileContext::metaHere(PyObject* example) const {
  NodeMeta meta;
  meta.location = here();
  meta.userStack = userStack;
  if (example != nullptr && isTensor(example)) {
    // Sizes, strides, memory format, dtype and requires_grad of the example (its device is the
    // meta device: callers set the real one).
    try {
      meta.tensor = tensorMetaOf(example);
    } catch (const PythonError&) {
      PyErr_Clear();
    }
  }
  return meta;
}

ValueRef CompileContext::wrapTensor(PyObject* obj, const Source& source) {
  PyObject* type = (PyObject*)Py_TYPE(obj);  // borrowed ref
  const TorchApi& api = torchApi();
  if (type != api.tensorType && type != api.parameterType)
    breakHere(BreakKind::kUnsupported,
              std::string("tensor subclass ") + Py_TYPE(obj)->tp_name + " as an input");
  if (!source) breakHere(BreakKind::kUnsupported, "a tensor that cannot be reached from the frame");
  PyObjectRef example = metaExample(obj);
  PyObjectRef device = PyObjectRef::steal(checkPy(PyObject_GetAttrString(obj, "device")));
  NodeMeta meta = metaHere(example.get());
  meta.tensor->device = PyUnicode_AsUTF8(PyObjectRef::steal(checkPy(PyObject_Str(device.get()))).get());
  NodeRef node = graph.placeholder(source.name(), meta);
  ValueRef v = makeTensor(node, example, device, source);
  nodeTensors.push_back(v);
  guard(source, makeTensorMatch(obj, makeInputSymbols(*this, v, obj, source)));
  v->as<TensorData>().exactType = PyObjectRef::borrow(type);  // Tensor or Parameter, for type() and isinstance
  inputs_.emplace_back(node, source);
  realInputs.push_back(PyObjectRef::borrow(obj));
  byIdentity.emplace(obj, v);  // the first source stays the canonical one
  return v;
}

// Objects whose behaviour is their value: enum members, numbers and strings of subclassed types,
// numpy scalars. Identity-guarded (a new object recompiles, a changed value cannot slip through).
static bool isValueLike(PyObject* obj) {
  if (PyLong_Check(obj) || PyFloat_Check(obj) || PyUnicode_Check(obj) || PyComplex_Check(obj)) return true;
  static PyObject* enumType = [] {
    PyObject* m = PyImport_ImportModule("enum");  // new ref, kept
    PyObject* t = m ? PyObject_GetAttrString(m, "Enum") : nullptr;  // new ref, kept
    PyErr_Clear();
    return t;
  }();
  if (enumType && PyObject_IsInstance(obj, enumType) == 1) return true;
  PyErr_Clear();
  // numpy scalar types (np.float32, np.int64, np.bool_); not arrays, whose contents change.
  static PyObject* numpyScalar = [] {
    PyObject* m = PyImport_ImportModule("numpy");  // new ref, kept
    PyObject* t = m ? PyObject_GetAttrString(m, "generic") : nullptr;  // new ref, kept
    PyErr_Clear();
    return t;
  }();
  return numpyScalar != nullptr && PyObject_TypeCheck(obj, (PyTypeObject*)numpyScalar);
}

// Guards `obj`, known exactly (a module, function, class, user object), read through `source`:
// by what makes it the same next time. True when its identity (or its whole value) is guarded, so
// that it is safe to fold.
static bool guardExactObject(CompileContext& ctx, PyObject* obj, const Source& source) {
  if (PyRange_Check(obj)) {
    // A range is its bounds (a new range object each call is the same value).
    ctx.guard(source, makeTypeMatch(obj));
    for (const char* part : {"start", "stop", "step"}) {
      PyObjectRef b = PyObjectRef::steal(checkPy(PyObject_GetAttrString(obj, part)));
      if (PyLong_CheckExact(b.get())) ctx.guard(Source::attr(source, part), makeEqualsMatch(b.get()));
    }
    return true;  // its value is fully guarded: safe to fold
  } else if (PyMethod_Check(obj)) {
    // A bound method is made anew by each attribute read: guard what it is made of (the
    // function and, through its own source when called, the receiver), never its identity.
    ctx.guard(source, makeTypeMatch(obj));
    ctx.guard(Source::attr(source, "__func__"), makeIdMatch(PyMethod_GET_FUNCTION(obj)));
  } else if (PyCFunction_Check(obj) && PyCFunction_GET_SELF(obj) != nullptr &&
             !PyModule_Check(PyCFunction_GET_SELF(obj))) {
    // A builtin method bound to an object (s.add, d.append): which method is fixed by its name
    // and its receiver's type.
    ctx.guard(source, makeTypeMatch(obj));
    PyObjectRef name = PyObjectRef::steal(PyObject_GetAttrString(obj, "__name__"));
    PyErr_Clear();
    if (name && PyUnicode_CheckExact(name.get())) ctx.guard(Source::attr(source, "__name__"), makeEqualsMatch(name.get()));
    ctx.guard(Source::attr(source, "__self__"), makeTypeMatch(PyCFunction_GET_SELF(obj)));
  } else if (PyFunction_Check(obj)) {
    // A function is its code, closure and defaults: guard the code here; closure contents and
    // defaults are guarded where the inlined call reads them. Functions made anew on each call
    // (closures passed to resume functions) then keep their cache entry.
    ctx.guard(source, makeTypeMatch(obj));
    ctx.guard(Source::attr(source, "__code__"), makeIdMatch(PyFunction_GET_CODE(obj)));
  } else if (isModule(obj) || PyType_Check(obj) || PyModule_Check(obj) ||
      PyCFunction_Check(obj) || PyMethod_Check(obj) || isValueLike(obj)) {
    // Value-like objects (enum members, numpy scalars, int/float/str subclasses) are folded
    // into constants when compared or converted: guard their identity, not just their type.
    ctx.guard(source, makeIdMatch(obj));
    return true;
  } else {
    ctx.guard(source, makeTypeMatch(obj));
  }
  return false;
}

ValueRef CompileContext::wrap(PyObject* obj, const Source& source, bool guarded) {
  if (!isConstantObject(obj)) {
    auto it = byIdentity.find(obj);
    if (it != byIdentity.end()) {
      const ValueRef& seen = it->second;
      if (!source || !seen->source || seen->source == source) return seen;
      // The same object through a second source: that source may differ next time, so it must
      // be guarded (or, for a tensor, be a graph input of its own: aliasing at run time is then
      // exact, since the graph runs on the real tensors).
      if (!isTensor(obj)) {
        if (guarded) guard(source, makeIdMatch(obj));
        return seen;
      }
      return wrapTensor(obj, source);
    }
  }
  if (isTensor(obj)) return wrapTensor(obj, source);
  if (isConstantObject(obj)) {
    if (source && guarded && PyLong_CheckExact(obj)) {
      if (ValueRef s = wrapSymIntInput(*this, obj, source)) return s;
    }
    if (source && guarded && PyFloat_CheckExact(obj)) {
      if (ValueRef s = wrapSymFloatInput(*this, obj, source)) return s;
    }
    if (source && guarded) {
      if (obj == Py_None || PyBool_Check(obj) || PyLong_CheckExact(obj) ||
          PyFloat_CheckExact(obj) || PyUnicode_CheckExact(obj)) {
        guard(source, makeEqualsMatch(obj));
      } else if (PyTuple_CheckExact(obj) || Py_TYPE(obj) == (PyTypeObject*)torchApi().sizeType) {
        // A tuple or a torch.Size (x.shape handed to a resume function, a size argument): by type,
        // length and items, not identity (every x.shape is a new object), its ints symbolic
        // where the policy makes them so.
        guard(source, makeTypeMatch(obj));
        guard(source, makeLengthCheck(PyTuple_GET_SIZE(obj)));
        std::vector<ValueRef> items;
        bool symbolic = false;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); ++i) {
          PyObjectRef idx = PyObjectRef::steal(PyLong_FromSsize_t(i));
          items.push_back(wrap(PyTuple_GET_ITEM(obj, i), Source::item(source, idx.get()), guarded));
          symbolic = symbolic || !items.back()->isConst();
        }
        // An item that is a symbolic int (its value guarded by the shape guards only) must not
        // be folded into a constant tuple.
        if (symbolic) {
          ValueRef t = makeTuple(std::move(items));
          if (!PyTuple_CheckExact(obj)) t->obj = PyObjectRef::borrow((PyObject*)Py_TYPE(obj));
          t->source = source;
          return t;
        }
      } else {
        guard(source, makeIdMatch(obj));
      }
    }
    return makeConst(obj);
  }
  ValueRef v;
  if (PyList_CheckExact(obj) || (PyTuple_Check(obj) && !isModule(obj))) {
    bool isList = PyList_CheckExact(obj);
    if (guarded) {
      guard(source, makeTypeMatch(obj));
      guard(source, makeLengthCheck(PySequence_Size(obj)));
    }
    std::vector<ValueRef> items;
    Py_ssize_t n = PySequence_Size(obj);
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* item = isList ? PyList_GET_ITEM(obj, i) : PyTuple_GET_ITEM(obj, i);  // borrowed
      PyObjectRef idx = PyObjectRef::steal(PyLong_FromSsize_t(i));
      items.push_back(wrap(item, source ? Source::item(source, idx.get()) : Source{}, guarded));
    }
    v = isList ? makeList(std::move(items)) : makeTuple(std::move(items));
    if (!PyTuple_CheckExact(obj) && !isList) v->obj = PyObjectRef::borrow((PyObject*)Py_TYPE(obj));
    v->source = source;
    if (isList) {
      v->real = PyObjectRef::borrow(obj);
      byIdentity[obj] = v;
    }
    return v;
  }
  if (PyDict_Check(obj) && !overridesMapping(Py_TYPE(obj))) {
    if (guarded) guard(source, makeDictKeys(obj));
    v = std::make_shared<Value>();
    v->kind = ValueKind::kDict;
    v->source = source;
    v->real = PyObjectRef::borrow(obj);
    if (!PyDict_CheckExact(obj)) v->obj = PyObjectRef::borrow((PyObject*)Py_TYPE(obj));  // OrderedDict ...
    PyObject *key, *value;  // borrowed refs
    Py_ssize_t pos = 0;
    while (PyDict_Next(obj, &pos, &key, &value)) {
      if (!isConstantObject(key)) breakHere(BreakKind::kUnsupported, "dict with non-constant keys");
      v->keys.push_back(PyObjectRef::borrow(key));
      v->items.push_back(wrap(value, source ? Source::item(source, key) : Source{}, guarded));
    }
    byIdentity[obj] = v;
    return v;
  }
  if (Py_TYPE(obj) == &PySuper_Type) {
    // A super object made before a break (the resume function gets it as a stack value): it
    // resolves attributes past its class and binds them to its receiver, as a traced super().
    PyObjectRef self = PyObjectRef::steal(PyObject_GetAttrString(obj, "__self__"));
    PyObjectRef thisclass = PyObjectRef::steal(PyObject_GetAttrString(obj, "__thisclass__"));
    PyErr_Clear();
    if (self && thisclass && self.get() != Py_None) {
      v = makeObject(obj, source);
      v->name = "__super__";
      if (source && guarded) {
        guard(source, makeTypeMatch(obj));
        guard(Source::attr(source, "__thisclass__"), makeIdMatch(thisclass.get()));
      }
      v->self = wrap(self.get(), source ? Source::attr(source, "__self__") : Source{}, guarded);
      return v;
    }
  }
  // Everything else is known exactly: modules, functions, classes, user objects.
  v = makeObject(obj, source);
  if (source && guarded) v->idGuarded = guardExactObject(*this, obj, source);
  if (!PyModule_Check(obj)) byIdentity[obj] = v;
  return v;
}

// ---- conversions ------------------------------------------------------------------------------

// Objects that are guarded by type only, yet whose contents or value decide what an operation on
// them gives (a set's members, a user object's __eq__): their concrete value must not be folded
// into the graph's code.
static bool unsafeToFold(const Value& v) {
  // An instance made in the trace (call_constructs.h): its attributes live in the trace, not on
  // the object, so Python code run on the object itself would read the wrong ones.
  if (v.kind == ValueKind::kObject && !v.source && v.name == kMadeInTrace && !PyAnySet_Check(v.obj.get()) &&
      !isModule(v.obj.get()))
    return true;
  if (v.kind != ValueKind::kObject || !v.source || v.idGuarded) return false;
  PyObject* o = v.obj.get();
  if (PyType_Check(o) || PyModule_Check(o) || PyFunction_Check(o) || PyCFunction_Check(o) ||
      PyMethod_Check(o) || isModule(o))
    return false;
  return true;
}

PyObjectRef concrete(const ValueRef& v) {
  switch (v->kind) {
    case ValueKind::kConst:
      return v->obj;
    case ValueKind::kSymInt: {
      // Its value is needed as a Python int: the int is specialised (guarded) at this line.
      CompileContext* ctx = CompileContext::current();
      if (ctx == nullptr) return {};
      return PyObjectRef::steal(checkPy(PyLong_FromLongLong(specializeSymInt(*ctx, v, "used as a Python value"))));
    }
    case ValueKind::kSymFloat: {
      // The same for a float: the float inputs it came from are guarded by value from here on.
      CompileContext* ctx = CompileContext::current();
      if (ctx == nullptr) return {};
      return specializeSymFloat(*ctx, v, "used as a Python value");
    }
    case ValueKind::kObject:
      if (unsafeToFold(*v)) return {};
      return v->obj;
    case ValueKind::kTuple:
    case ValueKind::kList: {
      PyObjectRef out = PyObjectRef::steal(v->kind == ValueKind::kTuple
                                               ? PyTuple_New(v->items.size())
                                               : PyList_New(v->items.size()));
      checkPy(out.get());
      for (size_t i = 0; i < v->items.size(); ++i) {
        PyObjectRef item = concrete(v->items[i]);
        if (!item) return {};
        if (v->kind == ValueKind::kTuple)
          PyTuple_SET_ITEM(out.get(), i, item.release());
        else
          PyList_SET_ITEM(out.get(), i, item.release());
      }
      if (v->kind == ValueKind::kTuple && v->obj) {
        return PyObjectRef::steal(checkPy(makeTupleSubclass(v->obj.get(), out.get())));
      }
      return out;
    }
    case ValueKind::kSlice: {
      PyObjectRef a = concrete(v->items[0]), b = concrete(v->items[1]), c = concrete(v->items[2]);
      if (!a || !b || !c) return {};
      return PyObjectRef::steal(checkPy(PySlice_New(a.get(), b.get(), c.get())));
    }
    case ValueKind::kDict: {
      PyObjectRef out = PyObjectRef::steal(checkPy(PyDict_New()));
      for (size_t i = 0; i < v->keys.size(); ++i) {
        PyObjectRef item = concrete(v->items[i]);
        if (!item) return {};
        PyDict_SetItem(out.get(), v->keys[i].get(), item.get());
      }
      return out;
    }
    default:
      return {};
  }
}

PyObjectRef exampleOf(CompileContext& ctx, const ValueRef& v) {
  switch (v->kind) {
    case ValueKind::kTensor:
      return v->obj;
    case ValueKind::kTuple:
    case ValueKind::kList: {
      PyObjectRef out = PyObjectRef::steal(checkPy(v->kind == ValueKind::kTuple
                                                       ? PyTuple_New(v->items.size())
                                                       : PyList_New(v->items.size())));
      for (size_t i = 0; i < v->items.size(); ++i) {
        PyObjectRef item = exampleOf(ctx, v->items[i]);
        if (v->kind == ValueKind::kTuple)
          PyTuple_SET_ITEM(out.get(), i, item.release());
        else
          PyList_SET_ITEM(out.get(), i, item.release());
      }
      return out;
    }
    case ValueKind::kSlice: {
      PyObjectRef a = exampleOf(ctx, v->items[0]), b = exampleOf(ctx, v->items[1]),
                  c = exampleOf(ctx, v->items[2]);
      return PyObjectRef::steal(checkPy(PySlice_New(a.get(), b.get(), c.get())));
    }
    case ValueKind::kDict: {
      PyObjectRef out = PyObjectRef::steal(checkPy(PyDict_New()));
      for (size_t i = 0; i < v->keys.size(); ++i) {
        PyObjectRef item = exampleOf(ctx, v->items[i]);
        PyDict_SetItem(out.get(), v->keys[i].get(), item.get());
      }
      return out;
    }
    case ValueKind::kConst:
    case ValueKind::kObject:
      return v->obj;
    case ValueKind::kSymInt:
      return PyObjectRef::steal(checkPy(PyLong_FromLongLong(
          ctx.probeValues ? v->as<SymIntData>().expr.eval(*ctx.probeValues) : ctx.shapes.evalHint(v->as<SymIntData>().expr))));
    case ValueKind::kSymFloat: {
      if (ctx.floatProbeValues) {
        auto it = ctx.floatProbeValues->find(v.get());
        if (it != ctx.floatProbeValues->end()) return PyObjectRef::steal(checkPy(PyFloat_FromDouble(it->second)));
      }
      return v->obj;
    }
    default:
      ctx.breakHere(BreakKind::kUnsupported, "passing " + describe(*v) + " to a torch function");
  }
}

static std::string strOf(PyObject* o) {
  PyObjectRef s = PyObjectRef::steal(checkPy(PyObject_Str(o)));
  return PyUnicode_AsUTF8(s.get());
}

Arg argOf(CompileContext& ctx, const ValueRef& v) {
  switch (v->kind) {
    case ValueKind::kTensor:
    case ValueKind::kSymInt:
    case ValueKind::kSymFloat:
      return Arg::node(v->graphNode());
    case ValueKind::kTuple:
    case ValueKind::kList: {
      std::vector<Arg> items;
      for (const ValueRef& item : v->items) items.push_back(argOf(ctx, item));
      return v->kind == ValueKind::kTuple ? Arg::tuple(std::move(items)) : Arg::list(std::move(items));
    }
    case ValueKind::kSlice:
      return Arg::slice(argOf(ctx, v->items[0]), argOf(ctx, v->items[1]), argOf(ctx, v->items[2]));
    case ValueKind::kDict: {
      std::vector<std::pair<std::string, Arg>> entries;
      for (size_t i = 0; i < v->keys.size(); ++i) {
        if (!PyUnicode_Check(v->keys[i].get()))
          ctx.breakHere(BreakKind::kUnsupported, "a dict with non-str keys as a graph argument");
        entries.emplace_back(PyUnicode_AsUTF8(v->keys[i].get()), argOf(ctx, v->items[i]));
      }
      return Arg::dict(std::move(entries));
    }
    case ValueKind::kConst:
    case ValueKind::kObject: {
      PyObject* o = v->py();
      const TorchApi& api = torchApi();
      if (o == Py_None) return Arg::none();
      if (o == Py_Ellipsis) return Arg::ellipsis();
      if (PyBool_Check(o)) return Arg::boolean(o == Py_True);
      if (PyLong_CheckExact(o)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (!overflow) return Arg::integer(x);
      }
      if (PyFloat_CheckExact(o)) return Arg::floating(PyFloat_AS_DOUBLE(o));
      if (moduleOf((PyObject*)Py_TYPE(o)) == "numpy" && !PyComplex_Check(o)) {
        // numpy scalars: torch takes them as the Python number they hold (np.sqrt(d) in a scale).
        PyObjectRef py = PyObjectRef::steal(PyObject_CallMethod(o, "item", nullptr));
        if (py && (PyBool_Check(py.get()) || PyLong_CheckExact(py.get()) || PyFloat_CheckExact(py.get())))
          return argOf(ctx, makeConst(py.get()));
        PyErr_Clear();
      }
      if (PyUnicode_CheckExact(o)) return Arg::string(PyUnicode_AsUTF8(o));
      if ((PyObject*)Py_TYPE(o) == api.dtypeType) return Arg::dtype(strOf(o));
      if ((PyObject*)Py_TYPE(o) == api.deviceType) return Arg::device(strOf(o));
      std::string tn = Py_TYPE(o)->tp_name;
      if (tn == "torch.layout") return Arg::layout(strOf(o));
      if (tn == "torch.memory_format") return Arg::memoryFormat(strOf(o));
      if (PyTuple_CheckExact(o) || (PyTuple_Check(o) && isConstantObject(o))) {  // torch.Size too
        std::vector<Arg> items;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i)
          items.push_back(argOf(ctx, makeConst(PyTuple_GET_ITEM(o, i))));
        return Arg::tuple(std::move(items));
      }
      ctx.breakHere(BreakKind::kUnsupported, "passing " + describe(*v) + " into the graph");
    }
    default:
      ctx.breakHere(BreakKind::kUnsupported, "passing " + describe(*v) + " into the graph");
  }
}

ValueRef wrapResult(CompileContext& ctx, NodeRef node, PyObject* example, PyObject* device) {
  if (isTensor(example)) {
    ctx.nodeTensors.push_back(makeTensor(node, PyObjectRef::borrow(example), PyObjectRef::borrow(device)));
    return ctx.nodeTensors.back();
  }
  if (PyTuple_Check(example) || PyList_Check(example)) {
    std::vector<ValueRef> items;
    Py_ssize_t n = PySequence_Size(example);
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObjectRef item = PyObjectRef::steal(checkPy(PySequence_GetItem(example, i)));
      if (isTensor(item.get())) {
        NodeRef sub = ctx.graph.callFunction(Target::fromCallable(torchApi().getitem),
                                             {Arg::node(node), Arg::integer(i)}, {},
                                             ctx.metaHere(item.get()));
        items.push_back(makeTensor(sub, item, PyObjectRef::borrow(device)));
        ctx.nodeTensors.push_back(items.back());
      } else if (isConstantObject(item.get())) {
        items.push_back(makeConst(item.get()));
      } else {
        ctx.breakHere(BreakKind::kUnsupported, "a torch call returning a container of non-tensors");
      }
    }
    ValueRef v = PyList_Check(example) ? makeList(std::move(items)) : makeTuple(std::move(items));
    if (!PyTuple_CheckExact(example) && !PyList_Check(example))
      v->obj = PyObjectRef::borrow((PyObject*)Py_TYPE(example));
    return v;
  }
  ctx.breakHere(BreakKind::kUnsupported, std::string("a torch call returning ") +
                                              Py_TYPE(example)->tp_name);
}

// Device of the result: an explicit device argument, else the first tensor argument's device.
static PyObjectRef inferDevice(const std::string& method, const std::vector<ValueRef>& args,
                               const std::vector<std::pair<std::string, ValueRef>>& kwargs) {
  const TorchApi& api = torchApi();
  auto asDevice = [&](const ValueRef& v) -> PyObjectRef {
    if (v->isTensor() && method == "to") return v->as<TensorData>().device;
    if ((v->isConst() || v->kind == ValueKind::kObject) &&
        ((PyObject*)Py_TYPE(v->py()) == api.deviceType || PyUnicode_Check(v->py()))) {
      if (PyUnicode_Check(v->py())) {
        PyObject* d = PyObject_CallFunctionObjArgs(api.deviceType, v->py(), nullptr);  // new
        if (d == nullptr) {
          PyErr_Clear();
          return {};
        }
        return PyObjectRef::steal(d);
      }
      return v->obj;
    }
    return {};
  };
  for (const auto& [k, v] : kwargs)
    if (k == "device") {
      if (PyObjectRef d = asDevice(v)) return d;
    }
  if (method == "to") {
    for (size_t i = 1; i < args.size(); ++i)
      if (PyObjectRef d = asDevice(args[i])) return d;
  }
  if (method == "cpu") return PyObjectRef::steal(checkPy(PyObject_CallFunction(api.deviceType, "s", "cpu")));
  if (method == "cuda") return PyObjectRef::steal(checkPy(PyObject_CallFunction(api.deviceType, "s", "cuda")));
  std::function<PyObjectRef(const ValueRef&)> first = [&](const ValueRef& v) -> PyObjectRef {
    if (v->isTensor()) return v->as<TensorData>().device;
    if (v->kind == ValueKind::kTuple || v->kind == ValueKind::kList)
      for (const ValueRef& item : v->items)
        if (PyObjectRef d = first(item)) return d;
    return {};
  };
  for (const ValueRef& a : args)
    if (PyObjectRef d = first(a)) return d;
  return PyObjectRef::steal(checkPy(PyObject_CallFunction(api.deviceType, "s", "cpu")));
}

// A meta copy of a tensor that is not on meta yet (new ref); meta tensors are returned as they are.
static PyObjectRef toMeta(PyObject* t) {
  PyObjectRef dev = PyObjectRef::steal(checkPy(PyObject_GetAttrString(t, "device")));
  if (strOf(dev.get()) == "meta") return PyObjectRef::borrow(t);
  return metaExample(t);
}

// Shapes of two results (tensors, or sequences of tensors) are equal.
static bool sameShapes(PyObject* a, PyObject* b) {
  if (isTensor(a) && isTensor(b)) {
    PyObjectRef sa = PyObjectRef::steal(PyObject_GetAttrString(a, "shape"));
    PyObjectRef sb = PyObjectRef::steal(PyObject_GetAttrString(b, "shape"));
    if (!sa || !sb) {
      PyErr_Clear();
      return false;
    }
    return PyObject_RichCompareBool(sa.get(), sb.get(), Py_EQ) == 1;
  }
  if ((PyTuple_Check(a) || PyList_Check(a)) && (PyTuple_Check(b) || PyList_Check(b))) {
    Py_ssize_t n = PySequence_Size(a);
    if (n != PySequence_Size(b)) return false;
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObjectRef x = PyObjectRef::steal(PySequence_GetItem(a, i));
      PyObjectRef y = PyObjectRef::steal(PySequence_GetItem(b, i));
      if (!x || !y || !sameShapes(x.get(), y.get())) return false;
    }
    return true;
  }
  return true;
}

static bool isIntegralTensorValue(const ValueRef& v) {
  if (v->isTensor()) {
    PyObjectRef dt = PyObjectRef::steal(PyObject_GetAttrString(v->obj.get(), "is_floating_point"));
    PyObjectRef fp = dt ? PyObjectRef::steal(PyObject_CallNoArgs(dt.get())) : PyObjectRef{};
    PyErr_Clear();
    return fp.get() == Py_False;
  }
  for (const ValueRef& i : v->items)
    if (i && isIntegralTensorValue(i)) return true;
  return false;
}

static bool hasIntegralTensor(const std::vector<ValueRef>& args,
                              const std::vector<std::pair<std::string, ValueRef>>& kwargs) {
  for (const ValueRef& a : args)
    if (isIntegralTensorValue(a)) return true;
  for (const auto& kv : kwargs)
    if (isIntegralTensorValue(kv.second)) return true;
  return false;
}

// Real tensors filled with `fill` standing in for symbolic ones, on the device each lives on.
static PyObjectRef materialize(CompileContext& ctx, const ValueRef& v, int fill, bool withGrad = false) {
  if (v->isTensor()) {
    // torch.full, not *_like: in torch 1.13 zeros_like(meta, device=...) is not zeroed.
    PyObjectRef zeros = PyObjectRef::steal(checkPy(PyObject_GetAttrString(torchApi().torch, fill ? "ones" : "zeros")));
    PyObjectRef shape = PyObjectRef::steal(checkPy(PyObject_GetAttrString(v->obj.get(), "shape")));
    PyObjectRef dtype = PyObjectRef::steal(checkPy(PyObject_GetAttrString(v->obj.get(), "dtype")));
    PyObjectRef args = PyObjectRef::steal(checkPy(PyTuple_Pack(1, shape.get())));
    PyObjectRef kw = PyObjectRef::steal(checkPy(PyDict_New()));
    PyDict_SetItemString(kw.get(), "dtype", dtype.get());
    PyDict_SetItemString(kw.get(), "device", v->as<TensorData>().device.get());
    if (withGrad) {
      PyObjectRef rg = PyObjectRef::steal(checkPy(PyObject_GetAttrString(v->obj.get(), "requires_grad")));
      PyDict_SetItem(kw.get(), PyUnicode_FromString("requires_grad"), rg.get());
    }
    return PyObjectRef::steal(checkPy(PyObject_Call(zeros.get(), args.get(), kw.get())));
  }
  if (v->kind == ValueKind::kTuple || v->kind == ValueKind::kList) {
    PyObjectRef out = PyObjectRef::steal(checkPy(PyList_New(0)));
    for (const ValueRef& item : v->items) PyList_Append(out.get(), materialize(ctx, item, fill, withGrad).get());
    if (v->kind == ValueKind::kList) return out;
    return PyObjectRef::steal(checkPy(PyList_AsTuple(out.get())));
  }
  return exampleOf(ctx, v);
}

static PyObject* callMaterialized(CompileContext& ctx, PyObject* fn, const std::string& method,
                                  const std::vector<ValueRef>& args,
                                  const std::vector<std::pair<std::string, ValueRef>>& kwargs, int fill,
                                  bool withGrad = false) {
  PyObjectRef t = PyObjectRef::steal(checkPy(PyTuple_New(args.size())));
  for (size_t i = 0; i < args.size(); ++i)
    PyTuple_SET_ITEM(t.get(), i, materialize(ctx, args[i], fill, withGrad).release());
  PyObjectRef kw = PyObjectRef::steal(checkPy(PyDict_New()));
  for (const auto& [k, v] : kwargs) PyDict_SetItemString(kw.get(), k.c_str(), materialize(ctx, v, fill, withGrad).get());
  PyObjectRef callable = PyObjectRef::borrow(fn);
  PyObjectRef callArgs = t;
  if (!method.empty()) {
    callable = PyObjectRef::steal(checkPy(PyObject_GetAttrString(PyTuple_GET_ITEM(t.get(), 0), method.c_str())));
    callArgs = PyObjectRef::steal(checkPy(PyTuple_GetSlice(t.get(), 1, args.size())));
  }
  return PyObject_Call(callable.get(), callArgs.get(), kw.get());  // new ref or NULL
}

// Under autocast an op's result dtypes are autocast's, which meta tensors never get (autocast
// applies to tensors of its device only, and a meta op on inputs autocast would have cast to one
// dtype fails): the call runs on stand-in tensors of the real device (requiring grad as the
// examples do) under the traced autocast blocks and grad mode, the random-number generator put
// back afterwards. Returns that result (new ref), or null (no error set) when it raised.
static PyObject* autocastExample(CompileContext& ctx, PyObject* fn, const std::string& method,
                                 const std::vector<ValueRef>& args,
                                 const std::vector<std::pair<std::string, ValueRef>>& kwargs) {
  const TorchApi& api = torchApi();
  PyObjectRef rng = PyObjectRef::steal(checkPy(PyObject_CallNoArgs(api.getRngState)));
  PyObject* real = nullptr;
  {
    TracedAutocast under(ctx);
    real = callMaterialized(ctx, fn, method, args, kwargs, 0, /*withGrad=*/true);  // new ref
    if (!real) PyErr_Clear();
  }
  PyObject* r = PyObject_CallOneArg(api.setRngState, rng.get());  // new ref
  Py_XDECREF(r);
  return real;
}

// The example's tensors take the dtypes of `real`'s (autocastExample of the same call).
static void retype(PyObjectRef& example, PyObject* real) {
  if (isTensor(example.get()) && isTensor(real)) {
    PyObjectRef want = PyObjectRef::steal(checkPy(PyObject_GetAttrString(real, "dtype")));
    PyObjectRef have = PyObjectRef::steal(checkPy(PyObject_GetAttrString(example.get(), "dtype")));
    if (want.get() != have.get())
      example = PyObjectRef::steal(checkPy(PyObject_CallMethod(example.get(), "to", "O", want.get())));
    return;
  }
  const bool tuple = PyTuple_CheckExact(example.get()) && PyTuple_Check(real);
  const bool list = PyList_CheckExact(example.get()) && PyList_Check(real);
  if (!tuple && !list) return;
  const Py_ssize_t n = PySequence_Size(example.get());
  if (n != PySequence_Size(real)) return;
  PyObjectRef out = PyObjectRef::steal(checkPy(tuple ? PyTuple_New(n) : PyList_New(n)));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObjectRef item = PyObjectRef::steal(checkPy(PySequence_GetItem(example.get(), i)));
    PyObjectRef r = PyObjectRef::steal(checkPy(PySequence_GetItem(real, i)));
    retype(item, r.get());
    if (tuple)
      PyTuple_SET_ITEM(out.get(), i, item.release());
    else
      PyList_SET_ITEM(out.get(), i, item.release());
  }
  example = out;
}

// Torch calls whose Python result depends only on metadata a meta example has exactly (sizes,
// strides, dtype, layout): tensor_queries.def. Device queries are answered from the real device
// elsewhere (x.device, x.is_cuda), never from the meta example.
static bool isMetadataQuery(const std::string& name) {
  static const char* kQueries[] = {
#define DYNAMO_TENSOR_QUERY(name) #name,
#include "tensor_queries.def"
#undef DYNAMO_TENSOR_QUERY
  };
  for (const char* q : kQueries)
    if (name == q) return true;
  return false;
}

namespace {
// Replaces warnings.filters with one "ignore" filter for a scope (and tells the warnings module,
// whose per-location cache depends on the filters). Any pending Python error is kept.
class WarningsSilenced {
 public:
  WarningsSilenced() {
    static PyObject* warnings = PyImport_ImportModule("warnings");  // new ref, kept
    module_ = warnings;
    if (module_ == nullptr) {
      PyErr_Clear();
      return;
    }
    saved_ = PyObject_GetAttrString(module_, "filters");  // new ref
    PyObject* ignore = Py_BuildValue("[(sOOOi)]", "ignore", Py_None, PyExc_Warning, Py_None, 0);  // new
    if (saved_ == nullptr || ignore == nullptr || PyObject_SetAttrString(module_, "filters", ignore) < 0) {
      Py_CLEAR(saved_);
      PyErr_Clear();
    }
    Py_XDECREF(ignore);
    mutated();
  }
  ~WarningsSilenced() {
    if (saved_ == nullptr) return;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (PyObject_SetAttrString(module_, "filters", saved_) < 0) PyErr_Clear();
    Py_DECREF(saved_);
    mutated();
    PyErr_Restore(et, ev, tb);
  }
  WarningsSilenced(const WarningsSilenced&) = delete;
  WarningsSilenced& operator=(const WarningsSilenced&) = delete;

 private:
  void mutated() {
    PyObject* r = PyObject_CallMethod(module_, "_filters_mutated", nullptr);  // new ref
    if (r == nullptr) PyErr_Clear();
    Py_XDECREF(r);
  }
  PyObject* module_ = nullptr;  // borrowed (kept by the static)
  PyObject* saved_ = nullptr;   // new ref: the user's filters
};
}  // namespace

namespace {

// A call's example result with its real tensors (factory functions, the materialized fallback)
// brought to meta, in place: a tensor, or the tensors of a tuple or list (a namedtuple stays
// one). Returns whether it holds a tensor.
bool resultToMeta(PyObjectRef& res) {
  bool hasTensor = isTensor(res.get());
  if (hasTensor) {
    res = toMeta(res.get());
  } else if (PyTuple_Check(res.get()) || PyList_Check(res.get())) {
    bool any = false;
    for (Py_ssize_t i = 0; i < PySequence_Size(res.get()); ++i) {
      PyObjectRef item = PyObjectRef::steal(checkPy(PySequence_GetItem(res.get(), i)));
      if (isTensor(item.get())) any = true;
    }
    if (any) {
      hasTensor = true;
      PyObjectRef items = PyObjectRef::steal(checkPy(PyList_New(0)));
      for (Py_ssize_t i = 0; i < PySequence_Size(res.get()); ++i) {
        PyObjectRef item = PyObjectRef::steal(checkPy(PySequence_GetItem(res.get(), i)));
        PyObjectRef m = isTensor(item.get()) ? toMeta(item.get()) : item;
        PyList_Append(items.get(), m.get());
      }
      if (PyList_Check(res.get())) {
        res = items;
      } else {
        PyObjectRef tup = PyObjectRef::steal(checkPy(PyList_AsTuple(items.get())));
        res = PyTuple_CheckExact(res.get()) ? tup
              : PyObjectRef::steal(checkPy(PyObject_CallOneArg((PyObject*)Py_TYPE(res.get()), tup.get())));
      }
    }
  }
  return hasTensor;
}

// x.to(...) / x.cuda() / x.cpu() on an example: the call becomes x.to(dtype=..., memory_format=...)
// so the example stays on meta (the device is tracked separately). exArgs: the examples, self
// first (borrowed ref).
void deviceMoveOnMeta(PyObject* exArgs, PyObjectRef& callable, PyObjectRef& callArgs, PyObjectRef& exKwargs) {
  const TorchApi& api = torchApi();
  PyObjectRef metaArgs = PyObjectRef::steal(checkPy(PyTuple_New(0)));
  PyObjectRef kw = PyObjectRef::steal(checkPy(PyDict_New()));
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(callArgs.get()); ++i) {
    PyObject* a = PyTuple_GET_ITEM(callArgs.get(), i);  // borrowed
    if ((PyObject*)Py_TYPE(a) == api.dtypeType) PyDict_SetItemString(kw.get(), "dtype", a);
    if (isTensor(a)) {  // x.to(other): other's dtype (and device, tracked separately)
      PyObjectRef dt = PyObjectRef::steal(checkPy(PyObject_GetAttrString(a, "dtype")));
      PyDict_SetItemString(kw.get(), "dtype", dt.get());
    }
  }
  PyObject* mf = PyDict_GetItemString(exKwargs.get(), "memory_format");  // borrowed
  if (mf) PyDict_SetItemString(kw.get(), "memory_format", mf);
  PyObject* dt = PyDict_GetItemString(exKwargs.get(), "dtype");  // borrowed
  if (dt) PyDict_SetItemString(kw.get(), "dtype", dt);
  callArgs = metaArgs;
  exKwargs = kw;
  PyObject* self = PyTuple_GET_ITEM(exArgs, 0);  // borrowed
  callable = PyObjectRef::steal(checkPy(PyObject_GetAttrString(self, "to")));
}

// The example call raised (et, ev, tb: the fetched error, new refs, released here): a break
// that says why, a missing meta kernel apart from a real error.
[[noreturn]] void breakOnFailedExample(const CompileContext& ctx, PyObject* fn, const std::string& method,
                                       PyObject* et, PyObject* ev, PyObject* tb) {
  PyObjectRef msg = PyObjectRef::steal(ev ? PyObject_Str(ev) : nullptr);
  std::string text = msg ? PyUnicode_AsUTF8(msg.get()) : "unknown error";
  bool notImpl = et && PyErr_GivenExceptionMatches(et, PyExc_NotImplementedError);
  Py_XDECREF(et);
  Py_XDECREF(ev);
  Py_XDECREF(tb);
  PyErr_Clear();
  std::string what = method.empty() ? Target::fromCallable(fn).qualifiedName() : "Tensor." + method;
  if (notImpl)
    ctx.breakHere(BreakKind::kUnsupported, what + " has no shape function (meta kernel): " + text.substr(0, 200));
  ctx.breakHere(BreakKind::kException, what + " raised while capturing: " + text.substr(0, 300));
}

// The call run on the examples of its arguments (meta tensors, under the traced grad mode,
// inference mode and autocast state), for the example of its result (a new ref); breaks when it
// cannot be run. `exArgs` receives the examples of the positional arguments (an in-place op
// returns one of them), `autocastReal` the result under the traced autocast state when autocast
// may apply. A call with no tensor argument (`anyTensorArg` false: torch.randn(2), torch.randint
// ...) runs for real: it must not move the random-number generator the program will use.
PyObjectRef exampleResult(CompileContext& ctx, PyObject* fn, const std::string& method, const std::vector<ValueRef>& args,
                          const std::vector<std::pair<std::string, ValueRef>>& kwargs, bool anyTensorArg,
                          PyObjectRef& exArgs, PyObjectRef& autocastReal) {
  const TorchApi& api = torchApi();
  // Examples: run the call on meta tensors under the traced grad mode.
  exArgs = PyObjectRef::steal(checkPy(PyTuple_New(args.size())));
  for (size_t i = 0; i < args.size(); ++i)
    PyTuple_SET_ITEM(exArgs.get(), i, exampleOf(ctx, args[i]).release());
  PyObjectRef exKwargs = PyObjectRef::steal(checkPy(PyDict_New()));
  for (const auto& [k, v] : kwargs) {
    PyObjectRef ex = exampleOf(ctx, v);
    if (k == "device") {
      PyDict_SetItemString(exKwargs.get(), "device", api.metaDevice);
    } else {
      PyDict_SetItemString(exKwargs.get(), k.c_str(), ex.get());
    }
  }
  PyObjectRef callable;
  PyObjectRef callArgs = exArgs;
  if (!method.empty()) {
    callable = PyObjectRef::steal(checkPy(PyObject_GetAttrString(PyTuple_GET_ITEM(exArgs.get(), 0), method.c_str())));
    callArgs = PyObjectRef::steal(checkPy(PyTuple_GetSlice(exArgs.get(), 1, args.size())));
  } else {
    callable = PyObjectRef::borrow(fn);
  }
  // Device moves are shape-preserving: keep the example on meta.
  if (method == "to" || method == "cuda" || method == "cpu") deviceMoveOnMeta(exArgs.get(), callable, callArgs, exKwargs);
  PyObjectRef rngState;
  if (!anyTensorArg) rngState = PyObjectRef::steal(checkPy(PyObject_CallNoArgs(api.getRngState)));
  PyObjectRef inferenceGuard = tracedInferenceMode(ctx);  // examples in the traced inference mode
  PyObjectRef prevGrad = PyObjectRef::steal(checkPy(PyObject_CallNoArgs(api.isGradEnabled)));
  PyObjectRef setTo = PyObjectRef::steal(checkPy(
      PyObject_CallFunctionObjArgs(api.setGradEnabled, ctx.gradEnabled ? Py_True : Py_False, nullptr)));
  // Warnings the op gives are the graph's to give when it runs (once, as eager does), not the
  // stand-in call's: they are silenced while the example is computed.
  WarningsSilenced silenced;
  // The same call on examples of the same metadata made before gives its result's metadata
  // (example_memo.h: torch 2.x runs many meta kernels in Python).
  const bool deviceMove = method == "to" || method == "cuda" || method == "cpu";
  // A method is checked by identity too (torch.Tensor.<method> now: a user may replace it).
  PyObjectRef methodFn;
  if (!method.empty()) {
    methodFn = PyObjectRef::steal(PyObject_GetAttrString(torchApi().tensorType, method.c_str()));  // new ref
    if (!methodFn) PyErr_Clear();
  }
  PyObject* memoFn = method.empty() ? fn : methodFn.get();  // borrowed
  const std::string memoKey = anyTensorArg && !deviceMove && memoFn != nullptr && !autocastMayApply(ctx)
                                  ? exampleMemoKey(memoFn, method, exArgs.get(), exKwargs.get(), ctx.gradEnabled)
                                  : std::string();
  PyObject* result = memoKey.empty() ? nullptr : exampleMemoLookup(memoKey, memoFn, exArgs.get()).release();  // new
  if (result == nullptr) {
    result = PyObject_Call(callable.get(), callArgs.get(), PyDict_Size(exKwargs.get()) ? exKwargs.get() : nullptr);
    if (result != nullptr && !memoKey.empty())
      exampleMemoStore(memoKey, memoFn, method, result, exArgs.get(), exKwargs.get(), ctx.gradEnabled);
  }
  if (anyTensorArg && autocastMayApply(ctx)) {
    PyObject *aet = nullptr, *aev = nullptr, *atb = nullptr;
    PyErr_Fetch(&aet, &aev, &atb);  // the meta call's error, if it failed
    autocastReal = PyObjectRef::steal(autocastExample(ctx, fn, method, args, kwargs));
    if (result == nullptr && autocastReal) {  // mixed dtypes that autocast makes one
      Py_XDECREF(aet);
      Py_XDECREF(aev);
      Py_XDECREF(atb);
      result = Py_NewRef(autocastReal.get());
    } else {
      PyErr_Restore(aet, aev, atb);
    }
  }
  if (result == nullptr) {
    // No meta kernel, or a kernel that needs data (one_hot): run on stand-in tensors of the right
    // shapes on the real device. A real error (a shape mismatch) fails here too. With integer or
    // bool inputs the output shape may depend on the values (one_hot, bincount,
    // repeat_interleave): run again on ones, and break if the shapes differ.
    PyErr_Clear();
    result = callMaterialized(ctx, fn, method, args, kwargs, 0);
    if (result != nullptr && hasIntegralTensor(args, kwargs)) {
      PyObject* again = callMaterialized(ctx, fn, method, args, kwargs, 1);  // new ref
      bool same = again != nullptr && sameShapes(result, again);
      Py_XDECREF(again);
      if (!same) {
        Py_DECREF(result);
        PyErr_Clear();
        ctx.breakHere(BreakKind::kDynamicShape,
                      (method.empty() ? Target::fromCallable(fn).qualifiedName() : "Tensor." + method) +
                          "() has an output shape that depends on the input values");
      }
    }
  }
  PyObject *et = nullptr, *ev = nullptr, *tb = nullptr;
  if (result == nullptr) PyErr_Fetch(&et, &ev, &tb);
  PyObject* restored = PyObject_CallFunctionObjArgs(api.setGradEnabled, prevGrad.get(), nullptr);
  Py_XDECREF(restored);
  inferenceGuard = PyObjectRef{};  // leaves the traced inference mode (restores the autograd state)
  if (rngState) {
    PyObject* r = PyObject_CallOneArg(api.setRngState, rngState.get());  // new ref
    Py_XDECREF(r);
  }
  if (result == nullptr) breakOnFailedExample(ctx, fn, method, et, ev, tb);
  return PyObjectRef::steal(result);
}

}  // namespace

ValueRef CompileContext::recordCall(PyObject* fn, const std::string& method,
                                    const std::vector<ValueRef>& args,
                                    const std::vector<std::pair<std::string, ValueRef>>& kwargs) {
  const TorchApi& api = torchApi();
  // Graph code that raises at run time cannot reach a handler of the user's: such code runs as
  // Python (the root frame runs eagerly; an inlined callee becomes a frame of its own).
  for (const Tracer* t : tracers)
    if (t->underUserHandler())
      breakHere(BreakKind::kUnsupported, "a tensor operation inside a try block (or a `with` block of a context manager that handles exceptions); its exception handlers must stay in force");
  if (fn == api.setGradEnabled) switchesGradMode = true;
  // Graph arguments first: what cannot be a graph argument (a Generator, a user object) breaks
  // before anything runs, so nothing it would change is touched at trace time.
  std::vector<Arg> gargs;
  for (const ValueRef& a : args) gargs.push_back(argOf(*this, a));
  Kwargs gkwargs;
  for (const auto& [k, v] : kwargs) gkwargs.emplace_back(k, argOf(*this, v));
  // A tensor built from constants (Value::constValue) is no longer known once an op sees it:
  // the op may change it in place or make a view through which it changes later.
  std::function<void(const ValueRef&)> forget = [&](const ValueRef& v) {
    if (v->isTensor()) v->as<TensorData>().constValue = PyObjectRef{};
    for (const ValueRef& i : v->items)
      if (i) forget(i);
  };
  for (const ValueRef& a : args) forget(a);
  for (const auto& kv : kwargs) forget(kv.second);
  // loss.backward() returns None and changes only .grad of leaves, which the trace never reads
  // (reading .grad breaks): it needs no example, and running it on stand-in tensors would fail
  // where they carry no autograd history (ops without meta kernels run on detached stand-ins).
  if (method == "backward" && !args.empty() && args[0]->isTensor()) {
    graph.callMethod(method, std::move(gargs), std::move(gkwargs), metaHere(nullptr));
    return makeConst(Py_None);
  }
  // The example of the result; a call with no tensor argument runs for real (exampleResult).
  bool anyTensorArg = false;
  for (const ValueRef& a : args) anyTensorArg = anyTensorArg || containsTensor(a);
  for (const auto& kv : kwargs) anyTensorArg = anyTensorArg || containsTensor(kv.second);
  PyObjectRef exArgs, autocastReal;
  PyObjectRef res = exampleResult(*this, fn, method, args, kwargs, anyTensorArg, exArgs, autocastReal);
  // An in-place op returns its input itself (y = x.add_(1); y is x): the result is the input's
  // Value, and the node records the mutation in program order.
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i]->isTensor() || PyTuple_GET_ITEM(exArgs.get(), i) != res.get()) continue;
    NodeMeta meta = metaHere(res.get());
    if (meta.tensor) meta.tensor->device = strOf(args[i]->as<TensorData>().device.get());
    if (method.empty())
      graph.callFunction(Target::fromCallable(fn), std::move(gargs), std::move(gkwargs), meta);
    else
      graph.callMethod(method, std::move(gargs), std::move(gkwargs), meta);
    checkInPlaceSizes(*this, args[i], method.empty() ? callableName(fn) : "Tensor." + method);
    return args[i];
  }
  if (autocastReal && autocastReal.get() != res.get()) {
    PyObjectRef inferenceAgain = tracedInferenceMode(*this);  // the cast example made in the traced mode
    retype(res, autocastReal.get());
  }
  // Factory functions (and the materialized fallback) give real tensors: bring them to meta.
  bool hasTensor = resultToMeta(res);
  if (!hasTensor && res.get() == Py_None) {
    // Mutation for its side effect (operator.setitem, Tensor.__setitem__): always a node.
    if (method.empty())
      graph.callFunction(Target::fromCallable(fn), std::move(gargs), std::move(gkwargs), metaHere(nullptr));
    else
      graph.callMethod(method, std::move(gargs), std::move(gkwargs), metaHere(nullptr));
    return makeConst(Py_None);
  }
  if (!hasTensor) {
    // A Python value out of a torch call is taken as a constant only when the call reads
    // metadata the example has exactly (x.dim(), x.size(1), x.is_contiguous()); anything that
    // reads the data (torch.equal, allclose, is_nonzero, __bool__, data_ptr, __repr__) would be
    // computed on stand-in tensors: a break, so it runs on the real values.
    const std::string what = method.empty() ? callableName(fn) : method;
    // The conjugate and negative bits, and whether a frame's tensor is an inference tensor, are
    // not on the meta examples of the frame's tensors (nor in their guards): read for real.
    // is_inference of a view reads it for real too: a view of an inference tensor is one, and a
    // view's meta example may stand on a frame tensor's (x[0].is_inference() read False).
    bool flagOfInput = what == "is_conj" || what == "is_neg";
    if (what == "is_inference")
      for (const ValueRef& a : args)
        flagOfInput = flagOfInput || (a->isTensor() && (a->source || isViewExample(a->py())));
    if (anyTensorArg && flagOfInput)
      breakHere(BreakKind::kTensorToPython,
                "Tensor." + what + "() of a tensor from outside the graph or a view: the flag is not on its meta example");
    if (anyTensorArg && !isMetadataQuery(what))
      breakHere(BreakKind::kTensorToPython,
                (method.empty() ? Target::fromCallable(fn).qualifiedName() : "Tensor." + method) +
                    "() returns a Python value computed from tensor data");
    if (isConstantObject(res.get())) {
      inferResultSizes(*this, fn, method, args, kwargs, nullptr);  // a size read: may specialise
      return makeConst(res.get());
    }
    breakHere(BreakKind::kUnsupported, std::string("a torch call returning ") + Py_TYPE(res.get())->tp_name);
  }
  PyObjectRef device = inferDevice(method, args, kwargs);
  NodeMeta meta = metaHere(isTensor(res.get()) ? res.get() : nullptr);
  if (meta.tensor) meta.tensor->device = strOf(device.get());
  NodeRef node = method.empty()
                     ? graph.callFunction(Target::fromCallable(fn), std::move(gargs), std::move(gkwargs), meta)
                     : graph.callMethod(method, std::move(gargs), std::move(gkwargs), meta);
  ValueRef out = wrapResult(*this, node, res.get(), device.get());
  inferResultSizes(*this, fn, method, args, kwargs, out);
  return out;
}

std::vector<ValueRef> iterateValue(CompileContext& ctx, const ValueRef& v) {
  switch (v->kind) {
    case ValueKind::kTuple:
    case ValueKind::kList:
      return v->items;
    case ValueKind::kDict: {
      std::vector<ValueRef> keys;
      for (const PyObjectRef& k : v->keys) keys.push_back(makeConst(k.get()));
      return keys;
    }
    case ValueKind::kIterator: {
      IteratorData& data = v->as<IteratorData>();
      if (data.lazy) {  // a generator runs to its end now
        std::vector<ValueRef> rest;
        ValueRef item;
        while (nextItem(v, &item)) rest.push_back(item);
        return rest;
      }
      // Consuming an iterator advances it, as in Python (list(it), for x in it, zip(it, ...)).
      const std::vector<ValueRef>& items = iteratorItems(*v);
      std::vector<ValueRef> rest(items.begin() + std::min(data.position, items.size()), items.end());
      data.position = std::max(data.position, items.size());
      return rest;
    }
    case ValueKind::kConst: {
      PyObject* o = v->py();
      if (PyTuple_Check(o) || PyUnicode_Check(o) || PyFrozenSet_Check(o)) {
        std::vector<ValueRef> out;
        PyObjectRef it = PyObjectRef::steal(checkPy(PyObject_GetIter(o)));
        while (PyObject* item = PyIter_Next(it.get())) {  // new ref
          out.push_back(makeConst(item));
          Py_DECREF(item);
        }
        if (PyErr_Occurred()) throw PythonError{};
        return out;
      }
      break;
    }
    case ValueKind::kTensor: {
      specializeSizes(ctx, v, "iteration over a tensor (a Python loop count)");
      PyObjectRef shape = PyObjectRef::steal(checkPy(PyObject_GetAttrString(v->obj.get(), "shape")));
      if (PyTuple_GET_SIZE(shape.get()) == 0) ctx.breakHere(BreakKind::kException, "iteration over a 0-d tensor");
      long n = PyLong_AsLong(PyTuple_GET_ITEM(shape.get(), 0));
      std::vector<ValueRef> out;
      for (long i = 0; i < n; ++i) {
        PyObjectRef idx = PyObjectRef::steal(PyLong_FromLong(i));
        out.push_back(getItem(ctx, v, makeConst(idx.get())));
      }
      return out;
    }
    case ValueKind::kObject: {
      PyObject* o = v->py();
      const TorchApi& api = torchApi();
      if (isTraceSet(*v)) return setMembers(v);  // the real set's order (call_constructs.h)
      // range objects and containers of modules are unrolled.
      if (PyRange_Check(o)) {
        std::vector<ValueRef> out;
        PyObjectRef it = PyObjectRef::steal(checkPy(PyObject_GetIter(o)));
        while (PyObject* item = PyIter_Next(it.get())) {  // new ref
          out.push_back(makeConst(item));
          Py_DECREF(item);
        }
        return out;
      }
      if (PyObject_IsInstance(o, api.sequentialType) == 1 || PyObject_IsInstance(o, api.moduleListType) == 1) {
        PyObjectRef mods = PyObjectRef::steal(checkPy(PyObject_GetAttrString(o, "_modules")));
        std::vector<ValueRef> out;
        PyObject *key, *value;  // borrowed refs
        Py_ssize_t pos = 0;
        while (PyDict_Next(mods.get(), &pos, &key, &value)) {
          Source s = v->source ? Source::moduleAttr(v->source, PyUnicode_AsUTF8(key), ModuleSlot::kModules) : Source{};
          out.push_back(ctx.wrap(value, s));
        }
        ctx.guard(v->source, makeLengthCheck(PyDict_Size(mods.get())));
        return out;
      }
      if (PyObject_IsInstance(o, api.moduleDictType) == 1) {
        PyObjectRef mods = PyObjectRef::steal(checkPy(PyObject_GetAttrString(o, "_modules")));
        std::vector<ValueRef> out;
        PyObject *key, *value;  // borrowed refs
        Py_ssize_t pos = 0;
        while (PyDict_Next(mods.get(), &pos, &key, &value)) out.push_back(makeConst(key));
        return out;
      }
      PyErr_Clear();
      break;
    }
    default:
      break;
  }
  ctx.breakHere(BreakKind::kUnsupported, "iteration over " + describe(*v));
}

}  // namespace dynamo::core::interp
