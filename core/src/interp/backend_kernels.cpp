// The kernels a backend reports for the compile running on its thread (backend.h): a
// thread-local slot set by the compiler around Backend::compile. The fused backend reports
// through it whether it was called by the compiler directly or through the AOT layer (Python,
// same thread), so core never learns about codegen and the backends never about the store.
#include <map>

#include "dynamo/core/backend.h"

namespace dynamo::core {
namespace detail {
struct KernelSlot {
  std::vector<BackendKernel>* out = nullptr;
  std::map<std::string, int> calls;  // graph kind -> graphs of that kind reported so far
};
}  // namespace detail
namespace {
thread_local detail::KernelSlot* tlsSlot = nullptr;
}  // namespace

BackendKernelCollector::BackendKernelCollector(std::vector<BackendKernel>* out)
    : previous_(tlsSlot), slot_(new detail::KernelSlot{out, {}}) {
  tlsSlot = slot_;
}

BackendKernelCollector::~BackendKernelCollector() {
  tlsSlot = previous_;
  delete slot_;
}

bool wantsBackendKernels() { return tlsSlot != nullptr; }

void reportBackendKernels(const std::string& graph, std::vector<BackendKernel> kernels) {
  if (!tlsSlot) return;
  const int ordinal = tlsSlot->calls[graph]++;  // a graph with no kernel still takes its number
  for (BackendKernel& k : kernels) {
    k.graph = graph;
    k.graphOrdinal = ordinal;
    tlsSlot->out->push_back(std::move(k));
  }
}

}  // namespace dynamo::core
