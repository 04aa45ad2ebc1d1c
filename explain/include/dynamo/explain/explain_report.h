// The graph-break explainer's report: what a run compiled, per function, built from a trace
// store, and its renderers. Pure functions: they read the store and return text; only cli/
// writes files. The Qt inspector and dynamo._C._reports reuse them.
//
//   TraceReader --buildExplainReport--> ExplainReport --renderExplain(format)--> text
//                                             \--checkExplainPolicy--> (exit code, message)
//
// Occurrences: one pass of the program through a break site at run time, counted as
// storage::BreakTally says (trace_reader.h), the one definition dynamo-trace and dynamo.explain()
// use too: 1 + the runtime hits of the cache entry for each compile that met the break
// (cache_entry_hits, counted by the entry itself; the "dynamo.entry_hits" artifact in v1-v2
// stores), 1 for a compile that made no entry; a break in a callee, met by its callers' compiles
// (inlined, one call chain each) and by its own compile, counts each pass once.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dynamo/explain/aot_report.h"
#include "dynamo/explain/format.h"
#include "dynamo/storage/trace_reader.h"

namespace dynamo::explain {

using storage::RowId;

/// One captured graph.
struct GraphSummary {
  RowId compileId = 0;                  ///< the compile that captured it
  int attempt = 0;                      ///< that compile's attempt
  int index = 0;                        ///< index within the compile
  int numNodes = 0;                     ///< nodes, placeholders and output included
  std::map<std::string, int> opCounts;  ///< graphOpKey -> count ("operator.mul": 2)
  std::string printed;                  ///< the printed graph (graph_printer.h), as stored
  int ops() const;                      ///< sum of opCounts
  // -- AOT (aot_report.h) --
  std::optional<GraphAot> aot;  ///< what an AOT backend did with the graph; none for others
  /// Its compiles per input signature (a graph with dynamic sizes under an AOT backend), in order.
  std::vector<AotSizeCompile> aotPerSize;
};

/// Graph breaks that share a kind and a user location (file, line).
struct BreakGroup {
  std::string kind;                    ///< graph-break kind slug
  SourceLocation location;             ///< user file:line and the source line
  std::string explanation;             ///< of the first break in the group
  std::vector<std::string> hints;      ///< of the first break
  std::vector<std::string> userStack;  ///< of the first break, outermost first
  std::int64_t occurrences = 0;        ///< see the banner; at least 1
  std::int64_t compiles = 0;           ///< compiles that met it
  storage::BreakTally tally;           ///< what occurrences is computed from
  std::vector<std::string> functions;  ///< the functions whose compiles met it, first first
};

/// A dimension of an input tensor (or a Python int input) that a compile made dynamic.
struct DynamicDim {
  std::string source;  ///< "x.size()[0]", "self.step"
  std::string symbol;  ///< "s0"; "float" for a float input (no symbol, no range)
  std::string range;   ///< "[2, inf]" ("" when the record does not say)
  std::string why;     ///< "automatic dynamic: the size changed (8 -> 16)", "mark_dynamic", ...
};

/// A compile's dynamic-shape record (the "dynamo.dynamic_shapes" artifact, one line per fact,
/// docs/dynamic-shapes.md), sorted into what is dynamic, what was specialised, the shape guards
/// and the other notes.
struct DynamicShapes {
  std::vector<DynamicDim> dynamic;       ///< symbols, in order
  std::vector<std::string> specialised;  ///< "x.size()[0] specialised to 6: x.shape read as Python ints at m.py:5"
  std::vector<std::string> guards;       ///< "Mod(n, 3) == 0  # comparison at m.py:7", duck-sizing equalities
  std::vector<std::string> notes;        ///< why a size stayed static ("every size is static: backend ...")
  bool empty() const { return dynamic.empty() && specialised.empty() && guards.empty() && notes.empty(); }
};
/// Parses the artifact's text.
DynamicShapes parseDynamicShapes(const std::string& text);
/// The name of that artifact.
inline constexpr const char* kDynamicShapesArtifact = "dynamo.dynamic_shapes";

/// One compiled function (a frame of the store: file, first line, name).
struct FunctionReport {
  std::string name;                     ///< co_qualname, "<resume in f>" for resume functions
  std::string file;                     ///< co_filename
  int firstLine = 0;                    ///< co_firstlineno
  int compiles = 0;                     ///< compile attempts
  std::map<std::string, int> statuses;  ///< compile status -> count ("ok": 1)
  std::string notCompiledReason;        ///< reason of the last skipped/failed compile, if any
  /// Every compile that made no cache entry, in attempt order: (status, reason).
  std::vector<std::pair<std::string, std::string>> notCompiled;
  std::vector<GraphSummary> graphs;     ///< every graph of every compile
  std::vector<BreakGroup> breaks;       ///< distinct breaks, most frequent first
  std::int64_t guards = 0;              ///< guards over all compiles
  std::map<std::string, std::int64_t> guardKinds;  ///< those guards by kind ("TENSOR_MATCH": 3)
  std::int64_t compileUs = 0;           ///< total compile time
  std::vector<storage::CompilePhase> phases;  ///< summed phase times, in first-seen order
  /// Symbols and shape guards of its newest compile that has symbols; the specialisations and
  /// notes of all its compiles (empty: every size static, nothing to say).
  DynamicShapes dynamicShapes;
  bool hasBreaks() const { return !breaks.empty(); }
};

/// One run (one process) of the store.
struct RunExplain {
  storage::RunRecord run;                  ///< who ran it
  std::vector<FunctionReport> functions;   ///< in first-compile order
  std::vector<BreakGroup> breaks;          ///< distinct over the run, most frequent first
  std::int64_t compiles = 0;               ///< compiles
  std::int64_t graphs = 0;                 ///< graphs
  std::int64_t ops = 0;                    ///< ops over all graphs
  std::int64_t compileUs = 0;              ///< total compile time
  bool hitsRecorded = false;               ///< the run has the runtime-hits artifact
};

/// The report over a store: one block per run.
struct ExplainReport {
  std::string storePath;        ///< the file read
  std::vector<RunExplain> runs; ///< oldest first
  /// Distinct breaks over every run (kind, file, line).
  std::int64_t distinctBreaks() const;
};

/// Builds the report for run `runId`, or every run when runId is 0. Throws UserError(kTraceStore)
/// when runId names no run.
ExplainReport buildExplainReport(const storage::TraceReader& reader, RowId runId = 0);

/// Op counts of a serialized graph ("dynamo.graph" JSON), keyed by graphOpKey
/// (common/op_key.h): call_function by target, call_method as "torch.Tensor.<name>",
/// call_module as "module <name>", the names dynamo.explain() uses. Empty when not JSON.
std::map<std::string, int> graphOpCounts(const std::string& serialized);

/// The name of the runtime-hits artifact of v1-v2 stores.
using storage::kEntryHitsArtifact;

/// The dynamo.explain() summary of one run (str(ExplainOutput)): graph, break and op counts, the
/// distinct breaks, the compiles that made no entry, the ops of each graph in compile order, the
/// guards by kind and the compile time. Files are shown as displayPath() says.
std::string renderExplainSummary(const RunExplain& run, const RenderOptions& options = {});

/// Renders the report in `format`.
std::string renderExplain(const ExplainReport& report, Format format,
                          const RenderOptions& options = {});
std::string renderExplainText(const ExplainReport& report, const RenderOptions& options = {});
std::string renderExplainJson(const ExplainReport& report, const RenderOptions& options = {});
std::string renderExplainJunit(const ExplainReport& report, const RenderOptions& options = {});
std::string renderExplainMarkdown(const ExplainReport& report, const RenderOptions& options = {});
std::string renderExplainSarif(const ExplainReport& report, const RenderOptions& options = {});

/// The CI policy of dynamo-explain.
struct ExplainPolicy {
  std::optional<std::int64_t> maxBreaks;  ///< fail when more distinct breaks than this
  bool fullgraph = false;                 ///< fail on any break
};
/// The outcome of a policy check: code 0 passes, 1 fails; message says why (empty on pass).
struct PolicyResult {
  int code = 0;         ///< 0 pass, 1 fail
  std::string message;  ///< one line per violation, for stderr
};
PolicyResult checkExplainPolicy(const ExplainReport& report, const ExplainPolicy& policy,
                                const RenderOptions& options = {});

}  // namespace dynamo::explain
