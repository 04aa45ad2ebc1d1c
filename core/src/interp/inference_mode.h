// torch.inference_mode blocks in the trace (inference_mode.cpp; docs/capture.md).
//
//   with torch.inference_mode():              enter_inference_mode(True)   <- a graph node
//   @torch.inference_mode() on a function        ... the block's ops (inference tensors) ...
//   with torch.inference_mode(False):         exit_inference_mode()        <- a graph node
//
// The nodes call dynamo.context_nodes, which enters and leaves a real torch.inference_mode, so
// the ops between them make inference tensors as in eager. Inside a block grad mode is off (on
// for inference_mode(False), as c10::InferenceMode sets it); examples are computed in the traced
// mode (they are inference tensors too: x.is_inference() and in-place updates of inference
// tensors outside the mode behave as in eager). The mode the frame is entered in is guarded
// (INFERENCE_MODE). The AOT backends and fused run such graphs on the eager runner.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tracer.h"

namespace dynamo::core::interp {

/// `torch.inference_mode(mode)`: its context manager Value; null for other callables. Throws
/// GraphBreak when the mode is not a constant.
ValueRef inferenceModeManager(CompileContext& ctx, PyObject* fn, const std::vector<ValueRef>& args,
                              const std::vector<std::pair<std::string, ValueRef>>& kwargs);
/// `with mgr:` of an inference-mode manager Value: records the enter node. Returns the __exit__
/// Value (it remembers the grad and inference modes to restore).
ValueRef enterInferenceMode(CompileContext& ctx, const ValueRef& mgr);
/// The __exit__ Value `exit` of an inference-mode block is called: records the exit node.
void exitInferenceMode(CompileContext& ctx, const GradModeData& exit);
/// torch.is_inference_mode_enabled(): the traced mode; null when fn is another callable.
ValueRef inferenceModeQuery(CompileContext& ctx, PyObject* fn, const std::vector<ValueRef>& args);
/// Puts the real inference mode in the traced one for the examples of a call, when they differ
/// (a torch._C._InferenceMode guard: new ref, released to leave it); null when they agree.
PyObjectRef tracedInferenceMode(CompileContext& ctx);

}  // namespace dynamo::core::interp
