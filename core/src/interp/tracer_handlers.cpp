// The tracer's exception-handler questions: whether the instruction being traced runs under a
// handler of the user's (so that its tensor code must not be captured: the handler could observe
// an error the graph would raise elsewhere), and whether it is inside a loop. CPython's own
// pass-through handlers are walked by bytecode::firstUserHandler.
#include "tracer.h"

#include <string>

#include <opcode.h>

#include "torch_api.h"

namespace dynamo::core::interp {

namespace bc = dynamo::core::bytecode;

// The __exit__ of a context manager whose exit does nothing (contextlib.nullcontext): a graph that
// raises inside its block skips nothing by not calling it.
static bool isNoOpExit(const Value& exit) {
  if ((exit.kind != ValueKind::kObject && exit.kind != ValueKind::kLazy) || !exit.obj) return false;
  PyObject* fn = exit.obj.get();
  if (!PyMethod_Check(fn)) return false;
  PyTypeObject* type = Py_TYPE(PyMethod_GET_SELF(fn));
  // record_function's exit closes a profiler range: only nullcontext's does nothing at all.
  return isNoOpContextManagerClass((PyObject*)type) && std::string(type->tp_name) == "nullcontext";
}

namespace {
// torch.nn.Module._call_impl's code (torch >= 2.1 runs hooks and forward under a try/except that
// calls the forward hooks registered with always_call=True, then re-raises); null before torch 2.
PyCodeObject* moduleCallImplCode() {
  static PyObject* code = [] {
    PyObject* fn = PyObject_GetAttrString(torchApi().moduleType, "_call_impl");  // new ref
    PyObject* c = fn != nullptr && PyFunction_Check(fn) ? PyFunction_GET_CODE(fn) : nullptr;  // borrowed
    Py_XINCREF(c);  // kept for the process
    Py_XDECREF(fn);
    PyErr_Clear();
    return c;
  }();
  return reinterpret_cast<PyCodeObject*>(code);
}
}  // namespace

// _call_impl's `except Exception:` runs the forward hooks registered with always_call=True that
// have not run yet, then re-raises. With no such hook, on the module or global, it only re-raises:
// an error from the graph reaching the caller directly is what eager gives, so the handler does not
// stop the capture. The two registries are guarded empty (a hook registered with always_call=True
// later recompiles, and the capture then breaks as under any other handler).
bool Tracer::isNoOpModuleCallHandler() const {
  if (code_ != moduleCallImplCode() || locals_.empty() || !locals_[0]) return false;
  ValueRef self = locals_[0];
  if (self->kind == ValueKind::kCell) self = self->as<CellData>().box ? self->as<CellData>().box->contents : nullptr;
  if (!self || !self->source || !self->obj || !isModule(self->obj.get())) return false;
  static PyObject* globalAlways = [] {  // borrowed from the module, which lives for the process
    PyObject* mod = PyImport_ImportModule("torch.nn.modules.module");  // new ref
    PyObject* d = mod ? PyObject_GetAttrString(mod, "_global_forward_hooks_always_called") : nullptr;  // new ref
    Py_XDECREF(mod);
    PyErr_Clear();
    return d;  // kept for the process
  }();
  if (globalAlways == nullptr || !PyDict_Check(globalAlways) || PyDict_GET_SIZE(globalAlways) != 0) return false;
  PyObjectRef own = PyObjectRef::steal(PyObject_GetAttrString(self->obj.get(), "_forward_hooks_always_called"));
  if (!own || !PyDict_Check(own.get()) || PyDict_GET_SIZE(own.get()) != 0) {
    PyErr_Clear();
    return false;
  }
  ctx_.guard(Source::object(globalAlways, "torch.nn.modules.module._global_forward_hooks_always_called"),
             makeLengthCheck(0));
  ctx_.guard(Source::attr(self->source, "_forward_hooks_always_called"), makeLengthCheck(0));
  return true;
}

bool Tracer::underUserHandler() const {
  const auto& ins = bc_.instructions;
  const int n = static_cast<int>(ins.size());
  if (ip_ < 0 || ip_ >= n) return false;
  // Walk out through CPython's pass-through handlers (bytecode::firstUserHandler), through torch
  // 2.x's Module._call_impl handler when it only re-raises, and through a `with` whose exit the
  // graph replays (a traced grad-mode manager) or that does nothing.
  bc::ExceptionHandler h = bc::firstUserHandler(bc_, ins[ip_].handler);
  for (int hops = 0; h.active() && hops < 64; ++hops) {
    const int t = h.target;
    if (t >= 0 && t < n && ins[t].opcode == PUSH_EXC_INFO && isNoOpModuleCallHandler()) {
      h = bc::firstUserHandler(bc_, ins[t].handler);
      continue;
    }
    if (!bc::isWithExitHandler(bc_, h)) return true;
    const int exitAt = h.depth - 1;  // the with's __exit__ sits just below the handler depth
    const ValueRef* exit = exitAt >= 0 && exitAt < static_cast<int>(stack_.size()) ? &stack_[exitAt] : nullptr;
    const bool gradWith = exit && *exit && (*exit)->kind == ValueKind::kGradMode;
    if (!gradWith && !(exit && *exit && isNoOpExit(**exit))) return true;
    h = bc::firstUserHandler(bc_, ins[h.target].handler);
  }
  return h.active();
}

bool Tracer::insideLoop(int i) const {
  for (const auto& [target, jump] : loops_)
    if (i >= target && i <= jump) return true;
  return false;
}

}  // namespace dynamo::core::interp
