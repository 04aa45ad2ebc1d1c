// torch.autocast blocks in the trace (autocast.cpp; docs/capture.md, "Autocast").
//
//   with torch.autocast("cpu", dtype=torch.bfloat16):     enter_autocast("cpu", torch.bfloat16,
//   with torch.cpu.amp.autocast(), torch.cuda.amp...:        True, True)   <- a graph node
//   @torch.autocast(...) on a function (its wrapper's        ... the block's ops ...
//   `with autocast_instance:`)                            exit_autocast()  <- a graph node
//
// The nodes call dynamo.context_nodes, which enters and leaves a real torch.autocast made from
// the block's effective settings (what the constructor made of its arguments), so every backend
// replays eager's autocast state: the eager runner runs them, the AOT backends trace through them
// (casts become explicit ATen ops), the fused backend runs such graphs on the eager runner. The
// open blocks are kept on CompileContext::autocastBlocks; while one autocasts, each op's example
// dtypes come from a run on stand-in tensors of the real device under the traced blocks (meta
// tensors are never autocast). The autocast state the frame is entered with is guarded (AUTOCAST).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tracer.h"

namespace dynamo::core::interp {

/// `cls(*args, **kwargs)` for torch.autocast / torch.cpu.amp.autocast / torch.cuda.amp.autocast:
/// the context manager Value (a no-op when it changes nothing); null for other classes. Throws
/// GraphBreak when its arguments are not constants.
ValueRef autocastManager(CompileContext& ctx, PyObject* cls, const std::vector<ValueRef>& args,
                         const std::vector<std::pair<std::string, ValueRef>>& kwargs);
/// The context manager Value of an autocast instance read from the frame (a decorator's
/// `with autocast_instance:`); null when v is none.
ValueRef autocastManagerOf(CompileContext& ctx, const ValueRef& v);
/// `with mgr:` of an autocast manager Value: records the enter node. Returns the __exit__ Value.
ValueRef enterAutocast(CompileContext& ctx, const ValueRef& mgr);
/// The __exit__ Value of an autocast block is called: records the exit node.
void exitAutocast(CompileContext& ctx);
/// Guards the autocast state the frame is entered with (AUTOCAST; once per compile).
void guardAutocastEntry(CompileContext& ctx);
/// True when an op traced now may be autocast (a block that autocasts is open, or the frame was
/// entered under autocast): its example dtypes need a run under TracedAutocast.
bool autocastMayApply(CompileContext& ctx);
/// torch.is_autocast_enabled(), get_autocast_cpu_dtype() and the other queries of the autocast
/// state: answered for the traced state; null when fn is none of them.
ValueRef autocastQuery(CompileContext& ctx, PyObject* fn, const std::vector<ValueRef>& args,
                       const std::vector<std::pair<std::string, ValueRef>>& kwargs);

/// Enters the open traced blocks for real for its lifetime (to compute examples under them);
/// leaves them, innermost first, when destroyed. Any pending Python error is kept.
class TracedAutocast {
 public:
  explicit TracedAutocast(const CompileContext& ctx);
  ~TracedAutocast();
  TracedAutocast(const TracedAutocast&) = delete;
  TracedAutocast& operator=(const TracedAutocast&) = delete;

 private:
  PyObjectRef depth_;  // dynamo.context_nodes.depth() before entering
};

}  // namespace dynamo::core::interp
