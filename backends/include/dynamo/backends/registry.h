// The backends of backends.def and the adapter for a user's Python callable.
#pragma once

#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "dynamo/core/backend.h"

namespace dynamo::backends {

/// One backend of backends.def.
struct BackendInfo {
  const char* name;         ///< "eager"
  const char* description;  ///< one sentence
};
/// The backends of backends.def, in file order.
const std::vector<BackendInfo>& backendList();

/// The backend of backends.def called `name`, or null when there is none.
std::shared_ptr<core::Backend> makeBackend(const std::string& name);

/// A user's backend: a Python callable compiler(gm, example_inputs) -> callable, given the graph
/// as a torch.fx.GraphModule. `callable` is borrowed (a new reference is kept).
std::shared_ptr<core::Backend> makeCallableBackend(PyObject* callable, std::string name);

}  // namespace dynamo::backends
