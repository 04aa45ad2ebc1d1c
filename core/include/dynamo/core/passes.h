// The pass pipeline: graph-to-graph transformations between capture and the backend.
//
//   tracer -> Graph --[pass 1]--> Graph --[pass 2]--> ... --> backend
//
// A pass is a free function `Graph pass(const Graph&)` in a file of its own (core/src/passes),
// listed in passes.def. It never edits a node: it builds a new graph with a GraphRewriter (or
// returns its input unchanged). The pipeline records, for each pass, whether it changed the graph
// and (only then) the graph it produced, for DYNAMO_LOGS=passes; a pass named in
// PassOptions::disabled is skipped (the accuracy bisector finds a bad pass this way).
#pragma once

#include <string>
#include <vector>

#include "dynamo/core/graph.h"

namespace dynamo::core {

/// One pass of passes.def.
struct PassInfo {
  const char* name;         ///< "dead_code_elimination"
  const char* description;  ///< what it does, one sentence
};
/// The passes in pipeline order.
const std::vector<PassInfo>& passList();

/// Options of one pipeline run.
struct PassOptions {
  std::vector<std::string> disabled;  ///< pass names not to run
  bool printGraphs = true;            ///< fill PassRecord::graphText (only when a log or trace wants it)
};

/// What one pass did.
struct PassRecord {
  std::string name;        ///< the pass
  std::string status;      ///< "changed", "unchanged" or "disabled"
  size_t nodesBefore = 0;  ///< graph size (inputs, body, output) before it
  size_t nodesAfter = 0;   ///< and after it
  std::string graphText;   ///< the printed graph after it, when it changed the graph
};

/// Runs every enabled pass in order. `records` (optional) receives one record per pass.
Graph runPasses(const Graph& graph, const PassOptions& options, std::vector<PassRecord>* records = nullptr);

/// Rebuilds a graph node by node: kept nodes are copied with their arguments remapped to the
/// copies of the nodes they use; a node a pass drops must have no kept users.
class GraphRewriter {
 public:
  explicit GraphRewriter(const Graph& base);
  /// Copies body node `n` (call_function or call_method) into the new graph; returns its copy.
  NodeRef copy(const NodeRef& n);
  /// `a` with every node reference replaced by its copy.
  Arg remap(const Arg& a) const;
  /// Sets the output (the base's output structure, remapped) and returns the new graph.
  Graph finish();

 private:
  Graph base_;
  GraphBuilder builder_;
  std::unordered_map<const Node*, NodeRef> copies_;
};

// ---- the passes (one file each in core/src/passes) --------------------------------------------
#define DYNAMO_PASS(Name, name, description) Graph run##Name(const Graph& graph);
#include "dynamo/core/passes.def"

}  // namespace dynamo::core
