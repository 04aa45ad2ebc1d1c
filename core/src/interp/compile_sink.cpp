// The process's compile sink (compile_sink.h). Read and replaced with the GIL held.
#include "dynamo/core/compile_sink.h"

namespace dynamo::core {

namespace {
std::shared_ptr<CompileSink>& slot() {
  static auto* sink = new std::shared_ptr<CompileSink>();  // never destroyed: used at exit
  return *sink;
}
}  // namespace

void setCompileSink(std::shared_ptr<CompileSink> sink) { slot() = std::move(sink); }

const std::shared_ptr<CompileSink>& compileSink() { return slot(); }

}  // namespace dynamo::core
