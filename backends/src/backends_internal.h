// Constructors of the backends of backends.def (one file each), for the registry.
#pragma once

#include <memory>
#include <string>

#include "dynamo/core/backend.h"

namespace dynamo::backends {

#define DYNAMO_BACKEND(Name, name, description) std::shared_ptr<core::Backend> make##Name##Backend();
#include "../backends.def"

/// The AOT layer (python/dynamo/aot) with the named preset of dynamo.aot.PRESETS: "aot_eager",
/// ..., or "fused" (the fused backend's training path: forward and backward compiled to kernels).
std::shared_ptr<core::Backend> makeAotBackend(const std::string& preset);

}  // namespace dynamo::backends
