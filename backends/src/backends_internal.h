// Constructors of the backends of backends.def (one file each), for the registry.
#pragma once

#include <memory>

#include "dynamo/core/backend.h"

namespace dynamo::backends {

#define DYNAMO_BACKEND(Name, name, description) std::shared_ptr<core::Backend> make##Name##Backend();
#include "../backends.def"

}  // namespace dynamo::backends
