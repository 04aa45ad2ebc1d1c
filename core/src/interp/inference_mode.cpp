// torch.inference_mode blocks in the trace (see inference_mode.h).
#include "inference_mode.h"

#include "py_lookup.h"
#include "torch_api.h"

namespace dynamo::core::interp {

namespace {

using Kw = std::vector<std::pair<std::string, ValueRef>>;

bool realInferenceMode() {
  static PyObject* isEnabled = lookupAttr("torch", "is_inference_mode_enabled");
  PyObjectRef r = PyObjectRef::steal(checkPy(PyObject_CallNoArgs(isEnabled)));
  return r.get() == Py_True;
}

// The mode the frame was entered in, guarded (once per compile).
void guardEntryMode(CompileContext& ctx) {
  if (ctx.enteredInferenceMode >= 0) return;
  ctx.enteredInferenceMode = realInferenceMode() ? 1 : 0;
  ctx.inferenceMode = ctx.enteredInferenceMode == 1;
  ctx.guards.add(Source{}, makeInferenceModeFromCurrent(), ctx.here());
}

}  // namespace

ValueRef inferenceModeManager(CompileContext& ctx, PyObject* fn, const std::vector<ValueRef>& args, const Kw& kwargs) {
  static PyObject* cls = lookupAttr("torch", "inference_mode");
  if (cls == nullptr || fn != cls) return nullptr;
  ValueRef mode = args.empty() ? nullptr : args[0];
  for (const auto& [k, v] : kwargs) {
    if (k != "mode") ctx.breakHere(BreakKind::kUnsupportedCall, "torch.inference_mode() with the keyword " + k);
    mode = v;
  }
  if (args.size() > 1 || (mode && !(mode->isConst() && PyBool_Check(mode->py()))))
    ctx.breakHere(BreakKind::kUnsupportedCall, "torch.inference_mode() with a mode that is not a constant bool");
  return makeGradMode({GradModeData::Role::kInferenceMode, !mode || mode->py() == Py_True});
}

ValueRef enterInferenceMode(CompileContext& ctx, const ValueRef& mgr) {
  static PyObject* enter = lookupAttr("dynamo.context_nodes", "enter_inference_mode");
  if (enter == nullptr) ctx.breakHere(BreakKind::kUnsupportedCall, "dynamo.context_nodes not found");
  guardEntryMode(ctx);
  // mode: the grad mode to restore; restore: the inference mode to restore.
  ValueRef exit = makeGradMode({GradModeData::Role::kInferenceExit, ctx.gradEnabled, ctx.inferenceMode});
  const bool mode = mgr->as<GradModeData>().mode;
  ctx.graph.callFunction(Target::fromCallable(enter), {Arg::boolean(mode)}, {}, ctx.metaHere(nullptr));
  ctx.usesContextBlocks = true;
  ++ctx.inferenceBlocks;
  ctx.inferenceMode = mode;
  ctx.gradEnabled = !mode;  // c10::InferenceMode(mode) sets grad mode to !mode
  return exit;
}

void exitInferenceMode(CompileContext& ctx, const GradModeData& exit) {
  static PyObject* leave = lookupAttr("dynamo.context_nodes", "exit_inference_mode");
  DYNAMO_INTERNAL_ASSERT(ctx.inferenceBlocks > 0 && leave != nullptr, "inference_mode __exit__ without an open block");
  ctx.graph.callFunction(Target::fromCallable(leave), {}, {}, ctx.metaHere(nullptr));
  --ctx.inferenceBlocks;
  ctx.inferenceMode = exit.restore;
  ctx.gradEnabled = exit.mode;
}

ValueRef inferenceModeQuery(CompileContext& ctx, PyObject* fn, const std::vector<ValueRef>& args) {
  static PyObject* isEnabled = lookupAttr("torch", "is_inference_mode_enabled");
  if (fn != isEnabled || !args.empty()) return nullptr;
  guardEntryMode(ctx);
  return makeConst(ctx.inferenceMode ? Py_True : Py_False);
}

PyObjectRef tracedInferenceMode(CompileContext& ctx) {
  if (ctx.inferenceBlocks == 0 && ctx.enteredInferenceMode < 0) return {};
  const bool real = realInferenceMode();
  if (real == ctx.inferenceMode) return {};
  static PyObject* raii = lookupAttr("torch._C", "_InferenceMode");
  return PyObjectRef::steal(checkPy(PyObject_CallOneArg(raii, ctx.inferenceMode ? Py_True : Py_False)));
}

}  // namespace dynamo::core::interp
