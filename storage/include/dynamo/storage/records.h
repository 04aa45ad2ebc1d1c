// The rows of the trace store, as plain structs shared by the writer, the reader, the Python
// binding and the tools (explainer, recompile profiler, minifier, bisector, Qt inspector).
//
// Every record has an `id` and a `runId`. The writer fills both when a record is enqueued (see
// "Ids" in docs/trace-store.md): callers leave them at 0 and use the returned id to refer to
// the row from later records, without waiting for it to reach the disk.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dynamo/common/error.h"

namespace dynamo::storage {

/// A row id. Unique within one trace store file, across every process that writes it:
/// (runId << 32) | per-run sequence number. 0 means "none".
using RowId = std::int64_t;

/// Microseconds since the Unix epoch (wall clock), the unit of every time column.
std::int64_t nowMicros();

/// What kind of code a CodeRecord holds (code_kinds.def).
enum class CodeKind {
#define DYNAMO_CODE_KIND(id, name, language, description) id,
#include "dynamo/storage/code_kinds.def"
#undef DYNAMO_CODE_KIND
};

/// The stored name of a code kind ("cuda_kernel").
std::string_view codeKindName(CodeKind kind);
/// The language of a code kind ("cuda").
std::string_view codeKindLanguage(CodeKind kind);
/// Parses a stored name; nullopt when unknown.
std::optional<CodeKind> codeKindFromName(std::string_view name);
/// Every code kind, in .def order.
const std::vector<CodeKind>& allCodeKinds();

/// How a run that never closed ended, when a crash marker says so (crash_marker.h). Filled by
/// the reader from the run's "dynamo.crash" artifact or a marker file not merged yet.
struct RunCrash {
  int signal = 0;           ///< the fatal signal (SIGSEGV, ...); 0: no marker (killed, os._exit)
  std::string stage;        ///< crash_stages.def name: "first_call", "backend", "unknown"
  RowId compileId = 0;      ///< the compile whose code ran; 0 unknown
  int attempt = -1;         ///< that compile's attempt (the N of "compile #N"); -1 unknown
  std::string frameName;    ///< that compile's frame: function name
  std::string frameFile;    ///< ... its file
  int frameLine = 0;        ///< ... its first line
  std::int64_t timeUs = 0;  ///< when the signal came
};

/// One process that wrote to the store (one rank of a distributed job is one run).
struct RunRecord {
  RowId id = 0;                       ///< run id, assigned by the store when the run begins
  std::int64_t pid = 0;               ///< operating-system process id
  std::string hostname;               ///< machine the process ran on
  std::vector<std::string> argv;      ///< the process's command line (sys.argv from Python)
  std::string pythonVersion;          ///< e.g. "3.11.2"; empty when not from Python
  std::string torchVersion;           ///< e.g. "1.13.1"; empty when torch was not importable
  std::string dynamoVersion;          ///< version of Dynamo that wrote the run
  int rank = -1;                      ///< distributed rank; -1 when not distributed (schema v2)
  int worldSize = 0;                  ///< distributed world size; 0 when not distributed (v2)
  std::int64_t startTimeUs = 0;       ///< when the run began (0: now, filled by the writer)
  std::int64_t endTimeUs = 0;         ///< when the writer was closed; 0 while running or killed
  RunCrash crash;                     ///< endTimeUs == 0 only: how it ended, when known
};

/// A Python code object Dynamo was asked to compile (one per code object per run).
struct FrameRecord {
  RowId id = 0;          ///< frame id
  RowId runId = 0;       ///< owning run
  std::string file;      ///< co_filename
  int firstLine = 0;     ///< co_firstlineno
  std::string name;      ///< co_qualname (co_name before 3.11)
};

/// Time spent in one phase of a compile ("trace", "guards", "codegen", "backend", ...).
struct CompilePhase {
  std::string name;             ///< phase name
  std::int64_t durationUs = 0;  ///< wall time spent in it
};

/// One attempt to compile a frame (a first compile or a recompile).
struct CompileRecord {
  RowId id = 0;                      ///< compile id; also names the cache entry it produced
  RowId runId = 0;                   ///< owning run
  RowId frameId = 0;                 ///< the frame compiled
  int attempt = 0;                   ///< 0 for the first compile of the frame, 1.. recompiles
  std::string status;                ///< "ok", "graph_break", "failed", "skipped", ...
  std::string reason;                ///< why it ran: "first call", or the guard failure
  std::int64_t startTimeUs = 0;      ///< when it began
  std::int64_t durationUs = 0;       ///< total wall time
  std::vector<CompilePhase> phases;  ///< per-phase timings, in order
};

/// A captured FX-like graph, serialized so that a tool can rebuild it.
struct GraphRecord {
  RowId id = 0;                      ///< graph id
  RowId runId = 0;                   ///< owning run
  RowId compileId = 0;               ///< the compile that captured it
  int index = 0;                     ///< 0.. in capture order within the compile
  std::string format;                ///< serialization format name, e.g. "dynamo-graph/1"
  std::string serialized;            ///< the graph in `format` (bytes; the core's serializer)
  std::string printed;               ///< the human-readable printed graph
  int numNodes = 0;                  ///< number of nodes
  std::vector<std::string> inputs;   ///< input names, in order
  std::vector<std::string> outputs;  ///< output names, in order
};

/// A graph break: where capture stopped and why (the explainer's main input).
struct GraphBreakRecord {
  RowId id = 0;                        ///< graph break id
  RowId runId = 0;                     ///< owning run
  RowId compileId = 0;                 ///< the compile it happened in
  std::string kind;                    ///< graph-break kind name (core's graph_break_kinds.def)
  SourceLocation location;             ///< user file:line and the source line
  std::string detail;                  ///< the specific reason ("call to print()"); v3
  std::string explanation;             ///< why capture cannot continue there
  std::vector<std::string> hints;      ///< how to avoid it, most useful first
  std::vector<std::string> userStack;  ///< "file:line in func" frames, outermost first
};

/// A guard installed by a compile (a condition for reusing its cache entry).
struct GuardRecord {
  RowId id = 0;             ///< guard id
  RowId runId = 0;          ///< owning run
  RowId compileId = 0;      ///< the compile (cache entry) it protects
  std::string kind;         ///< guard kind name (core's guard kinds list), e.g. "TENSOR_MATCH"
  std::string checks;       ///< what it checks, e.g. "x.size() == (4, 8)"
  std::string source;       ///< the value checked, e.g. "L['x']"
  SourceLocation location;  ///< the user source line that made the guard necessary
};

/// A cache entry whose guards failed on a call (the recompile profiler's main input). The
/// structured fields (schema v3) come from the guard itself; a store of an older version has
/// only the reason text, and they stay empty.
struct GuardFailureRecord {
  RowId id = 0;              ///< failure id
  RowId runId = 0;           ///< owning run
  RowId compileId = 0;       ///< the cache entry (compile) whose guards failed
  RowId frameId = 0;         ///< the frame being called
  RowId guardId = 0;         ///< the first failing guard, 0 when unknown
  std::int64_t timeUs = 0;   ///< when (0: now, filled by the writer)
  std::string reason;        ///< the verbose reason, e.g. "tensor 'x' size mismatch at dim 0..."
  std::string guardKind;     ///< the failing guard's kind ("TENSOR_MATCH"); v3
  std::string guardSource;   ///< the value it checks ("x", "G['SCALE']"); v3
  std::string property;      ///< what differed ("size", "dtype", "value", "object", ...); v3
  int dim = -1;              ///< the dimension of a size/stride mismatch, else -1; v3
  std::string expected;      ///< what the entry was compiled for ("4"); v3
  std::string seen;          ///< what this call passed ("8"); v3
  SourceLocation location;   ///< the user line that created the guard; v3
  RowId causedCompileId = 0; ///< the compile this failure led to (a recompile), 0 none; v3
};

/// How often a cache entry ran, counted by the entry itself (schema v3: cache_entry_hits). One
/// row per compile that made an entry, written when the run ends (or when asked).
struct CacheEntryHitsRecord {
  RowId id = 0;              ///< unused (the compile id is the key); filled by the writer
  RowId runId = 0;           ///< owning run
  RowId compileId = 0;       ///< the compile whose cache entry ran
  std::int64_t hits = 0;     ///< calls that ran the entry after its guards passed
  std::int64_t timeUs = 0;   ///< when counted (0: now, filled by the writer)
};

/// Generated or original code: bytecode, generated source, C++/CUDA/Triton kernels.
struct CodeRecord {
  RowId id = 0;                  ///< code id
  RowId runId = 0;               ///< owning run
  RowId compileId = 0;           ///< the compile that produced it, 0 when none
  CodeKind kind = CodeKind::kOther;  ///< what it is; fixes the language
  std::string name;              ///< kernel or function name
  std::string content;           ///< the code: text, or raw bytes for bytecode
};

/// The artifact that holds a kernel's metadata (KernelRecord), one per kernel, beside the code
/// row with its source.
inline constexpr const char* kKernelArtifact = "dynamo.kernel";
/// The artifact of a kernel's measured run time (TraceWriter::recordKernelRunTime): JSON
/// {"code_id", "run_us", "calls"}, written after the kernel ran, so after its kKernelArtifact.
inline constexpr const char* kKernelRunArtifact = "dynamo.kernel.run";

/// A kernel a code-generating backend (the fused backend) compiled for one of a compile's graphs.
/// Stored without a schema change (v3): its source as a `code` row (cpp_kernel, cuda_kernel) and
/// the rest as a kKernelArtifact artifact (JSON naming the code row), both linked to the compile;
/// TraceWriter::recordKernel writes both, TraceReader::kernelsOfCompile joins them.
struct KernelRecord {
  RowId id = 0;                    ///< the code row's id
  RowId runId = 0;                 ///< owning run
  RowId compileId = 0;             ///< the compile whose backend made it
  CodeKind kind = CodeKind::kCppKernel;  ///< cpp_kernel or cuda_kernel
  std::string name;                ///< "k0_mul_add_relu"
  std::string source;              ///< the generated source
  std::string graph;               ///< the graph its nodes are in: "dynamo" (the compile's graph
                                   ///< `graphIndex`), "aot.forward", "aot.backward" (of the
                                   ///< compile's AOT compile number `graphIndex`)
  int graphIndex = 0;              ///< see `graph`
  std::vector<std::string> nodes;  ///< the nodes of that graph it computes (its fusion group)
  std::string loops;               ///< "outer [8192] inner [1024]"
  std::string cacheKey;            ///< the kernel disk cache's key
  bool cacheHit = false;           ///< loaded from the disk cache: no compiler run
  std::int64_t compileUs = 0;      ///< the system compiler's wall time for this kernel (0 on a hit)
  std::int64_t lowerUs = 0;        ///< lowering and emitting its whole graph (shared by its kernels)
  std::int64_t runUs = -1;         ///< its mean wall time per call over its first `runCalls`
                                   ///< calls (the fused backend: docs/trace-store.md,
                                   ///< "Kernels"); -1 when not measured
  int runCalls = 0;                ///< the calls runUs averages; 0 when not measured
};

/// A free-form artifact (a file a backend wrote, a profile, a log excerpt).
struct ArtifactRecord {
  RowId id = 0;             ///< artifact id
  RowId runId = 0;          ///< owning run
  RowId compileId = 0;      ///< related compile, 0 when none
  std::string name;         ///< a name unique enough for a person to find it
  std::string mediaType;    ///< e.g. "text/plain", "application/json", "application/octet-stream"
  std::string data;         ///< the content (bytes)
  std::int64_t timeUs = 0;  ///< when (0: now, filled by the writer)
};

}  // namespace dynamo::storage
