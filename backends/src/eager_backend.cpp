// "eager" (backends.def): the captured graph run by core's GraphRunner, which knows which node
// failed (so side effects before it can be applied as in eager).
#include "backends_internal.h"

namespace dynamo::backends {

GraphRunnerFn::GraphRunnerFn(const core::Graph& graph) : runner_(graph) {}

PyObject* GraphRunnerFn::call(PyObject* const* inputs, size_t count, size_t* failedAt) const {
  return runner_.run(inputs, count, failedAt);
}

namespace {

class EagerBackend final : public core::Backend {
 public:
  const std::string& name() const override { return name_; }
  std::unique_ptr<core::CompiledGraphFn> compile(const core::BackendRequest& request) const override {
    return std::make_unique<GraphRunnerFn>(request.graph);
  }

 private:
  std::string name_ = "eager";
};

}  // namespace

std::shared_ptr<core::Backend> makeEagerBackend() { return std::make_shared<EagerBackend>(); }

}  // namespace dynamo::backends
