// The Backend interface: what turns a captured (and passed) graph into something that runs.
//
//   Graph --Backend::compile(request)--> CompiledGraphFn --call(inputs)--> outputs
//
// Implementations live in backends/ (dynamo::backends): the C++ runner ("eager") and a user's
// Python callable (given a torch.fx.GraphModule); the AOT and code-generating backends come as
// more implementations, listed in backends/backends.def. The compiler holds one Backend; the
// CompiledGraph (core/src/interp/graph_call.cpp) calls the CompiledGraphFn on every run.
#pragma once

#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "dynamo/common/error.h"
#include "dynamo/core/graph.h"
#include "dynamo/core/graph_pyref.h"

namespace dynamo::core {

/// What a backend made of one graph: a callable over the graph's inputs. Immutable; called with
/// the GIL held, possibly from several threads.
class CompiledGraphFn {
 public:
  virtual ~CompiledGraphFn() = default;
  /// Runs on `count` inputs (borrowed refs). Returns the outputs as a tuple or list (new ref),
  /// or NULL with a Python error set; then, when the failing node is known, *failedAt is its
  /// index in the graph's body (left unchanged otherwise).
  virtual PyObject* call(PyObject* const* inputs, size_t count, size_t* failedAt) const = 0;
  /// Told once, when the cache entry that runs it is made (CacheEntry::id): a backend that
  /// compiles again on later calls names the entry in what it records (CompileSink).
  virtual void entryMade(uint64_t entryId) const { (void)entryId; }
};

/// One compile request: the graph and what a backend's messages name.
struct BackendRequest {
  const Graph& graph;                          ///< the graph, after the pass pipeline
  const std::vector<PyObjectRef>& examples;    ///< the real input tensors of this call, in order
  std::string function;                        ///< the user function ("f", "Net.forward")
  SourceLocation where;                        ///< its file and first line
  bool suppressErrors = true;                  ///< a failure falls back (Error) instead of raising
  /// The graph serves inputs of several sizes (dynamic shapes): a backend that traces with the
  /// example sizes must specialise per call (CompilerOptions::backendPerSize).
  bool dynamic = false;
};

/// A backend. Implementations must be stateless or thread-safe: one instance serves a compiler.
class Backend {
 public:
  virtual ~Backend() = default;
  /// The name users pass (backend="eager"), or a callable backend's __name__.
  virtual const std::string& name() const = 0;
  /// Compiles the graph. A failure throws UserError (the user's backend is at fault and
  /// suppressErrors is off) or Error (the compile falls back to running the function eagerly).
  virtual std::unique_ptr<CompiledGraphFn> compile(const BackendRequest& request) const = 0;
};

/// One kernel a code-generating backend (the fused backend) compiled for a graph: what the trace
/// store keeps of it (storage::KernelRecord) and the inspector shows beside the nodes it covers.
struct BackendKernel {
  std::string graph;               ///< the graph its nodes are in: "dynamo" (the captured graph),
                                   ///< "aot.forward", "aot.backward" (an AOT compile's graphs)
  int graphOrdinal = 0;            ///< which graph of that kind in the compile, 0.. (set by
                                   ///< reportBackendKernels: one per call for that kind)
  std::string name;                ///< "k0_mul_add_relu"
  std::string language;            ///< "c++" or "cuda"
  std::string source;              ///< the generated source
  std::vector<std::string> nodes;  ///< the graph's nodes it computes (its fusion group)
  std::string loops;               ///< "outer [8192] inner [1024]"
  std::string cacheKey;            ///< the kernel cache's key
  bool cacheHit = false;           ///< loaded from the disk cache (no compiler run)
  double compileMs = 0;            ///< the system compiler's wall time for it (0 on a hit)
  double lowerMs = 0;              ///< lowering and emitting the whole graph, shared by its kernels
  uint64_t runToken = 0;           ///< the token reportBackendKernels returned for its graph
                                   ///< (set by it): reportKernelRunTimes names the graph by it
  int runIndex = 0;                ///< its position in that graph's kernels (set by it)
};

/// Whether the compile running on this thread collects its backend's kernels (the trace store
/// records them): a backend builds BackendKernel values only then. GIL held.
bool wantsBackendKernels();
/// Hands the kernels of one compiled graph of kind `graph` to the compile running on this thread
/// (CompileRecord::kernels), numbering the graphs of each kind in call order. A no-op when no
/// compile collects (wantsBackendKernels() false: a graph compiled lazily, at its first call).
/// Returns a token naming these kernels (process-unique, nonzero) when collected, else 0: a
/// backend that gets a token measures its kernels' first kTimedKernelCalls calls and reports
/// them with reportKernelRunTimes; with 0 it measures nothing.
uint64_t reportBackendKernels(const std::string& graph, std::vector<BackendKernel> kernels);

/// The calls of a graph whose kernels a backend times (from the first; reportBackendKernels).
inline constexpr int kTimedKernelCalls = 5;
/// The mean wall time per call, in microseconds, of each kernel of the graph reportBackendKernels
/// named `token` (in its order) over its first `calls` calls: handed to the compile sink
/// (CompileSink::kernelRunTimes), which writes it once. GIL held.
void reportKernelRunTimes(uint64_t token, const std::vector<double>& meanUs, int calls);

namespace detail {
struct KernelSlot;
}

/// While alive, this thread's compile collects kernels into `out` (the compiler, around
/// Backend::compile). Nests: the inner one wins until it ends.
class BackendKernelCollector {
 public:
  explicit BackendKernelCollector(std::vector<BackendKernel>* out);
  ~BackendKernelCollector();
  BackendKernelCollector(const BackendKernelCollector&) = delete;
  BackendKernelCollector& operator=(const BackendKernelCollector&) = delete;

 private:
  detail::KernelSlot* previous_;
  detail::KernelSlot* slot_;
};

/// The graph of the compile whose backend is compiling now, as the tracer captured it, before
/// the pass pipeline; null outside a backend's compile (GIL held). dynamo-minify's and
/// dynamo-bisect's accuracy checks run it in fp64 as the reference, so that a pass that changes
/// values shows as a divergence (dynamo._C._compiler.captured_graph()).
const Graph* capturedGraphOfCurrentCompile();

/// Keeps the exception a Python backend raised (a new reference is stolen), for the
/// BackendCompilerFailed the binding layer raises next (see takeBackendFailureCause()).
void setBackendFailureCause(PyObject* exception);

}  // namespace dynamo::core
