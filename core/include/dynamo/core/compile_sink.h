// CompileSink: where the compiler hands its records, in C++ (no Python in between).
//
//   Compiler::compile --compileStarting()--> sink      (the trace store's run opens here, so a
//                     --backendStarting()--> sink       crash in the first backend leaves one)
//                     --compiled(record)---> sink      (before the compiled code first runs)
//                     --listener(record)---> Python    (optional: dynamo.add_compile_listener)
//
// One sink per process (the trace store's recorder, python/src/trace_sink.cpp, implements it
// over dynamo::storage; core does not depend on storage). All calls hold the GIL.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dynamo/core/compiler.h"

namespace dynamo::core {

/// One compile a backend made of a graph for one input signature (the aot_eager* backends
/// compile a graph with dynamic sizes once per distinct input sizes and numbers, the fused
/// backend lowers it once per signature: the first while the entry is made, the others on the
/// first call with new sizes).
struct BackendCompileRecord {
  /// The cache entry whose graph it compiled (CompileRecord::entryId); 0: the entry being made
  /// now (its CompileRecord follows).
  uint64_t entryId = 0;
  std::string backend;                 ///< "aot_eager"
  std::vector<std::string> signature;  ///< per graph input: "x: [16, 3]", "lr: 0.1", "step: 5"
  double ms = 0;                       ///< the backend's compile time
  /// What the backend recorded of it (the AOT layer's "dynamo.aot" JSON object), or "".
  std::string detailJson;
  /// The fused backend's lowering for a new signature at a call: its kernels, in the lowering's
  /// order (the first signature's are the CompileRecord's kernels; empty for the AOT backends).
  std::vector<BackendKernel> kernels;
  double lowerMs = 0;                ///< of ms: running the graph on meta tensors and lowering it
  std::vector<std::string> symbols;  ///< the dynamic dimensions' values at it: "s0=16"
  std::string reason;                ///< why this lowering ran: "new input signature", ...
  std::string fallback;              ///< why this signature runs on the eager runner, or ""
};

/// Receives every compile attempt of every compiler in the process.
class CompileSink {
 public:
  virtual ~CompileSink() = default;
  /// A compile begins (before tracing). Never throws.
  virtual void compileStarting() {}
  /// The backend is about to compile a graph: a fatal signal from here on happened in a
  /// backend. Never throws; no I/O (a crash marker's stage is two atomic stores).
  virtual void backendStarting() {}
  /// Whether this compile's record must carry its listings (printed and serialized graphs, the
  /// pass graphs, the guard text, the bytecode listing): asked once per compile, after
  /// compileStarting(). Never throws.
  virtual bool wantsListings() { return true; }
  /// After every compile attempt, before its code runs for the first time. Never throws.
  virtual void compiled(const CompileRecord& record) = 0;
  /// A backend compiled a graph for one input signature (during a compile, or on a call of an
  /// entry whose graph has dynamic sizes). Never throws.
  virtual void backendCompiled(const BackendCompileRecord& record) { (void)record; }
  /// Whether a graph compiled after the entry `entryId` was made (an AOT compile's backward
  /// graph, at its first backward call) should collect its backend's kernels for lateKernels.
  /// Never throws.
  virtual bool wantsLateKernels(uint64_t entryId) { (void)entryId; return false; }
  /// The kernels of a graph the entry `entryId` compiled after it was made (the backward graph
  /// of a training compile): late rows of the compile that made the entry. Never throws.
  virtual void lateKernels(uint64_t entryId, const std::vector<BackendKernel>& kernels) {
    (void)entryId;
    (void)kernels;
  }
  /// The measured run times of the kernels reported with `token` (BackendKernel::runToken; see
  /// reportKernelRunTimes): per kernel in report order, its mean microseconds per call over its
  /// first `calls` calls. Never throws.
  virtual void kernelRunTimes(uint64_t token, const std::vector<double>& meanUs, int calls) {
    (void)token;
    (void)meanUs;
    (void)calls;
  }
};

/// Installs the process's sink (null: none). GIL held.
void setCompileSink(std::shared_ptr<CompileSink> sink);
/// The process's sink, or null. GIL held.
const std::shared_ptr<CompileSink>& compileSink();

}  // namespace dynamo::core
