// Python objects of graph arguments: the one place that turns an Arg into the object it stands
// for (used by the runner, the FX conversion and the bindings), and the resolution of targets
// known by name only (graphs read back from JSON) to live callables.
#pragma once

#include <functional>
#include <string>

#include "dynamo/core/graph.h"
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

/// The object a qualified name stands for ("torch.nn.functional.relu"): imports the first part,
/// then walks attributes, importing submodules where one is missing. A new ref, or null (no
/// Python error left set) when the name does not resolve. Needs the GIL.
PyObjectRef resolveQualifiedName(const std::string& qualifiedName);

/// The same graph (same names, arguments and meta) with every call_function target given its
/// live callable, resolved by qualified name: what a graph read back from JSON needs before it
/// can run or become a GraphModule. Targets that already have one keep it. Needs the GIL; user
/// error naming the node and target when a name does not resolve.
Graph resolveTargets(const Graph& graph);

}  // namespace dynamo::core
