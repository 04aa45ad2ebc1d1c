// Lowering: an ATen-level (or torch-level) Graph to a loop-IR Program of fused kernels and
// extern steps. The ops it lowers are listed in codegen/lowered_ops.def; every other node, and
// every node whose dtypes, devices or arguments it does not handle, becomes an extern step that
// runs the node's own target (so a graph never fails to compile because of one op).
//
//   Graph --lowerGraph--> scheduler nodes (pointwise / reduction, values inlined into users)
//         --fuseProgram--> kernels (vertical fusion, size cap, cycle check) + memory plan
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dynamo/codegen/loop_ir.h"
#include "dynamo/core/graph.h"

namespace dynamo::codegen {

/// What a graph input that is not a tensor holds, when kernels may read it at call time.
enum class ScalarInput {
  kNone,   ///< not read by kernels (a tensor, or a value extern calls take as it is)
  kInt,    ///< a Python int: an int64 kernel argument (exact; another value needs no new lowering)
  kFloat,  ///< a Python float: a double kernel argument
};

/// Knobs of the lowering and fusion.
struct LoweringOptions {
  bool fuse = true;            ///< off: one kernel per scheduler node (for bisecting fusion bugs)
  int maxFusedNodes = 64;      ///< the fusion-size cap: scheduler nodes per kernel
  int maxExprSize = 400;       ///< expression nodes per stage before a value is materialised
  int inlineCost = 24;         ///< a value with several users is recomputed below this size
  bool matmulSteps = true;     ///< linear/mm/addmm as matmul steps (at::mm_out into pooled
                               ///< memory; the bias joins the fused pointwise epilogue)
  bool convSteps = true;       ///< 2-d convolutions as conv steps (channels-last weights, an
                               ///< eval batch_norm folded in); off: plain extern calls
  /// Per graph input (empty: none): the Python numbers that pointwise arithmetic in kernels reads
  /// as a run-time argument (Program::scalars) instead of a literal; any other use of one is an
  /// extern call, which takes the value as it is. The program never depends on their values.
  std::vector<ScalarInput> scalarInputs;
};

/// True for a call that gives a tensor new storage in place (x.resize_(...), x.resize_as_(y),
/// x.set_(y)): a view taken before keeps the old storage, which a program's planned buffers
/// cannot follow (the fused backend runs such a graph on the eager runner).
bool replacesStorage(const core::Node& n);

/// Lowers `graph`. Never fails on an unsupported op (it becomes an extern step); internal errors
/// only for bugs.
Program lowerGraph(const core::Graph& graph, const LoweringOptions& options = {});

/// The memory plan's live ranges (Program::steps indices, inclusive): per buffer that owns an
/// arena slot (a kIntermediate that is no in-place chain member), the first step that writes it
/// and the last that reads it (a chain's members' accesses included); {-1, -1} for the others.
/// The runtime places each conv step's oneDNN workspace in the arena bytes free at its step.
std::vector<std::pair<int, int>> arenaLiveRanges(const Program& p);
/// The bytes buffer `b` covers in its arena slot (before the slot's 64-byte rounding): its
/// elements, or its strided span when that is larger. The plan sizes a slot by the largest of its
/// chain's members; the runtime places conv workspaces around the same extents.
int64_t arenaBytes(const Buffer& b);

/// One entry of lowered_ops.def: the op name and the forms it is lowered from.
struct LoweredOpInfo {
  const char* name;   ///< "add"
  const char* kind;   ///< "pointwise", "reduction", "composite", "view", "extern" (a conv step) or "matmul" (a matmul step)
  const char* forms;  ///< "aten::add.Tensor/Scalar, torch.add, operator.add, Tensor.add"
};
/// The ops the generator lowers (docs and tests enumerate them).
const std::vector<LoweredOpInfo>& loweredOps();

}  // namespace dynamo::codegen
