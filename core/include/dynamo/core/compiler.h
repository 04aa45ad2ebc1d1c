// The frame compiler: the symbolic interpreter behind the PEP 523 hook.
//
// makeFrameCompiler() returns a FrameCompiler (frame_hook.h) that traces a frame's bytecode,
// captures its tensor operations into a graph, compiles the graph with the chosen backend and
// returns a cache entry whose transformed code calls the compiled graph and continues in ordinary
// Python after graph breaks (resume functions). Every graph, guard set and break is reported to
// the CompileListener (the Python layer forwards them to the trace store and the explainer).
#pragma once

#include <Python.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dynamo/common/compile_status.h"
#include "dynamo/common/error.h"
#include "dynamo/core/frame_hook.h"
#include "dynamo/core/graph.h"
#include "dynamo/core/backend.h"
#include "dynamo/core/passes.h"
#include "dynamo/core/graph_pyref.h"
#include "dynamo/core/guards.h"

namespace dynamo::core {

/// One graph break, as data.
struct BreakRecord {
  std::string kind;         ///< slug from break_kinds.def ("data-dependent-branch")
  std::string detail;       ///< the specific reason ("call to print()")
  std::string explanation;  ///< why this kind stops a graph
  std::string hint;         ///< what to do
  SourceLocation where;     ///< innermost user location
  std::vector<SourceLocation> userStack;  ///< outermost first
};

/// A cache entry whose guards failed on the call that led to a compile (a recompile or a
/// cache-limit hit), with its failing guards as data.
struct EntryMiss {
  uint64_t entryId = 0;               ///< CacheEntry::id of the entry (CompileRecord::entryId)
  std::vector<GuardFailure> failures; ///< its failing guards, in check order
};

/// What one compile of one frame produced, for the compile sink (compile_sink.h: the trace
/// store) and the Python listeners (explain, logs).
struct CompileRecord {
  std::string function;     ///< co_qualname of the frame
  SourceLocation where;     ///< file and first line of the frame
  int attempt = 0;          ///< 0 for the first compile of this code, then 1, 2, ...
  CompileStatus status = CompileStatus::kFailed;  ///< how it ended (compile_statuses.def)
  std::string reason;       ///< for skipped/failed; for recompiles, the guard failures
  std::vector<EntryMiss> misses;    ///< recompile or cache limit: why no entry matched, by entry
  std::weak_ptr<CacheEntry> entry;  ///< the entry made (counts its own hits), when compiled
  std::vector<Graph> graphs;        ///< the graph (one per compile; empty when none)
  std::vector<BreakRecord> breaks;  ///< breaks met, in order (restarts included)
  std::vector<GuardInfo> guards;    ///< the guards of the new entry
  std::string guardText;            ///< GuardSet::describe() (a listing)
  std::string bytecode;             ///< the transformed code, disassembled (a listing)
  uint64_t entryId = 0;             ///< the cache entry made ("compiled" only); see CacheEntry::id
  double captureMs = 0;     ///< tracing
  double guardMs = 0;       ///< building guards
  double backendMs = 0;     ///< the backend
  double totalMs = 0;
  std::vector<PassRecord> passes;   ///< what each pass of the pipeline did to the graph
  /// graphs[i] printed (graph_printer.h) and serialized (graph_serializer.h): built once, when
  /// the record is handed on, for the sink and the listeners alike (empty before).
  std::vector<std::string> printedGraphs, serializedGraphs;
  /// Whether the listings (printedGraphs, serializedGraphs, passes[i].graphText, guardText,
  /// bytecode) were built: only when the sink (a trace, a log) or a listener wants them.
  bool hasListings = false;
  /// Dynamic shapes: which input dimensions are dynamic or specialised and why, then the shape
  /// guards (symbols, ranges, relations with their user lines); "" when every size is static.
  std::string dynamicShapes;
  /// The kernels the backend generated while compiling (backend.h, BackendKernel): collected only
  /// when the listings are (hasListings); the fused backend's, for the trace store.
  std::vector<BackendKernel> kernels;
};

/// Options of a compiler, fixed when it is made.
struct CompilerOptions {
  std::string backendName = "eager";  ///< the backend's name, for messages
  std::shared_ptr<Backend> backend;   ///< compiles each graph (backends/: eager, a callable, ...)
  bool fullgraph = false;    ///< a graph break is an error (dynamo.Unsupported)
  int cacheSizeLimit = 8;    ///< entries per code object before running eagerly
  bool suppressErrors = true;///< backend/internal failures run eagerly with one warning
  std::function<void(const CompileRecord&)> listener;  ///< called after every compile attempt
  /// Whether the listener needs the record's listings (CompileRecord::hasListings), asked once
  /// per compile; null: it always does.
  std::function<bool()> listenerWantsListings;
  /// Frames whose file starts with one of these are never compiled (the Python standard
  /// library, Dynamo's own package): they run as usual, and what they call is still captured.
  std::vector<std::string> skipFilePrefixes;
  /// When not empty, only frames whose code name (co_name) is this are compiled
  /// (DYNAMO_DEBUG_FUNCTION); everything else runs as usual.
  std::string onlyFunction;
  /// Code objects compiled even when their file is skipped, with the resume functions that
  /// continue them: the forward of a module passed to dynamo.compile or
  /// dynamo.optimize(backend) (nn.Sequential's forward lives in torch's files).
  std::vector<PyObjectRef> forceCodes;
  /// Libraries with nothing to capture (numpy, scipy, ...: the skip list in docs/capture.md):
  /// functions whose file starts with one of these are not traced into when user code calls them
  /// (the call is a graph break and runs as Python), and their frames are never compiled.
  std::vector<std::string> noInlineFilePrefixes;
  /// Passes of passes.def not to run (dynamo.config.disabled_passes).
  PassOptions passOptions;
  /// dynamo.compile(dynamic=...): -1 None (automatic, per automaticDynamic), 0 False (every size
  /// static), 1 True (every size of every input tensor dynamic from the first compile).
  int dynamic = -1;
  /// dynamo.config.automatic_dynamic_shapes: a size that changed is recompiled as dynamic.
  bool automaticDynamic = true;
  /// The backend runs a graph for any sizes (the eager runner, the FX bridge): when false the
  /// backend specialises on the example sizes and every size stays static.
  bool backendHandlesDynamic = true;
  /// The backend specialises on example sizes but compiles once per distinct input size inside
  /// one cache entry when BackendRequest::dynamic (the AOT backends): sizes are then dynamic for
  /// the trace (one compile of the function), static for the backend.
  bool backendPerSize = false;
};

/// A new compiler. Needs the GIL.
std::shared_ptr<FrameCompiler> makeFrameCompiler(CompilerOptions options);

/// Graph-break kinds (break_kinds.def) as (slug, explanation, hint) rows.
struct BreakKindRow {
  const char* slug;
  const char* explanation;
  const char* hint;
};
std::vector<BreakKindRow> breakKinds();

/// The Python exception a backend raised, kept for the BackendCompilerFailed the binding layer
/// raises next (it becomes that exception's __cause__). Returns null when there is none; taking it
/// clears it. Thread-local; needs the GIL.
PyObjectRef takeBackendFailureCause();

/// Adds the compiler's Python types (dynamo._C.CompiledGraph) to the extension module.
int registerCompilerTypes(PyObject* module);

/// The binding layer's type of what dynamo.compile returns (dynamo.CompiledFunction), set once
/// at import, so the tracer knows such a callable by its type (it traces through one in compile
/// mode). Null until set. GIL held.
void setCompiledFunctionType(PyTypeObject* type);
PyTypeObject* compiledFunctionType();

}  // namespace dynamo::core
