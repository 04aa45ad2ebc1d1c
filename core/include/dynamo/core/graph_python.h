// Python objects of graph arguments: the one place that turns an Arg into the object it stands
// for (used by the runner, the FX conversion and the bindings).
#pragma once

#include <functional>

#include "dynamo/core/graph_arg.h"
#include "dynamo/core/graph_node.h"
#include "dynamo/core/graph_pyref.h"

namespace dynamo::core {

/// Gives the Python value of a node reference (a borrowed ref; must not be NULL).
using NodeValueFn = std::function<PyObject*(const NodeRef&)>;

/// The Python object arg stands for, with node references replaced by nodeValue(node). Torch
/// constants (dtype, device, ...) come from `torch` (imported on first use, cached). Needs the
/// GIL; throws PythonError with the Python error set on failure.
PyObjectRef argToPython(const Arg& arg, const NodeValueFn& nodeValue);

/// The Python object of an Arg without node references; internal error if it has one.
PyObjectRef constantToPython(const Arg& arg);

}  // namespace dynamo::core
