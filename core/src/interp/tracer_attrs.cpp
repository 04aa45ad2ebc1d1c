// Attribute access, attribute assignment and subscripts on symbolic Values (see tracer.h).
//
// nn.Module attributes are read through the fast path of source.h (instance dict, _parameters,
// _buffers, _modules) when that gives what getattr gives. Every attribute read is guarded, those of
// torch.nn's own module classes (stride, eps, p, ...) included: programs change them between
// calls (dropout schedules) and keep their own counters on built-in modules (hooks).
#include <cstring>

#include "dynamic.h"
#include "torch_api.h"
#include "tracer.h"
#include "call_constructs.h"
#include "sym_values.h"

namespace dynamo::core::interp {

namespace {

bool isTorchNnClass(PyObject* obj) {
  std::string mod = moduleOf((PyObject*)Py_TYPE(obj));
  return mod.rfind("torch.nn.modules", 0) == 0;
}

// A tuple of ints, floats, bools, None and strings (nested tuples of those included).
bool isConstantTuple(PyObject* obj) {
  if (!PyTuple_CheckExact(obj)) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); ++i) {
    PyObject* item = PyTuple_GET_ITEM(obj, i);  // borrowed ref
    if (!(item == Py_None || PyBool_Check(item) || PyLong_CheckExact(item) || PyFloat_CheckExact(item) ||
          PyUnicode_CheckExact(item) || isConstantTuple(item)))
      return false;
  }
  return true;
}

bool isTorchishModule(PyObject* module) {
  const char* name = PyModule_GetName(module);
  if (name == nullptr) {
    PyErr_Clear();
    return false;
  }
  return std::strcmp(name, "torch") == 0 || std::strncmp(name, "torch.", 6) == 0 ||
         std::strcmp(name, "math") == 0 || std::strcmp(name, "operator") == 0 ||
         std::strcmp(name, "builtins") == 0;
}

ValueRef methodOf(const ValueRef& self, PyObject* function) {
  auto m = std::make_shared<Value>();
  m->kind = ValueKind::kMethod;
  m->self = self;
  m->obj = PyObjectRef::borrow(function);
  return m;
}

ValueRef containerMethod(const ValueRef& self, const std::string& name) {
  auto m = std::make_shared<Value>();
  m->kind = ValueKind::kMethod;
  m->self = self;
  m->name = name;
  return m;
}

// Attributes (not methods: is_floating_point() and is_complex() are calls, see
// tensor_queries.def) that the meta example has exactly.
const char* kTensorConstAttrs[] = {"dtype", "ndim", "requires_grad", "is_sparse", "layout",
                                   "is_quantized", "is_nested", "is_mkldnn"};

ValueRef tensorAttr(Tracer& tr, const ValueRef& v, const std::string& name) {
  CompileContext& ctx = tr.ctx();
  PyObject* ex = v->obj.get();  // borrowed: the meta example
  if (name == "shape") {  // a torch.Size, as in eager (isinstance, .numel(), returned as is)
    if (ValueRef s = symbolicShape(ctx, v)) return s;  // its dynamic sizes symbolic ints
    specializeSizes(ctx, v, "x.shape read as Python ints");
    PyObjectRef shape = PyObjectRef::steal(checkPy(PyObject_GetAttrString(ex, "shape")));
    return makeConst(shape.get());
  }
  if (name == "device") return makeObject(v->as<TensorData>().device.get());
  if (name == "is_cuda") {
    PyObjectRef type = PyObjectRef::steal(checkPy(PyObject_GetAttrString(v->as<TensorData>().device.get(), "type")));
    return makeConst(std::strcmp(PyUnicode_AsUTF8(type.get()), "cuda") == 0 ? Py_True : Py_False);
  }
  if (name == "is_cpu") {
    PyObjectRef type = PyObjectRef::steal(checkPy(PyObject_GetAttrString(v->as<TensorData>().device.get(), "type")));
    return makeConst(std::strcmp(PyUnicode_AsUTF8(type.get()), "cpu") == 0 ? Py_True : Py_False);
  }
  for (const char* c : kTensorConstAttrs) {
    if (name == c) {
      PyObjectRef r = PyObjectRef::steal(checkPy(PyObject_GetAttrString(ex, c)));
      return makeConst(r.get());
    }
  }
  if (name == "T" || name == "mT" || name == "H" || name == "mH" || name == "real" ||
      name == "imag" || name == "data") {
    PyObjectRef getattrFn = PyObjectRef::steal(checkPy(PyObject_GetAttrString(torchApi().builtinsModule, "getattr")));
    PyObjectRef n = PyObjectRef::steal(checkPy(PyUnicode_FromString(name.c_str())));
    return ctx.recordCall(getattrFn.get(), "", {v, makeConst(n.get())}, {});
  }
  if (name == "grad" || name == "grad_fn" || name == "_version" || name == "is_leaf")
    ctx.breakHere(BreakKind::kUnsupportedAttribute, "tensor attribute ." + name);
  PyObject* attr = PyObject_GetAttrString(torchApi().tensorType, name.c_str());  // new ref
  if (attr == nullptr) {
    PyErr_Clear();
    ctx.breakHere(BreakKind::kUnsupportedAttribute, "tensor attribute ." + name);
  }
  Py_DECREF(attr);
  auto m = std::make_shared<Value>();
  m->kind = ValueKind::kTensorAttr;
  m->self = v;
  m->name = name;
  return m;
}

// Attribute `name` of an object known exactly (modules, user objects, Python modules, classes).
// A class's own attribute `name` (borrowed; nullptr when absent). From 3.12 the static builtin
// types (object, dict, ...) keep their dict in the interpreter and tp_dict is NULL:
// PyType_GetDict reads it there. The class outlives the call, so its dict's item stays valid.
PyObject* typeDictItem(PyTypeObject* t, const std::string& name) {
#if PY_VERSION_HEX >= 0x030C0000
  PyObjectRef dict = PyObjectRef::steal(PyType_GetDict(t));
  return dict ? PyDict_GetItemString(dict.get(), name.c_str()) : nullptr;
#else
  return t->tp_dict ? PyDict_GetItemString(t->tp_dict, name.c_str()) : nullptr;
#endif
}

// super().name (v: a super object made while tracing, v->self the traced receiver), looked up the
// way super does it, in the MRO of __self_class__ past __thisclass__, never by getattr on the
// super object: that would run a property's getter now, while tracing, and bind descriptors to the
// object seen while tracing. A function binds to the receiver (stays unbound when the receiver is
// the class itself, in a classmethod); a property runs its Python getter on the receiver; static
// and class methods unwrap; C methods bind to the receiver; a plain class attribute is read from
// its class. Each is guarded on the class it was found in. Any other descriptor breaks the graph.
ValueRef superAttr(Tracer& tr, const ValueRef& v, const std::string& name) {
  CompileContext& ctx = tr.ctx();
  PyObject* sup = v->py();  // borrowed ref
  PyObjectRef thisclass = PyObjectRef::steal(checkPy(PyObject_GetAttrString(sup, "__thisclass__")));
  PyObjectRef selfClass = PyObjectRef::steal(checkPy(PyObject_GetAttrString(sup, "__self_class__")));
  if (!PyType_Check(selfClass.get()))
    ctx.breakHere(BreakKind::kUnsupportedAttribute, "super()." + name + " of an unbound super object");
  const bool receiverIsClass = v->self->py() == selfClass.get();  // super() in a classmethod
  PyObject* mro = ((PyTypeObject*)selfClass.get())->tp_mro;  // borrowed ref
  bool after = false;
  for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); ++i) {
    PyObject* cls = PyTuple_GET_ITEM(mro, i);  // borrowed ref
    if (!after) {
      after = cls == thisclass.get();
      continue;
    }
    PyObject* d = typeDictItem((PyTypeObject*)cls, name);  // borrowed ref
    if (d == nullptr) continue;
    const Source klass = Source::object(cls, ((PyTypeObject*)cls)->tp_name);
    if (Py_TYPE(d)->tp_descr_get == nullptr || PyType_Check(d)) return ctx.wrap(d, Source::attr(klass, name));  // super().k
    // The descriptor itself, read from the class's __dict__ (getattr would make a new bound method
    // of a classmethod every call).
    PyObjectRef key = PyObjectRef::steal(checkPy(PyUnicode_FromString(name.c_str())));
    ctx.guard(Source::item(Source::attr(klass, "__dict__"), key.get()), makeIdMatch(d));
    if (PyFunction_Check(d)) return receiverIsClass ? makeObject(d) : methodOf(v->self, d);
    const std::string tn = Py_TYPE(d)->tp_name;
    if (PyObject_TypeCheck(d, &PyProperty_Type) && !receiverIsClass) {
      PyObjectRef fget = PyObjectRef::steal(checkPy(PyObject_GetAttrString(d, "fget")));
      if (PyFunction_Check(fget.get())) return callValue(tr, makeObject(fget.get()), {v->self}, {});
    } else if (tn == "staticmethod") {
      PyObjectRef f = PyObjectRef::steal(checkPy(PyObject_GetAttrString(d, "__func__")));
      return ctx.wrap(f.get(), Source{}, false);
    } else if (tn == "classmethod") {
      PyObjectRef f = PyObjectRef::steal(checkPy(PyObject_GetAttrString(d, "__func__")));
      if (receiverIsClass) return methodOf(v->self, f.get());
      const Source& src = v->self->source;
      ValueRef klass = makeObject(selfClass.get(), src ? Source::attr(src, "__class__") : Source{});
      klass->idGuarded = static_cast<bool>(src);
      return methodOf(klass, f.get());
    } else if (!receiverIsClass && (PyObject_TypeCheck(d, &PyMethodDescr_Type) ||
                                    PyObject_TypeCheck(d, &PyWrapperDescr_Type))) {
      return methodOf(v->self, d);  // object.__setattr__, dict.update, ...
    }
    ctx.breakHere(BreakKind::kUnsupportedAttribute, "super()." + name + " is a " + tn + " descriptor");
  }
  ctx.breakHere(BreakKind::kUnsupportedAttribute, "super()." + name + " could not be resolved");
}

ValueRef objectAttr(Tracer& tr, const ValueRef& v, const std::string& name) {
  CompileContext& ctx = tr.ctx();
  PyObject* obj = v->py();
  if (v->name == "__super__") return superAttr(tr, v, name);
  auto overlay = ctx.attrOverlay.find({obj, name});
  if (overlay != ctx.attrOverlay.end()) return overlay->second;

  if (PyModule_Check(obj)) {
    PyObjectRef r = PyObjectRef::steal(PyObject_GetAttrString(obj, name.c_str()));
    if (!r) ctx.breakHere(BreakKind::kUnsupportedAttribute, "module attribute ." + name + " does not exist");
    // torch's classes and submodules are taken as fixed; its plain values (flags such as
    // torch.backends.cudnn.benchmark) and its functions (patched by libraries: F.softplus = ...)
    // can be changed by the program, so they are guarded.
    bool guarded = !isTorchishModule(obj) || isConstantObject(r.get()) || PyFunction_Check(r.get()) ||
                   PyCFunction_Check(r.get());
    return ctx.wrap(r.get(), v->source ? Source::attr(v->source, name) : Source{}, guarded);
  }

  if (isModule(obj)) {
    ModuleAttrPlan plan = planModuleAttr(obj, name);
    if (plan.safe) {
      PyObjectRef r = PyObjectRef::steal(checkPy(PyObject_GetAttrString(obj, name.c_str())));
      Source s = v->source ? Source::moduleAttr(v->source, name, plan.foundIn) : Source{};
      // Every attribute is guarded, torch.nn's own classes included: programs change their
      // configuration between calls (Dropout.p schedules, LeakyReLU.negative_slope) and keep
      // their own state on them (a hook's `mod.calls += 1`). A constant tuple configuring one of
      // torch.nn's classes (Conv2d.stride, .padding) is one EQUALS_MATCH, not a guard per item:
      // its items are never made symbolic.
      if (s && isTorchNnClass(obj) && isConstantTuple(r.get())) {
        ctx.guard(s, makeEqualsMatch(r.get()));
        return makeConst(r.get());
      }
      return ctx.wrap(r.get(), s, true);
    }
  }

  // Class attributes: methods, properties, constants.
  PyObject* type = (PyObject*)Py_TYPE(obj);  // borrowed ref
  PyObjectRef nameStr = PyObjectRef::steal(checkPy(PyUnicode_FromString(name.c_str())));
  PyObject* classAttr = PyType_Check(obj) ? nullptr : _PyType_Lookup((PyTypeObject*)type, nameStr.get());  // borrowed
  if (classAttr != nullptr) {
    if (PyFunction_Check(classAttr)) {
      // A plain method, unless the instance dict shadows it. Reached as type(obj).name, so its
      // defaults and closure are guarded when it is inlined.
      PyObject* dict = PyObject_GenericGetDict(obj, nullptr);  // new ref
      bool shadowed = dict && PyDict_GetItem(dict, nameStr.get()) != nullptr;
      Py_XDECREF(dict);
      PyErr_Clear();
      if (!shadowed) {
        ValueRef m = methodOf(v, classAttr);
        if (v->source) {
          // Replacing the method on the class (K.go = ...) or on the instance (k.go = ...) must
          // recompile: guard the function found on the class and the instance dict's lack of it.
          // The class is fixed by the object's own type guard, so the function is guarded on the
          // class object itself: one guard per class, however many instances call it.
          Source fnSource = Source::attr(Source::object(type, std::string(Py_TYPE(obj)->tp_name)), name);
          ctx.guard(fnSource, makeIdMatch(classAttr));
          ctx.guard(v->source, makeNoInstanceAttr(name));
          if (PyFunction_GET_DEFAULTS(classAttr) != nullptr) m->source = fnSource;
        }
        return m;
      }
    }
    if (PyObject_TypeCheck(classAttr, &PyProperty_Type)) {
      if (v->source)  // P.s = property(...) later recompiles
        ctx.guard(Source::attr(Source::object(type, std::string(Py_TYPE(obj)->tp_name)), name), makeIdMatch(classAttr));
      PyObjectRef fget = PyObjectRef::steal(checkPy(PyObject_GetAttrString(classAttr, "fget")));
      if (PyFunction_Check(fget.get())) return callValue(tr, makeObject(fget.get()), {v}, {});
      ctx.breakHere(BreakKind::kUnsupportedAttribute, "property ." + name + " implemented in C");
    }
    std::string tn = Py_TYPE(classAttr)->tp_name;
    if (tn == "staticmethod") {
      PyObjectRef f = PyObjectRef::steal(checkPy(PyObject_GetAttrString(classAttr, "__func__")));
      return ctx.wrap(f.get(), Source{}, false);
    }
    if (tn == "classmethod") {
      PyObjectRef f = PyObjectRef::steal(checkPy(PyObject_GetAttrString(classAttr, "__func__")));
      // cls is the object's class, reached as obj.__class__ so that cls.k is guarded.
      ValueRef cls = makeObject(type, v->source ? Source::attr(v->source, "__class__") : Source{});
      cls->idGuarded = static_cast<bool>(v->source);
      return methodOf(cls, f.get());
    }
  }
  PyObjectRef r = PyObjectRef::steal(PyObject_GetAttrString(obj, name.c_str()));
  if (!r) {
    PyErr_Clear();
    ctx.breakHere(BreakKind::kUnsupportedAttribute,
                  std::string(Py_TYPE(obj)->tp_name) + " has no attribute ." + name);
  }
  // Fn.apply of a torch.autograd.Function (torch 2.x: a classmethod) stays the bound method, so
  // that its call is the one graph node of call_constructs.cpp rather than an inlined apply.
  if (PyMethod_Check(r.get()) && PyMethod_GET_SELF(r.get()) == obj && autogradFunctionOf(r.get()) == nullptr) {
    // A bound method of this object (through __getattr__ or a descriptor): trace it with self.
    return methodOf(v, PyMethod_GET_FUNCTION(r.get()));
  }
  // Anything else, bound methods of other objects stored as attributes included, is the object
  // itself: a call binds its own __self__.
  return ctx.wrap(r.get(), v->source ? Source::attr(v->source, name) : Source{}, !PyType_Check(obj) || true);
}

}  // namespace

ValueRef getAttr(Tracer& tr, const ValueRef& v, const std::string& name) {
  CompileContext& ctx = tr.ctx();
  switch (v->kind) {
    case ValueKind::kTensor:
      return tensorAttr(tr, v, name);
    case ValueKind::kObject:
      if (isTraceSet(*v)) return containerMethod(v, name);  // call_constructs.h
      if (!v->source && v->name == kMadeInTrace && (name == "__dict__" || name == "__getattribute__"))
        ctx.breakHere(BreakKind::kUnsupportedAttribute, "." + name + " of an object made in the function (its attributes live in the trace)");
      return objectAttr(tr, v, name);
    case ValueKind::kConst: {
      PyObjectRef r = PyObjectRef::steal(PyObject_GetAttrString(v->py(), name.c_str()));
      if (!r) {
        PyErr_Clear();
        ctx.breakHere(BreakKind::kUnsupportedAttribute, describe(*v) + " has no attribute ." + name);
      }
      if (isConstantObject(r.get())) return makeConst(r.get());
      return makeObject(r.get());
    }
    case ValueKind::kTuple:
      if (v->obj) {  // namedtuple field; structseq (torch.return_types.max) fields by __match_args__
        PyObjectRef fields = PyObjectRef::steal(PyObject_GetAttrString(v->obj.get(), "_fields"));
        if (!fields) {
          PyErr_Clear();
          fields = PyObjectRef::steal(PyObject_GetAttrString(v->obj.get(), "__match_args__"));
        }
        if (fields && PyTuple_Check(fields.get())) {
          for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields.get()); ++i)
            if (name == PyUnicode_AsUTF8(PyTuple_GET_ITEM(fields.get(), i)) &&
                i < static_cast<Py_ssize_t>(v->items.size()))
              return v->items[i];
        }
        PyErr_Clear();
      }
      return containerMethod(v, name);
    case ValueKind::kList:
    case ValueKind::kDict:
      return containerMethod(v, name);
    case ValueKind::kGradMode:
      break;
    default:
      break;
  }
  ctx.breakHere(BreakKind::kUnsupportedAttribute, "attribute ." + name + " of " + describe(*v));
}

void setAttr(CompileContext& ctx, const ValueRef& v, const std::string& name, ValueRef value) {
  if (v->kind != ValueKind::kObject || PyModule_Check(v->py()) || PyType_Check(v->py()))
    ctx.breakHere(BreakKind::kUnsupported, "assignment to attribute ." + name + " of " + describe(*v));
  // A property setter, a slot or a custom __setattr__ decides what is stored: reading the
  // attribute back would not give `value`, so such assignments run as Python.
  PyTypeObject* type = Py_TYPE(v->py());
  PyObjectRef nameStr = PyObjectRef::steal(checkPy(PyUnicode_FromString(name.c_str())));
  PyObject* descr = _PyType_Lookup(type, nameStr.get());  // borrowed ref
  if (descr != nullptr && Py_TYPE(descr)->tp_descr_set != nullptr)
    ctx.breakHere(BreakKind::kUnsupported, "assignment through the descriptor " + std::string(type->tp_name) + "." + name);
  if (type->tp_setattro != PyObject_GenericSetAttr && !isModule(v->py()))
    ctx.breakHere(BreakKind::kUnsupported, std::string(type->tp_name) + " defines __setattr__");
  if (isModule(v->py())) {
    // nn.Module's own __setattr__ is modelled; a module class's override is user code.
    static PyObject* moduleSetattr = PyObject_GetAttrString(torchApi().moduleType, "__setattr__");  // new, kept
    PyObjectRef own = PyObjectRef::steal(PyObject_GetAttrString((PyObject*)type, "__setattr__"));
    PyErr_Clear();
    if (!own || own.get() != moduleSetattr)
      ctx.breakHere(BreakKind::kUnsupported, std::string(type->tp_name) + " defines __setattr__");
  }
  ctx.attrOverlay[{v->py(), name}] = value;
  // An object made in the trace exists only in it (call_constructs.h): nothing to replay on it.
  if (!v->source && v->name == kMadeInTrace) return;
  ctx.recordEffect(SideEffect::Kind::kSetAttr, v, name, -1, value);
}

// A slice (or a tuple of indices holding one) with a tensor bound: indexing needs the bound's value.
static bool sliceWithTensorBound(const ValueRef& index) {
  if (index->kind == ValueKind::kSlice) {
    for (const ValueRef& part : index->items)
      if (part && part->isTensor()) return true;
    return false;
  }
  if (index->kind == ValueKind::kTuple)
    for (const ValueRef& item : index->items)
      if (item && sliceWithTensorBound(item)) return true;
  return false;
}

ValueRef getItem(CompileContext& ctx, const ValueRef& v, const ValueRef& index) {
  if (v->isTensor()) {
    if (sliceWithTensorBound(index))
      ctx.breakHere(BreakKind::kTensorToPython, "a tensor used as a slice bound (x[a:b] with a tensor a or b) needs its value");
    return ctx.recordCall(torchApi().getitem, "", {v, index}, {});
  }
  PyObjectRef key = concrete(index);
  if ((v->kind == ValueKind::kTuple || v->kind == ValueKind::kList) && key) {
    Py_ssize_t n = static_cast<Py_ssize_t>(v->items.size());
    if (PyLong_Check(key.get())) {
      Py_ssize_t i = PyLong_AsSsize_t(key.get());
      if (i < 0) i += n;
      if (i < 0 || i >= n) ctx.breakHere(BreakKind::kException, "index out of range");
      return v->items[i];
    }
    if (PySlice_Check(key.get())) {
      Py_ssize_t start, stop, step, len;
      if (PySlice_GetIndicesEx(key.get(), n, &start, &stop, &step, &len) < 0) throw PythonError{};
      std::vector<ValueRef> items;
      for (Py_ssize_t k = 0, i = start; k < len; ++k, i += step) items.push_back(v->items[i]);
      if (v->kind == ValueKind::kList) return makeList(std::move(items));
      ValueRef t = makeTuple(std::move(items));
      if (isSymShape(v)) t->obj = v->obj;  // a slice of a torch.Size is one
      return t;
    }
  }
  if (v->kind == ValueKind::kDict && key) {
    for (size_t i = 0; i < v->keys.size(); ++i) {
      int r = PyObject_RichCompareBool(v->keys[i].get(), key.get(), Py_EQ);
      if (r < 0) throw PythonError{};
      if (r) return v->items[i];
    }
    if (ValueRef made = defaultDictMissing(ctx, v, key)) return made;  // call_constructs.h
    ctx.breakHere(BreakKind::kException, "KeyError in a dict lookup");
  }
  if (v->isConst() && key) {
    PyObjectRef r = PyObjectRef::steal(PyObject_GetItem(v->py(), key.get()));
    if (!r) ctx.breakHere(BreakKind::kException, "subscript of a constant raised");
    return makeConst(r.get());
  }
  if (v->kind == ValueKind::kObject && key) {
    PyObject* obj = v->py();
    const TorchApi& api = torchApi();
    bool seq = PyObject_IsInstance(obj, api.sequentialType) == 1 ||
               PyObject_IsInstance(obj, api.moduleListType) == 1;
    bool mdict = PyObject_IsInstance(obj, api.moduleDictType) == 1;
    PyErr_Clear();
    if (seq && PySlice_Check(key.get())) return sliceModuleContainer(ctx, v, key.get());  // call_constructs.h
    if ((seq && PyLong_Check(key.get())) || (mdict && PyUnicode_Check(key.get()))) {
      PyObjectRef r = PyObjectRef::steal(PyObject_GetItem(obj, key.get()));
      if (!r) ctx.breakHere(BreakKind::kException, "module container index out of range");
      // Items of module containers live in _modules under their str key.
      std::string k;
      if (mdict) {
        k = PyUnicode_AsUTF8(key.get());
      } else {
        PyObjectRef mods = PyObjectRef::steal(checkPy(PyObject_GetAttrString(obj, "_modules")));
        PyObject *mk, *mv;  // borrowed refs
        Py_ssize_t pos = 0;
        while (PyDict_Next(mods.get(), &pos, &mk, &mv))
          if (mv == r.get()) k = PyUnicode_AsUTF8(mk);
      }
      Source s = v->source && !k.empty() ? Source::moduleAttr(v->source, k, ModuleSlot::kModules) : Source{};
      return ctx.wrap(r.get(), s);
    }
  }
  ctx.breakHere(BreakKind::kUnsupported, "subscript of " + describe(*v));
}

}  // namespace dynamo::core::interp
