// The loop IR: what the fused code generator emits C++ and CUDA C from.
//
//   Graph --lowering--> Program { buffers, steps: Kernel | Extern }
//   Kernel = outer loops (parallel) x stages; a stage is a reduction over the inner loops, a
//            pointwise store over the inner loops, or a store per outer point.
//
// Index expressions are affine in the kernel's loop variables (outer x0.., inner r0..): every
// load and store is `buffer[c0 + sum c_i * var_i]`, which covers sizes, strides, broadcasting,
// permutes and slices. Values are expression trees (Expr), immutable and shared, made only through
// the static make*() functions. No torch in here: the lowering reads the graph's TensorMeta.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dynamo::codegen {

/// The element types the generator handles (others run as extern ATen calls).
enum class DType { kBool, kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat32, kFloat64 };

/// "torch.float32" -> kFloat32; nullopt for a dtype the generator does not handle.
std::optional<DType> dtypeFromTorch(const std::string& name);
/// "float32", "int64", "bool", ...
const char* dtypeName(DType t);
/// The C type spelled in generated code: "float", "long long", "bool", ...
const char* dtypeCType(DType t);
/// Bytes per element.
int dtypeSize(DType t);
/// True for kFloat32 / kFloat64.
bool isFloating(DType t);
/// ATen's promotion of two dtypes of the same priority class (promoteTypes).
DType promote(DType a, DType b);

/// c0 + sum_i coeffs[i] * var_i over a kernel's loop variables (outer first, then inner).
struct Affine {
  int64_t offset = 0;                ///< c0
  std::vector<int64_t> coeffs;       ///< one per loop variable
  bool operator==(const Affine& o) const { return offset == o.offset && coeffs == o.coeffs; }
  bool operator!=(const Affine& o) const { return !(*this == o); }
};

class ExprNode;
/// A shared handle to an immutable expression.
using Expr = std::shared_ptr<const ExprNode>;

/// What an expression computes.
enum class ExprKind {
  kLoad,     ///< buffer[index]
  kConst,    ///< a number of dtype()
  kUnary,    ///< op(a)
  kBinary,   ///< op(a, b)
  kWhere,    ///< a ? b : c
  kCast,     ///< (dtype) a
  kReduced,  ///< the value of reduction stage `stage` of this kernel at the current outer point
  kScalar,   ///< a Python number given at call time (Program::scalars[scalar()]): kInt64 or kFloat64
};

/// Unary operators (the emitted C spelling is in the emitters' prelude).
enum class UnaryOp { kNeg, kAbs, kRelu, kSigmoid, kTanh, kExp, kLog, kSqrt, kRsqrt, kErf,
                     kFloor, kTrunc, kNot, kIsNan, kReciprocal };
/// Binary operators; comparisons give kBool.
enum class BinaryOp { kAdd, kSub, kMul, kDiv, kMax, kMin, kMaxNan, kMinNan, kPow, kFloorDiv,
                      kEq, kNe, kLt, kLe, kGt, kGe, kAnd, kOr };

/// One immutable expression node.
class ExprNode {
 public:
  static Expr makeLoad(int buffer, DType t, Affine index);
  static Expr makeConst(DType t, double value);
  static Expr makeUnary(UnaryOp op, Expr a);
  static Expr makeBinary(BinaryOp op, Expr a, Expr b);
  static Expr makeWhere(Expr cond, Expr a, Expr b);
  static Expr makeCast(DType t, Expr a);
  static Expr makeReduced(int stage, DType t);
  /// Program::scalars[slot], read from the kernel's argument array at call time; t is kInt64
  /// (a Python int, exact) or kFloat64 (a Python float).
  static Expr makeScalar(int slot, DType t);

  ExprKind kind() const { return kind_; }
  DType dtype() const { return dtype_; }
  int buffer() const { return buffer_; }          ///< kLoad
  const Affine& index() const { return index_; }  ///< kLoad
  double value() const { return value_; }         ///< kConst
  UnaryOp unary() const { return unary_; }        ///< kUnary
  BinaryOp binary() const { return binary_; }     ///< kBinary
  int stage() const { return buffer_; }           ///< kReduced
  int scalar() const { return buffer_; }          ///< kScalar: index in Program::scalars
  const std::vector<Expr>& operands() const { return operands_; }
  /// Number of nodes in this tree (the fusion size cap counts these).
  int size() const { return size_; }

 private:
  ExprNode(ExprKind k, DType t) : kind_(k), dtype_(t) {}
  ExprKind kind_;
  DType dtype_;
  int buffer_ = -1;
  Affine index_;
  double value_ = 0;
  UnaryOp unary_ = UnaryOp::kNeg;
  BinaryOp binary_ = BinaryOp::kAdd;
  std::vector<Expr> operands_;
  int size_ = 1;
};

/// Reductions.
enum class ReduceOp { kSum, kMax, kMin };

/// One stage of a kernel, run for every outer point in order.
struct Stage {
  enum class Kind {
    kReduce,      ///< acc = reduce over the inner loops of `value`; later stages read kReduced
    kStoreInner,  ///< buffer[index] = value over the inner loops
    kStoreOuter,  ///< buffer[index] = value once per outer point (index uses outer vars only)
  };
  Kind kind = Kind::kStoreOuter;  ///< what the stage does
  ReduceOp reduce = ReduceOp::kSum;  ///< kReduce
  int buffer = -1;                ///< the stored buffer (kReduce: also stored at the outer point
                                  ///< unless it is kernel-local; -1 when local)
  Affine index;                   ///< where it is stored
  Expr value;                     ///< the value (kReduce: the value reduced)
  Expr finish;                    ///< kReduce: the stored value, kReduced(own stage) = the raw
                                  ///< accumulator (mean divides it); later stages read this
  std::vector<std::string> nodes; ///< graph nodes this stage covers (for the trace and logs)
};

/// A fused kernel: loops over outerSizes (parallel) and, per outer point, its stages.
struct Kernel {
  std::string name;                  ///< unique in the program: "k0_add_relu"
  std::vector<int64_t> outerSizes;   ///< outer loop extents (may be empty: one point)
  std::vector<int64_t> innerSizes;   ///< inner (reduction) loop extents (may be empty)
  std::vector<Stage> stages;         ///< in order
  std::vector<int> reads;            ///< buffers read, sorted
  std::vector<int> writes;           ///< buffers written, sorted
  /// The graph nodes it covers, in order.
  std::vector<std::string> nodes() const;
};

/// Where a buffer's memory comes from at run time.
enum class BufferKind {
  kInput,         ///< a graph input tensor (the caller's)
  kExtern,        ///< the tensor result of an extern (ATen) step
  kOutput,        ///< written by a kernel and escapes (graph output or an extern step's argument,
                  ///< pooling externs' aside)
  kIntermediate,  ///< read by kernels, conv steps and pooling externs only: planned into the arena
};

/// A tensor the program reads or writes.
struct Buffer {
  int id = -1;                    ///< index in Program::buffers
  std::string node;               ///< the graph node whose value it holds
  DType dtype = DType::kFloat32;  ///< element type
  std::vector<int64_t> shape;     ///< sizes
  std::vector<int64_t> strides;   ///< in elements
  BufferKind kind = BufferKind::kIntermediate;  ///< where it lives
  int64_t arenaOffset = -1;       ///< kIntermediate: byte offset in the arena (memory planning)
  /// An intermediate written over in place (inplace.h): the buffer whose memory it lives in (a
  /// kOutput's pool block, or an intermediate's arena slot, arenaOffset then the same), else -1
  int storage = -1;
  /// Number of elements.
  int64_t numel() const;
};

/// The elementwise op a conv step applies as it writes its output (oneDNN's post-op).
enum class ConvPostOp {
  kNone,
  kRelu,  ///< relu / F.relu / relu_ after the conv (or the folded batch_norm)
  kClip,  ///< F.hardtanh(x, lo, hi) (nn.ReLU6: lo 0, hi 6) after it
};

/// A 2-d convolution the runtime computes with a prepared weight (oneDNN's primitive, the weight
/// folded and reordered from the live tensors at every call into the step's workspace, else
/// ATen's convolution): an eval-mode batch_norm that only it feeds is folded into the weight and
/// bias, a ReLU / hardtanh after it is the post-op, and its result is a planned buffer (the arena
/// when only kernels, conv steps and pooling externs read it, else a pool block). Nothing prepared
/// is kept between calls (a write through `.data` or numpy leaves no trace to check).
struct ConvStep {
  int input = -1;                  ///< activation buffer
  int weight = -1;                 ///< weight buffer (a graph input)
  int bias = -1;                   ///< bias buffer, or -1
  int bnMean = -1, bnVar = -1;     ///< folded batch_norm's running statistics, or -1
  int bnWeight = -1, bnBias = -1;  ///< folded batch_norm's affine parameters, or -1
  double bnEps = 1e-5;             ///< folded batch_norm's eps
  std::vector<int64_t> stride, padding, dilation;  ///< as at::convolution takes them
  int64_t groups = 1;              ///< channel groups
  ConvPostOp post = ConvPostOp::kNone;  ///< the op after it applied as oneDNN's post-op
  double clipLo = 0, clipHi = 0;   ///< kClip's bounds
  int result = -1;                 ///< the output buffer (kIntermediate or kOutput; its layout
                                   ///< the conv's: NCHW or channels-last, eager's when it escapes)
  std::vector<std::string> nodes;  ///< the conv node [, the folded batch_norm node]
};

/// A matrix product the runtime computes with at::mm_out into a buffer of Dynamo's caching
/// pool (no fresh pages per call): `a @ b` (`a @ b.T` for a linear's [out, in] weight). An
/// N-d `a` of a linear is taken as a matrix of its rows. A linear's bias is not added here: it is
/// the first op of the pointwise epilogue (bias, activation, residual) that the kernels fuse into
/// one pass over the product.
struct MatmulStep {
  int a = -1;                      ///< left operand buffer ([..., k])
  int b = -1;                      ///< right operand buffer ([k, n], or [n, k] when transposeB)
  bool transposeB = false;         ///< b is a linear's weight
  bool batched = false;            ///< bmm: a [B, m, k] @ b [B, k, n] by at::bmm_out
  int result = -1;                 ///< the product's buffer ([..., n], contiguous)
  std::vector<std::string> nodes;  ///< the matmul/linear node
};

/// One step of a program, in execution order.
struct Step {
  bool isKernel = true;    ///< a kernel, or an extern call of one graph node
  int kernel = -1;         ///< index in Program::kernels
  int node = -1;           ///< extern: index of the node in the graph's body
  int result = -1;         ///< extern: the buffer its tensor result fills, or -1
  int conv = -1;           ///< extern: a conv step (index in Program::convs), not a call
  int matmul = -1;         ///< extern: a matmul step (index in Program::matmuls), not a call
  /// extern: an op whose values do not depend on its inputs' strides (pooling): it takes its
  /// tensor arguments in the program's layout (a channels-last conv result as it is), not in
  /// eager's recorded one, so no copy is made before the call
  bool programLayout = false;
  /// extern call: the program's buffers it takes as arguments. A programLayout step's may be
  /// arena slots (lent to the call by pointer, its result is a fresh tensor): the memory plan
  /// counts these reads in the slots' live ranges.
  std::vector<int> reads;
};

/// A Python number graph input that kernels read at call time (docs/dynamic-shapes.md, "Python
/// numbers in the fused backend"): a new value needs no new lowering and no compile.
struct ScalarArg {
  int input = -1;                 ///< the graph input (index in Graph::inputs())
  DType dtype = DType::kInt64;    ///< kInt64 (a Python int, passed as its int64) or kFloat64
  std::string name;               ///< the placeholder's name (logs)
};

/// The lowered graph.
struct Program {
  std::vector<Buffer> buffers;  ///< every buffer
  std::vector<Kernel> kernels;  ///< every kernel
  std::vector<Step> steps;      ///< execution order
  std::vector<ConvStep> convs;  ///< the conv steps
  std::vector<MatmulStep> matmuls;  ///< the matmul steps
  std::vector<ScalarArg> scalars;   ///< the Python numbers kernels read at call time (kScalar)
  std::vector<int> inputBuffer; ///< per graph input: its buffer, or -1 when no kernel reads it
  /// Per body node: the buffer that holds its value when a kernel makes it, else -1.
  std::vector<int> nodeBuffer;
  int64_t arenaBytes = 0;       ///< size of the intermediate arena (memory planning)
  /// Body nodes lowered into kernels, and the reason each extern node was not lowered.
  std::vector<std::string> lowered;
  std::vector<std::pair<std::string, std::string>> externs;
};

/// The scalars (Program::scalars indices) kernel k reads, sorted: the first entries of its
/// argument array, before its size parameters (kernel_template.h).
std::vector<int> kernelScalars(const Kernel& k);

/// The printed expression ("add(load(b0, 1*x0), 1.0)").
std::string printExpr(const Expr& e);
/// The printed program: buffers, steps and kernels with their stages (DYNAMO_LOGS=fusion).
std::string printProgram(const Program& p);

/// Calls f(const ExprNode&) for every node of e, depth first.
template <typename F>
void forEachExpr(const Expr& e, F&& f) {
  f(*e);
  for (const Expr& o : e->operands()) forEachExpr(o, f);
}

}  // namespace dynamo::codegen
