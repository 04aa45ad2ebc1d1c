// The graph serializer: JSON text for the trace store, from which tools rebuild the graph
// (python/dynamo/graph_io.py turns it into a torch.fx.GraphModule).
//
// Format (version 1), one object per node in graph order:
//   {"format": "dynamo.graph", "version": 1, "nodes": [
//     {"op": "placeholder", "name": "x", "source": "x", "meta": {...}},
//     {"op": "call_function", "name": "add", "target": "torch.add",
//      "args": [{"node": "x"}, {"node": "y"}], "kwargs": {"alpha": 2}},
//     {"op": "call_method", "name": "view", "target": "view", "args": [...], "kwargs": {}},
//     {"op": "output", "name": "output", "args": [{"tuple": [{"node": "add"}]}]}]}
// Arguments: null, true/false, ints, floats (always with '.' or an exponent; non-finite as
// {"float": "inf"}), strings and lists are plain JSON; everything else is a one-key object:
// {"node": name}, {"dtype": "torch.float32"}, {"device": "cpu"}, {"memory_format": ...},
// {"layout": ...}, {"ellipsis": true}, {"slice": [start, stop, step]}, {"tuple": [...]},
// {"dict": [[key, value], ...]}. A call_function target that could not be resolved back to its
// callable carries "resolvable": false.
#pragma once

#include <string>

#include "dynamo/core/graph.h"

namespace dynamo::core {

/// Version of the JSON format written by serializeGraph.
constexpr int kGraphFormatVersion = 1;

/// Options of serializeGraph.
struct SerializeOptions {
  bool pretty = false;  ///< one node per line instead of one line in all
};

/// The graph as JSON text (see the format above).
std::string serializeGraph(const Graph& graph, const SerializeOptions& options = {});

}  // namespace dynamo::core
