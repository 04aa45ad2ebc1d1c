// The fused backend's program cache: the lowered codegen::Program of a graph, and its kernels'
// marked sources, on disk, so that a warm compile (a new process, the disk cache filled) skips
// the lowering, the fusion and the emission. What is cached is a pure function of the key:
//
//   key   = sha256("dynamo-program-cache" format, the _C build (path, size, mtime of the shared
//                  object holding this code), the graph as serializeGraph writes it (every node:
//                  op, name, target by name, args, kwargs; every value's tensor meta: sizes,
//                  strides, memory format, dtype, device, requires_grad, symbolic sizes),
//                  the lowering options, CUDA or C++ emission, $DYNAMO_TEST_MISCOMPILE)
//   entry = <cache dir>/<key>.program: "dynamo-program-cache <sha256 of body>\n" + body,
//           body = key, kernel count, each kernel's marked source (kernel_template.h), then the
//           program (codegen/program_io.h)
//
// Never the values of tensors: a conv step's weights are read from the live graph inputs at
// every call (prepared again when they change), as without the cache. The kernel cache's
// directory, lock per key, temp file + rename, size limit and eviction serve it
// (kernel_cache.h readCacheFile / writeCacheFile). A corrupt entry is ignored with a
// RuntimeWarning, compiled again and overwritten. DYNAMO_GRAPH_CACHE=0 (or DYNAMO_REPRO_AFTER)
// turns it off, as the AOT layer's whole-graph cache.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dynamo/codegen/loop_ir.h"
#include "dynamo/codegen/lowering.h"
#include "dynamo/core/graph.h"

namespace dynamo::backends {

/// What a hit gives back: the lowered program and, per kernel, its marked source
/// (emitCppMarked, or emitCudaMarked for the CUDA host shim).
struct CachedProgram {
  codegen::Program program;          ///< as lowerGraph returned it
  std::vector<std::string> marked;   ///< per kernel, in program order
};

/// Whether the program cache is on ($DYNAMO_GRAPH_CACHE != "0" and no $DYNAMO_REPRO_AFTER).
bool programCacheEnabled();

/// The hex key of lowering `graph` with `options` and emitting C++ (cuda false) or CUDA C.
std::string programCacheKey(const core::Graph& graph, const codegen::LoweringOptions& options, bool cuda);

/// The entry under `key`, or nullopt: absent, or corrupt (then a RuntimeWarning names the file
/// and why; throws core::PythonError when the warning is turned into an error). Needs the GIL.
/// `graph` is the graph being compiled: an entry whose program does not fit it is corrupt.
std::optional<CachedProgram> loadProgram(const std::string& key, const core::Graph& graph);

/// Stores `program` and its kernels' marked sources under `key`; a cache that cannot be written
/// warns (RuntimeWarning). Needs the GIL.
void storeProgram(const std::string& key, const codegen::Program& program, const std::vector<std::string>& marked);

/// Process-wide counts: lookups that found a valid entry, found none, entries written, entries
/// ignored as corrupt.
struct ProgramCacheCounters {
  int64_t hits = 0, misses = 0, stores = 0, rejected = 0;
};
ProgramCacheCounters programCacheCounters();

}  // namespace dynamo::backends
