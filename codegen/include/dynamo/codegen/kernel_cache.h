// Compiling generated C++ at run time: the system compiler, dlopen, and a content-addressed disk
// cache shared by processes.
//
//   key  = sha256(source of the unit, compiler version, flags, CPU features)
//   path = <cache dir>/<key>.so   (written to a temp file and renamed; under a flock of one of 256
//          lock files, lock-<xx>, chosen by the key)
//   cache dir: $DYNAMO_KERNEL_CACHE, else $XDG_CACHE_HOME/dynamo/kernels, else
//              ~/.cache/dynamo/kernels; size limit $DYNAMO_KERNEL_CACHE_MB (default 512), the
//              oldest files evicted first (a process reads the whole directory at its first
//              write, then only when its own writes may have passed the limit).
// The same directory holds the fused backend's whole-graph entries (<key>.graph, written by
// python/dynamo/aot/graph_cache.py through readCacheFile / writeCacheFile) and its lowered
// programs (<key>.program, backends/src/fused_program_cache.cpp): same lock per key,
// temp file + rename, and the same size limit and eviction.
// Loaded libraries stay loaded for the life of the process (one handle per key).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dynamo::codegen {

/// One compiled and loaded kernel.
struct LoadedKernel {
  void* symbol = nullptr;   ///< the function (dlsym of the requested name)
  std::string key;          ///< the cache key (hex sha256)
  std::string path;         ///< the shared object
  bool cacheHit = false;    ///< found on disk or in memory (no compiler run)
  double compileMs = 0;     ///< time spent compiling (0 on a hit)
};

/// One compile job: source, the symbol to look up, extra compiler flags.
struct CompileJob {
  std::string source;
  std::string symbol;
  std::vector<std::string> extraFlags;  ///< e.g. {"-DDYN_HOST_SHIM", "-x", "c++"}
};

/// Compiles (or loads from the cache) every job, in parallel on up to hardware_concurrency
/// threads. Jobs without extra flags are dealt round-robin into translation units, one per 5
/// kernels and at most one per core ($DYNAMO_KERNEL_UNITS overrides), each compiled by one
/// compiler run and cached under one key (a compiler run costs ~0.1 s of CPU before it reaches a
/// kernel). Thread-safe. A compiler failure throws InternalError with the compiler's output.
std::vector<LoadedKernel> compileKernels(const std::vector<CompileJob>& jobs);

/// The bytes of the cache file `name` ("<hex key>.<extension>", not .so or .lock) in the cache
/// directory, read under the key's lock (a hit marks it recently used), or nullopt when absent.
std::optional<std::string> readCacheFile(const std::string& name);
/// Stores `bytes` as the cache file `name`: written to a temp file and renamed under the key's
/// lock (readers see the old file or the whole new one), then evicts as the kernels do. Throws
/// Error when the directory is not writable.
void writeCacheFile(const std::string& name, const std::string& bytes);

/// The cache directory in use (created on first use).
std::string kernelCacheDir();
/// The flags every kernel is compiled with.
const std::vector<std::string>& kernelCompileFlags();
/// Hex SHA-256 of `data` (the cache's key function: OpenSSL's, dynamo/common/hash.h; tested
/// against FIPS 180-2 vectors).
std::string sha256Hex(const std::string& data);

}  // namespace dynamo::codegen
