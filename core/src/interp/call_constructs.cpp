// Constructs of real model code captured the way eager runs them (see call_constructs.h).
#include "call_constructs.h"

#include <cstring>
#include <functional>

#include "autocast.h"
#include "inference_mode.h"
#include "py_lookup.h"
#include "torch_api.h"

namespace dynamo::core::interp {

namespace {

using Kw = std::vector<std::pair<std::string, ValueRef>>;

std::string str(PyObject* o) {
  PyObjectRef s = PyObjectRef::steal(checkPy(PyObject_Str(o)));
  return PyUnicode_AsUTF8(s.get());
}

// A symbolic int or float anywhere in `v` (concrete() would specialise it).
bool hasSymbolic(const ValueRef& v) {
  if (v->isSymScalar()) return true;
  if (v->isTensor()) return false;
  for (const ValueRef& i : v->items)
    if (i && hasSymbolic(i)) return true;
  return false;
}

bool allConcrete(const std::vector<ValueRef>& args, const Kw& kwargs) {
  for (const ValueRef& a : args)
    if (!concrete(a)) return false;
  for (const auto& kv : kwargs)
    if (!concrete(kv.second)) return false;
  return true;
}

// fn(*args, **kwargs) on concrete values; null with the Python error cleared when it raises.
PyObjectRef callReal(PyObject* fn, const std::vector<ValueRef>& args, const Kw& kwargs) {
  PyObjectRef t = PyObjectRef::steal(checkPy(PyTuple_New(args.size())));
  for (size_t i = 0; i < args.size(); ++i) PyTuple_SET_ITEM(t.get(), i, concrete(args[i]).release());
  PyObjectRef kw = PyObjectRef::steal(checkPy(PyDict_New()));
  for (const auto& [k, v] : kwargs) PyDict_SetItemString(kw.get(), k.c_str(), concrete(v).get());
  PyObjectRef r = PyObjectRef::steal(PyObject_Call(fn, t.get(), kw.get()));
  if (!r) PyErr_Clear();
  return r;
}

// The Value of a Python value computed now from a constant tensor: constants, lists of them.
ValueRef valueOf(CompileContext& ctx, PyObject* o) {
  if (isConstantObject(o)) return makeConst(o);
  if (PyList_Check(o)) {
    std::vector<ValueRef> items;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(o); ++i) items.push_back(valueOf(ctx, PyList_GET_ITEM(o, i)));
    return makeList(std::move(items));
  }
  ctx.breakHere(BreakKind::kUnsupported, std::string("a value of type ") + Py_TYPE(o)->tp_name + " from a constant tensor");
}

// ---- torch.autograd.Function.apply --------------------------------------------------------------

// The function under torch 2.x's Function.apply, a Python classmethod around the builtin apply
// (torch 1.13: Fn.apply is the builtin itself), or null.
PyObject* pythonApplyOf(PyObject* functionType) {
  PyObjectRef bound = PyObjectRef::steal(PyObject_GetAttrString(functionType, "apply"));
  if (!bound) PyErr_Clear();
  if (!bound || !PyMethod_Check(bound.get())) return nullptr;
  PyObject* f = PyMethod_GET_FUNCTION(bound.get());  // borrowed; the class keeps it
  return PyFunction_Check(f) ? f : nullptr;
}

// True when `cls` keeps the setup_context torch's Function classes inherit (forward takes ctx).
bool inheritsSetupContext(PyObject* cls) {
  static PyObject* base = lookupAttr("torch.autograd.function", "_SingleLevelFunction");
  if (base == nullptr) return true;  // torch 1.13: no setup_context at all
  PyObjectRef mine = PyObjectRef::steal(PyObject_GetAttrString(cls, "setup_context"));
  PyObjectRef inherited = PyObjectRef::steal(PyObject_GetAttrString(base, "setup_context"));
  if (!mine || !inherited) PyErr_Clear();
  return mine && mine.get() == inherited.get();
}

// The class whose apply `fn` is (Fn.apply bound to the class), or null. torch 2.x's Python apply
// only adds functorch's dead-wrapper unwrapping (none in a trace) before the builtin, for Function
// classes whose forward takes ctx; setup_context-style classes are not taken here.
PyObject* autogradFunctionOfImpl(PyObject* fn) {
  static PyObject* functionType = lookupAttr("torch.autograd.function", "Function");
  if (functionType == nullptr) return nullptr;
  PyObject* self = nullptr;
  if (PyCFunction_Check(fn)) {
    self = PyCFunction_GET_SELF(fn);  // borrowed ref
    if (self == nullptr || !PyType_Check(self) || callableName(fn) != "apply") return nullptr;
  } else if (PyMethod_Check(fn)) {
    static PyObject* pyApply = pythonApplyOf(functionType);
    if (pyApply == nullptr || PyMethod_GET_FUNCTION(fn) != pyApply) return nullptr;
    self = PyMethod_GET_SELF(fn);  // borrowed ref
    if (!PyType_Check(self) || !inheritsSetupContext(self)) return nullptr;
  } else {
    return nullptr;
  }
  if (!PyType_IsSubtype((PyTypeObject*)self, (PyTypeObject*)functionType)) return nullptr;
  return self;
}

// A Value of the scratch context standing for `v` of the main one: tensors become placeholders
// of the scratch graph with the same example; containers are copied (what the forward does to
// them is not the main trace's business: the real forward does it when the graph runs).
ValueRef toScratch(CompileContext& scratch, const ValueRef& v) {
  if (v->isTensor()) {
    if (!v->as<TensorData>().symSizes.empty())
      scratch.breakHere(BreakKind::kUnsupported, "a tensor with dynamic sizes passed to a torch.autograd.Function");
    NodeMeta meta = scratch.metaHere(v->obj.get());
    if (meta.tensor) meta.tensor->device = str(v->as<TensorData>().device.get());
    NodeRef n = scratch.graph.placeholder("arg", meta);
    return makeTensor(n, v->obj, v->as<TensorData>().device);
  }
  if (v->kind == ValueKind::kTuple || v->kind == ValueKind::kList || v->kind == ValueKind::kDict) {
    auto c = std::make_shared<Value>(*v);
    c->source = Source{};
    c->real = PyObjectRef{};
    for (ValueRef& i : c->items) i = toScratch(scratch, i);
    return c;
  }
  return v;
}

PyObjectRef deviceOf(const ValueRef& out) {
  if (out->isTensor()) return out->as<TensorData>().device;
  for (const ValueRef& i : out->items)
    if (i->isTensor()) return i->as<TensorData>().device;
  return {};
}

ValueRef applyAutogradFunction(Tracer& tr, const ValueRef& fnValue, PyObject* cls, std::vector<ValueRef>& args,
                               Kw& kwargs) {
  CompileContext& ctx = tr.ctx();
  const std::string name = ((PyTypeObject*)cls)->tp_name;
  if (!kwargs.empty()) ctx.breakHere(BreakKind::kException, name + ".apply() takes no keyword arguments");
  // The graph node holds this very class's apply: another class under the same name recompiles.
  Source clsSource = fnValue->source ? Source::attr(fnValue->source, "__self__") : Source{};
  ctx.guard(clsSource, makeIdMatch(cls));
  PyObjectRef forward = PyObjectRef::steal(PyObject_GetAttrString(cls, "forward"));
  if (!forward || !PyFunction_Check(forward.get()))
    ctx.breakHere(BreakKind::kUnsupportedCall, "torch.autograd.Function " + name + ": forward is not a Python function");
  ctx.guard(clsSource ? Source::attr(clsSource, "forward") : Source{}, makeIdMatch(forward.get()));
  for (const Tracer* t : ctx.tracers)
    if (t->underUserHandler())
      ctx.breakHere(BreakKind::kUnsupported, "a tensor operation inside a try block (or a `with` block of a context manager that handles exceptions); its exception handlers must stay in force");

  // ctx.needs_input_grad as eager's forward sees it.
  static PyObject* ctxType = lookupAttr("torch.autograd.function", "FunctionCtx");
  if (ctxType == nullptr) ctx.breakHere(BreakKind::kUnsupportedCall, "torch.autograd.function.FunctionCtx not found");
  bool needsGrad = false;
  PyObjectRef needs = PyObjectRef::steal(checkPy(PyTuple_New(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    bool rg = false;
    if (args[i]->isTensor()) {
      PyObjectRef r = PyObjectRef::steal(checkPy(PyObject_GetAttrString(args[i]->obj.get(), "requires_grad")));
      rg = ctx.gradEnabled && r.get() == Py_True;
    } else if (containsTensor(args[i])) {
      ctx.breakHere(BreakKind::kUnsupported, name + ".apply() with tensors inside a container argument");
    }
    needsGrad = needsGrad || rg;
    PyTuple_SET_ITEM(needs.get(), i, Py_NewRef(rg ? Py_True : Py_False));
  }
  PyObjectRef fctx = PyObjectRef::steal(checkPy(PyObject_CallNoArgs(ctxType)));
  checkPy(PyObject_SetAttrString(fctx.get(), "needs_input_grad", needs.get()) == 0 ? Py_None : nullptr);

  // The forward, traced in a scratch context under no_grad (Function.apply runs it so): it must
  // be traceable, and its outputs give the node's shapes. Its graph, guards and effects are
  // dropped: the node runs the real forward.
  TraceOptions opts = ctx.options;
  opts.forcedBreaks.clear();
  opts.dynamic = nullptr;
  CompileContext scratch(ctx.frame(), ctx.rootCode(), opts);
  scratch.gradEnabled = false;
  scratch.userStack = ctx.userStack;
  scratch.tracers = ctx.tracers;
  ValueRef out;
  try {
    std::vector<ValueRef> fargs{makeObject(fctx.get())};
    for (const ValueRef& a : args) fargs.push_back(toScratch(scratch, a));
    Tracer proxy(scratch, tr, (PyCodeObject*)PyFunction_GET_CODE(forward.get()),
                 PyFunction_GET_GLOBALS(forward.get()), {}, {});
    out = callValue(proxy, makeObject(forward.get()), std::move(fargs), {});
  } catch (const GraphBreak& b) {
    ctx.breakHere(BreakKind::kUnsupportedCall,
                  "the forward of torch.autograd.Function " + name + " cannot be captured: " + b.detail);
  }
  bool ok = out->isTensor() || out->kind == ValueKind::kTuple;
  if (out->kind == ValueKind::kTuple)
    for (const ValueRef& i : out->items) ok = ok && (i->isTensor() || i->isConst());
  PyObjectRef device = deviceOf(out);
  if (!ok || !device)
    ctx.breakHere(BreakKind::kUnsupported, "torch.autograd.Function " + name + " returning " + describe(*out));

  // Outputs require grad when an input does (grad mode on): autograd attaches the backward.
  auto outExample = [&](const ValueRef& v) -> PyObjectRef {
    if (!v->isTensor()) return v->obj;
    PyObjectRef fp = PyObjectRef::steal(checkPy(PyObject_CallMethod(v->obj.get(), "is_floating_point", nullptr)));
    PyObjectRef ex = PyObjectRef::steal(checkPy(PyObject_CallMethod(v->obj.get(), "detach", nullptr)));
    if (needsGrad && fp.get() == Py_True)
      ex = PyObjectRef::steal(checkPy(PyObject_CallMethod(ex.get(), "requires_grad_", nullptr)));
    return ex;
  };
  PyObjectRef example;
  if (out->isTensor()) {
    example = outExample(out);
  } else {
    example = PyObjectRef::steal(checkPy(PyTuple_New(out->items.size())));
    for (size_t i = 0; i < out->items.size(); ++i) PyTuple_SET_ITEM(example.get(), i, outExample(out->items[i]).release());
  }

  std::vector<Arg> gargs;
  for (const ValueRef& a : args) {
    gargs.push_back(argOf(ctx, a));
    if (a->isTensor()) a->as<TensorData>().constValue = PyObjectRef{};
  }
  NodeMeta meta = ctx.metaHere(out->isTensor() ? example.get() : nullptr);
  if (meta.tensor) meta.tensor->device = str(device.get());
  // The target is a Python function calling Fn.apply (dynamo/autograd_function.py): torch.fx can
  // name it, and the AOT backends recognise it.
  static PyObject* trampoline = lookupAttr("dynamo.autograd_function", "trampoline");
  if (trampoline == nullptr) ctx.breakHere(BreakKind::kUnsupportedCall, "dynamo.autograd_function not found");
  PyObjectRef target = PyObjectRef::steal(checkPy(PyObject_CallOneArg(trampoline, cls)));
  NodeRef node = ctx.graph.callFunction(Target::fromCallable(target.get()), std::move(gargs), {}, meta);
  return wrapResult(ctx, node, example.get(), device.get());
}

// ---- modules made inside forward --------------------------------------------------------------

ValueRef constructModule(CompileContext& ctx, PyObject* cls, const std::vector<ValueRef>& args, const Kw& kwargs) {
  const std::string mod = moduleOf(cls);
  if (mod.rfind("torch.nn.", 0) != 0) return nullptr;  // user classes: their __init__ may do anything
  const std::string name = ((PyTypeObject*)cls)->tp_name;
  if (!allConcrete(args, kwargs))
    ctx.breakHere(BreakKind::kUnsupportedCall, "creating a module (" + name + ") inside the compiled function from values that are not constants");
  // Building it must not move the random-number generator the program uses (parameter init).
  const TorchApi& api = torchApi();
  PyObjectRef rng = PyObjectRef::steal(checkPy(PyObject_CallNoArgs(api.getRngState)));
  PyObjectRef m = callReal(cls, args, kwargs);
  PyObjectRef restored = PyObjectRef::steal(checkPy(PyObject_CallOneArg(api.setRngState, rng.get())));
  if (!m) ctx.breakHere(BreakKind::kException, "creating a module (" + name + ") raised");
  for (const char* state : {"parameters", "buffers"}) {
    PyObjectRef it = PyObjectRef::steal(checkPy(PyObject_CallMethod(m.get(), state, nullptr)));
    PyObjectRef first = PyObjectRef::steal(PyIter_Next(it.get()));
    if (PyErr_Occurred()) throw PythonError{};
    if (first)
      ctx.breakHere(BreakKind::kUnsupportedCall, "creating a module with " + std::string(state) + " (" + name +
                                                     ") inside the compiled function: they would be new on every call (create it in __init__)");
  }
  ValueRef v = makeObject(m.get());
  v->name = kMadeInTrace;  // the graph's code cannot hand out a new one per call (codegen.cpp)
  return v;
}

// ---- torch.autograd.Variable, legacy constructors, factories of constants -------------------

// dtype and device of a legacy tensor type (torch.FloatTensor, torch.cuda.LongTensor, torch.Tensor),
// from an empty instance; false when cls is not one.
bool legacyTensorType(PyObject* cls, PyObjectRef& dtype, PyObjectRef& device) {
  const TorchApi& api = torchApi();
  if (cls != api.tensorType) {
    const std::string mod = moduleOf(cls);
    const std::string tn = ((PyTypeObject*)cls)->tp_name;
    if ((mod != "torch" && mod != "torch.cuda") || tn.size() < 7 || tn.compare(tn.size() - 6, 6, "Tensor") != 0)
      return false;
    static PyObject* tensortype = lookupAttr("torch", "FloatTensor");
    if (tensortype == nullptr || Py_TYPE(cls) != Py_TYPE(tensortype)) return false;
  }
  PyObjectRef probe = PyObjectRef::steal(PyObject_CallNoArgs(cls));
  if (!probe || !isTensor(probe.get())) {
    PyErr_Clear();
    return false;
  }
  dtype = PyObjectRef::steal(checkPy(PyObject_GetAttrString(probe.get(), "dtype")));
  device = PyObjectRef::steal(checkPy(PyObject_GetAttrString(probe.get(), "device")));
  return true;
}

// Sizes given as ints, or as one torch.Size: the tuple of ints; null otherwise.
PyObjectRef sizesOf(const std::vector<ValueRef>& args) {
  static PyObject* sizeType = lookupAttr("torch", "Size");
  if (args.size() == 1 && args[0]->isConst() && (PyObject*)Py_TYPE(args[0]->py()) == sizeType)
    return PyObjectRef::steal(checkPy(PySequence_Tuple(args[0]->py())));
  PyObjectRef t = PyObjectRef::steal(checkPy(PyTuple_New(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i]->isConst() || !PyLong_Check(args[i]->py()) || PyBool_Check(args[i]->py())) return {};
    PyTuple_SET_ITEM(t.get(), i, Py_NewRef(args[i]->py()));
  }
  return t;
}

// Data given as one list or tuple (not a torch.Size) of Python numbers: its concrete value.
PyObjectRef dataOf(const std::vector<ValueRef>& args) {
  if (args.size() != 1 || containsTensor(args[0])) return {};
  PyObjectRef c = concrete(args[0]);
  if (!c || !(PyList_Check(c.get()) || PyTuple_CheckExact(c.get()))) return {};
  return c;
}

PyObject* torchFn(const char* name) {
  PyObject* f = PyObject_GetAttrString(torchApi().torch, name);  // new ref
  checkPy(f);
  Py_DECREF(f);  // the torch module keeps it
  return f;
}

ValueRef recordFactory(CompileContext& ctx, PyObject* fn, std::vector<ValueRef> args, Kw kwargs) {
  ValueRef r = ctx.recordCall(fn, "", args, kwargs);
  // Small ones only (a value read back is a handful of numbers; a big one costs time to make).
  PyObjectRef numel = r->isTensor() ? PyObjectRef::steal(checkPy(PyObject_CallMethod(r->obj.get(), "numel", nullptr))) : PyObjectRef{};
  // Not of symbolic sizes or values (torch.zeros(x.size(1))): reading them would specialise them.
  bool symbolic = false;
  for (const ValueRef& a : args) symbolic = symbolic || hasSymbolic(a);
  for (const auto& kv : kwargs) symbolic = symbolic || hasSymbolic(kv.second);
  if (numel && PyLong_AsLong(numel.get()) <= 4096 && !symbolic && allConcrete(args, kwargs)) {
    PyObjectRef real = callReal(fn, args, kwargs);
    if (real && isTensor(real.get())) {
      PyObjectRef dev = PyObjectRef::steal(checkPy(PyObject_GetAttrString(real.get(), "device")));
      if (str(dev.get()) == "cpu") r->as<TensorData>().constValue = real;
    }
  }
  return r;
}

ValueRef legacyConstructor(CompileContext& ctx, PyObject* cls, const std::vector<ValueRef>& args, const Kw& kwargs) {
  PyObjectRef dtype, device;
  if (!kwargs.empty() || !legacyTensorType(cls, dtype, device)) return nullptr;
  Kw kw{{"dtype", makeConst(dtype.get())}};
  if (str(device.get()) != "cpu") kw.emplace_back("device", makeConst(device.get()));
  // torch.Tensor() is empty (size 0); torch.Tensor(2, 3) uninitialised memory of those sizes.
  PyObjectRef sizes = args.empty() ? PyObjectRef::steal(checkPy(Py_BuildValue("(i)", 0))) : sizesOf(args);
  if (sizes)
    return ctx.recordCall(torchFn("empty"), "", {makeConst(sizes.get())}, kw);
  if (PyObjectRef data = dataOf(args))
    return recordFactory(ctx, torchFn("tensor"), {args[0]}, kw);
  return nullptr;
}

ValueRef variable(CompileContext& ctx, const std::vector<ValueRef>& args, const Kw& kwargs) {
  // Variable(t, requires_grad=False): since torch 0.4, t.detach() with requires_grad set.
  ValueRef requiresGrad = args.size() > 1 ? args[1] : nullptr;
  for (const auto& [k, v] : kwargs) {
    if (k != "requires_grad") return nullptr;
    requiresGrad = v;
  }
  if (args.empty() || args.size() > 2 || !args[0]->isTensor()) return nullptr;
  if (requiresGrad && !(requiresGrad->isConst() && PyBool_Check(requiresGrad->py())))
    ctx.breakHere(BreakKind::kUnsupported, "torch.autograd.Variable with a requires_grad that is not a constant bool");
  ValueRef t = ctx.recordCall(nullptr, "detach", {args[0]}, {});
  if (requiresGrad && requiresGrad->py() == Py_True) t = ctx.recordCall(nullptr, "requires_grad_", {t, requiresGrad}, {});
  return t;
}

// ---- numpy on sizes and constants ------------------------------------------------------------

// numpy's ufuncs (np.sqrt, np.floor, np.log2 ...) and its pure reductions: evaluated now when every
// argument is a constant (sizes are constants of the trace, guarded through the tensors).
bool pureNumpy(PyObject* fn) {
  static PyObject* ufuncType = lookupAttr("numpy", "ufunc");
  if (ufuncType != nullptr && PyObject_TypeCheck(fn, (PyTypeObject*)ufuncType)) return true;
  // numpy >= 1.25 wraps its array functions in _ArrayFunctionDispatcher objects (not functions).
  const bool dispatcher = std::strcmp(Py_TYPE(fn)->tp_name, "numpy._ArrayFunctionDispatcher") == 0;
  if ((!PyFunction_Check(fn) && !dispatcher) || moduleOf(fn) != "numpy") return false;
  static const char* kPure[] = {"prod", "sum", "mean", "round", "around", "clip", "amax", "amin", "max", "min",
                                "median", "std", "var", "cumsum", "cumprod", "isclose", "allclose"};
  const std::string name = callableName(fn);
  for (const char* p : kPure)
    if (name == p) return true;
  return false;
}

ValueRef callNumpy(CompileContext& ctx, const ValueRef& fnValue, const std::vector<ValueRef>& args, const Kw& kwargs) {
  PyObject* fn = fnValue->py();
  const std::string name = "numpy." + callableName(fn);
  for (const ValueRef& a : args)
    if (containsTensor(a)) ctx.breakHere(BreakKind::kTensorToPython, name + "() of a tensor needs its data");
  for (const auto& kv : kwargs)
    if (containsTensor(kv.second)) ctx.breakHere(BreakKind::kTensorToPython, name + "() of a tensor needs its data");
  if (!allConcrete(args, kwargs)) return nullptr;
  ctx.guard(fnValue->source, makeIdMatch(fn));  // np.sqrt = ... later recompiles
  PyObjectRef r = callReal(fn, args, kwargs);
  if (!r) ctx.breakHere(BreakKind::kException, name + "() raised on constants");
  if (isConstantObject(r.get())) return makeConst(r.get());
  static PyObject* genericType = lookupAttr("numpy", "generic");
  // A numpy scalar: an immutable value (np.float64 is a float); passed to torch as a number.
  if (genericType != nullptr && PyObject_TypeCheck(r.get(), (PyTypeObject*)genericType)) return makeObject(r.get());
  ctx.breakHere(BreakKind::kUnsupportedCall, name + "() returned a " + Py_TYPE(r.get())->tp_name + " (numpy arrays are not captured)");
}

// np.array(data[, dtype]) / np.asarray(...) of Python constants (numbers, nested lists of them):
// the real array, made now, as an object made in the trace (it may only reach torch.from_numpy
// below; anything else breaks, and one that outlives the graph makes the frame run as Python).
ValueRef numpyArray(CompileContext& ctx, PyObject* fn, const std::vector<ValueRef>& args, const Kw& kwargs) {
  static PyObject* array = lookupAttr("numpy", "array");
  static PyObject* asarray = lookupAttr("numpy", "asarray");
  if (fn == nullptr || (fn != array && fn != asarray) || args.size() != 1) return nullptr;
  for (const auto& kv : kwargs)
    if (kv.first != "dtype") return nullptr;
  if (!allConcrete(args, kwargs) || containsTensor(args[0])) return nullptr;
  PyObjectRef data = concrete(args[0]);
  if (!data || !(PyList_Check(data.get()) || PyTuple_Check(data.get()))) return nullptr;
  PyObjectRef a = callReal(fn, args, kwargs);
  if (!a) ctx.breakHere(BreakKind::kException, "numpy." + callableName(fn) + "() raised on constants");
  ValueRef v = makeObject(a.get());
  v->name = kMadeInTrace;
  return v;
}

// torch.from_numpy(arr) of a numpy array read from the frame (an argument, an attribute): a graph
// input of its own, fetched as torch.from_numpy(<arr's source>) on every call, so it shares the
// array's memory as in eager (in-place ops write the array). Its TENSOR_MATCH guard checks the
// array's dtype, shape and strides; the array's type and `flags.writeable` are guarded too. An
// array made in the function is not known to the graph: a break.
ValueRef fromNumpy(CompileContext& ctx, const std::vector<ValueRef>& args, const Kw& kwargs) {
  static PyObject* ndarray = lookupAttr("numpy", "ndarray");
  if (ndarray == nullptr || args.size() != 1 || !kwargs.empty() || args[0]->kind != ValueKind::kObject ||
      !args[0]->obj || Py_TYPE(args[0]->py()) != (PyTypeObject*)ndarray)
    return nullptr;
  const ValueRef& arr = args[0];
  static PyObject* fn = lookupAttr("torch", "from_numpy");
  if (!arr->source && arr->name == kMadeInTrace) {
    // np.array([...]) of constants made in the function (numpyArray): a fresh array on each call
    // in eager, which only this tensor sees: torch.tensor(data, dtype=...) of the same values.
    PyObjectRef t = PyObjectRef::steal(PyObject_CallOneArg(fn, arr->py()));
    PyObjectRef data = PyObjectRef::steal(PyObject_CallMethod(arr->py(), "tolist", nullptr));
    PyObjectRef dtype = t ? PyObjectRef::steal(PyObject_GetAttrString(t.get(), "dtype")) : PyObjectRef{};
    if (!t || !data || !dtype) {
      PyErr_Clear();
      ctx.breakHere(BreakKind::kUnsupportedCall, "torch.from_numpy() of this array raised (an unsupported dtype)");
    }
    return recordFactory(ctx, torchFn("tensor"), {valueOf(ctx, data.get())}, {{"dtype", makeConst(dtype.get())}});
  }
  if (!arr->source)
    ctx.breakHere(BreakKind::kUnsupportedCall, "torch.from_numpy() of a numpy array computed in the compiled function "
                                               "(arrays are mutable objects the graph cannot hold)");
  PyObjectRef flags = PyObjectRef::steal(checkPy(PyObject_GetAttrString(arr->py(), "flags")));
  PyObjectRef writeable = PyObjectRef::steal(checkPy(PyObject_GetAttrString(flags.get(), "writeable")));
  if (writeable.get() != Py_True)
    ctx.breakHere(BreakKind::kUnsupportedCall, "torch.from_numpy() of a read-only numpy array (torch warns and the "
                                               "tensor must not be written)");
  ctx.guard(Source::attr(Source::attr(arr->source, "flags"), "writeable"), makeEqualsMatch(Py_True));
  PyObjectRef t = PyObjectRef::steal(PyObject_CallOneArg(fn, arr->py()));
  if (!t) {
    PyErr_Clear();
    ctx.breakHere(BreakKind::kUnsupportedCall, "torch.from_numpy() of this array raised (an unsupported dtype)");
  }
  return ctx.wrap(t.get(), Source::fromNumpy(arr->source));
}

// ---- instances of user classes ----------------------------------------------------------------

PyObject* objectInit() {
  static PyObject* init = PyObject_GetAttrString((PyObject*)&PyBaseObject_Type, "__init__");  // new ref, kept
  return init;
}

// A plain Python class: object's __new__ and attribute machinery, a Python __init__ (or none),
// not a subclass of a builtin other than object, no __slots__ and no __getattr__ hooks.
bool plainClass(PyObject* cls) {
  PyTypeObject* t = (PyTypeObject*)cls;
  if (Py_TYPE(cls) != &PyType_Type || !(t->tp_flags & Py_TPFLAGS_HEAPTYPE)) return false;
  if (t->tp_new != PyBaseObject_Type.tp_new || t->tp_setattro != PyObject_GenericSetAttr ||
      t->tp_getattro != PyObject_GenericGetAttr || t->tp_dictoffset == 0)
    return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t->tp_mro); ++i) {
    PyTypeObject* base = (PyTypeObject*)PyTuple_GET_ITEM(t->tp_mro, i);
    if (base != &PyBaseObject_Type && !(base->tp_flags & Py_TPFLAGS_HEAPTYPE)) return false;
    if (base->tp_dict && (PyDict_GetItemString(base->tp_dict, "__slots__") || PyDict_GetItemString(base->tp_dict, "__del__")))
      return false;
  }
  if (isModule(cls) || moduleOf(cls).rfind("torch", 0) == 0) return false;
  return true;
}

// cls(*args, **kwargs) of a plain class: a real instance made with object.__new__ (nothing of the
// user's runs), then __init__ inlined; its attributes live in the trace (setAttr writes only the
// overlay). If the object outlives the graph the frame runs as Python (codegen.cpp).
ValueRef constructInstance(Tracer& tr, const ValueRef& fnValue, std::vector<ValueRef>& args, Kw& kwargs) {
  CompileContext& ctx = tr.ctx();
  PyObject* cls = fnValue->py();
  PyObjectRef init = PyObjectRef::steal(PyObject_GetAttrString(cls, "__init__"));
  if (!init) {
    PyErr_Clear();
    return nullptr;
  }
  const bool pythonInit = PyFunction_Check(init.get());
  if (!pythonInit && (init.get() != objectInit() || !args.empty() || !kwargs.empty())) return nullptr;
  PyObjectRef noArgs = PyObjectRef::steal(checkPy(PyTuple_New(0)));
  PyObjectRef obj = PyObjectRef::steal(checkPy(PyBaseObject_Type.tp_new((PyTypeObject*)cls, noArgs.get(), nullptr)));
  ValueRef v = makeObject(obj.get());
  v->name = kMadeInTrace;
  if (pythonInit) {
    Source initSource = fnValue->source ? Source::attr(fnValue->source, "__init__") : Source{};
    ValueRef initFn = initSource ? ctx.wrap(init.get(), initSource) : makeObject(init.get());
    std::vector<ValueRef> initArgs{v};
    initArgs.insert(initArgs.end(), args.begin(), args.end());
    ValueRef r = callValue(tr, initFn, std::move(initArgs), kwargs);
    if (!(r->isConst() && r->py() == Py_None))
      ctx.breakHere(BreakKind::kException, std::string("__init__() of ") + ((PyTypeObject*)cls)->tp_name + " should return None");
  }
  return v;
}

// operator.add(a, b) and the like on tensors made from constants (torch.tensor(n) // 2): the
// result is such a tensor too. Only pure arithmetic and comparisons (never in-place or random).
ValueRef constantArithmetic(CompileContext& ctx, PyObject* fn, const std::vector<ValueRef>& args, const Kw& kwargs) {
  static const char* kPure[] = {"add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "pos",
                                "lt", "le", "eq", "ne", "gt", "ge"};
  const std::string mod = moduleOf(fn), name = callableName(fn);
  if ((mod != "operator" && mod != "_operator") || !kwargs.empty()) return nullptr;
  bool pure = false, anyConstTensor = false;
  for (const char* p : kPure) pure = pure || name == p;
  if (!pure) return nullptr;
  PyObjectRef realArgs = PyObjectRef::steal(checkPy(PyTuple_New(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    PyObjectRef a;
    if (args[i]->isTensor()) {
      if (!args[i]->as<TensorData>().constValue) return nullptr;
      a = args[i]->as<TensorData>().constValue;
      anyConstTensor = true;
    } else if (args[i]->isConst()) {
      a = args[i]->obj;
    } else {
      return nullptr;
    }
    PyTuple_SET_ITEM(realArgs.get(), i, a.release());
  }
  if (!anyConstTensor) return nullptr;
  ValueRef r = ctx.recordCall(fn, "", args, kwargs);
  PyObjectRef real = PyObjectRef::steal(PyObject_Call(fn, realArgs.get(), nullptr));
  if (real && isTensor(real.get()) && r->isTensor()) r->as<TensorData>().constValue = real;
  PyErr_Clear();
  return r;
}

bool isConstantFactory(const std::string& name) {
  static const char* kFactories[] = {"tensor", "as_tensor", "scalar_tensor", "zeros", "ones", "full",
                                     "arange", "eye", "linspace"};
  for (const char* f : kFactories)
    if (name == f) return true;
  return false;
}

// sorted(pairs) where each item is a tuple whose first element is a distinct constant
// (sorted(d.items()) with tensor values): the first elements decide every comparison, as in
// Python's tuple order, so the items are ordered by them without comparing the rest.
ValueRef sortedByConstantFirst(CompileContext& ctx, const std::vector<ValueRef>& args, const Kw& kwargs) {
  // Not over an iterator: reading it would consume it, and the generic path after us needs it.
  if (args.size() != 1 || args[0]->kind == ValueKind::kIterator) return nullptr;
  PyObject* reverse = Py_False;
  for (const auto& [k, v] : kwargs) {
    if (k != "reverse" || !v->isConst() || !PyBool_Check(v->py())) return nullptr;
    reverse = v->py();
  }
  std::vector<ValueRef> items = iterateValue(ctx, args[0]);
  PyObjectRef keys = PyObjectRef::steal(checkPy(PyList_New(0)));
  for (const ValueRef& item : items) {
    if (item->kind != ValueKind::kTuple || item->items.empty()) return nullptr;
    PyObjectRef k = concrete(item->items[0]);
    if (!k || !isConstantObject(k.get())) return nullptr;
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(keys.get()); ++j) {
      int eq = PyObject_RichCompareBool(PyList_GET_ITEM(keys.get(), j), k.get(), Py_EQ);
      if (eq != 0) {  // equal first elements (or an error): the rest would be compared
        PyErr_Clear();
        return nullptr;
      }
    }
    checkPy(PyList_Append(keys.get(), k.get()) == 0 ? Py_None : nullptr);
  }
  // The permutation Python's sort gives the keys: sorted(range(n), key=keys.__getitem__, reverse=...).
  PyObjectRef n = PyObjectRef::steal(checkPy(PyLong_FromSsize_t(PyList_GET_SIZE(keys.get()))));
  PyObjectRef range = PyObjectRef::steal(checkPy(PyObject_CallOneArg((PyObject*)&PyRange_Type, n.get())));
  PyObjectRef getitem = PyObjectRef::steal(checkPy(PyObject_GetAttrString(keys.get(), "__getitem__")));
  PyObjectRef sortedFn = PyObjectRef::steal(checkPy(PyObject_GetAttrString(torchApi().builtinsModule, "sorted")));
  PyObjectRef kw = PyObjectRef::steal(checkPy(Py_BuildValue("{sOsO}", "key", getitem.get(), "reverse", reverse)));
  PyObjectRef argTuple = PyObjectRef::steal(checkPy(PyTuple_Pack(1, range.get())));
  PyObjectRef order = PyObjectRef::steal(PyObject_Call(sortedFn.get(), argTuple.get(), kw.get()));
  if (!order) {
    PyErr_Clear();
    ctx.breakHere(BreakKind::kException, "sorted() raised comparing the first elements");
  }
  std::vector<ValueRef> out;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(order.get()); ++i)
    out.push_back(items[PyLong_AsSize_t(PyList_GET_ITEM(order.get(), i))]);
  return makeList(std::move(out));
}

}  // namespace

PyObject* autogradFunctionOf(PyObject* fn) { return autogradFunctionOfImpl(fn); }

ValueRef sliceModuleContainer(CompileContext& ctx, const ValueRef& container, PyObject* slice) {
  PyObject* obj = container->py();
  if (!container->source)
    ctx.breakHere(BreakKind::kUnsupported, "slicing " + describe(*container) + " that cannot be reached from the frame");
  // The members, wrapped through the original's source first: the slice's members are then
  // these Values (CompileContext::wrap finds an object's Value by identity).
  PyObjectRef mods = PyObjectRef::steal(checkPy(PyObject_GetAttrString(obj, "_modules")));
  PyObject *key, *value;  // borrowed refs
  Py_ssize_t pos = 0;
  while (PyDict_Next(mods.get(), &pos, &key, &value))
    ctx.wrap(value, Source::moduleAttr(container->source, PyUnicode_AsUTF8(key), ModuleSlot::kModules));
  ctx.guard(container->source, makeLengthCheck(PyDict_Size(mods.get())));
  PyObjectRef sliced = PyObjectRef::steal(PyObject_GetItem(obj, slice));
  if (!sliced || !isModule(sliced.get())) {
    PyErr_Clear();
    ctx.breakHere(BreakKind::kException, "slicing " + describe(*container) + " raised");
  }
  ValueRef v = makeObject(sliced.get());
  v->name = kMadeInTrace;  // a new container each call in eager: it must not outlive the graph
  return v;
}

ValueRef defaultDictMissing(CompileContext& ctx, const ValueRef& dict, const PyObjectRef& key) {
  static PyObject* defaultDictType = lookupAttr("collections", "defaultdict");
  if (dict->kind != ValueKind::kDict || dict->obj.get() != defaultDictType || !dict->self) return nullptr;
  if (dict->self->isConst() && dict->self->py() == Py_None) return nullptr;  // no factory: KeyError
  Tracer& current = const_cast<Tracer&>(*ctx.tracers.back());
  ValueRef made = callValue(current, dict->self, {}, {});
  setDictItem(dict, key, made);
  ctx.recordContents(dict);
  return made;
}

ValueRef callModuleWithHooks(Tracer& tr, const ValueRef& module, std::vector<ValueRef> args, Kw kwargs) {
  CompileContext& ctx = tr.ctx();
  PyObject* m = module->py();
  // Backward hooks wrap the inputs and outputs in autograd functions (torch.utils.hooks.BackwardHook).
  // (Backward pre-hooks: torch 2.x's register_full_backward_pre_hook, run by the same wrapper.)
  static PyObject* globalBackward = lookupAttr("torch.nn.modules.module", "_global_backward_hooks");
  static PyObject* globalBackwardPre = lookupAttr("torch.nn.modules.module", "_global_backward_pre_hooks");
  auto nonEmpty = [](PyObject* d) { return d != nullptr && PyDict_Check(d) && PyDict_Size(d) > 0; };
  PyObjectRef own = PyObjectRef::steal(PyObject_GetAttrString(m, "_backward_hooks"));
  PyErr_Clear();
  PyObjectRef ownPre = PyObjectRef::steal(PyObject_GetAttrString(m, "_backward_pre_hooks"));
  PyErr_Clear();
  if (nonEmpty(own.get()) || nonEmpty(ownPre.get()) || nonEmpty(globalBackward) || nonEmpty(globalBackwardPre))
    ctx.breakHere(BreakKind::kUnsupportedCall, "call of a module with backward hooks (" + std::string(Py_TYPE(m)->tp_name) + ")");
  // The hook dicts are attributes of torch.nn's own classes, which reads do not guard: guard
  // them here (a hook added, removed or replaced recompiles).
  if (module->source) {
    for (const char* name : {"_forward_pre_hooks", "_forward_hooks", "_backward_hooks", "_backward_pre_hooks"}) {
      if (std::strcmp(name, "_backward_pre_hooks") == 0 && !ownPre) continue;  // torch 1.13 has none
      PyObjectRef d = PyObjectRef::steal(PyObject_GetAttrString(m, name));
      if (!d || !PyDict_Check(d.get())) {
        PyErr_Clear();
        ctx.breakHere(BreakKind::kUnsupportedCall, "call of a module with hooks: its ." + std::string(name) + " is not a dict");
      }
      Source ds = Source::attr(module->source, name);
      ctx.guard(ds, makeDictKeys(d.get()));
      PyObject *key, *hook;  // borrowed refs
      Py_ssize_t pos = 0;
      while (PyDict_Next(d.get(), &pos, &key, &hook)) ctx.guard(Source::item(ds, key), makeIdMatch(hook));
    }
  }
  static PyObject* moduleCall = PyObject_GetAttrString(torchApi().moduleType, "__call__");  // new ref, kept
  if (moduleCall == nullptr || !PyFunction_Check(moduleCall))
    ctx.breakHere(BreakKind::kUnsupportedCall, "call of a module with hooks: torch.nn.Module.__call__ is not a Python function");
  args.insert(args.begin(), module);
  return callValue(tr, makeObject(moduleCall), std::move(args), std::move(kwargs));
}

ValueRef callConstruct(Tracer& tr, const ValueRef& fnValue, std::vector<ValueRef>& args, Kw& kwargs) {
  CompileContext& ctx = tr.ctx();
  PyObject* fn = fnValue->py();
  if (PyObject* cls = autogradFunctionOfImpl(fn)) return applyAutogradFunction(tr, fnValue, cls, args, kwargs);
  // super().__init__() reaching object.__init__ in the __init__ of an object made in the trace.
  if (fn == objectInit() && args.size() == 1 && kwargs.empty() && args[0]->kind == ValueKind::kObject &&
      !args[0]->source && args[0]->name == kMadeInTrace)
    return makeConst(Py_None);
  const TorchApi& api = torchApi();
  if (pureNumpy(fn))
    if (ValueRef r = callNumpy(ctx, fnValue, args, kwargs)) return r;
  static PyObject* fromNumpyFn = lookupAttr("torch", "from_numpy");
  static PyObject* asTensorFn = lookupAttr("torch", "as_tensor");
  if (fn == fromNumpyFn || (fn == asTensorFn && args.size() == 1 && kwargs.empty()))
    if (ValueRef r = fromNumpy(ctx, args, kwargs)) return r;
  if (ValueRef r = numpyArray(ctx, fn, args, kwargs)) return r;
  if (fn == (PyObject*)&PySet_Type && kwargs.empty()) return setFromIterable(ctx, args);
  static PyObject* defaultDictType = lookupAttr("collections", "defaultdict");
  if (fn == defaultDictType && args.size() <= 1 && kwargs.empty()) {
    // defaultdict(factory): a dict Value holding its factory (missing keys: defaultDictMissing).
    auto d = std::make_shared<Value>();
    d->kind = ValueKind::kDict;
    d->obj = PyObjectRef::borrow(fn);
    d->self = args.empty() ? makeConst(Py_None) : args[0];
    if (!d->self->isConst() && d->self->kind != ValueKind::kObject && d->self->kind != ValueKind::kFunction)
      ctx.breakHere(BreakKind::kUnsupported, "defaultdict with the factory " + describe(*d->self));
    return d;
  }
  static PyObject* sortedFn = lookupAttr("builtins", "sorted");
  if (fn == sortedFn && !allConcrete(args, kwargs))
    if (ValueRef r = sortedByConstantFirst(ctx, args, kwargs)) return r;
  if ((fn == (PyObject*)&PyMap_Type || fn == (PyObject*)&PyFilter_Type) && !allConcrete(args, kwargs))
    if (ValueRef r = lazyMapOrFilter(ctx, fn == (PyObject*)&PyMap_Type, args, kwargs)) return r;
  if ((fn == (PyObject*)&PyZip_Type || fn == (PyObject*)&PyEnum_Type) && anyLazy(args))
    return lazyZipOrEnumerate(ctx, fn == (PyObject*)&PyZip_Type, args, kwargs);
  if (PyType_Check(fn)) {
    static PyObject* variableType = lookupAttr("torch.autograd", "Variable");
    if (fn == variableType) return variable(ctx, args, kwargs);
    if (ValueRef r = autocastManager(ctx, fn, args, kwargs)) return r;
    if (ValueRef r = inferenceModeManager(ctx, fn, args, kwargs)) return r;
    if (PyObject_IsSubclass(fn, api.moduleType) == 1) return constructModule(ctx, fn, args, kwargs);
    PyErr_Clear();
    if (ValueRef r = legacyConstructor(ctx, fn, args, kwargs)) return r;
    if (plainClass(fn))
      if (ValueRef r = constructInstance(tr, fnValue, args, kwargs)) return r;
    // int(t), float(t), bool(t) of a tensor made from constants.
    if ((fn == (PyObject*)&PyLong_Type || fn == (PyObject*)&PyFloat_Type || fn == (PyObject*)&PyBool_Type) &&
        args.size() == 1 && kwargs.empty() && args[0]->isTensor() && args[0]->as<TensorData>().constValue) {
      PyObjectRef r = PyObjectRef::steal(PyObject_CallOneArg(fn, args[0]->as<TensorData>().constValue.get()));
      if (!r) ctx.breakHere(BreakKind::kException, std::string(((PyTypeObject*)fn)->tp_name) + "() of a constant tensor raised");
      return makeConst(r.get());
    }
    return nullptr;
  }
  if (ValueRef r = constantArithmetic(ctx, fn, args, kwargs)) return r;
  if (isTorchOp(fn) && isConstantFactory(callableName(fn)) && (moduleOf(fn) == "torch" || moduleOf(fn).rfind("torch._C", 0) == 0))
    return recordFactory(ctx, fn, args, kwargs);
  return nullptr;
}

ValueRef callTensorConstruct(Tracer& tr, const ValueRef& self, const std::string& name, std::vector<ValueRef>& args,
                             Kw& kwargs) {
  CompileContext& ctx = tr.ctx();
  if (name == "register_hook" || name == "register_post_accumulate_grad_hook")
    ctx.breakHere(BreakKind::kUnsupportedCall,
                  "Tensor." + name + "() inside the compiled function: autograd calls the hook on the real tensor, "
                  "which the graph cannot hold; the call runs as Python");
  if (name == "new" && kwargs.empty()) {
    // x.new(2, 3) and x.new(x.size()) are uninitialised tensors of those sizes; x.new([1, 2])
    // holds that data (a tuple is data too, a torch.Size is sizes); both with x's dtype and device.
    PyObjectRef sizes = args.empty() ? PyObjectRef::steal(checkPy(Py_BuildValue("(i)", 0))) : sizesOf(args);
    if (sizes) return ctx.recordCall(nullptr, "new_empty", {self, makeConst(sizes.get())}, {});
    if (dataOf(args)) return ctx.recordCall(nullptr, "new_tensor", {self, args[0]}, {});
    return nullptr;
  }
  PyObjectRef dtype, device;
  if (name == "type" && args.size() == 1 && kwargs.empty() && args[0]->kind == ValueKind::kObject &&
      PyType_Check(args[0]->py()) && args[0]->py() != torchApi().tensorType &&
      legacyTensorType(args[0]->py(), dtype, device)) {
    // x.type(torch.FloatTensor) is x.to(torch.float32) (and the type's device).
    Kw kw{{"dtype", makeConst(dtype.get())}};
    if (str(device.get()) != "cpu") kw.emplace_back("device", makeConst(device.get()));
    return ctx.recordCall(nullptr, "to", {self}, kw);
  }
  static const char* kToPython[] = {"item", "tolist", "__int__", "__float__", "__bool__", "__index__"};
  if (self->as<TensorData>().constValue && args.empty() && kwargs.empty()) {
    for (const char* m : kToPython) {
      if (name != m) continue;
      PyObjectRef r = PyObjectRef::steal(PyObject_CallMethod(self->as<TensorData>().constValue.get(), m, nullptr));
      if (!r) ctx.breakHere(BreakKind::kException, "Tensor." + name + "() of a constant tensor raised");
      return valueOf(ctx, r.get());
    }
  }
  return nullptr;
}

}  // namespace dynamo::core::interp
