// Calls during symbolic interpretation (see tracer.h): what each kind of callable becomes.
//
//   user Python function / method / nn.Module.forward   inlined (a child Tracer)
//   torch function, torch.nn.functional, Tensor method   a graph node (meta-tensor shapes)
//   operator.* on tensors                                a graph node; on constants, folded
//   pure builtins and math on constants                  evaluated now, the result a constant
//   print, logging, .item(), unknown C functions         a graph break
#include <climits>
#include <cstring>

#include "autocast.h"
#include "inference_mode.h"
#include "call_constructs.h"
#include "dynamic.h"
#include "dynamo/core/compiler.h"
#include "sym_values.h"
#include "torch_api.h"
#include "tracer.h"

namespace dynamo::core::interp {

namespace {

using Kw = std::vector<std::pair<std::string, ValueRef>>;

[[noreturn]] void unsupportedCall(CompileContext& ctx, PyObject* fn, const std::string& why) {
  PyObjectRef r = PyObjectRef::steal(PyObject_Repr(fn));
  std::string name = r ? PyUnicode_AsUTF8(r.get()) : "?";
  PyErr_Clear();
  if (name.size() > 80) name = name.substr(0, 77) + "...";
  ctx.breakHere(BreakKind::kUnsupportedCall, "call to " + name + (why.empty() ? "" : ": " + why));
}

bool anyTensor(const ValueRef& v) {
  if (v->isTensor()) return true;
  if (v->kind == ValueKind::kTuple || v->kind == ValueKind::kList || v->kind == ValueKind::kDict ||
      v->kind == ValueKind::kSlice)
    for (const ValueRef& i : v->items)
      if (anyTensor(i)) return true;
  return false;
}

bool anyTensor(const std::vector<ValueRef>& args, const Kw& kwargs) {
  for (const ValueRef& a : args)
    if (anyTensor(a)) return true;
  for (const auto& kv : kwargs)
    if (anyTensor(kv.second)) return true;
  return false;
}

// Calls fn for real on concrete arguments; null when some argument is symbolic.
PyObjectRef callConcrete(PyObject* fn, const std::vector<ValueRef>& args, const Kw& kwargs) {
  PyObjectRef t = PyObjectRef::steal(checkPy(PyTuple_New(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    PyObjectRef c = concrete(args[i]);
    if (!c) return {};
    PyTuple_SET_ITEM(t.get(), i, c.release());
  }
  PyObjectRef kw;
  if (!kwargs.empty()) {
    kw = PyObjectRef::steal(checkPy(PyDict_New()));
    for (const auto& [k, v] : kwargs) {
      PyObjectRef c = concrete(v);
      if (!c) return {};
      PyDict_SetItemString(kw.get(), k.c_str(), c.get());
    }
  }
  return PyObjectRef::steal(PyObject_Call(fn, t.get(), kw.get()));
}

// The Value of a Python object computed while tracing (folded constants): containers become
// container Values so later code can index, extend or pass them into the graph.
ValueRef constOrObject(PyObject* o) {
  if (isConstantObject(o)) return makeConst(o);
  if (PySet_CheckExact(o)) return makeTraceSet(o);  // a new set each call, never the folded one
  if (PyList_CheckExact(o)) {
    std::vector<ValueRef> items;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(o); ++i) items.push_back(constOrObject(PyList_GET_ITEM(o, i)));
    return makeList(std::move(items));
  }
  if (PyTuple_CheckExact(o)) {
    std::vector<ValueRef> items;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i) items.push_back(constOrObject(PyTuple_GET_ITEM(o, i)));
    return makeTuple(std::move(items));
  }
  if (PyDict_CheckExact(o)) {
    auto d = std::make_shared<Value>();
    d->kind = ValueKind::kDict;
    PyObject *k, *v;  // borrowed refs
    Py_ssize_t pos = 0;
    while (PyDict_Next(o, &pos, &k, &v)) {
      if (!isConstantObject(k)) return makeObject(o);
      d->keys.push_back(PyObjectRef::borrow(k));
      d->items.push_back(constOrObject(v));
    }
    return d;
  }
  return makeObject(o);
}

ValueRef foldOrBreak(CompileContext& ctx, PyObject* fn, const std::vector<ValueRef>& args,
                     const Kw& kwargs) {
  bool allConcrete = true;
  for (const ValueRef& a : args) allConcrete = allConcrete && static_cast<bool>(concrete(a));
  for (const auto& kv : kwargs) allConcrete = allConcrete && static_cast<bool>(concrete(kv.second));
  if (!allConcrete) unsupportedCall(ctx, fn, "arguments are not all constants");
  PyObjectRef r = callConcrete(fn, args, kwargs);
  if (!r) {
    PyObjectRef msg;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    msg = PyObjectRef::steal(ev ? PyObject_Str(ev) : nullptr);
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
    PyErr_Clear();
    ctx.breakHere(BreakKind::kException, std::string("constant call raised: ") +
                                             (msg ? PyUnicode_AsUTF8(msg.get()) : "?"));
  }
  return constOrObject(r.get());
}

const char* kToPython[] = {"item", "tolist", "numpy", "__bool__", "__int__", "__float__",
                           "__index__", "__len__"};
const char* kDynamicShape[] = {"nonzero", "unique", "masked_select", "unique_consecutive",
                               "argwhere", "nonzero_static"};

// Torch functions that change process- or thread-wide state. Examples come from running ops for
// real while tracing, so these would change the state at trace time; they break instead.
bool changesGlobalTorchState(const std::string& n) {
  static const char* kPrefixes[] = {"set_", "_set_", "manual_seed", "seed", "initial_seed", "autocast_",
                                    "clear_autocast_cache", "use_deterministic_algorithms",
                                    "_jit_", "_enable_", "_disable_"};
  for (const char* p : kPrefixes)
    if (n.rfind(p, 0) == 0) return true;
  return false;
}

bool nameIn(const std::string& n, const char* const* list, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if (n == list[i]) return true;
  return false;
}

// ---- inlining ---------------------------------------------------------------------------------

ValueRef inlineCode(Tracer& tr, PyCodeObject* code, PyObject* globals,
                    const std::vector<ValueRef>& defaults, const ValueRef& kwdefaults,
                    std::vector<std::shared_ptr<CellBox>> closure, std::vector<ValueRef> args,
                    Kw kwargs, const std::string& what) {
  CompileContext& ctx = tr.ctx();
  if (code->co_flags & (CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE))
    ctx.breakHere(BreakKind::kUnsupportedCall, "call to coroutine function " + what);
  const bool generator = code->co_flags & CO_GENERATOR;
  const int argc = code->co_argcount;
  const int kwonly = code->co_kwonlyargcount;
  const bool varargs = code->co_flags & CO_VARARGS;
  const bool varkw = code->co_flags & CO_VARKEYWORDS;
  std::vector<ValueRef> locals(static_cast<size_t>(code->co_nlocalsplus));
  PyObject* names = code->co_localsplusnames;  // borrowed ref
  auto nameAt = [&](int i) { return std::string(PyUnicode_AsUTF8(PyTuple_GET_ITEM(names, i))); };

  std::vector<ValueRef> extra;
  for (size_t i = 0; i < args.size(); ++i) {
    if (static_cast<int>(i) < argc) {
      locals[i] = args[i];
    } else if (varargs) {
      extra.push_back(args[i]);
    } else {
      ctx.breakHere(BreakKind::kException, what + "() takes " + std::to_string(argc) +
                                               " positional arguments but more were given");
    }
  }
  ValueRef extraKw = std::make_shared<Value>();
  extraKw->kind = ValueKind::kDict;
  for (auto& [k, v] : kwargs) {
    int slot = -1;
    for (int i = code->co_posonlyargcount; i < argc + kwonly; ++i)
      if (nameAt(i) == k) slot = i;
    if (slot >= 0) {
      if (locals[slot]) ctx.breakHere(BreakKind::kException, what + "() got multiple values for '" + k + "'");
      locals[slot] = v;
    } else if (varkw) {
      PyObjectRef key = PyObjectRef::steal(checkPy(PyUnicode_FromString(k.c_str())));
      extraKw->keys.push_back(key);
      extraKw->items.push_back(v);
    } else {
      ctx.breakHere(BreakKind::kException, what + "() got an unexpected keyword argument '" + k + "'");
    }
  }
  // Defaults fill the last positional parameters.
  int ndef = static_cast<int>(defaults.size());
  for (int i = 0; i < argc; ++i) {
    if (locals[i]) continue;
    int d = i - (argc - ndef);
    if (d >= 0 && d < ndef) {
      locals[i] = defaults[d];
    } else {
      ctx.breakHere(BreakKind::kException, what + "() missing argument '" + nameAt(i) + "'");
    }
  }
  for (int i = argc; i < argc + kwonly; ++i) {
    if (locals[i]) continue;
    bool found = false;
    if (kwdefaults && kwdefaults->kind == ValueKind::kDict) {
      for (size_t k = 0; k < kwdefaults->keys.size(); ++k)
        if (nameAt(i) == PyUnicode_AsUTF8(kwdefaults->keys[k].get())) {
          locals[i] = kwdefaults->items[k];
          found = true;
        }
    }
    if (!found) ctx.breakHere(BreakKind::kException, what + "() missing keyword argument '" + nameAt(i) + "'");
  }
  int next = argc + kwonly;
  if (varargs) locals[next++] = makeTuple(std::move(extra));
  if (varkw) locals[next++] = extraKw;

  // A generator runs lazily, to each yield when its consumer asks for the next value, so its
  // code and the consumer's interleave as in Python (call_constructs.h).
  if (generator)
    return makeGeneratorIterator(std::make_unique<Tracer>(ctx, tr, code, globals, std::move(locals), std::move(closure)));
  Tracer child(ctx, tr, code, globals, std::move(locals), std::move(closure));
  try {
    return child.run();
  } catch (GraphBreak& b) {
    b.inlined = true;
    throw;
  }
}

ValueRef inlineFunction(Tracer& tr, PyObject* fn, const Source& reachedAs, std::vector<ValueRef> args,
                        Kw kwargs) {
  CompileContext& ctx = tr.ctx();
  PyCodeObject* code = (PyCodeObject*)PyFunction_GET_CODE(fn);  // borrowed ref
  // A function reached without a source (a method found on its class, a property's getter) is
  // held by the source itself: its defaults and closure cells are read (and guarded) through it
  // at run time. Without one, a list in a closure cell would be taken as a constant and its traced
  // contents written back over the real list every call.
  const Source fnSource = reachedAs ? reachedAs : Source::object(fn, PyUnicode_AsUTF8(code->co_qualname));
  if (!ctx.options.noInlinePrefixes.empty() && PyUnicode_Check(code->co_filename)) {
    const std::string file = PyUnicode_AsUTF8(code->co_filename);
    for (const std::string& prefix : ctx.options.noInlinePrefixes)
      if (file.compare(0, prefix.size(), prefix) == 0)
        unsupportedCall(ctx, fn, "a library on Dynamo's skip list (it runs as Python; see docs/capture.md)");
  }
  PyObject* globals = PyFunction_GET_GLOBALS(fn);              // borrowed ref
  std::vector<ValueRef> defaults;
  PyObject* defs = PyFunction_GET_DEFAULTS(fn);  // borrowed ref
  if (defs != nullptr) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(defs); ++i) {
      Source s;
      if (fnSource) {
        PyObjectRef idx = PyObjectRef::steal(PyLong_FromSsize_t(i));
        s = Source::item(Source::attr(fnSource, "__defaults__"), idx.get());
      }
      defaults.push_back(ctx.wrap(PyTuple_GET_ITEM(defs, i), s));
    }
  }
  ValueRef kwdefaults;
  PyObject* kwd = PyFunction_GET_KW_DEFAULTS(fn);  // borrowed ref
  if (kwd != nullptr && PyDict_Check(kwd))
    kwdefaults = fnSource ? ctx.wrap(kwd, Source::attr(fnSource, "__kwdefaults__")) : ctx.wrap(kwd, Source{}, false);
  std::vector<std::shared_ptr<CellBox>> closure;
  PyObject* cl = PyFunction_GET_CLOSURE(fn);  // borrowed ref
  if (cl != nullptr) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(cl); ++i) {
      PyObject* realCell = PyTuple_GET_ITEM(cl, i);  // borrowed ref
      auto known = ctx.cellBoxes.find(realCell);
      if (known != ctx.cellBoxes.end()) {
        closure.push_back(known->second);
        continue;
      }
      auto box = std::make_shared<CellBox>();
      box->external = true;
      ctx.cellBoxes[realCell] = box;
      PyObject* contents = PyCell_GET(realCell);  // borrowed ref
      if (contents != nullptr) {
        Source s;
        if (fnSource) {
          PyObjectRef idx = PyObjectRef::steal(PyLong_FromSsize_t(i));
          s = Source::attr(Source::item(Source::attr(fnSource, "__closure__"), idx.get()), "cell_contents");
        }
        box->contents = ctx.wrap(contents, s);
      }
      closure.push_back(box);
    }
  }
  std::string what = PyUnicode_AsUTF8(code->co_qualname);
  return inlineCode(tr, code, globals, defaults, kwdefaults, std::move(closure), std::move(args),
                    std::move(kwargs), what);
}

// ---- modules -----------------------------------------------------------------------------------

bool hasHooks(PyObject* module) {
  // (_backward_pre_hooks: torch 2.x's register_full_backward_pre_hook.)
  static const char* kHookDicts[] = {"_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"};
  for (const char* h : kHookDicts) {
    PyObjectRef d = PyObjectRef::steal(PyObject_GetAttrString(module, h));
    PyErr_Clear();
    if (d && PyDict_Check(d.get()) && PyDict_Size(d.get()) > 0) return true;
  }
  static PyObject* globalHooks[4] = {};
  static bool looked = false;
  if (!looked) {
    looked = true;
    PyObjectRef mod = PyObjectRef::steal(PyImport_ImportModule("torch.nn.modules.module"));
    const char* names[4] = {"_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                            "_global_backward_pre_hooks"};
    for (int i = 0; mod && i < 4; ++i) {
      globalHooks[i] = PyObject_GetAttrString(mod.get(), names[i]);  // kept (null where absent)
      PyErr_Clear();
    }
    PyErr_Clear();
  }
  for (PyObject* g : globalHooks)
    if (g && PyDict_Check(g) && PyDict_Size(g) > 0) return true;
  return false;
}

ValueRef callModule(Tracer& tr, const ValueRef& mod, std::vector<ValueRef> args, Kw kwargs) {
  CompileContext& ctx = tr.ctx();
  PyObject* m = mod->py();
  // A module class with its own __call__ runs that (it usually calls super().__call__ itself).
  static PyObject* moduleCall = PyObject_GetAttrString(torchApi().moduleType, "__call__");  // new ref, kept
  PyObjectRef call = PyObjectRef::steal(PyObject_GetAttrString((PyObject*)Py_TYPE(m), "__call__"));
  PyErr_Clear();
  if (call && moduleCall && call.get() != moduleCall) {
    if (!PyFunction_Check(call.get())) unsupportedCall(ctx, call.get(), "a module's own __call__ implemented in C");
    Source callSource = mod->source ? Source::attr(Source::object((PyObject*)Py_TYPE(m), Py_TYPE(m)->tp_name), "__call__") : Source{};
    if (mod->source) ctx.guard(callSource, makeIdMatch(call.get()));
    args.insert(args.begin(), mod);
    return inlineFunction(tr, call.get(), callSource, std::move(args), std::move(kwargs));
  }
  if (hasHooks(m)) return callModuleWithHooks(tr, mod, std::move(args), std::move(kwargs));
  if (mod->source) {
    // Hooks registered later must not be skipped by the compiled code.
    // Hooks registered later, or an instance forward set later, must not be skipped.
    ctx.guard(mod->source, makeModuleCall());
    static PyObject* moduleGlobals = [] {
      PyObject* m = PyImport_ImportModule("torch.nn.modules.module");  // new ref, kept
      PyObject* d = m ? PyModule_GetDict(m) : nullptr;                 // borrowed from the module
      PyErr_Clear();
      return d;
    }();
    if (moduleGlobals != nullptr) {
      Source g = moduleGlobalsSource(moduleGlobals);
      for (const char* h : {"_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                            "_global_backward_pre_hooks"}) {
        PyObjectRef key = PyObjectRef::steal(checkPy(PyUnicode_FromString(h)));
        if (PyDict_GetItem(moduleGlobals, key.get())) ctx.guard(Source::item(g, key.get()), makeLengthCheck(0));
      }
    }
  }
  // module(...) calls self.forward: an instance attribute (m.forward = ..., as hooks libraries
  // set) wins over the class's method.
  PyObject** dictSlot = _PyObject_GetDictPtr(m);  // borrowed
  PyObject* own = dictSlot && *dictSlot ? PyDict_GetItemString(*dictSlot, "forward") : nullptr;  // borrowed
  PyErr_Clear();
  if (own != nullptr) {
    ValueRef f = ctx.wrap(own, mod->source ? Source::attr(mod->source, "forward") : Source{});
    return callValue(tr, f, std::move(args), std::move(kwargs));
  }
  PyObjectRef forward = PyObjectRef::steal(checkPy(PyObject_GetAttrString((PyObject*)Py_TYPE(m), "forward")));
  if (!PyFunction_Check(forward.get())) unsupportedCall(ctx, forward.get(), "forward is not a Python function");
  args.insert(args.begin(), mod);
  // M.forward = ... or m.forward = ... later recompiles: the class's function is guarded on the
  // class object (fixed by the module's type guard), the instance dict for not shadowing it.
  Source fwdSource = mod->source ? Source::attr(Source::object((PyObject*)Py_TYPE(m), Py_TYPE(m)->tp_name), "forward") : Source{};
  if (mod->source) ctx.guard(fwdSource, makeIdMatch(forward.get()));  // instance forward: MODULE_CALL
  return inlineFunction(tr, forward.get(), fwdSource, std::move(args), std::move(kwargs));
}

// ---- containers --------------------------------------------------------------------------------

ValueRef containerCall(Tracer& tr, const ValueRef& self, const std::string& name,
                       std::vector<ValueRef> args, Kw kwargs) {
  CompileContext& ctx = tr.ctx();
  if (ValueRef r = callSetMethod(tr, self, name, args, kwargs)) return r;
  auto mutated = [&] { ctx.recordContents(self); };
  if (self->kind == ValueKind::kList) {
    if (name == "append" && args.size() == 1) {
      self->items.push_back(args[0]);
      mutated();
      return makeConst(Py_None);
    }
    if (name == "extend" && args.size() == 1) {
      for (ValueRef& v : iterateValue(ctx, args[0])) self->items.push_back(v);
      mutated();
      return makeConst(Py_None);
    }
    if (name == "insert" && args.size() == 2 && args[0]->isConst()) {
      Py_ssize_t i = PyLong_AsSsize_t(args[0]->py());
      Py_ssize_t n = static_cast<Py_ssize_t>(self->items.size());
      if (i < 0) i = std::max<Py_ssize_t>(0, i + n);
      i = std::min(i, n);
      self->items.insert(self->items.begin() + i, args[1]);
      mutated();
      return makeConst(Py_None);
    }
    if (name == "pop" && self->items.size() > 0 && (args.empty() || (args[0]->isConst() && PyLong_Check(args[0]->py())))) {
      Py_ssize_t i = static_cast<Py_ssize_t>(self->items.size()) - 1;
      if (!args.empty()) {
        i = PyLong_AsSsize_t(args[0]->py());
        if (i < 0) i += static_cast<Py_ssize_t>(self->items.size());
      }
      if (i < 0 || i >= static_cast<Py_ssize_t>(self->items.size()))
        ctx.breakHere(BreakKind::kException, "pop index out of range");
      ValueRef v = self->items.at(static_cast<size_t>(i));
      self->items.erase(self->items.begin() + i);
      mutated();
      return v;
    }
    if (name == "copy") return makeList(self->items);
  }
  if (self->kind == ValueKind::kDict) {
    if (name == "update" && args.size() <= 1) {
      std::vector<std::pair<PyObjectRef, ValueRef>> updates;
      if (!args.empty()) {
        if (args[0]->kind != ValueKind::kDict)
          ctx.breakHere(BreakKind::kUnsupported, "dict.update() from " + describe(*args[0]));
        for (size_t i = 0; i < args[0]->keys.size(); ++i) updates.emplace_back(args[0]->keys[i], args[0]->items[i]);
      }
      for (auto& [k, v] : kwargs)
        updates.emplace_back(PyObjectRef::steal(checkPy(PyUnicode_FromString(k.c_str()))), v);
      for (auto& [key, v] : updates) {
        bool replaced = false;
        for (size_t i = 0; i < self->keys.size(); ++i)
          if (PyObject_RichCompareBool(self->keys[i].get(), key.get(), Py_EQ) == 1) {
            self->items[i] = v;
            replaced = true;
          }
        if (!replaced) {
          self->keys.push_back(key);
          self->items.push_back(v);
        }
      }
      mutated();
      return makeConst(Py_None);
    }
    // Views are snapshots here: good for iteration and len, not for set operations or for
    // outliving the dict's changes (such uses break, see doBinary and the planner).
    auto view = [](std::vector<ValueRef> items) {
      ValueRef v = makeList(std::move(items));
      v->name = "dict_view";
      return v;
    };
    if (name == "items") {
      std::vector<ValueRef> pairs;
      for (size_t i = 0; i < self->keys.size(); ++i)
        pairs.push_back(makeTuple({makeConst(self->keys[i].get()), self->items[i]}));
      return view(std::move(pairs));
    }
    if (name == "keys") {
      std::vector<ValueRef> keys;
      for (const PyObjectRef& k : self->keys) keys.push_back(makeConst(k.get()));
      return view(std::move(keys));
    }
    if (name == "values") return view(self->items);
    if (name == "get" && !args.empty()) {
      PyObjectRef key = concrete(args[0]);
      if (!key) ctx.breakHere(BreakKind::kUnsupported, "dict.get() with a key that is not a constant");
      for (size_t i = 0; i < self->keys.size(); ++i)
        if (PyObject_RichCompareBool(self->keys[i].get(), key.get(), Py_EQ) == 1) return self->items[i];
      return args.size() > 1 ? args[1] : makeConst(Py_None);
    }
    if ((name == "setdefault" || name == "pop") && !args.empty() && args.size() <= 2 && kwargs.empty()) {
      PyObjectRef key = concrete(args[0]);
      if (!key) ctx.breakHere(BreakKind::kUnsupported, "dict." + name + "() with a key that is not a constant");
      int i = dictIndex(self, key);
      if (name == "setdefault") {
        if (i >= 0) return self->items[i];
        ValueRef v = args.size() > 1 ? args[1] : makeConst(Py_None);
        setDictItem(self, key, v);
        mutated();
        return v;
      }
      if (i < 0) {
        if (args.size() > 1) return args[1];
        ctx.breakHere(BreakKind::kException, "KeyError in dict.pop()");
      }
      ValueRef v = self->items[i];
      self->keys.erase(self->keys.begin() + i);
      self->items.erase(self->items.begin() + i);
      mutated();
      return v;
    }
    if (name == "copy") {
      // dict.copy() of a subclass is a plain dict; OrderedDict.copy() an OrderedDict.
      if (self->obj && self->obj.get() != torchApi().orderedDictType)
        ctx.breakHere(BreakKind::kUnsupported, "copy() of a " + std::string(((PyTypeObject*)self->obj.get())->tp_name));
      auto d = std::make_shared<Value>(*self);
      d->source = Source{};
      d->real = PyObjectRef{};  // a new dict, not the one it was copied from
      d->mutated = false;
      return d;
    }
  }
  if (name == "numel" && args.empty() && kwargs.empty())
    if (ValueRef n = symShapeNumel(ctx, self)) return n;  // torch.Size.numel(): the product
  if (self->kind == ValueKind::kTuple && (name == "index" || name == "count")) {
    PyObjectRef c = concrete(self);
    if (c) {
      PyObjectRef m = PyObjectRef::steal(checkPy(PyObject_GetAttrString(c.get(), name.c_str())));
      return foldOrBreak(ctx, m.get(), args, kwargs);
    }
  }
  ctx.breakHere(BreakKind::kUnsupported, "method ." + name + "() of " + describe(*self));
}

// ---- builtins ----------------------------------------------------------------------------------

// dict(...) / OrderedDict(...): from nothing, a mapping, or an iterable of pairs, then keywords.
ValueRef makeDict(CompileContext& ctx, PyObject* cls, const std::vector<ValueRef>& args, const Kw& kwargs) {
  auto d = std::make_shared<Value>();
  d->kind = ValueKind::kDict;
  if (cls != nullptr) d->obj = PyObjectRef::borrow(cls);
  if (!args.empty()) {
    const ValueRef& src = args[0];
    if (src->kind == ValueKind::kDict) {
      for (size_t i = 0; i < src->keys.size(); ++i) setDictItem(d, src->keys[i], src->items[i]);
    } else {
      for (const ValueRef& pair : iterateValue(ctx, src)) {
        std::vector<ValueRef> kv = iterateValue(ctx, pair);
        if (kv.size() != 2) ctx.breakHere(BreakKind::kException, "dict() from a sequence whose items are not pairs");
        PyObjectRef key = concrete(kv[0]);
        if (!key) ctx.breakHere(BreakKind::kUnsupported, "dict with a non-constant key");
        setDictItem(d, key, kv[1]);
      }
    }
  }
  for (const auto& [k, v] : kwargs)
    setDictItem(d, PyObjectRef::steal(checkPy(PyUnicode_FromString(k.c_str()))), v);
  return d;
}

ValueRef typeOf(CompileContext& ctx, const ValueRef& v) {
  switch (v->kind) {
    case ValueKind::kTensor: {
      const PyObjectRef& exact = v->as<TensorData>().exactType;
      return makeObject(exact ? exact.get() : torchApi().tensorType);
    }
    case ValueKind::kTuple: return makeObject(v->obj ? v->obj.get() : (PyObject*)&PyTuple_Type);
    case ValueKind::kList: return makeObject((PyObject*)&PyList_Type);
    case ValueKind::kDict: return makeObject(v->obj ? v->obj.get() : (PyObject*)&PyDict_Type);
    case ValueKind::kConst: return makeObject((PyObject*)Py_TYPE(v->py()));
    case ValueKind::kObject: {
      // The class of an object from the frame: fixed by the object's guards, and reached as
      // obj.__class__ so that attributes read from it are guarded (type(self).expansion).
      PyObject* cls = (PyObject*)Py_TYPE(v->py());
      if (!v->source) return makeObject(cls);
      ValueRef c = makeObject(cls, Source::attr(v->source, "__class__"));
      c->idGuarded = true;
      return c;
    }
    default: ctx.breakHere(BreakKind::kUnsupported, "type() of " + describe(*v));
  }
}

// getattr, hasattr, setattr with a constant name; null when not one of those.
ValueRef attributeBuiltin(Tracer& tr, const std::string& name, std::vector<ValueRef>& args) {
  CompileContext& ctx = tr.ctx();
  if ((name == "getattr" || name == "hasattr" || name == "setattr") && args.size() >= 2 &&
      !(args[1]->isConst() && PyUnicode_Check(args[1]->py())))
    ctx.breakHere(BreakKind::kException, name + "(): attribute name must be a string");
  if (name == "getattr" && (args.size() == 2 || args.size() == 3) && args[1]->isConst()) {
    std::string attr = PyUnicode_AsUTF8(args[1]->py());
    if (args.size() == 3 && (args[0]->kind == ValueKind::kObject)) {
      // An attribute written earlier in the trace exists, whatever the real object holds now.
      int has = ctx.attrOverlay.count({args[0]->py(), attr}) ? 1 : PyObject_HasAttrString(args[0]->py(), attr.c_str());
      if (args[0]->source) ctx.guard(args[0]->source, makeHasAttr(attr, has != 0));
      if (!has) return args[2];
    }
    return getAttr(tr, args[0], attr);
  }
  if (name == "hasattr" && args.size() == 2 && args[1]->isConst()) {
    std::string attr = PyUnicode_AsUTF8(args[1]->py());
    PyObject* probe = nullptr;
    if (args[0]->kind == ValueKind::kObject || args[0]->isConst()) probe = args[0]->py();
    if (args[0]->isTensor()) probe = args[0]->obj.get();
    if (probe == nullptr) ctx.breakHere(BreakKind::kUnsupported, "hasattr on " + describe(*args[0]));
    if (ctx.attrOverlay.count({probe, attr})) return makeConst(Py_True);  // written earlier in the trace
    if (args[0]->source) ctx.guard(args[0]->source, makeHasAttr(attr, PyObject_HasAttrString(probe, attr.c_str())));
    return makeConst(PyObject_HasAttrString(probe, attr.c_str()) ? Py_True : Py_False);
  }
  if (name == "setattr" && args.size() == 3 && args[1]->isConst()) {
    setAttr(ctx, args[0], PyUnicode_AsUTF8(args[1]->py()), args[2]);
    return makeConst(Py_None);
  }
  return nullptr;
}

// enumerate, zip, reversed, list, tuple, dict, iter, next over what the trace knows; null when
// not one of those (or not a form handled here).
ValueRef iterationBuiltin(Tracer& tr, const std::string& name, std::vector<ValueRef>& args, Kw& kwargs) {
  CompileContext& ctx = tr.ctx();
  if (name == "enumerate" && !args.empty()) {
    ValueRef startV = args.size() > 1 ? args[1] : nullptr;
    for (auto& [k, v] : kwargs)
      if (k == "start") startV = v;
    if (startV && (!startV->isConst() || !PyLong_Check(startV->py())))
      ctx.breakHere(BreakKind::kUnsupported, "enumerate() with a non-constant start");
    long start = startV ? PyLong_AsLong(startV->py()) : 0;
    std::vector<ValueRef> out;
    long i = start;
    for (ValueRef& item : iterateValue(ctx, args[0])) {
      PyObjectRef idx = PyObjectRef::steal(PyLong_FromLong(i++));
      out.push_back(makeTuple({makeConst(idx.get()), item}));
    }
    return makeIterator(nullptr, std::move(out));  // an iterator, as in Python (next() works)
  }
  if (name == "zip") {
    std::vector<std::vector<ValueRef>> seqs;
    size_t n = SIZE_MAX;
    for (ValueRef& a : args) {
      seqs.push_back(iterateValue(ctx, a));
      n = std::min(n, seqs.back().size());
    }
    if (seqs.empty()) n = 0;
    std::vector<ValueRef> out;
    for (size_t i = 0; i < n; ++i) {
      std::vector<ValueRef> t;
      for (auto& s : seqs) t.push_back(s[i]);
      out.push_back(makeTuple(std::move(t)));
    }
    return makeIterator(nullptr, std::move(out));
  }
  if (name == "reversed" && args.size() == 1) {
    std::vector<ValueRef> items = iterateValue(ctx, args[0]);
    return makeIterator(nullptr, std::vector<ValueRef>(items.rbegin(), items.rend()));
  }
  if ((name == "list" || name == "tuple") && args.size() <= 1) {
    std::vector<ValueRef> items = args.empty() ? std::vector<ValueRef>{} : iterateValue(ctx, args[0]);
    return name == "list" ? makeList(std::move(items)) : makeTuple(std::move(items));
  }
  if (name == "dict" && args.size() <= 1) return makeDict(ctx, nullptr, args, kwargs);
  if (name == "iter" && args.size() == 1) {
    if (args[0]->kind == ValueKind::kIterator) return args[0];  // iter(it) is it
    return makeIterator(args[0], args[0]->kind == ValueKind::kList ? std::vector<ValueRef>{} : iterateValue(ctx, args[0]));
  }
  if (name == "next" && !args.empty() && args[0]->kind == ValueKind::kIterator) {
    ValueRef item;
    if (nextItem(args[0], &item)) return item;
    if (args.size() > 1) return args[1];
    ctx.breakHere(BreakKind::kException, "next() on an exhausted iterator");
  }
  return nullptr;
}

// Returns null when `fn` is not a builtin handled here.
ValueRef callBuiltin(Tracer& tr, PyObject* fn, std::vector<ValueRef>& args, Kw& kwargs) {
  CompileContext& ctx = tr.ctx();
  std::string name = callableName(fn);
  PyObject* b = torchApi().builtinsModule;  // borrowed ref
  PyObjectRef same = PyObjectRef::steal(PyObject_GetAttrString(b, name.c_str()));
  PyErr_Clear();
  if (!same || same.get() != fn) return nullptr;

  if (name == "print") ctx.breakHere(BreakKind::kPrint, "call to print()");
  static const char* kFrameIntrospection[] = {"locals", "globals", "vars", "dir", "eval", "exec",
                                              "compile", "breakpoint", "__import__", "input", "open"};
  for (const char* n : kFrameIntrospection)
    if (name == n) ctx.breakWholeFrame("call to " + name + "(), which needs the real frame or I/O");
  if (name == "len" && args.size() == 1) {
    const ValueRef& v = args[0];
    if (v->kind == ValueKind::kTuple || v->kind == ValueKind::kList || v->kind == ValueKind::kDict) {
      PyObjectRef n = PyObjectRef::steal(PyLong_FromSize_t(v->items.size()));
      return makeConst(n.get());
    }
    if (v->isTensor()) {
      specializeSizes(ctx, v, "len() of a tensor");
      PyObjectRef n = PyObjectRef::steal(checkPy(PyObject_CallMethod(v->obj.get(), "__len__", nullptr)));
      return makeConst(n.get());
    }
    if (v->kind == ValueKind::kObject && isModule(v->py())) {
      Py_ssize_t len = PyObject_Length(v->py());
      if (len < 0) ctx.breakHere(BreakKind::kException, "len() of " + describe(*v) + " raised");
      ctx.guard(v->source, makeLengthCheck(len));
      PyObjectRef n = PyObjectRef::steal(PyLong_FromSsize_t(len));
      return makeConst(n.get());
    }
  }
  if (name == "isinstance" && args.size() == 2) {
    PyObjectRef cls = concrete(args[1]);
    if (!cls) ctx.breakHere(BreakKind::kUnsupported, "isinstance with a non-constant class");
    int r;
    if (args[0]->kind == ValueKind::kObject || args[0]->isConst()) {
      r = PyObject_IsInstance(args[0]->py(), cls.get());
    } else {
      ValueRef t = typeOf(ctx, args[0]);
      r = PyObject_IsSubclass(t->py(), cls.get());
    }
    if (r < 0) throw PythonError{};
    return makeConst(r ? Py_True : Py_False);
  }
  if (name == "issubclass" || name == "callable" || name == "id") {
    if (name == "callable" && args.size() == 1 && args[0]->kind != ValueKind::kObject && !args[0]->isConst())
      return makeConst(args[0]->kind == ValueKind::kFunction || args[0]->kind == ValueKind::kMethod ||
                       args[0]->kind == ValueKind::kTensorAttr ? Py_True : Py_False);
    return foldOrBreak(ctx, fn, args, kwargs);
  }
  if (name == "type" && args.size() == 1) return typeOf(ctx, args[0]);
  if (ValueRef v = attributeBuiltin(tr, name, args)) return v;
  if ((name == "int" || name == "float" || name == "bool" || name == "complex") && args.size() == 1 &&
      args[0]->isTensor())
    ctx.breakHere(BreakKind::kTensorToPython, name + "() of a tensor");
  if (ValueRef v = iterationBuiltin(tr, name, args, kwargs)) return v;
  if (name == "sum" && !args.empty() && !concrete(args[0])) {
    // sum(items, start=0) adds left to right from start, as Python does.
    ValueRef acc = args.size() > 1 ? args[1] : nullptr;
    for (auto& [k, v] : kwargs)
      if (k == "start") acc = v;
    if (!acc) {
      PyObjectRef zero = PyObjectRef::steal(PyLong_FromLong(0));
      acc = makeConst(zero.get());
    }
    PyObject* add = binaryOperator(0, nullptr);  // borrowed: operator.add
    for (ValueRef& item : iterateValue(ctx, args[0])) acc = callValue(tr, makeObject(add), {acc, item}, {});
    return acc;
  }
  if ((name == "min" || name == "max" || name == "sum" || name == "any" || name == "all" ||
       name == "sorted") && args.size() == 1 && !concrete(args[0])) {
    std::vector<ValueRef> items = iterateValue(ctx, args[0]);
    std::vector<ValueRef> consts = items;
    ValueRef asTuple = makeTuple(consts);
    return foldOrBreak(ctx, fn, {asTuple}, kwargs);
  }
  if (name == "super" && args.empty()) return nullptr;  // handled by the caller
  static const char* kPure[] = {"len", "abs", "min", "max", "round", "divmod", "pow", "sum", "sorted", "any",
                                "all", "int", "float", "bool", "str", "repr", "hash", "ord", "chr",
                                "range", "slice", "tuple", "list", "set", "frozenset", "format",
                                "isinstance", "issubclass", "hex", "oct", "bin", "map", "filter"};
  for (const char* p : kPure)
    if (name == p) {
      if (anyTensor(args, kwargs)) {
        if (name == "abs" && args.size() == 1) return ctx.recordCall(fn, "", args, kwargs);
        ctx.breakHere(BreakKind::kTensorToPython, "builtin " + name + "() applied to a tensor");
      }
      return foldOrBreak(ctx, fn, args, kwargs);
    }
  unsupportedCall(ctx, fn, "builtin not supported");
}

ValueRef callNamedTuple(CompileContext& ctx, PyObject* cls, std::vector<ValueRef> args, Kw kwargs) {
  PyObjectRef fields = PyObjectRef::steal(checkPy(PyObject_GetAttrString(cls, "_fields")));
  PyObjectRef defaults = PyObjectRef::steal(PyObject_GetAttrString(cls, "_field_defaults"));
  PyErr_Clear();
  Py_ssize_t n = PyTuple_GET_SIZE(fields.get());
  std::vector<ValueRef> items(static_cast<size_t>(n));
  if (static_cast<Py_ssize_t>(args.size()) > n)
    ctx.breakHere(BreakKind::kException, "namedtuple called with too many arguments");
  for (size_t i = 0; i < args.size(); ++i) items[i] = args[i];
  for (auto& [k, v] : kwargs) {
    bool known = false;
    for (Py_ssize_t i = 0; i < n; ++i)
      if (k == PyUnicode_AsUTF8(PyTuple_GET_ITEM(fields.get(), i))) {
        if (items[i]) ctx.breakHere(BreakKind::kException, "namedtuple got multiple values for " + k);
        items[i] = v;
        known = true;
      }
    if (!known) ctx.breakHere(BreakKind::kException, "namedtuple got an unexpected keyword " + k);
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (items[i]) continue;
    PyObject* d = defaults ? PyDict_GetItem(defaults.get(), PyTuple_GET_ITEM(fields.get(), i)) : nullptr;
    if (!d) ctx.breakHere(BreakKind::kException, "namedtuple missing a field");
    items[i] = ctx.wrap(d, Source{}, false);
  }
  ValueRef t = makeTuple(std::move(items));
  t->obj = PyObjectRef::borrow(cls);
  return t;
}

bool isModuleName(const std::string& mod, const char* prefix) {
  return mod == prefix || mod.rfind(std::string(prefix) + ".", 0) == 0;
}

// Grad-mode calls: torch.no_grad() / enable_grad() / set_grad_enabled(mode) (managers the
// tracer enters and leaves), is_grad_enabled(), and managers that change nothing the graph sees.
// Null when fn is none of those.
ValueRef gradModeCall(CompileContext& ctx, PyObject* fn, const std::vector<ValueRef>& args, const Kw& kwargs) {
  const TorchApi& api = torchApi();
  if (fn == api.noGrad || fn == api.enableGrad) {
    return makeGradMode({GradModeData::Role::kGradMode, fn == api.enableGrad});
  }
  if (fn == api.isGradEnabled) return makeConst(ctx.gradEnabled ? Py_True : Py_False);
  if (isNoOpContextManagerClass(fn) && kwargs.empty() &&
      (std::string(((PyTypeObject*)fn)->tp_name) == "record_function" ? args.size() <= 2 : args.empty())) {
    // A context manager that changes nothing the graph sees: a grad-mode manager that keeps the
    // mode (entering returns None, as nullcontext() does). record_function's profiler range is
    // not recorded for code that runs inside a graph.
    return makeGradMode({GradModeData::Role::kNoOp, ctx.gradEnabled});
  }
  if (fn == api.setGradEnabledCm) {
    // torch.set_grad_enabled(mode) switches at once; as a context manager it switches back on exit.
    if (args.size() != 1 || !args[0]->isConst() || !PyBool_Check(args[0]->py()))
      ctx.breakHere(BreakKind::kUnsupported, "torch.set_grad_enabled with a non-constant mode");
    bool mode = args[0]->py() == Py_True;
    // restore: the mode to restore on __exit__
    ValueRef g = makeGradMode({GradModeData::Role::kSetGradEnabled, mode, ctx.gradEnabled});
    if (ctx.gradEnabled != mode) ctx.recordCall(api.setGradEnabled, "", {args[0]}, {});
    ctx.gradEnabled = mode;
    return g;
  }
  if (fn == api.setGradEnabled && args.size() == 1 && args[0]->isConst()) {
    ctx.gradEnabled = args[0]->py() == Py_True;
    ctx.recordCall(fn, "", args, {});
    return makeConst(Py_None);
  }
  return nullptr;
}

// A class called: a namedtuple, an OrderedDict, a builtin type, a torch value type (torch.device,
// torch.Size, finfo); anything else is a graph break.
ValueRef callClass(Tracer& tr, PyObject* fn, const std::string& mod, std::vector<ValueRef>& args, Kw& kwargs) {
  CompileContext& ctx = tr.ctx();
  const TorchApi& api = torchApi();
  if (PyType_IsSubtype((PyTypeObject*)fn, &PyTuple_Type) && PyObject_HasAttrString(fn, "_fields"))
    return callNamedTuple(ctx, fn, std::move(args), std::move(kwargs));
  if (fn == api.orderedDictType && args.size() <= 1) return makeDict(ctx, fn, args, kwargs);
  if (PyObject_IsSubclass(fn, api.moduleType) == 1)
    ctx.breakHere(BreakKind::kUnsupportedCall, std::string("creating a module (") + ((PyTypeObject*)fn)->tp_name + ") inside the compiled function");
  PyErr_Clear();
  if (ValueRef r = callBuiltin(tr, fn, args, kwargs)) return r;
  if (fn == api.deviceType || fn == api.dtypeType) return foldOrBreak(ctx, fn, args, kwargs);
  if (fn == api.sizeType && args.size() == 1 && kwargs.empty())
    if (ValueRef s = makeSymShape(ctx, args[0])) return s;  // torch.Size([b, -1]) of symbolic ints
  if (mod.rfind("torch", 0) == 0) {
    if (anyTensor(args, kwargs)) unsupportedCall(ctx, fn, "constructing a torch object from tensors");
    // Only value objects (torch.device, torch.Size ...) may be made now and used as constants;
    // a stateful object made while tracing (torch.Generator) would be shared by every call.
    ValueRef made = foldOrBreak(ctx, fn, args, kwargs);
    // torch.finfo / torch.iinfo are immutable descriptions of a dtype: values, like torch.Size.
    const std::string tn = ((PyTypeObject*)fn)->tp_name;
    if (made->kind == ValueKind::kObject && (tn == "torch.finfo" || tn == "torch.iinfo")) return made;
    if (!made->isConst() && made->kind != ValueKind::kTuple)
      unsupportedCall(ctx, fn, "creating a stateful torch object inside the compiled function");
    return made;
  }
  unsupportedCall(ctx, fn, "creating an instance of a class inside the compiled function");
}

namespace {
// The function a torch._dynamo.disable wrapper (torch/_dynamo/eval_frame.py's `_fn`) calls
// (borrowed), or null for anything else.
PyObject* torchDynamoDisabled(PyObject* fn) {
  if (!PyFunction_Check(fn)) return nullptr;
  PyObject* d = reinterpret_cast<PyFunctionObject*>(fn)->func_dict;  // borrowed, may be NULL
  if (d == nullptr || PyDict_GetItemString(d, "_torchdynamo_disable") != Py_True) return nullptr;
  PyCodeObject* code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(fn));  // borrowed
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  const std::string suffix = "torch/_dynamo/eval_frame.py";
  if (file == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  const std::string f = file;
  if (f.size() < suffix.size() || f.compare(f.size() - suffix.size(), suffix.size(), suffix) != 0) return nullptr;
  PyObject* orig = PyDict_GetItemString(d, "_torchdynamo_orig_callable");  // borrowed
  return orig != nullptr && PyCallable_Check(orig) ? orig : nullptr;
}

// ref() of a weakref.ref read from the frame (torch 2.x's RNN checks `ref() is not weight` for its
// flat weights). The weakref is guarded to be this very one, so its referent is fixed or gone. A
// dead one gives None (it stays dead). A live one gives the value the function already read the
// referent through (the module's parameter), guarded to be that object: alive, so ref() is it.
// A referent the function has not read elsewhere has no source to guard: the call breaks.
ValueRef callWeakref(CompileContext& ctx, const ValueRef& fnValue, const std::vector<ValueRef>& args, const Kw& kwargs) {
  PyObject* ref = fnValue->py();  // borrowed ref
  if (!args.empty() || !kwargs.empty())
    ctx.breakHere(BreakKind::kException, "a weakref is called with no arguments");
  if (!fnValue->source) ctx.breakHere(BreakKind::kUnsupportedCall, "call of a weakref that cannot be reached from the frame");
  ctx.guard(fnValue->source, makeIdMatch(ref));
  PyObject* target = PyWeakref_GET_OBJECT(ref);  // borrowed ref; Py_None once dead
  if (target == Py_None) return makeConst(Py_None);
  auto seen = ctx.byIdentity.find(target);
  if (seen == ctx.byIdentity.end() || !seen->second->source)
    ctx.breakHere(BreakKind::kUnsupportedCall, "call of a weakref to an object (" + std::string(Py_TYPE(target)->tp_name) +
                                                   ") that the function does not read otherwise");
  ctx.guard(seen->second->source, makeIdMatch(target));
  return seen->second;
}
}  // namespace

ValueRef callObject(Tracer& tr, const ValueRef& fnValue, std::vector<ValueRef> args, Kw kwargs) {
  CompileContext& ctx = tr.ctx();
  PyObject* fn = fnValue->py();
  if (PyWeakref_CheckRefExact(fn)) return callWeakref(ctx, fnValue, args, kwargs);
  if (ValueRef r = callConstruct(tr, fnValue, args, kwargs)) return r;

  if (ValueRef g = gradModeCall(ctx, fn, args, kwargs)) return g;
  if (ValueRef q = autocastQuery(ctx, fn, args, kwargs)) return q;
  if (ValueRef q = inferenceModeQuery(ctx, fn, args)) return q;
  if (isModule(fn)) return callModule(tr, fnValue, std::move(args), std::move(kwargs));
  if (PyObject* wrapped = torchDynamoDisabled(fn)) {
    // torch._dynamo.disable(f) (torch 2.x wraps Optimizer.zero_grad and others with it) only
    // switches torch's own frame hook off around the call, which changes nothing Dynamo captures
    // or runs: traced as the function it wraps.
    Source s = fnValue->source ? Source::attr(fnValue->source, "_torchdynamo_orig_callable") : Source{};
    ctx.guard(s, makeIdMatch(wrapped));
    return callObject(tr, makeObject(wrapped, s), std::move(args), std::move(kwargs));
  }
  if (Py_TYPE(fn) == compiledFunctionType() && compiledFunctionType() != nullptr) {
    // dynamo.compile(g) called from traced code is traced through; dynamo.disable(g) is not.
    PyObjectRef mode = PyObjectRef::steal(checkPy(PyObject_GetAttrString(fn, "_dynamo_mode")));
    if (PyLong_AsLong(mode.get()) != 2)
      ctx.breakHere(BreakKind::kUnsupportedCall, "call to a function wrapped with dynamo.disable or dynamo.run");
    PyObjectRef orig = PyObjectRef::steal(checkPy(PyObject_GetAttrString(fn, "_dynamo_orig")));
    return callObject(tr, makeObject(orig.get()), std::move(args), std::move(kwargs));
  }

  std::string mod = moduleOf(fn);
  std::string name = callableName(fn);
  if (isModuleName(mod, "logging") || isModuleName(mod, "warnings"))
    ctx.breakHere(BreakKind::kLogging, "call to " + mod + "." + name + "()");
  // The frame itself (inspect.currentframe() and inspect.stack() reach it through sys._getframe):
  // its locals and line are the user's only when the function runs as written. sys._getframe(n)
  // in an inlined call reads n frames up: the root frame once n reaches it (or n is not known).
  if (mod == "sys" && (name == "_getframe" || name == "_getframemodulename")) {
    long depth = 0;
    if (!kwargs.empty() || args.size() > 1) depth = LONG_MAX;
    else if (args.size() == 1) depth = args[0]->isConst() && PyLong_CheckExact(args[0]->py()) ? PyLong_AsLong(args[0]->py()) : LONG_MAX;
    const long inlinedCalls = static_cast<long>(ctx.tracers.size()) - 1;
    ctx.breakWholeFrame("call to sys." + name + "(), which needs the real frame", depth < 0 || depth >= inlinedCalls);
  }
  // torch helpers that are constant while capturing (only torch's own, by module).
  const bool fromTorch = mod == "torch" || mod.rfind("torch.", 0) == 0 || mod.rfind("torch._C", 0) == 0;
  if (fromTorch && (mod == "torch.jit._script" || mod == "torch._jit_internal" || mod == "torch.jit") &&
      (name == "is_scripting" || name == "is_tracing"))
    return makeConst(Py_False);
  if (fromTorch && name == "_get_tracing_state") return makeConst(Py_None);
  if (fromTorch && name == "is_fx_tracing") return makeConst(Py_False);
  if ((fromTorch || mod.rfind("torchvision", 0) == 0) && name == "_log_api_usage_once") return makeConst(Py_None);
  if (fromTorch && (name == "has_torch_function" || name == "has_torch_function_unary" ||
                    name == "has_torch_function_variadic"))
    return makeConst(Py_False);
  if ((mod == "torch" || mod == "torch.functional") && (name == "is_tensor")) {
    return makeConst(!args.empty() && args[0]->isTensor() ? Py_True : Py_False);
  }
  if (name == "_assert" && mod.rfind("torch", 0) == 0 && !args.empty()) {
    if (args[0]->isConst() && PyObject_IsTrue(args[0]->py())) return makeConst(Py_None);
    ctx.breakHere(BreakKind::kDataDependentBranch, "torch._assert on a tensor value");
  }

  if (PyType_Check(fn)) return callClass(tr, fn, mod, args, kwargs);

  if (isTorchOp(fn)) {
    if (changesGlobalTorchState(name))
      ctx.breakHere(BreakKind::kUnsupportedCall,
                    "torch." + name + "() changes global torch state (autocast, seeds, flags); it runs as Python");
    if (nameIn(name, kDynamicShape, std::size(kDynamicShape)))
      ctx.breakHere(BreakKind::kDynamicShape, "torch." + name + "() has a data-dependent output shape");
    return ctx.recordCall(fn, "", args, kwargs);
  }
  if (mod == "operator" || mod == "_operator") {
    if (anyTensor(args, kwargs)) {
      // Tuple/list concatenation is structural, not a tensor op.
      if (name == "add" && args.size() == 2 && args[0]->kind == args[1]->kind &&
          (args[0]->kind == ValueKind::kTuple || args[0]->kind == ValueKind::kList)) {
        std::vector<ValueRef> items = args[0]->items;
        items.insert(items.end(), args[1]->items.begin(), args[1]->items.end());
        return args[0]->kind == ValueKind::kTuple ? makeTuple(items) : makeList(items);
      }
      if (name == "getitem") return getItem(ctx, args[0], args[1]);
      return ctx.recordCall(fn, "", args, kwargs);
    }
    if (kwargs.empty())
      if (ValueRef r = symShapeOperator(ctx, name, args)) return r;  // torch.Size + tuple, shape == shape
    if (name == "add" && args.size() == 2 && args[0]->kind == args[1]->kind &&
        (args[0]->kind == ValueKind::kTuple || args[0]->kind == ValueKind::kList) &&
        !(concrete(args[0]) && concrete(args[1]))) {
      std::vector<ValueRef> items = args[0]->items;
      items.insert(items.end(), args[1]->items.begin(), args[1]->items.end());
      return args[0]->kind == ValueKind::kTuple ? makeTuple(items) : makeList(items);
    }
    if (name == "getitem" && args.size() == 2) return getItem(ctx, args[0], args[1]);
    if (kwargs.empty() && anySymScalar(args)) {
      if (ValueRef r = symIntOperator(ctx, name, args)) return r;
      if (ValueRef r = symFloatOperator(ctx, name, args)) return r;
    }
    return foldOrBreak(ctx, fn, args, kwargs);
  }
  if (mod == "math" || mod == "cmath") {
    if (anyTensor(args, kwargs)) ctx.breakHere(BreakKind::kTensorToPython, "math." + name + "() of a tensor");
    if (mod == "math" && kwargs.empty() && anySymScalar(args)) {
      if (ValueRef r = symFloatMath(ctx, fn, name, args)) return r;
    }
    return foldOrBreak(ctx, fn, args, kwargs);
  }
  if (PyCFunction_Check(fn)) {
    if (ValueRef r = callBuiltin(tr, fn, args, kwargs)) return r;
    PyObject* self = PyCFunction_GET_SELF(fn);  // borrowed ref
    if (self != nullptr && isConstantObject(self)) return foldOrBreak(ctx, fn, args, kwargs);
    unsupportedCall(ctx, fn, "a function implemented in C");
  }
  if (PyFunction_Check(fn)) return inlineFunction(tr, fn, fnValue->source, std::move(args), std::move(kwargs));
  if (PyMethod_Check(fn)) {
    PyObject* self = PyMethod_GET_SELF(fn);  // borrowed ref
    args.insert(args.begin(), ctx.wrap(self, fnValue->source ? Source::attr(fnValue->source, "__self__") : Source{}));
    return callObject(tr, makeObject(PyMethod_GET_FUNCTION(fn)), std::move(args), std::move(kwargs));
  }
  // Callable user objects: trace type(obj).__call__.
  PyObjectRef call = PyObjectRef::steal(PyObject_GetAttrString((PyObject*)Py_TYPE(fn), "__call__"));
  PyErr_Clear();
  if (call && PyFunction_Check(call.get())) {
    Source callSource;
    if (fnValue->source) {  // Cl.__call__ = ... later recompiles
      callSource = Source::attr(Source::object((PyObject*)Py_TYPE(fn), Py_TYPE(fn)->tp_name), "__call__");
      ctx.guard(callSource, makeIdMatch(call.get()));
    }
    args.insert(args.begin(), fnValue);
    return inlineFunction(tr, call.get(), callSource, std::move(args), std::move(kwargs));
  }
  unsupportedCall(ctx, fn, "");
}

}  // namespace

ValueRef callValue(Tracer& tr, const ValueRef& fn, std::vector<ValueRef> args, Kw kwargs) {
  CompileContext& ctx = tr.ctx();
  switch (fn->kind) {
    case ValueKind::kTensorAttr: {
      const std::string& name = fn->name;
      if (ValueRef r = callTensorConstruct(tr, fn->self, name, args, kwargs)) return r;
      if (nameIn(name, kToPython, std::size(kToPython)))
        ctx.breakHere(BreakKind::kTensorToPython, "Tensor." + name + "() needs the tensor's data");
      if (nameIn(name, kDynamicShape, std::size(kDynamicShape)))
        ctx.breakHere(BreakKind::kDynamicShape, "Tensor." + name + "() has a data-dependent output shape");
      if (name == "size" && args.empty() && kwargs.empty())
        if (ValueRef s = symbolicShape(ctx, fn->self)) return s;
      if (name == "size" && args.size() == 1 && kwargs.empty() && args[0]->isConst() && PyLong_CheckExact(args[0]->py())) {
        if (ValueRef s = symbolicSize(ctx, fn->self, PyLong_AsLongLong(args[0]->py()))) return s;
        PyErr_Clear();
      }
      if ((name == "numel" || name == "nelement") && args.empty() && kwargs.empty())
        if (ValueRef s = symbolicNumel(ctx, fn->self)) return s;
      args.insert(args.begin(), fn->self);
      return ctx.recordCall(nullptr, name, args, kwargs);
    }
    case ValueKind::kMethod: {
      if (!fn->obj) return containerCall(tr, fn->self, fn->name, std::move(args), std::move(kwargs));
      args.insert(args.begin(), fn->self);
      return callObject(tr, makeObject(fn->obj.get(), fn->source), std::move(args), std::move(kwargs));
    }
    case ValueKind::kFunction: {
      PyCodeObject* code = (PyCodeObject*)fn->py();  // borrowed ref
      const FunctionData& f = fn->as<FunctionData>();
      return inlineCode(tr, code, f.globals ? f.globals.get() : tr.globals(), fn->items, f.kwdefaults,
                        f.closure, std::move(args), std::move(kwargs), fn->name);
    }
    case ValueKind::kGradMode: {
      const TorchApi& api = torchApi();
      const GradModeData& gm = fn->as<GradModeData>();
      using Role = GradModeData::Role;
      if (gm.role == Role::kNoOpExit) return makeConst(Py_None);
      if (gm.role == Role::kAutocastExit) {
        exitAutocast(ctx);
        return makeConst(Py_None);
      }
      if (gm.role == Role::kInferenceExit) {
        exitInferenceMode(ctx, gm);
        return makeConst(Py_None);
      }
      if (gm.role == Role::kEnter || gm.role == Role::kExit) {
        bool mode = gm.mode;
        PyObject* flag = mode ? Py_True : Py_False;
        if (ctx.gradEnabled != mode) ctx.recordCall(api.setGradEnabled, "", {makeConst(flag)}, {});
        ctx.gradEnabled = mode;
        return makeConst(Py_None);
      }
      ctx.breakHere(BreakKind::kUnsupported, "calling a grad-mode context manager");
    }
    case ValueKind::kObject: {
      PyObject* f = fn->py();
      // super() inside a method: the class from __class__, self from the first argument.
      if (f == (PyObject*)&PySuper_Type && args.empty()) return tr.zeroArgSuper();
      if (f == (PyObject*)&PySuper_Type && args.size() == 2 && args[0]->kind == ValueKind::kObject &&
          args[1]->kind == ValueKind::kObject) {
        PyObjectRef sup = PyObjectRef::steal(checkPy(
            PyObject_CallFunctionObjArgs(f, args[0]->py(), args[1]->py(), nullptr)));
        ValueRef v = makeObject(sup.get());
        v->name = "__super__";
        v->self = args[1];
        return v;
      }
      return callObject(tr, fn, std::move(args), std::move(kwargs));
    }
    case ValueKind::kConst:
      if (PyCallable_Check(fn->py())) return callObject(tr, makeObject(fn->py()), std::move(args), std::move(kwargs));
      break;
    default:
      break;
  }
  ctx.breakHere(BreakKind::kUnsupported, "calling " + describe(*fn));
}

}  // namespace dynamo::core::interp
