// Conversion of a Graph to a torch.fx.GraphModule, the form user backends receive
// (compiler(gm, example_inputs)).
//
// The C++ side turns each node into a plain tuple (op, name, target, args, kwargs, meta) with
// constants as Python objects and node references as bridge.NodeRef(name); the Python helper
// bridge.build_graph_module() makes the FX graph from them. The bridge is dynamo.fx_bridge, the
// same helper graph_io.deserialize uses, so both paths give the same GraphModule; core does not
// name the package: the binding layer gives it (setFxBridgeLoader). Parameters and buffers are
// placeholders: the GraphModule is a pure function of its inputs.
#pragma once

#include "dynamo/core/graph.h"
#include "dynamo/core/graph_pyref.h"

namespace dynamo::core {

/// A new torch.fx.GraphModule equivalent to graph. Needs the GIL and a bridge loader; throws
/// PythonError when a Python call fails (the error stays set), InternalError without a loader.
PyObjectRef toFxGraphModule(const Graph& graph);

/// Returns the bridge module (NodeRef, build_graph_module) as a new reference, or throws.
using FxBridgeLoader = PyObjectRef (*)();
/// Sets the loader toFxGraphModule calls (the binding layer: it imports dynamo.fx_bridge). GIL.
void setFxBridgeLoader(FxBridgeLoader loader);

}  // namespace dynamo::core
