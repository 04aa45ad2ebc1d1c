// Constructors of the backends of backends.def (one file each), for the registry.
#pragma once

#include <memory>
#include <string>

#include "dynamo/common/logs.h"
#include "dynamo/core/backend.h"
#include "dynamo/core/graph_runner.h"

namespace dynamo::backends {

#define DYNAMO_BACKEND(Name, name, description) std::shared_ptr<core::Backend> make##Name##Backend();
#include "../backends.def"

/// The AOT layer (python/dynamo/aot) with the named preset of dynamo.aot.PRESETS: "aot_eager",
/// ..., or "fused" (the fused backend's training path: forward and backward compiled to kernels).
std::shared_ptr<core::Backend> makeAotBackend(const std::string& preset);

/// A graph run by core's GraphRunner: the "eager" backend's callable, and the fused backends'
/// fallback for a graph (or a size) that kernels cannot run. The runner knows which node failed, so
/// side effects before it can be applied as in eager.
class GraphRunnerFn final : public core::CompiledGraphFn {
 public:
  explicit GraphRunnerFn(const core::Graph& graph);
  PyObject* call(PyObject* const* inputs, size_t count, size_t* failedAt) const override;

 private:
  core::GraphRunner runner_;  ///< planned once; run() is re-entrant
};

/// The key of a call for backends that compile once per input signature: per input, a tensor's
/// sizes and strides, an int's or float's value, else its type. Needs the GIL.
std::string inputSignature(PyObject* const* inputs, size_t count);

/// The "fused" backend's callable for a graph with dynamic sizes (fused_per_size.cpp): lowers
/// the graph again for each input signature, its kernels parametrised by size
/// (codegen/kernel_template.h), so that sizes with the same kernel text share compiled kernels.
std::unique_ptr<core::CompiledGraphFn> makePerSizeFused(const core::BackendRequest& request);

/// A backend's compile that raised in Python (the error is set now): takes that error and throws
/// BackendCompilerFailed (UserError, with `explanation` and `hint`, the Python error as its
/// __cause__), or with r.suppressErrors an Error (the function then runs eagerly, one warning).
[[noreturn]] void throwBackendFailed(const core::BackendRequest& r, const std::string& backend,
                                     const char* explanation, const char* hint);

/// DYNAMO_LOGS names the log `what` or "all" (dynamo/common/logs.h).
using common::logEnabled;

/// True when a dimension's size expression is one symbol ("s0"), not an expression ("2*s0").
bool plainSymbol(const std::string& e);

}  // namespace dynamo::backends
