// "eager" (backends.def): the captured graph run by core's GraphRunner, which knows which node
// failed (so side effects before it can be applied as in eager).
#include "backends_internal.h"
#include "dynamo/core/graph_runner.h"

namespace dynamo::backends {
namespace {

class RunnerFn final : public core::CompiledGraphFn {
 public:
  explicit RunnerFn(const core::Graph& graph) : runner_(graph) {}
  PyObject* call(PyObject* const* inputs, size_t count, size_t* failedAt) const override {
    return runner_.run(inputs, count, failedAt);
  }

 private:
  core::GraphRunner runner_;
};

class EagerBackend final : public core::Backend {
 public:
  const std::string& name() const override { return name_; }
  std::unique_ptr<core::CompiledGraphFn> compile(const core::BackendRequest& request) const override {
    return std::make_unique<RunnerFn>(request.graph);
  }

 private:
  std::string name_ = "eager";
};

}  // namespace

std::shared_ptr<core::Backend> makeEagerBackend() { return std::make_shared<EagerBackend>(); }

}  // namespace dynamo::backends
