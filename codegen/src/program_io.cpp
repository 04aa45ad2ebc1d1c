// writeProgram / readProgram (program_io.h): the lowered Program as bytes, for the fused
// backend's program cache. Every field is written; the reader checks lengths, enum ranges and
// expression references, and throws ProgramFormatError on anything it cannot read.
#include "dynamo/codegen/program_io.h"

#include <cstdint>
#include <cstring>
#include <unordered_map>

namespace dynamo::codegen {
namespace {

constexpr char kMagic[4] = {'D', 'Y', 'N', 'P'};
// Expression references: kNull, kNew (the node follows, it gets the next index), kRef (an index).
enum : uint8_t { kNull = 0, kNew = 1, kRef = 2 };

class Writer {
 public:
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void num(int v) { i64(v); }
  void flag(bool b) { out_.push_back(b ? 1 : 0); }
  void f64(double d) {
    uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    u64(bits);
  }
  void str(const std::string& s) {
    u64(s.size());
    out_ += s;
  }
  template <typename T, typename F>
  void vec(const std::vector<T>& v, F&& each) {
    u64(v.size());
    for (const T& x : v) each(x);
  }
  void ints(const std::vector<int64_t>& v) { vec(v, [&](int64_t x) { i64(x); }); }
  void nums(const std::vector<int>& v) { vec(v, [&](int x) { num(x); }); }
  void strs(const std::vector<std::string>& v) { vec(v, [&](const std::string& s) { str(s); }); }
  void affine(const Affine& a) {
    i64(a.offset);
    ints(a.coeffs);
  }
  void expr(const Expr& e) {
    if (!e) {
      out_.push_back(kNull);
      return;
    }
    auto it = ids_.find(e.get());
    if (it != ids_.end()) {
      out_.push_back(kRef);
      u64(it->second);
      return;
    }
    out_.push_back(kNew);
    num(static_cast<int>(e->kind()));
    num(static_cast<int>(e->dtype()));
    switch (e->kind()) {
      case ExprKind::kLoad: num(e->buffer()); affine(e->index()); break;
      case ExprKind::kConst: f64(e->value()); break;
      case ExprKind::kUnary: num(static_cast<int>(e->unary())); break;
      case ExprKind::kBinary: num(static_cast<int>(e->binary())); break;
      case ExprKind::kReduced: num(e->stage()); break;
      case ExprKind::kScalar: num(e->scalar()); break;
      case ExprKind::kWhere:
      case ExprKind::kCast: break;
    }
    vec(e->operands(), [&](const Expr& o) { expr(o); });
    ids_.emplace(e.get(), ids_.size());  // after its operands: the reader numbers it last too
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
  std::unordered_map<const ExprNode*, uint64_t> ids_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}

  uint64_t u64() {
    need(8, "an integer");
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return v;
  }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  int num() {
    int64_t v = i64();
    if (v < INT32_MIN || v > INT32_MAX) fail("an int out of range");
    return static_cast<int>(v);
  }
  bool flag() {
    need(1, "a flag");
    char c = in_[pos_++];
    if (c != 0 && c != 1) fail("a flag that is neither 0 nor 1");
    return c == 1;
  }
  double f64() {
    uint64_t bits = u64();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return d;
  }
  std::string str() {
    uint64_t n = u64();
    need(n, "a string");
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  uint64_t count() {
    uint64_t n = u64();
    if (n > in_.size() - pos_) fail("a length beyond the end");  // every element takes >= 1 byte
    return n;
  }
  template <typename T, typename F>
  std::vector<T> vec(F&& each) {
    std::vector<T> v(count());
    for (T& x : v) x = each();
    return v;
  }
  std::vector<int64_t> ints() { return vec<int64_t>([&] { return i64(); }); }
  std::vector<int> nums() { return vec<int>([&] { return num(); }); }
  std::vector<std::string> strs() { return vec<std::string>([&] { return str(); }); }
  template <typename E>
  E enumOf(E last, const char* what) {
    int v = num();
    if (v < 0 || v > static_cast<int>(last)) fail(std::string("an unknown ") + what);
    return static_cast<E>(v);
  }
  Affine affine() {
    Affine a;
    a.offset = i64();
    a.coeffs = ints();
    return a;
  }
  Expr expr() {
    need(1, "an expression tag");
    const auto tag = static_cast<uint8_t>(in_[pos_++]);
    if (tag == kNull) return nullptr;
    if (tag == kRef) {
      uint64_t id = u64();
      if (id >= exprs_.size()) fail("a reference to an expression not read yet");
      return exprs_[id];
    }
    if (tag != kNew) fail("an unknown expression tag");
    auto kind = enumOf(ExprKind::kScalar, "expression kind");
    auto dtype = enumOf(DType::kFloat64, "dtype");
    int buffer = -1;
    Affine index;
    double value = 0;
    UnaryOp unary = UnaryOp::kNeg;
    BinaryOp binary = BinaryOp::kAdd;
    switch (kind) {
      case ExprKind::kLoad: buffer = num(); index = affine(); break;
      case ExprKind::kConst: value = f64(); break;
      case ExprKind::kUnary: unary = enumOf(UnaryOp::kReciprocal, "unary op"); break;
      case ExprKind::kBinary: binary = enumOf(BinaryOp::kOr, "binary op"); break;
      case ExprKind::kReduced: buffer = num(); break;
      case ExprKind::kScalar: buffer = num(); break;
      case ExprKind::kWhere:
      case ExprKind::kCast: break;
    }
    std::vector<Expr> ops = vec<Expr>([&] { return expr(); });
    const size_t arity = kind == ExprKind::kUnary || kind == ExprKind::kCast ? 1
                         : kind == ExprKind::kBinary                         ? 2
                         : kind == ExprKind::kWhere                          ? 3
                                                                             : 0;
    if (ops.size() != arity) fail("an expression with the wrong number of operands");
    for (const Expr& o : ops) {
      if (!o) fail("a null operand");
    }
    Expr e;
    switch (kind) {
      case ExprKind::kLoad: e = ExprNode::makeLoad(buffer, dtype, std::move(index)); break;
      case ExprKind::kConst: e = ExprNode::makeConst(dtype, value); break;
      case ExprKind::kUnary: e = ExprNode::makeUnary(unary, ops[0]); break;
      case ExprKind::kBinary: e = ExprNode::makeBinary(binary, ops[0], ops[1]); break;
      case ExprKind::kWhere: e = ExprNode::makeWhere(ops[0], ops[1], ops[2]); break;
      case ExprKind::kCast: e = ExprNode::makeCast(dtype, ops[0]); break;
      case ExprKind::kReduced: e = ExprNode::makeReduced(buffer, dtype); break;
      case ExprKind::kScalar: e = ExprNode::makeScalar(buffer, dtype); break;
    }
    if (e->dtype() != dtype) fail("an expression whose dtype is not the one its operands give");
    exprs_.push_back(e);
    return e;
  }
  void magic() {
    need(sizeof kMagic, "the magic");
    if (in_.compare(0, sizeof kMagic, kMagic, sizeof kMagic) != 0) fail("no DYNP magic");
    pos_ += sizeof kMagic;
    uint64_t version = u64();
    if (version != kProgramFormatVersion) fail("format version " + std::to_string(version));
  }
  void end() {
    if (pos_ != in_.size()) fail("bytes after the program");
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw ProgramFormatError("not a lowered program: " + what + " at byte " + std::to_string(pos_));
  }

 private:
  void need(uint64_t n, const char* what) const {
    if (n > in_.size() - pos_) fail(std::string("truncated in ") + what);
  }
  const std::string& in_;
  size_t pos_ = 0;
  std::vector<Expr> exprs_;
};

void writeKernel(Writer& w, const Kernel& k) {
  w.str(k.name);
  w.ints(k.outerSizes);
  w.ints(k.innerSizes);
  w.vec(k.stages, [&](const Stage& s) {
    w.num(static_cast<int>(s.kind));
    w.num(static_cast<int>(s.reduce));
    w.num(s.buffer);
    w.affine(s.index);
    w.expr(s.value);
    w.expr(s.finish);
    w.strs(s.nodes);
  });
  w.nums(k.reads);
  w.nums(k.writes);
}

Kernel readKernel(Reader& r) {
  Kernel k;
  k.name = r.str();
  k.outerSizes = r.ints();
  k.innerSizes = r.ints();
  k.stages = r.vec<Stage>([&] {
    Stage s;
    s.kind = r.enumOf(Stage::Kind::kStoreOuter, "stage kind");
    s.reduce = r.enumOf(ReduceOp::kMin, "reduction");
    s.buffer = r.num();
    s.index = r.affine();
    s.value = r.expr();
    s.finish = r.expr();
    s.nodes = r.strs();
    return s;
  });
  k.reads = r.nums();
  k.writes = r.nums();
  return k;
}

}  // namespace

std::string writeProgram(const Program& p) {
  Writer w;
  std::string head(kMagic, sizeof kMagic);
  w.u64(kProgramFormatVersion);
  w.vec(p.buffers, [&](const Buffer& b) {
    w.num(b.id);
    w.str(b.node);
    w.num(static_cast<int>(b.dtype));
    w.ints(b.shape);
    w.ints(b.strides);
    w.num(static_cast<int>(b.kind));
    w.i64(b.arenaOffset);
    w.num(b.storage);
  });
  w.vec(p.kernels, [&](const Kernel& k) { writeKernel(w, k); });
  w.vec(p.steps, [&](const Step& s) {
    w.flag(s.isKernel);
    w.num(s.kernel);
    w.num(s.node);
    w.num(s.result);
    w.num(s.conv);
    w.num(s.matmul);
    w.flag(s.programLayout);
    w.nums(s.reads);
  });
  w.vec(p.convs, [&](const ConvStep& c) {
    for (int b : {c.input, c.weight, c.bias, c.bnMean, c.bnVar, c.bnWeight, c.bnBias}) w.num(b);
    w.f64(c.bnEps);
    w.ints(c.stride);
    w.ints(c.padding);
    w.ints(c.dilation);
    w.i64(c.groups);
    w.num(static_cast<int>(c.post));
    w.f64(c.clipLo);
    w.f64(c.clipHi);
    w.num(c.result);
    w.strs(c.nodes);
  });
  w.vec(p.matmuls, [&](const MatmulStep& m) {
    w.num(m.a);
    w.num(m.b);
    w.flag(m.transposeB);
    w.flag(m.batched);
    w.num(m.result);
    w.strs(m.nodes);
  });
  w.vec(p.scalars, [&](const ScalarArg& a) {
    w.num(a.input);
    w.num(static_cast<int>(a.dtype));
    w.str(a.name);
  });
  w.nums(p.inputBuffer);
  w.nums(p.nodeBuffer);
  w.i64(p.arenaBytes);
  w.strs(p.lowered);
  w.vec(p.externs, [&](const std::pair<std::string, std::string>& e) {
    w.str(e.first);
    w.str(e.second);
  });
  return head + w.take();
}

Program readProgram(const std::string& bytes) {
  Reader r(bytes);
  r.magic();
  Program p;
  p.buffers = r.vec<Buffer>([&] {
    Buffer b;
    b.id = r.num();
    b.node = r.str();
    b.dtype = r.enumOf(DType::kFloat64, "dtype");
    b.shape = r.ints();
    b.strides = r.ints();
    b.kind = r.enumOf(BufferKind::kIntermediate, "buffer kind");
    b.arenaOffset = r.i64();
    b.storage = r.num();
    return b;
  });
  p.kernels = r.vec<Kernel>([&] { return readKernel(r); });
  p.steps = r.vec<Step>([&] {
    Step s;
    s.isKernel = r.flag();
    s.kernel = r.num();
    s.node = r.num();
    s.result = r.num();
    s.conv = r.num();
    s.matmul = r.num();
    s.programLayout = r.flag();
    s.reads = r.nums();
    return s;
  });
  p.convs = r.vec<ConvStep>([&] {
    ConvStep c;
    for (int* b : {&c.input, &c.weight, &c.bias, &c.bnMean, &c.bnVar, &c.bnWeight, &c.bnBias}) *b = r.num();
    c.bnEps = r.f64();
    c.stride = r.ints();
    c.padding = r.ints();
    c.dilation = r.ints();
    c.groups = r.i64();
    c.post = r.enumOf(ConvPostOp::kClip, "conv post-op");
    c.clipLo = r.f64();
    c.clipHi = r.f64();
    c.result = r.num();
    c.nodes = r.strs();
    return c;
  });
  p.matmuls = r.vec<MatmulStep>([&] {
    MatmulStep m;
    m.a = r.num();
    m.b = r.num();
    m.transposeB = r.flag();
    m.batched = r.flag();
    m.result = r.num();
    m.nodes = r.strs();
    return m;
  });
  p.scalars = r.vec<ScalarArg>([&] {
    ScalarArg a;
    a.input = r.num();
    a.dtype = r.enumOf(DType::kFloat64, "dtype");
    a.name = r.str();
    return a;
  });
  p.inputBuffer = r.nums();
  p.nodeBuffer = r.nums();
  p.arenaBytes = r.i64();
  p.lowered = r.strs();
  p.externs = r.vec<std::pair<std::string, std::string>>([&] {
    std::string a = r.str();
    return std::make_pair(std::move(a), r.str());
  });
  r.end();
  // Indices the runtime follows without checks: every one must name a buffer, kernel or step.
  const auto n = static_cast<int>(p.buffers.size());
  auto buffer = [&](int b, bool optional) {
    if (b >= n || b < (optional ? -1 : 0)) r.fail("a buffer index out of range");
  };
  for (int i = 0; i < n; ++i) {
    if (p.buffers[i].id != i) r.fail("a buffer whose id is not its index");
    if (p.buffers[i].strides.size() != p.buffers[i].shape.size()) r.fail("a buffer with strides of another rank");
    buffer(p.buffers[i].storage, true);
  }
  for (const Kernel& k : p.kernels) {
    for (int b : k.reads) buffer(b, false);
    for (int b : k.writes) buffer(b, false);
  }
  for (const Step& s : p.steps) {
    if (s.isKernel && (s.kernel < 0 || s.kernel >= static_cast<int>(p.kernels.size()))) r.fail("a kernel step out of range");
    if (s.conv >= static_cast<int>(p.convs.size()) || s.matmul >= static_cast<int>(p.matmuls.size()))
      r.fail("a conv or matmul step out of range");
    buffer(s.result, true);
    for (int b : s.reads) buffer(b, false);
  }
  for (const ConvStep& c : p.convs) {
    for (int b : {c.weight, c.bias, c.bnMean, c.bnVar, c.bnWeight, c.bnBias}) buffer(b, true);
    buffer(c.input, false);
    buffer(c.result, false);
  }
  for (const MatmulStep& m : p.matmuls) {
    for (int b : {m.a, m.b, m.result}) buffer(b, false);
  }
  for (int b : p.inputBuffer) buffer(b, true);
  for (int b : p.nodeBuffer) buffer(b, true);
  return p;
}

}  // namespace dynamo::codegen
