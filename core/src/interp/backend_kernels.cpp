// The kernels a backend reports for the compile running on its thread (backend.h): a
// thread-local slot set by the compiler around Backend::compile. The fused backend reports
// through it whether it was called by the compiler directly or through the AOT layer (Python,
// same thread), so core never learns about codegen and the backends never about the store.
#include <map>

#include "dynamo/core/backend.h"
#include "dynamo/core/compile_sink.h"

namespace dynamo::core {
namespace detail {
struct KernelSlot {
  std::vector<BackendKernel>* out = nullptr;
  std::map<std::string, int> calls;  // graph kind -> graphs of that kind reported so far
};
}  // namespace detail
namespace {
thread_local detail::KernelSlot* tlsSlot = nullptr;
uint64_t lastToken = 0;  // GIL held
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

uint64_t reportBackendKernels(const std::string& graph, std::vector<BackendKernel> kernels) {
  if (!tlsSlot) return 0;
  const int ordinal = tlsSlot->calls[graph]++;  // a graph with no kernel still takes its number
  const uint64_t token = ++lastToken;
  int index = 0;
  for (BackendKernel& k : kernels) {
    k.graph = graph;
    k.graphOrdinal = ordinal;
    k.runToken = token;
    k.runIndex = index++;
    tlsSlot->out->push_back(std::move(k));
  }
  return token;
}

void reportKernelRunTimes(uint64_t token, const std::vector<double>& meanUs, int calls) {
  if (const auto& sink = compileSink()) sink->kernelRunTimes(token, meanUs, calls);
}

}  // namespace dynamo::core
