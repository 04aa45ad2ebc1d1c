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

#include <memory>

#include "dynamo/core/compiler.h"

namespace dynamo::core {

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
};

/// Installs the process's sink (null: none). GIL held.
void setCompileSink(std::shared_ptr<CompileSink> sink);
/// The process's sink, or null. GIL held.
const std::shared_ptr<CompileSink>& compileSink();

}  // namespace dynamo::core
