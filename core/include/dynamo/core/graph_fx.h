// Conversion of a Graph to a torch.fx.GraphModule, the form user backends receive
// (compiler(gm, example_inputs)).
//
// The C++ side turns each node into a plain tuple (op, name, target, args, kwargs, meta) with
// constants as Python objects and node references as dynamo.fx_bridge.NodeRef(name); the Python
// helper dynamo.fx_bridge.build_graph_module() makes the FX graph from them, the same helper
// graph_io.deserialize uses, so both paths give the same GraphModule. Parameters and buffers are
// placeholders: the GraphModule is a pure function of its inputs.
#pragma once

#include "dynamo/core/graph.h"
#include "dynamo/core/graph_pyref.h"

namespace dynamo::core {

/// A new torch.fx.GraphModule equivalent to graph. Needs the GIL and an importable `dynamo`
/// package; throws PythonError when a Python call fails (the error stays set).
PyObjectRef toFxGraphModule(const Graph& graph);

}  // namespace dynamo::core
