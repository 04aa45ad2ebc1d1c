// The loop IR's constructors, dtype table and printer.
#include "dynamo/codegen/loop_ir.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "dynamo/common/error.h"

namespace dynamo::codegen {

std::optional<DType> dtypeFromTorch(const std::string& name) {
  static const std::pair<const char*, DType> kTable[] = {
      {"torch.bool", DType::kBool},       {"torch.uint8", DType::kUInt8},
      {"torch.int8", DType::kInt8},       {"torch.int16", DType::kInt16},
      {"torch.int32", DType::kInt32},     {"torch.int64", DType::kInt64},
      {"torch.float32", DType::kFloat32}, {"torch.float64", DType::kFloat64},
  };
  for (const auto& [n, t] : kTable) {
    if (name == n) return t;
  }
  return std::nullopt;
}

const char* dtypeName(DType t) {
  switch (t) {
    case DType::kBool: return "bool";
    case DType::kUInt8: return "uint8";
    case DType::kInt8: return "int8";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
  }
  return "?";
}

const char* dtypeCType(DType t) {
  switch (t) {
    case DType::kBool: return "bool";
    case DType::kUInt8: return "unsigned char";
    case DType::kInt8: return "signed char";
    case DType::kInt16: return "short";
    case DType::kInt32: return "int";
    case DType::kInt64: return "long long";
    case DType::kFloat32: return "float";
    case DType::kFloat64: return "double";
  }
  return "?";
}

int dtypeSize(DType t) {
  switch (t) {
    case DType::kBool: case DType::kUInt8: case DType::kInt8: return 1;
    case DType::kInt16: return 2;
    case DType::kInt32: case DType::kFloat32: return 4;
    case DType::kInt64: case DType::kFloat64: return 8;
  }
  return 1;
}

bool isFloating(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }

DType promote(DType a, DType b) {
  if (a == b) return a;
  if (isFloating(a) || isFloating(b)) {
    if (isFloating(a) && isFloating(b)) return DType::kFloat64;
    return isFloating(a) ? a : b;
  }
  if (a == DType::kBool) return b;
  if (b == DType::kBool) return a;
  // uint8 with a signed type: the signed type one size up (int16 at least), as ATen does.
  if (a == DType::kUInt8 || b == DType::kUInt8) {
    DType s = a == DType::kUInt8 ? b : a;
    return s == DType::kInt8 ? DType::kInt16 : s;
  }
  return dtypeSize(a) >= dtypeSize(b) ? a : b;
}

Expr ExprNode::makeLoad(int buffer, DType t, Affine index) {
  auto n = std::shared_ptr<ExprNode>(new ExprNode(ExprKind::kLoad, t));
  n->buffer_ = buffer;
  n->index_ = std::move(index);
  return n;
}

Expr ExprNode::makeConst(DType t, double value) {
  auto n = std::shared_ptr<ExprNode>(new ExprNode(ExprKind::kConst, t));
  n->value_ = value;
  return n;
}

Expr ExprNode::makeUnary(UnaryOp op, Expr a) {
  DType t = (op == UnaryOp::kIsNan || op == UnaryOp::kNot) ? DType::kBool : a->dtype();
  auto n = std::shared_ptr<ExprNode>(new ExprNode(ExprKind::kUnary, t));
  n->unary_ = op;
  n->size_ = 1 + a->size();
  n->operands_ = {std::move(a)};
  return n;
}

Expr ExprNode::makeBinary(BinaryOp op, Expr a, Expr b) {
  DYNAMO_INTERNAL_ASSERT(a->dtype() == b->dtype(), "binary operands of different dtypes: ",
                         dtypeName(a->dtype()), " and ", dtypeName(b->dtype()));
  bool cmp = op >= BinaryOp::kEq;
  auto n = std::shared_ptr<ExprNode>(new ExprNode(ExprKind::kBinary, cmp ? DType::kBool : a->dtype()));
  n->binary_ = op;
  n->size_ = 1 + a->size() + b->size();
  n->operands_ = {std::move(a), std::move(b)};
  return n;
}

Expr ExprNode::makeWhere(Expr cond, Expr a, Expr b) {
  DYNAMO_INTERNAL_ASSERT(a->dtype() == b->dtype() && cond->dtype() == DType::kBool,
                         "where: operand dtypes differ");
  auto n = std::shared_ptr<ExprNode>(new ExprNode(ExprKind::kWhere, a->dtype()));
  n->size_ = 1 + cond->size() + a->size() + b->size();
  n->operands_ = {std::move(cond), std::move(a), std::move(b)};
  return n;
}

Expr ExprNode::makeCast(DType t, Expr a) {
  if (a->dtype() == t) return a;
  if (a->kind() == ExprKind::kConst) {
    double v = a->value();
    if (t == DType::kBool) v = v != 0;
    else if (!isFloating(t)) v = static_cast<double>(static_cast<int64_t>(v));
    return makeConst(t, v);
  }
  auto n = std::shared_ptr<ExprNode>(new ExprNode(ExprKind::kCast, t));
  n->size_ = 1 + a->size();
  n->operands_ = {std::move(a)};
  return n;
}

Expr ExprNode::makeReduced(int stage, DType t) {
  auto n = std::shared_ptr<ExprNode>(new ExprNode(ExprKind::kReduced, t));
  n->buffer_ = stage;
  return n;
}

Expr ExprNode::makeScalar(int slot, DType t) {
  DYNAMO_INTERNAL_ASSERT(t == DType::kInt64 || t == DType::kFloat64, "a scalar argument is int64 or float64");
  auto n = std::shared_ptr<ExprNode>(new ExprNode(ExprKind::kScalar, t));
  n->buffer_ = slot;
  return n;
}

std::vector<int> kernelScalars(const Kernel& k) {
  std::vector<int> out;
  auto visit = [&](const ExprNode& x) {
    if (x.kind() == ExprKind::kScalar && std::find(out.begin(), out.end(), x.scalar()) == out.end())
      out.push_back(x.scalar());
  };
  for (const Stage& s : k.stages) {
    if (s.value) forEachExpr(s.value, visit);
    if (s.finish) forEachExpr(s.finish, visit);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> Kernel::nodes() const {
  std::vector<std::string> out;
  for (const Stage& s : stages) {
    for (const std::string& n : s.nodes) {
      if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
    }
  }
  return out;
}

int64_t Buffer::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

namespace {

const char* unaryName(UnaryOp op) {
  static const char* kNames[] = {"neg", "abs", "relu", "sigmoid", "tanh", "exp", "log", "sqrt",
                                 "rsqrt", "erf", "floor", "trunc", "not", "isnan", "reciprocal"};
  return kNames[static_cast<int>(op)];
}

const char* binaryName(BinaryOp op) {
  static const char* kNames[] = {"add", "sub", "mul", "div", "max", "min", "maximum", "minimum",
                                 "pow", "floordiv", "eq", "ne", "lt", "le", "gt", "ge", "and",
                                 "or"};
  return kNames[static_cast<int>(op)];
}

std::string printAffine(const Affine& a, size_t outer) {
  std::ostringstream o;
  bool first = true;
  if (a.offset != 0 || a.coeffs.empty()) {
    o << a.offset;
    first = false;
  }
  for (size_t i = 0; i < a.coeffs.size(); ++i) {
    if (a.coeffs[i] == 0) continue;
    if (!first) o << " + ";
    first = false;
    o << a.coeffs[i] << "*" << (i < outer ? "x" : "r") << (i < outer ? i : i - outer);
  }
  if (first) o << "0";
  return o.str();
}

void printExprTo(std::ostringstream& o, const Expr& e, size_t outer, int rawStage = -1) {
  switch (e->kind()) {
    case ExprKind::kLoad:
      o << "b" << e->buffer() << "[" << printAffine(e->index(), outer) << "]";
      return;
    case ExprKind::kConst: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", e->value());
      o << buf << ":" << dtypeName(e->dtype());
      return;
    }
    case ExprKind::kReduced:  // the raw accumulator inside its own finish, else the finished value
      o << (e->stage() == rawStage ? "acc" : "red") << e->stage();
      return;
    case ExprKind::kScalar:
      o << "arg" << e->scalar() << ":" << dtypeName(e->dtype());
      return;
    case ExprKind::kCast:
      o << dtypeName(e->dtype()) << "(";
      printExprTo(o, e->operands()[0], outer, rawStage);
      o << ")";
      return;
    case ExprKind::kUnary: o << unaryName(e->unary()) << "("; break;
    case ExprKind::kBinary: o << binaryName(e->binary()) << "("; break;
    case ExprKind::kWhere: o << "where("; break;
  }
  for (size_t i = 0; i < e->operands().size(); ++i) {
    if (i) o << ", ";
    printExprTo(o, e->operands()[i], outer, rawStage);
  }
  o << ")";
}

const char* bufferKindName(BufferKind k) {
  switch (k) {
    case BufferKind::kInput: return "input";
    case BufferKind::kExtern: return "extern";
    case BufferKind::kOutput: return "output";
    case BufferKind::kIntermediate: return "intermediate";
  }
  return "?";
}

template <typename T>
std::string list(const std::vector<T>& v) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < v.size(); ++i) o << (i ? ", " : "") << v[i];
  o << "]";
  return o.str();
}

}  // namespace

std::string printExpr(const Expr& e) {
  std::ostringstream o;
  printExprTo(o, e, 1u << 20);
  return o.str();
}

std::string printProgram(const Program& p) {
  std::ostringstream o;
  for (size_t i = 0; i < p.scalars.size(); ++i) {
    o << "arg" << i << ": " << (p.scalars[i].dtype == DType::kInt64 ? "int" : "float") << " read at call time ("
      << p.scalars[i].name << ")\n";
  }
  for (const Buffer& b : p.buffers) {
    o << "b" << b.id << ": " << bufferKindName(b.kind) << " " << dtypeName(b.dtype) << list(b.shape)
      << " strides " << list(b.strides) << " (" << b.node << ")";
    if (b.arenaOffset >= 0) o << " arena+" << b.arenaOffset;
    if (b.storage >= 0) o << " in b" << b.storage;
    o << "\n";
  }
  for (const Step& s : p.steps) {
    if (!s.isKernel && s.conv >= 0) {
      const ConvStep& c = p.convs[s.conv];
      o << "conv #" << s.node << " b" << c.input << " * b" << c.weight;
      if (c.bias >= 0) o << " + b" << c.bias;
      o << " stride " << list(c.stride) << " padding " << list(c.padding) << " dilation " << list(c.dilation)
        << " groups " << c.groups;
      if (c.bnMean >= 0) o << " batch_norm(b" << c.bnMean << ", b" << c.bnVar << ") folded";
      if (c.post == ConvPostOp::kRelu) o << " relu";
      if (c.post == ConvPostOp::kClip) o << " clip(" << c.clipLo << ", " << c.clipHi << ")";
      o << " -> b" << c.result << "   # " << list(c.nodes) << "\n";
      continue;
    }
    if (!s.isKernel && s.matmul >= 0) {
      const MatmulStep& m = p.matmuls[s.matmul];
      o << (m.batched ? "bmm #" : "matmul #") << s.node << " b" << m.a << " @ b" << m.b << (m.transposeB ? ".T" : "") << " -> b" << m.result
        << "   # " << list(m.nodes) << "\n";
      continue;
    }
    if (!s.isKernel) {
      o << "extern #" << s.node;
      if (s.programLayout) {  // the buffers it reads, which may be arena slots
        for (size_t i = 0; i < s.reads.size(); ++i) o << (i ? ", b" : " reads b") << s.reads[i];
      }
      if (s.result >= 0) o << " -> b" << s.result;
      if (s.programLayout) o << "   (arguments in the program's layout)";
      o << "\n";
      continue;
    }
    const Kernel& k = p.kernels[s.kernel];
    o << "kernel " << k.name << " outer " << list(k.outerSizes) << " inner " << list(k.innerSizes)
      << "\n";
    for (size_t i = 0; i < k.stages.size(); ++i) {
      const Stage& st = k.stages[i];
      std::ostringstream e;
      printExprTo(e, st.value, k.outerSizes.size());
      static const char* kReduce[] = {"sum", "max", "min"};
      switch (st.kind) {
        case Stage::Kind::kReduce:
          o << "  acc" << i << " = " << kReduce[static_cast<int>(st.reduce)] << "_r(" << e.str() << ")";
          if (st.finish && !(st.finish->kind() == ExprKind::kReduced)) {
            std::ostringstream f;
            printExprTo(f, st.finish, k.outerSizes.size(), static_cast<int>(i));
            o << "; red" << i << " = " << f.str();
          }
          if (st.buffer >= 0) o << " -> b" << st.buffer << "[" << printAffine(st.index, k.outerSizes.size()) << "]";
          break;
        case Stage::Kind::kStoreInner:
        case Stage::Kind::kStoreOuter:
          o << "  b" << st.buffer << "[" << printAffine(st.index, k.outerSizes.size())
            << (st.kind == Stage::Kind::kStoreInner ? "] (inner) = " : "] = ") << e.str();
          break;
      }
      o << "   # " << list(st.nodes) << "\n";
    }
  }
  return o.str();
}

}  // namespace dynamo::codegen
