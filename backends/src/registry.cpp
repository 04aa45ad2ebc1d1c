// The registry of backends.def.
#include "backends_internal.h"
#include "dynamo/backends/registry.h"

namespace dynamo::backends {

const std::vector<BackendInfo>& backendList() {
  static const std::vector<BackendInfo> kList = {
#define DYNAMO_BACKEND(Name, name, description) {name, description},
#include "../backends.def"
  };
  return kList;
}

std::shared_ptr<core::Backend> makeBackend(const std::string& name) {
#define DYNAMO_BACKEND(Name, n, description) \
  if (name == n) return make##Name##Backend();
#include "../backends.def"
  return nullptr;
}

}  // namespace dynamo::backends
