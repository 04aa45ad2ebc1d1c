// The "fused" backend (backends.def): lowers the graph with dynamo::codegen, compiles one C++
// kernel per fused group with the system compiler (disk-cached), and runs kernels and extern ATen
// calls in order with a planned intermediate arena. Tools and tests read what it made through a
// FusedReport. No torch headers here.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dynamo/core/backend.h"

namespace dynamo::backends {

/// One compiled kernel, for the logs, the tests and the inspector.
struct FusedKernelInfo {
  std::string name;                ///< "k0_mul_add_relu"
  std::vector<std::string> nodes;  ///< graph nodes it covers
  std::string source;              ///< the C++ source
  std::string cudaSource;          ///< the same kernel as CUDA C
  std::string loops;               ///< "outer [8192] inner [1024]"
  std::string cacheKey;            ///< sha256 of source + compiler + flags + CPU
  bool cacheHit = false;           ///< no compiler run
  double compileMs = 0;            ///< compiler time (0 on a hit)
};

/// What the fused backend made of one graph.
struct FusedReport {
  std::string program;  ///< printProgram() of the lowered program
  std::vector<FusedKernelInfo> kernels;
  std::vector<std::pair<std::string, std::string>> externs;  ///< (node, why not lowered)
  int64_t arenaBytes = 0;  ///< intermediate arena size
  std::string eagerReason; ///< non-empty when the whole graph runs eagerly, and why
};

/// How to build the kernels.
struct FusedOptions {
  /// Run the CUDA C kernels instead of the C++ ones, compiled for the host with the grid walked
  /// as loops (-DDYN_HOST_SHIM): tests the CUDA bodies' numerics without a GPU. Slow.
  bool cudaHostShim = false;
  /// The graph is a forward or backward graph of the AOT layer (run inside its
  /// torch.autograd.Function): convolutions stay ATen calls (no channels-last conv steps, whose
  /// rounding small-batch batch_norm amplifies in gradients).
  bool insideAutograd = false;
  /// The family scope of the kernels' size templates (codegen/kernel_template.h); empty: the
  /// request's function and location.
  std::string sizeScope;
  /// Size integers that differ between lowerings of the same kernel text in this scope become
  /// a parameter array passed to the kernel (one compile serves many sizes). Off: literal sizes
  /// (a static compile still records its sizes as the scope's reference).
  bool sizeParams = false;
};

/// True when fn is the fused backend's compiled graph and every input is a tensor with exactly
/// the sizes and strides of the graph's placeholder, or a Python number of the type `numbers[i]`
/// names for it ('i' int, 'f' float: any value; other characters: not a number) (the per-size
/// backend's fast path: the last size's kernels take the call without building its signature).
/// Needs the GIL.
bool fusedTakesSizes(const core::CompiledGraphFn& fn, PyObject* const* inputs, size_t count,
                     const std::string& numbers = {});

/// Process-wide counts of the fused backend's kernel loading (tests and benchmarks count the
/// compiles a workload causes by the difference before and after).
struct FusedCounters {
  int64_t unitsLoaded = 0;   ///< kernel libraries (cache keys) first used by this process
  int64_t compilerRuns = 0;  ///< of those, the ones the C++ compiler built (not on disk yet)
  int64_t lowerings = 0;     ///< graphs lowered (each compile, and each new input signature of a
                             ///< dynamic entry; a new value of a number kernels read needs none)
  int64_t programHits = 0;     ///< program cache: lowered programs read back (no lowering)
  int64_t programMisses = 0;   ///< program cache: lookups that found no entry
  int64_t programStores = 0;   ///< program cache: entries written
  int64_t programRejected = 0; ///< program cache: corrupt entries ignored (with a warning)
};
/// The counts so far.
FusedCounters fusedCounters();

/// The probe lowering of a dynamic graph (docs/dynamic-shapes.md): lowers `graph` (the graph at
/// probe sizes, each dynamic dimension one larger than the first call's) as compileFused would
/// with `options`, and registers its kernels' templates in options.sizeScope as a parametrised
/// lowering, compiling nothing: the first size's kernels of that scope then take the integers
/// that move with the sizes as parameters. Returns how many kernels it registered.
size_t registerSizeFamilies(const core::Graph& graph, const FusedOptions& options);

/// Compiles request.graph with the fused backend; fills *report when given.
std::unique_ptr<core::CompiledGraphFn> compileFused(const core::BackendRequest& request,
                                                    FusedReport* report,
                                                    const FusedOptions& options = {});

}  // namespace dynamo::backends
