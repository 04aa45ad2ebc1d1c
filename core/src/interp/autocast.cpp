// torch.autocast blocks in the trace (see autocast.h).
#include "autocast.h"

#include "py_lookup.h"
#include "torch_api.h"

namespace dynamo::core::interp {

namespace {

using Kw = std::vector<std::pair<std::string, ValueRef>>;

// dynamo.context_nodes.<name> (new ref kept for the process).
PyObject* nodesAttr(const char* name) {
  PyObjectRef m = PyObjectRef::steal(checkPy(PyImport_ImportModule("dynamo.context_nodes")));
  return checkPy(PyObject_GetAttrString(m.get(), name));
}

PyObject* enterFn() {
  static PyObject* f = nodesAttr("enter_autocast");
  return f;
}
PyObject* exitFn() {
  static PyObject* f = nodesAttr("exit_autocast");
  return f;
}

// torch.autocast (torch.amp.autocast_mode.autocast): the base of the CPU and CUDA classes.
PyObject* autocastBase() {
  static PyObject* c = lookupAttr("torch", "autocast");
  return c;
}

bool isAutocastClass(PyObject* cls) {
  PyObject* base = autocastBase();
  if (base == nullptr || !PyType_Check(cls)) return false;
  int r = PyObject_IsSubclass(cls, base);
  if (r < 0) PyErr_Clear();
  return r > 0;
}

std::string str(PyObject* o) {
  PyObjectRef s = PyObjectRef::steal(checkPy(PyObject_Str(o)));
  return PyUnicode_AsUTF8(s.get());
}

// Whether autocast is on for `device` at this point of the trace: the innermost open block for
// that device decides, else the state the frame was entered with (guarded).
bool tracedEnabled(CompileContext& ctx, const std::string& device) {
  for (auto it = ctx.autocastBlocks.rbegin(); it != ctx.autocastBlocks.rend(); ++it)
    if (it->device == device) return it->enabled;
  guardAutocastEntry(ctx);
  const std::string now = currentAutocastState();
  return now.find(device) != std::string::npos;
}

// Whether torch.set_autocast_cpu_dtype accepts `dtype`: autocast's constructor only warns and
// disables itself for an unsupported CPU dtype, but its __enter__ still sets the dtype, which
// raises on torch 1.x for anything but bfloat16. Probed (and the previous dtype restored) so that
// the answer follows the installed torch.
bool cpuDtypeAccepted(PyObject* dtype) {
  // torch 2.x: get/set_autocast_dtype(device, ...) (the _cpu_ forms are deprecated there).
  static PyObject* getDev = lookupAttr("torch", "get_autocast_dtype");
  static PyObject* setDev = lookupAttr("torch", "set_autocast_dtype");
  static PyObject* getCpu = lookupAttr("torch", "get_autocast_cpu_dtype");
  static PyObject* setCpu = lookupAttr("torch", "set_autocast_cpu_dtype");
  const bool byDevice = getDev != nullptr && setDev != nullptr;
  if (!byDevice && (getCpu == nullptr || setCpu == nullptr)) return true;
  PyObjectRef prev = PyObjectRef::steal(byDevice ? PyObject_CallFunction(getDev, "s", "cpu") : PyObject_CallNoArgs(getCpu));
  if (!prev) {
    PyErr_Clear();
    return true;
  }
  auto set = [&](PyObject* dt) {
    return PyObjectRef::steal(byDevice ? PyObject_CallFunction(setDev, "sO", "cpu", dt) : PyObject_CallOneArg(setCpu, dt));
  };
  const bool ok = static_cast<bool>(set(dtype));
  PyErr_Clear();
  set(prev.get());
  PyErr_Clear();
  return ok;
}

// The Value of a real autocast instance: the effective settings its constructor made of its
// arguments (a CUDA block without CUDA, or a dtype autocast does not support on the device, is
// disabled there, with torch's warning).
ValueRef managerValue(CompileContext& ctx, PyObject* cm) {
  PyObjectRef device = PyObjectRef::steal(PyObject_GetAttrString(cm, "device"));
  PyObjectRef dtype = PyObjectRef::steal(PyObject_GetAttrString(cm, "fast_dtype"));
  PyObjectRef enabled = PyObjectRef::steal(PyObject_GetAttrString(cm, "_enabled"));
  PyObjectRef cache = PyObjectRef::steal(PyObject_GetAttrString(cm, "_cache_enabled"));
  if (!device || !dtype || !enabled || !cache || !PyUnicode_Check(device.get()) ||
      (PyObject*)Py_TYPE(dtype.get()) != torchApi().dtypeType) {
    PyErr_Clear();
    ctx.breakHere(BreakKind::kUnsupportedCall, "an autocast object whose settings cannot be read (device, fast_dtype, _enabled, _cache_enabled)");
  }
  const std::string dev = PyUnicode_AsUTF8(device.get());
  if (dev != "cpu" && dev != "cuda")
    ctx.breakHere(BreakKind::kUnsupportedCall, "an autocast block for device '" + dev + "' (only cpu and cuda are captured)");
  if (dev == "cpu" && !cpuDtypeAccepted(dtype.get()))
    ctx.breakHere(BreakKind::kUnsupportedCall,
                  "an autocast block whose dtype " + str(dtype.get()) + " torch.set_autocast_cpu_dtype rejects (its __enter__ raises)");
  const bool on = PyObject_IsTrue(enabled.get()) == 1;
  if (!on && !tracedEnabled(ctx, dev)) {
    // autocast(enabled=False) where autocast is off already: entering and leaving it change
    // nothing the graph sees (see nullcontext).
    return makeGradMode({GradModeData::Role::kNoOp, ctx.gradEnabled});
  }
  ValueRef g = makeGradMode({GradModeData::Role::kAutocast, ctx.gradEnabled});
  g->obj = PyObjectRef::borrow(cm);
  return g;
}

}  // namespace

void guardAutocastEntry(CompileContext& ctx) {
  if (ctx.autocastGuarded) return;
  ctx.autocastGuarded = true;
  ctx.guards.add(Source{}, makeAutocastFromCurrent(), ctx.here());
}

ValueRef autocastManager(CompileContext& ctx, PyObject* cls, const std::vector<ValueRef>& args, const Kw& kwargs) {
  if (!isAutocastClass(cls)) return nullptr;
  PyObjectRef pargs = PyObjectRef::steal(checkPy(PyTuple_New(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    PyObjectRef c = concrete(args[i]);
    if (!c || args[i]->isTensor())
      ctx.breakHere(BreakKind::kUnsupportedCall, "an autocast block whose arguments are not constants");
    PyTuple_SET_ITEM(pargs.get(), i, c.release());
  }
  PyObjectRef pkw = PyObjectRef::steal(checkPy(PyDict_New()));
  for (const auto& [k, v] : kwargs) {
    PyObjectRef c = concrete(v);
    if (!c || v->isTensor()) ctx.breakHere(BreakKind::kUnsupportedCall, "an autocast block whose arguments are not constants");
    PyDict_SetItemString(pkw.get(), k.c_str(), c.get());
  }
  // The constructor only validates and stores its settings (and warns where it disables itself,
  // once per place as eager's would): made now, as eager makes it.
  PyObjectRef cm = PyObjectRef::steal(PyObject_Call(cls, pargs.get(), pkw.get()));
  if (!cm) {
    PyErr_Clear();
    ctx.breakHere(BreakKind::kException, std::string(((PyTypeObject*)cls)->tp_name) + "(...) raised");
  }
  return managerValue(ctx, cm.get());
}

ValueRef autocastManagerOf(CompileContext& ctx, const ValueRef& v) {
  if (v->kind != ValueKind::kObject || !v->obj || !isAutocastClass((PyObject*)Py_TYPE(v->py()))) return nullptr;
  // An instance read from the frame is identity-guarded; its settings are read now.
  return managerValue(ctx, v->py());
}

ValueRef enterAutocast(CompileContext& ctx, const ValueRef& mgr) {
  PyObject* cm = mgr->obj.get();
  PyObjectRef device = PyObjectRef::steal(checkPy(PyObject_GetAttrString(cm, "device")));
  PyObjectRef dtype = PyObjectRef::steal(checkPy(PyObject_GetAttrString(cm, "fast_dtype")));
  PyObjectRef enabled = PyObjectRef::steal(checkPy(PyObject_GetAttrString(cm, "_enabled")));
  PyObjectRef cache = PyObjectRef::steal(checkPy(PyObject_GetAttrString(cm, "_cache_enabled")));
  CompileContext::AutocastBlock b;
  b.device = PyUnicode_AsUTF8(device.get());
  b.dtype = dtype;
  b.enabled = PyObject_IsTrue(enabled.get()) == 1;
  b.cacheEnabled = PyObject_IsTrue(cache.get()) == 1;
  guardAutocastEntry(ctx);
  ctx.usesContextBlocks = true;
  ctx.graph.callFunction(Target::fromCallable(enterFn()),
                         {Arg::string(b.device), Arg::dtype(str(dtype.get())), Arg::boolean(b.enabled),
                          Arg::boolean(b.cacheEnabled)},
                         {}, ctx.metaHere(nullptr));
  ctx.autocastBlocks.push_back(std::move(b));
  return makeGradMode({GradModeData::Role::kAutocastExit, ctx.gradEnabled});
}

void exitAutocast(CompileContext& ctx) {
  DYNAMO_INTERNAL_ASSERT(!ctx.autocastBlocks.empty(), "autocast __exit__ without an open block");
  ctx.graph.callFunction(Target::fromCallable(exitFn()), {}, {}, ctx.metaHere(nullptr));
  ctx.autocastBlocks.pop_back();
}

bool autocastMayApply(CompileContext& ctx) {
  for (const auto& b : ctx.autocastBlocks)
    if (b.enabled) return true;
  if (!ctx.autocastBlocks.empty()) return false;  // every open block disables autocast
  if (ctx.enteredUnderAutocast < 0) ctx.enteredUnderAutocast = currentAutocastState() != "off";
  if (ctx.enteredUnderAutocast) guardAutocastEntry(ctx);
  return ctx.enteredUnderAutocast == 1;
}

ValueRef autocastQuery(CompileContext& ctx, PyObject* fn, const std::vector<ValueRef>& args, const Kw& kwargs) {
  const std::string mod = moduleOf(fn), name = callableName(fn);
  if (mod != "torch" && mod.rfind("torch.", 0) != 0) return nullptr;
  if (name.rfind("is_autocast_", 0) != 0 && name.rfind("get_autocast_", 0) != 0) return nullptr;
  PyObjectRef pargs = PyObjectRef::steal(checkPy(PyTuple_New(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    PyObjectRef c = concrete(args[i]);
    if (!c) return nullptr;
    PyTuple_SET_ITEM(pargs.get(), i, c.release());
  }
  if (!kwargs.empty()) return nullptr;
  guardAutocastEntry(ctx);
  PyObjectRef r;
  {
    TracedAutocast under(ctx);
    r = PyObjectRef::steal(PyObject_Call(fn, pargs.get(), nullptr));
  }
  if (!r) {
    PyErr_Clear();
    ctx.breakHere(BreakKind::kException, "torch." + name + "() raised");
  }
  return makeConst(r.get());
}

TracedAutocast::TracedAutocast(const CompileContext& ctx) {
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  static PyObject* depthFn = nodesAttr("depth");
  depth_ = PyObjectRef::steal(checkPy(PyObject_CallNoArgs(depthFn)));
  for (const auto& b : ctx.autocastBlocks) {
    PyObjectRef r = PyObjectRef::steal(PyObject_CallFunction(enterFn(), "sOOO", b.device.c_str(), b.dtype.get(),
                                                             b.enabled ? Py_True : Py_False,
                                                             b.cacheEnabled ? Py_True : Py_False));
    if (!r) PyErr_Clear();
  }
  PyErr_Restore(et, ev, tb);
}

TracedAutocast::~TracedAutocast() {
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  static PyObject* unwindFn = nodesAttr("unwind");
  PyObject* r = PyObject_CallOneArg(unwindFn, depth_.get());  // new ref
  if (r == nullptr) PyErr_Clear();
  Py_XDECREF(r);
  PyErr_Restore(et, ev, tb);
}

}  // namespace dynamo::core::interp
