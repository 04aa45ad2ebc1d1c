// What a compile's artifacts hold for the inspector (docs/aot.md, docs/dynamic-shapes.md):
//
//   dynamo.aot            JSON summary of one AOT compile (backend, partition, saved, ...)
//   dynamo.aot.joint      the graphs of that AOT compile, in core's JSON format
//   dynamo.aot.forward
//   dynamo.aot.backward
//   dynamo.dynamic_shapes which dims are dynamic and the shape guards (text)
//   dynamo.passes         the passes that changed the graph: nodes removed and added (text)
//   dynamo.kernel         one per generated kernel (storage::KernelRecord's metadata)
//
// A compile may hold several AOT compiles (each a `dynamo.aot` followed by its graphs). The
// views address an AOT graph by a negative graph index: -1 - (3 * ordinal + kind), so the
// first AOT compile's joint, forward and backward graphs are -1, -2 and -3; Dynamo's own
// graphs keep their indexes (0, 1, ...). No Qt, no SQL: the artifacts come from
// TraceReader::artifactsOfCompile.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dynamo/gui/inspect_graph.h"
#include "dynamo/storage/records.h"

namespace dynamo::gui {

/// The artifact names (python/dynamo/aot/__init__.py, python/src/recording_bindings.cpp).
inline constexpr std::string_view kAotArtifact = "dynamo.aot";
inline constexpr std::string_view kDynamicShapesArtifact = "dynamo.dynamic_shapes";
/// What the passes that changed the graph did (text: status, nodes removed and added).
inline constexpr std::string_view kPassesArtifact = "dynamo.passes";

/// The three graphs of an AOT compile.
enum class AotGraphKind { kJoint = 0, kForward = 1, kBackward = 2 };

/// "joint", "forward", "backward".
std::string_view aotGraphKindName(AotGraphKind kind);

/// One AOT graph stored with a compile.
struct AotGraphRef {
  AotGraphKind kind = AotGraphKind::kJoint;  ///< which graph
  int index = -1;                            ///< the graph index the views use (negative)
  storage::RowId artifactId = 0;             ///< the artifact holding its JSON
  std::size_t bytes = 0;                     ///< size of that JSON
};

/// One AOT compile recorded with a Dynamo compile: its `dynamo.aot` summary and its graphs.
struct AotRecord {
  int ordinal = 0;                       ///< 0 for the compile's first AOT compile
  std::string backend;                   ///< "aot_eager", ...
  bool training = false;                 ///< joint forward/backward, or inference only
  std::string partitionMode;             ///< the backend's: "min_cut", "save_all" (unused in inference)
  std::string fallback;                  ///< why it runs on the eager runner ("" when it does not)
  std::string summary;                   ///< "3 saved (4096 bytes), 2 recomputed"
  std::vector<std::string> saved;        ///< joint node names saved for the backward
  std::vector<std::string> recomputed;   ///< joint node names recomputed in the backward
  std::vector<std::string> mutatedInputs;  ///< inputs written in place
  std::int64_t bytesSaved = 0;           ///< bytes of the saved tensors
  std::vector<std::pair<std::string, double>> phasesMs;  ///< trace, import, partition, ...
  std::vector<std::pair<std::string, std::int64_t>> decompositions;  ///< group -> count
  std::vector<AotGraphRef> graphs;       ///< the graphs stored after the summary
  std::string error;                     ///< set when the summary is not the JSON expected
};

/// The artifacts holding the graph a pass got, when it changed it ("dynamo.pass.input/NAME").
inline constexpr std::string_view kPassInputPrefix = "dynamo.pass.input/";
/// Pass input graphs are addressed by index kPassGraphBase - k (the compile's k-th such artifact),
/// below every AOT graph index.
inline constexpr int kPassGraphBase = -1000000;
/// The pass input graphs among a compile's artifacts: (graph index, pass name), in order.
std::vector<std::pair<int, std::string>> passInputGraphs(const std::vector<storage::ArtifactRecord>& artifacts);
/// The artifact of pass input graph `index` (<= kPassGraphBase), or null.
const storage::ArtifactRecord* passGraphArtifact(const std::vector<storage::ArtifactRecord>& artifacts, int index);

/// The graph index of graph `kind` of AOT compile `ordinal` (see the banner).
int aotGraphIndex(int ordinal, AotGraphKind kind);
/// The inverse of aotGraphIndex; false for indexes >= 0 (Dynamo's graphs) and pass input graphs.
bool decodeAotGraphIndex(int index, int& ordinal, AotGraphKind& kind);
/// "graph 0", "AOT joint graph", "AOT #2 backward graph", "graph before pass #1" (a pass input
/// graph; passInputGraphs names the pass).
std::string graphIndexLabel(int index);

/// The AOT compiles among a compile's artifacts (in id order). Graph artifacts before any
/// summary belong to an AOT compile of their own.
std::vector<AotRecord> aotRecords(const std::vector<storage::ArtifactRecord>& artifacts);

/// The artifact holding AOT graph `index` (< 0) among a compile's artifacts, or null.
const storage::ArtifactRecord* aotGraphArtifact(const std::vector<storage::ArtifactRecord>& artifacts,
                                                int index);

/// `graph`, an AOT graph of kind `kind`, with each node's partition role: in the joint graph a
/// node that depends on a tangent is backward; in the forward graph every node is forward; in
/// the backward graph every node is backward; in all three the record's saved and recomputed
/// names are marked so (node names are kept by the partitioner). The output node has none, and
/// an inference compile (no joint graph, nothing partitioned) gives no roles at all.
InspectGraphPtr withPartitionRoles(const InspectGraph& graph, AotGraphKind kind, const AotRecord& record);

/// `aot` with what the Dynamo graph it was traced from knows and ATen graphs lack: each node
/// matched by diffGraphs (across dialects) takes its Dynamo counterpart's module path, source
/// line and user stack; an unmatched node (getitem, t, backward ops) takes the module of an input
/// matched so, else of any input that has one (graph order), so a backward op sits in the module
/// of the forward values it reads. The views group and link AOT graphs by these.
InspectGraphPtr withDynamoContext(const InspectGraph& aot, const InspectGraph& dynamo);

/// `graph` (an AOT forward or backward graph) with the module path, source line and user stack
/// of the node of the same name in `named` (its joint graph, after withDynamoContext).
InspectGraphPtr withContextOf(const InspectGraph& graph, const InspectGraph& named);

/// `graph` (graph `index` of its compile, as the views number them) with the kernels a backend
/// generated for it: those of `kernels` (TraceReader::kernelsOfCompile) whose graph is this one
/// (Dynamo graph `index`: "dynamo" kernels of that index; an AOT forward or backward graph: the
/// AOT compile's "aot.forward" or "aot.backward" kernels; its joint graph: both, since the
/// partitioner keeps node names). Each node gets the kernels that compute it. The graph itself
/// when none apply.
InspectGraphPtr withKernels(const InspectGraphPtr& graph, int index,
                            const std::vector<storage::KernelRecord>& kernels);

/// `graph` (a Dynamo graph) with the symbols of its dynamic input sizes: each line
/// "sN = SOURCE.size()[D] in [LO, HI] (...)" of the compile's dynamo.dynamic_shapes report marks
/// dimension D of the input whose source is SOURCE (InspectNode::symbolicShape, symbols). The
/// graph itself when the report has none.
InspectGraphPtr withSymbolicInputs(const InspectGraphPtr& graph,
                                   const std::vector<storage::ArtifactRecord>& artifacts);

/// A kernel's measured run time as the Details tab, the node panel and the export say it:
/// "ran in 8 us per call (mean of its first 5 calls)", or "run time not measured" when
/// `runUs` < 0 (storage::KernelRecord::runUs, runCalls).
std::string kernelRunText(double runUs, int calls);

/// The Details tab's text of one compile: each AOT compile's summary, the dynamic-shapes
/// report, the generated kernels (cache state or compile time, run time), and the other
/// artifacts by name, type and size. Plain text.
std::string compileDetailsText(const std::vector<storage::ArtifactRecord>& artifacts);
/// The artifact of a backend's compile per input signature ("dynamo.aot_per_size"; the fused
/// backend's lowerings carry their kernels).
inline constexpr const char* kSizeLoweringArtifact = "dynamo.aot_per_size";
/// The Details section of the fused backend's lowerings per input signature, from the compile's
/// artifacts (explain::readAotSizeCompiles): per lowering its sizes, why it ran, and each kernel,
/// reused from an earlier lowering (family hit) or new; "" when the compile has none.
std::string sizeLoweringsText(const std::vector<storage::ArtifactRecord>& artifacts);

}  // namespace dynamo::gui
