// The graph printer: readable, stable text for logs, the explainer and golden tests.
//
//   graph(%x, %y):
//     %x: f32[2, 3] = placeholder[source=x]
//     %y = placeholder[source=y]
//     %add: f32[2, 3] = torch.add(%x, %y, alpha=2)  # model.py:12
//     %view = %add.view(-1)  # model.py:13
//     return (%add, %view)
//
// One node per line; constants print as Python reprs; user locations print as trailing comments.
#pragma once

#include <string>

#include "dynamo/core/graph.h"

namespace dynamo::core {

/// What printGraph shows besides the nodes themselves.
struct PrintOptions {
  bool showLocations = true;  ///< "# file.py:12" comments after nodes with a user location
  bool showTensorMeta = true; ///< ": f32[2, 3]" after node names with tensor meta
};

/// The graph as text, one node per line, ending with a newline.
std::string printGraph(const Graph& graph, const PrintOptions& options = {});

/// One node as printed in a graph, without indentation, tensor meta or location:
/// "%add = torch.add(%x, %y)", "%view = %add.view(-1)", "return (%add,)".
std::string printNode(const Node& node);

/// One argument as printed inside a node line (node refs as %name, constants as Python reprs).
std::string printArg(const Arg& arg);

/// Python's repr() of a float: the shortest text that reads back to the same double.
std::string formatFloat(double value);

}  // namespace dynamo::core
