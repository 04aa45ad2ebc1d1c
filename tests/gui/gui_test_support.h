// Shared by the inspector's tests: graphs built with core's GraphBuilder (a ResNet-like block
// with parameters and user stacks, chains, synthetic module hierarchies) and trace stores
// written with storage's TraceWriter, so every test makes its own input.
#pragma once

#include <string>
#include <vector>

#include "dynamo/core/graph.h"
#include "dynamo/storage/records.h"

namespace dynamo::gui::testing {

/// A fresh directory, removed on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// A small ResNet-like forward: conv1/bn1/relu at the top, layer1 with two blocks of
/// conv1/bn1/relu/conv2/bn2/+=/relu, fc. User stacks as Dynamo records them. `channels` sets
/// the tensor sizes (two versions differ in meta).
core::Graph makeResnetLike(int channels = 64, bool extraAdd = false);

/// A chain of `n` relu/add nodes with no module (a flat graph), 1 input.
core::Graph makeChain(int n);

/// A synthetic model: `blocks` modules "blocks.i", each with `layers` submodules "blocks.i.l<j>"
/// of `ops` ops (the first uses a parameter), chained. About blocks*layers*(ops+1) nodes.
core::Graph makeSynthetic(int blocks, int layers, int ops);

/// What makeStore recorded, for assertions.
struct StoreIds {
  storage::RowId run = 0;
  storage::RowId frameModel = 0, frameStep = 0, frameResume = 0;
  storage::RowId compileModel = 0, compileStep0 = 0, compileStep1 = 0, compileResume = 0;
};

/// Writes a store: frame "Model.forward" (one compile, the ResNet-like graph), frame "step"
/// (attempt 0 with a graph break and graph, attempt 1 a recompile after a guard failure on x's
/// size), and "<resume in step>" (the graph after the break). Closes the writer.
StoreIds makeStore(const std::string& path);

/// The whole content of a file ("" when missing).
std::string readFile(const std::string& path);

/// The directory of the dynamo-inspect-layout program (set by CMake).
std::string layoutProgram();

}  // namespace dynamo::gui::testing
