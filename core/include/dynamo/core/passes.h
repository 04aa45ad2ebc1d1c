// The pass pipeline: graph-to-graph transformations between capture and the backend.
//
//   tracer -> Graph --[pass 1]--> Graph --[pass 2]--> ... --> backend
//
// A pass is a free function `Graph pass(const Graph&, PassContext&)` in a file of its own
// (core/src/passes), listed in passes.def. It never edits a node: it builds a new graph with a
// GraphRewriter (or returns its input unchanged). The pipeline records, for each pass, whether it
// changed the graph and (only then) the graph it produced, for DYNAMO_LOGS=passes; a pass named
// in PassOptions::disabled is skipped (the accuracy bisector finds a bad pass this way).
//
// Applications: a pass asks PassContext::apply(site) before each rewrite it makes at one node.
// The pipeline numbers them per pass over every run sharing PassOptions::counters (the Python
// module shares one per process) and, when PassOptions::limits caps the pass at N
// (DYNAMO_BISECT_PASS=name:N), lets only the first N go ahead: dynamo-bisect's binary search to
// the single bad application (LLVM's DebugCounter does the same for its passes).
#pragma once

#include <functional>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dynamo/core/graph.h"

namespace dynamo::core {

/// One pass of passes.def.
struct PassInfo {
  const char* name;         ///< "dead_code_elimination"
  const char* description;  ///< what it does, one sentence
  bool testOnly;            ///< DYNAMO_TEST_PASS: runs only when a test turns it on
};
/// The passes in pipeline order (test-only passes last).
const std::vector<PassInfo>& passList();

#define DYNAMO_PASS(Name, name, description) +1
#define DYNAMO_TEST_PASS(Name, name, description) +1
/// How many passes passes.def lists (test-only ones included).
inline constexpr size_t kNumPasses = 0
#include "dynamo/core/passes.def"
    ;

/// Application counts per pass (index in passList()), shared by the pipeline runs that number
/// applications together: the Python module shares one per process.
struct PassCounters {
  std::array<std::atomic<std::int64_t>, kNumPasses> asked{};  ///< applications numbered so far
};

/// Options of one pipeline run.
struct PassOptions {
  std::vector<std::string> disabled;  ///< pass names not to run
  /// (pass, N): only the first N applications of the pass (numbered by `counters`) go ahead
  /// (DYNAMO_BISECT_PASS=name:N).
  std::vector<std::pair<std::string, std::int64_t>> limits;
  /// Where applications are numbered; null: from 1 in this run alone.
  std::shared_ptr<PassCounters> counters;
  /// Test only (DYNAMO_TEST_CORRUPT_NODE): turns on the test pass test_corrupt_node, which breaks
  /// the call nodes of this name ("relu"; "relu:value": makes their values 1e-2 off). Empty:
  /// test passes do not run.
  std::string corruptNode;
  bool printGraphs = true;            ///< fill PassRecord::graphText (only when a log or trace wants it)
};

/// One application of a pass (one rewrite at one node), as the pass asked for it.
struct PassApplication {
  std::int64_t index = 0;   ///< its number among the pass's applications (1-based)
  std::string node;         ///< the node it rewrites ("relu_1"), in the graph the pass got
  std::string op;           ///< that node's Node::opKey()
  SourceLocation where;     ///< that node's user line
  bool applied = true;      ///< false: skipped, past the limit of PassOptions::limits
};

/// What one pass did.
struct PassRecord {
  std::string name;        ///< the pass
  std::string status;      ///< "changed", "unchanged" or "disabled"
  size_t nodesBefore = 0;  ///< graph size (inputs, body, output) before it
  size_t nodesAfter = 0;   ///< and after it
  std::string graphText;   ///< the printed graph after it, when it changed the graph
  /// When it changed the graph and listings are wanted (PassOptions::printGraphs): the body
  /// nodes of its input that its output lacks, and those its output added, by name.
  std::vector<std::string> removed, added;
  /// ... and the graph it got (a shared handle, no copy): the trace store keeps it so that the
  /// inspector can diff the graph before the pass against the one after it.
  std::shared_ptr<const Graph> input;
  std::vector<PassApplication> applications;  ///< every application it asked for, in order
};

/// What a pass sees of the pipeline besides its graph: the options and its applications.
class PassContext {
 public:
  /// `limit` < 0: no limit. `counter` numbers this pass's applications.
  PassContext(const PassOptions& options, std::atomic<std::int64_t>& counter, std::int64_t limit,
              std::vector<PassApplication>& out)
      : options_(options), counter_(counter), limit_(limit), out_(out) {}
  /// Asks to apply the pass at `site` (one rewrite at that node): numbers and records the
  /// application, and says whether the pass may make it (false past its limit).
  bool apply(const NodeRef& site);
  /// The pipeline's options.
  const PassOptions& options() const { return options_; }

 private:
  const PassOptions& options_;
  std::atomic<std::int64_t>& counter_;
  std::int64_t limit_;
  std::vector<PassApplication>& out_;
};

/// Runs every enabled pass in order. `records` (optional) receives one record per pass.
Graph runPasses(const Graph& graph, const PassOptions& options, std::vector<PassRecord>* records = nullptr);

/// Rebuilds a graph node by node: kept nodes are copied with their arguments remapped to the
/// copies of the nodes they use; a node a pass drops must have no kept users.
class GraphRewriter {
 public:
  /// `metaOf` (optional) gives each copied node's meta (inputs included); by default a copy keeps
  /// its node's meta.
  explicit GraphRewriter(const Graph& base, std::function<NodeMeta(const Node&)> metaOf = nullptr);
  /// Copies body node `n` (call_function or call_method) into the new graph; returns its copy.
  NodeRef copy(const NodeRef& n);
  /// `a` with every node reference replaced by its copy.
  Arg remap(const Arg& a) const;
  /// From now on, uses of base node `n` refer to `with` (a node made with builder()).
  void replaceUses(const NodeRef& n, NodeRef with) { copies_[n.get()] = std::move(with); }
  /// The builder of the new graph, to add nodes of the pass's own.
  GraphBuilder& builder() { return builder_; }
  /// Sets the output (the base's output structure, remapped) and returns the new graph.
  Graph finish();

 private:
  Graph base_;
  GraphBuilder builder_;
  std::unordered_map<const Node*, NodeRef> copies_;
  std::function<NodeMeta(const Node&)> metaOf_;
  NodeMeta metaOf(const Node& n) const { return metaOf_ ? metaOf_(n) : n.meta(); }
};

// ---- the passes (one file each in core/src/passes) --------------------------------------------
#define DYNAMO_PASS(Name, name, description) Graph run##Name(const Graph& graph, PassContext& ctx);
#define DYNAMO_TEST_PASS(Name, name, description) Graph run##Name(const Graph& graph, PassContext& ctx);
#include "dynamo/core/passes.def"

}  // namespace dynamo::core
