// Private types shared by the lowering (lowering.cpp), the op table (lower_ops.cpp) and fusion
// (fusion.cpp).
//
// A lowered value (LValue) is a function from an index (one affine expression per dimension) to
// an expression: inlining it into a user is calling that function. Values that must exist in
// memory (reductions, outputs, values read by extern steps, expensive values with several users)
// become scheduler nodes (SNode) that store into a buffer; fusion groups scheduler nodes into
// kernels.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dynamo/codegen/lowering.h"

namespace dynamo::codegen::detail {

/// One affine expression per tensor dimension.
using IndexVec = std::vector<Affine>;
/// value(index) -> expression.
using ValueFn = std::function<Expr(const IndexVec&)>;

/// A lowered value: a tensor (shape, dtype, fn), a Python number (a constant, or a graph input
/// read at call time), or a tuple of values.
struct LValue {
  enum class Kind { kTensor, kNumber, kScalar, kTuple, kText, kNone };
  Kind kind = Kind::kNone;
  DType dtype = DType::kFloat32;   ///< tensor dtype; numbers: kBool, kInt64 or kFloat64
  std::vector<int64_t> shape;      ///< tensor sizes
  ValueFn fn;                      ///< tensor: the value at an index
  double number = 0;               ///< kNumber
  int scalar = -1;                 ///< kScalar: index in Program::scalars (dtype kInt64 or kFloat64);
                                   ///< only pointwise arithmetic takes one (lowerNode)
  std::string text;                ///< kText: a str or dtype argument ("torch.float32")
  int buffer = -1;                 ///< the buffer holding it, when materialised
  bool isView = false;             ///< made by a view op (never materialised: it would copy)
  std::vector<LValue> items;       ///< kTuple; a refined reshape: {its source}
  /// A reshape of items[0] whose index map is not affine (dims both split and merged, as
  /// [S, B*H, D] -> [S, B, H*D]): fn is null and the value is only ever stored, by a scheduler
  /// node over this common refinement of both shapes (each dim of either shape a run of these).
  std::vector<int64_t> refined;
};

/// A scheduler node: one materialised value.
struct SNode {
  bool reduction = false;          ///< a reduction (else pointwise)
  int buffer = -1;                 ///< where it is stored
  std::vector<int64_t> storeStrides;  ///< per dim of `full`, when the store does not follow the
                                      ///< buffer's own shape (a refined reshape), else empty
  int64_t storeOffset = 0;         ///< elements added to the store index: one input of a cat
                                   ///< stores into its slice of the cat's buffer (pointwise only)
  std::vector<std::string> nodes;  ///< graph nodes it covers
  std::vector<int64_t> full;       ///< iteration shape (pointwise: the value's shape)
  std::vector<bool> reduced;       ///< per dim of `full`: reduced (reduction only)
  ReduceOp op = ReduceOp::kSum;    ///< reduction only
  DType accType = DType::kFloat32; ///< the accumulator's dtype
  ValueFn fn;                      ///< value at a full index (reduction: the value reduced)
  std::function<Expr(Expr)> epilogue;  ///< reduction: acc -> stored value (mean divides)
  std::vector<int> reads;          ///< buffers it reads (sorted, unique)
  int size = 0;                    ///< expression size
};

/// One item of the lowered sequence: a scheduler node or an extern step.
struct Item {
  bool extern_ = false;
  int snode = -1;          ///< index in Lowered::snodes
  int node = -1;           ///< extern: body index
  int result = -1;         ///< extern: its result buffer, or -1
  int conv = -1;           ///< extern: a conv step (Program::convs) rather than a call
  int matmul = -1;         ///< extern: a matmul step (Program::matmuls) rather than a call
  bool barrier = false;    ///< extern that may mutate memory: fusion does not cross it
  bool programLayout = false;  ///< extern: takes its arguments in the program's layout (Step)
  std::vector<int> reads;  ///< extern: buffers it takes as arguments
};

/// The lowering's result before fusion.
struct Lowered {
  Program program;          ///< buffers, inputs, node buffers, lowered/externs (no kernels yet)
  std::vector<SNode> snodes;
  std::vector<Item> items;
};

/// The state the op lowerings use to make buffers and scheduler nodes.
class LoweringContext {
 public:
  virtual ~LoweringContext() = default;
  /// Materialises a reduction of `input` over `dims` (sorted, unique) into a new buffer of
  /// dtype `out`; returns the value that loads it (shape: keepdim or not).
  virtual LValue reduce(const LValue& input, const std::vector<int>& dims, bool keepdim,
                        ReduceOp op, DType out, std::function<Expr(Expr)> epilogue,
                        const std::string& node) = 0;
  /// Materialises a tensor value into a new intermediate buffer (a composite op reads its input
  /// several times: an expensive input is computed once); returns the value that loads it.
  virtual LValue materialize(const LValue& v, const std::string& node) = 0;
  /// Options of this lowering.
  virtual const LoweringOptions& options() const = 0;
  /// A buffer made so far.
  virtual const Buffer& buffer(int id) const = 0;
};

/// Lowers call node `n` with its argument values (nodes replaced by LValues), or nullopt with
/// `why` set when it stays an extern call.
std::optional<LValue> lowerNode(const core::Node& n, const std::vector<LValue>& args,
                                const std::vector<std::pair<std::string, LValue>>& kwargs,
                                LoweringContext& ctx, std::string* why,
                                const std::string& asOp = {});

/// The functional op of an in-place node ("relu" for relu_, F.relu(inplace=True), aten::relu_;
/// "add" for add_, operator.iadd), or empty.
std::string inplaceBase(const core::Node& n);
/// True for the in-place ops that change their tensor's sizes or strides (resize_, t_,
/// unsqueeze_, set_, ...): later readers of the tensor see the op's result meta, not the old one.
bool changesSizesInPlace(const core::Node& n);

/// True when argument `at` of n is the literal True (a positional inplace flag).
bool positionalInplace(const core::Node& n, size_t at);
/// True when a call's `inplace` flag is set, as a keyword or at its position
/// (codegen/inplace_functions.def): F.hardswish(x, True) writes x.
bool inplaceFlag(const core::Node& n);

/// The canonical op name of a call node ("add" for aten::add.Tensor, torch.add, operator.add,
/// Tensor.add), or empty.
std::string canonicalOp(const core::Node& n);
/// True for ops that never alias their inputs' memory when lowered as views.
bool isViewOp(const std::string& op);

/// The value of a buffer (a load at its strides).
LValue bufferValue(int buffer, DType t, const std::vector<int64_t>& shape,
                   const std::vector<int64_t>& strides);
/// Index `idx` broadcast to `shape` (right-aligned; size-1 dims read index 0).
IndexVec broadcastIndex(const IndexVec& idx, const std::vector<int64_t>& shape);
/// The identity index of `rank` dims over `nvars` variables (dim i -> var i).
IndexVec identityIndex(size_t rank, size_t nvars);
/// Contiguous strides of `shape`.
std::vector<int64_t> contiguousStrides(const std::vector<int64_t>& shape);

/// The arguments of a 2-d convolution node the generator runs as a conv step.
struct ConvMatch {
  core::NodeRef input, weight, bias;  ///< bias may be null
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups = 1;
};
/// torch.conv2d / F.conv2d / aten::conv2d / aten::convolution (not transposed) with int
/// padding, or nullopt with `why` set.
std::optional<ConvMatch> matchConv(const core::Node& n, std::string* why);

/// True when conv step m should run on an NCHW (contiguous) input and write an NCHW result
/// rather than channels-last: oneDNN then computes it in its blocked layout (nChw8c on AVX2),
/// which measured ~1.4x less CPU than its channels-last kernels for resnet's 3x3 convs. A dense
/// conv with a spatial kernel over at least 16 input channels takes NCHW; a 1x1 conv keeps its
/// input's layout (no reorder: `inputContiguous`); the rest (a stem over 3 channels, grouped and
/// depthwise convs) stay channels-last, where oneDNN was as fast or faster.
bool convTakesNchw(const ConvMatch& m, bool inputContiguous);

/// The statistics of an eval-mode F.batch_norm, each a graph input (placeholder) or null.
struct BatchNormMatch {
  core::NodeRef mean, var, weight, bias;
  double eps = 1e-5;
};
/// `bn` as an eval-mode F.batch_norm of `input` whose tensors are graph inputs, or nullopt.
std::optional<BatchNormMatch> matchEvalBatchNorm(const core::Node& bn, const core::Node& input);
/// True when `relu` is a float32 relu of `input` (relu, F.relu with or without inplace, relu_):
/// a conv step applies it as a post-op.
bool isReluOf(const core::Node& relu, const core::Node& input);
/// The bounds (lo, hi) when `clip` is a float32 F.hardtanh of `input` with number bounds
/// (nn.ReLU6, nn.Hardtanh; in place or not): a conv step applies it as a post-op.
std::optional<std::pair<double, double>> clipBoundsOf(const core::Node& clip, const core::Node& input);
/// True when extern node `n` is a pooling op returning one tensor (max_pool2d without indices,
/// avg_pool2d, adaptive_avg_pool2d) whose values do not depend on its input's strides: the runtime hands it the program's
/// channels-last conv result as it is instead of a copy in eager's layout.
bool takesAnyLayout(const core::Node& n);

/// A matrix product node the generator runs as a matmul step (lower_matmul.cpp).
struct MatmulMatch {
  core::NodeRef a, b, bias;  ///< bias may be null (linear, addmm)
  bool transposeB = false;   ///< linear: b is [out, in]
  bool batched = false;      ///< bmm: 3-d operands, one product per batch
};
/// F.linear / aten::linear (2-d weight, 1-d bias or none), torch.mm / aten::mm, aten::addmm
/// (beta = alpha = 1), torch.bmm / aten::bmm of float32 CPU tensors, or nullopt.
std::optional<MatmulMatch> matchMatmul(const core::Node& n);

/// Groups scheduler nodes into kernels, plans the arena; fills program.kernels/steps.
Program fuseProgram(Lowered lowered, const LoweringOptions& options);
/// Per buffer: the first step that writes it and the last that touches it (-1: none), from
/// kernels, conv steps and extern calls' reads (the memory plan's liveness).
void stepRanges(const Program& p, std::vector<int>* first, std::vector<int>* last);
/// stepRanges' per-buffer ranges folded into arenaLiveRanges' per-slot ranges.
std::vector<std::pair<int, int>> slotRanges(const Program& p, const std::vector<int>& first,
                                            const std::vector<int>& last);

}  // namespace dynamo::codegen::detail
