// What the AOT layer (aot_eager and friends, docs/aot.md) recorded for each captured graph, read
// back from the trace store, and its reports: `dynamo-trace aot`, the "aot" member of each graph
// of `dynamo-explain --json`, and the AOT line under each graph of its text report.
//
// The AOT layer writes, per compiled graph, the artifacts of its compile (python/dynamo/aot):
//   "dynamo.aot"            JSON: backend, training, partition mode, fallback reason, per-phase
//                           compile times (ms), mutated inputs, saved and recomputed node names,
//                           bytes saved, summary, decomposition counts
//   "dynamo.aot.joint"      the joint forward/backward graph (core's graph JSON), training only
//   "dynamo.aot.forward"    the forward graph (the whole graph for an inference compile)
//   "dynamo.aot.backward"   the backward graph, training only
// in the order the compile's graphs went to the backend, each "dynamo.aot" first: the k-th
// "dynamo.aot" artifact of a compile, with the graph artifacts that follow it, describes graph k.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dynamo/explain/format.h"
#include "dynamo/explain/trace_report.h"
#include "dynamo/storage/trace_reader.h"

namespace dynamo::explain {

/// Size of one AOT graph (core's graph JSON).
struct AotGraphSize {
  int nodes = 0;  ///< nodes, placeholders and output included
  int ops = 0;    ///< call nodes
};

/// The AOT record of one captured graph.
struct GraphAot {
  std::string backend;        ///< "aot_eager"
  std::string function;       ///< the compiled function, as the AOT layer named it
  std::string file;           ///< its file
  int line = 0;               ///< its first line
  bool training = false;      ///< joint graph traced (else a forward-only inference graph)
  std::string partitionMode;  ///< "min_cut" or "save_all"
  std::string fallback;       ///< why the graph runs on the eager runner; empty when compiled
  /// Per-phase compile times in microseconds: trace, import, partition, compile_forward (and
  /// compile_backward, which the store never has: the backward compiles on first use).
  std::vector<std::pair<std::string, std::int64_t>> phasesUs;
  std::vector<std::string> mutatedInputs;  ///< inputs written in place (their sources)
  bool partitioned = false;                ///< a joint graph was partitioned
  std::vector<std::string> saved;          ///< joint nodes saved for backward, in order
  std::vector<std::string> recomputed;     ///< joint nodes recomputed in the backward
  std::int64_t bytesSaved = 0;             ///< bytes of the saved tensors
  std::string summary;                     ///< "8 saved (544 bytes), 2 recomputed"
  std::map<std::string, int> decompositions;  ///< group -> count (aot_eager_decomp_partition)
  std::optional<AotGraphSize> joint, forward, backward;  ///< absent when not recorded
  /// The graphs as stored (core's graph JSON), "joint", "forward", "backward"; filled only when
  /// asked for (readAotRecords' keepGraphs).
  std::vector<std::pair<std::string, std::string>> graphs;
  std::int64_t compileUs() const;  ///< sum of phasesUs
};

/// One compile of a graph for one input signature: an AOT backend given a graph with dynamic
/// sizes compiles it once per distinct input sizes and numbers, the first while the entry is
/// made, the others on the first call with them (backends/src/aot_backend.cpp). The
/// "dynamo.aot_per_size" artifacts of the compile that made the entry, in id order.
struct AotSizeCompile {
  std::string backend;                 ///< "aot_eager"
  std::string when;                    ///< "compile" (with the entry) or "call"
  std::vector<std::string> signature;  ///< per graph input: "x: [8, 3]", "n: 5", "lr: 0.1"
  std::int64_t compileUs = 0;          ///< the backend's time for it
  std::string fallback;                ///< why it runs on the eager runner; empty when compiled
  // The fused backend's lowerings (absent from the AOT backends' records and older stores):
  int lowering = -1;                   ///< 0: the compile's own, 1..: made at calls; -1 unknown
  std::string reason;                  ///< why it ran: "first input signature", "new input signature"
  std::vector<std::string> symbols;    ///< the dynamic dimensions' values: "s0=16"
  std::int64_t lowerUs = 0;            ///< of compileUs: meta run and lowering (the rest: C++ compiles)
  /// One kernel of the lowering: a new one (a kernel row of graph "per_size", or the compile's
  /// own "dynamo" rows for lowering 0) or one reused from an earlier lowering (same source: its
  /// family's template; `codeId` names the earlier row).
  struct Kernel {
    std::string name;              ///< "k0_mul_add"
    storage::RowId codeId = 0;     ///< the kernel row with its source (TraceReader::kernelsOfCompile)
    bool reused = false;           ///< a family hit: no compiler run, no new row
    bool cacheHit = false;         ///< loaded from the disk cache
    std::int64_t compileUs = 0;    ///< the system compiler's time (0 when reused or a cache hit)
  };
  std::vector<Kernel> kernels;         ///< in the lowering's order
  int reusedKernels() const;           ///< kernels with `reused`
};
/// The per-signature compiles among one compile's artifacts (TraceReader::artifactsOfCompile),
/// in id order; other artifacts are ignored (the inspector's query).
std::vector<AotSizeCompile> readAotSizeCompiles(const std::vector<storage::ArtifactRecord>& artifacts);
/// The per-signature compiles of every compile of a run, by compile id.
std::map<storage::RowId, std::vector<AotSizeCompile>> aotSizeCompilesOfRun(const storage::TraceReader& reader,
                                                                           storage::RowId runId);
/// The signature entries that differ between the compiles (the dynamic ones), per compile, in
/// order ("x: [8, 3]"); all of them when there is one compile.
std::vector<std::vector<std::string>> varyingSignatures(const std::vector<AotSizeCompile>& compiles);
/// One line of text for a fused lowering (lowering >= 0): "lowering #1 at s0=16 (new input
/// signature): 0 kernels new, 2 reused (family hit); lowering 3 ms, total 4 ms".
std::string sizeLoweringLine(const AotSizeCompile& compile, const RenderOptions& options);
/// The "aot_per_size" array of a graph in the explainer's JSON report.
void jsonAotSizeCompiles(JsonWriter& w, const std::vector<AotSizeCompile>& compiles, const RenderOptions& options);

/// The AOT records of one compile from its artifacts (any order of rows is accepted; they are
/// taken in id order), graph index order. Artifacts of other names are ignored; a "dynamo.aot"
/// artifact that is not a JSON object gives a record with only its fallback set to say so.
std::vector<GraphAot> readAotRecords(const std::vector<storage::ArtifactRecord>& artifacts,
                                     bool keepGraphs = false);
/// The AOT records of every compile of a run, by compile id.
std::map<storage::RowId, std::vector<GraphAot>> aotRecordsOfRun(const storage::TraceReader& reader,
                                                                storage::RowId runId,
                                                                bool keepGraphs = false);
/// The AOT records of one compile, its graphs kept (dynamo-trace aot-graph); empty when the
/// compile has none or does not exist.
std::vector<GraphAot> aotRecordsOfCompile(const storage::TraceReader& reader,
                                          storage::RowId compileId);

/// `dynamo-trace aot`: every compile with AOT records, per run and function: graph sizes, the
/// partition (saved values and recomputed nodes by name, bytes saved), mutated inputs, phase
/// times, or the fallback reason. Masked: times, pids and directories.
std::string renderAot(const storage::TraceReader& reader, const ReportOptions& options = {});

/// One line for the explainer's text report: "aot_eager (training): joint 31 nodes, forward
/// 21, backward 25; min_cut partition: 8 saved (544 bytes), 2 recomputed; 431.4ms".
std::string aotLine(const GraphAot& aot, const RenderOptions& options);
/// The "aot" object of a graph in the explainer's JSON report.
void jsonAot(JsonWriter& w, const GraphAot& aot, const RenderOptions& options);

}  // namespace dynamo::explain
