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
// callable carries "resolvable": false; an ATen operator target ("torch.ops.aten.add.Tensor")
// also carries its "schema" ("aten::add.Tensor"). Tensor meta is {"shape", "dtype", "device",
// "requires_grad"} and, when known, "strides" and "memory_format" ("contiguous",
// "channels_last" or "other"). Readers ignore members they do not know.
//
// readGraphJson is the C++ reader: it needs no Python (targets come back by name, without a live
// callable; resolveTargets in graph_python.h makes the graph runnable), and
// serializeGraph(readGraphJson(text)) == text for any text serializeGraph wrote.
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

/// The graph of JSON text written by serializeGraph (compact or pretty). No Python needed. Throws
/// a UserError (kInvalidArgument) naming the node and member at fault for text that is not such
/// a graph: invalid JSON, another format or version, an unknown op or argument tag, a reference
/// to a node not defined before its use, a duplicate or non-canonical node name, ...
Graph readGraphJson(const std::string& text);

/// True when the two graphs have the same nodes (names, ops, targets by name, arguments, meta),
/// that is the same serialized form; live callables are not compared.
bool sameGraph(const Graph& a, const Graph& b);

}  // namespace dynamo::core
