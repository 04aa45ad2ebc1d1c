// dynamo::codegen's in-place rule (inplace.h): which kernel outputs may be written over an
// intermediate that dies in the kernel. Hand-built kernels for the rule itself (the safe row
// reduction and pointwise shapes; neighbour, transposed, broadcast and column reads, a read after
// the store, a store per outer point, another dtype: never), then lowered graphs for the plan.
#include <string>
#include <vector>

#include "dynamo/codegen/emit.h"
#include "dynamo/codegen/inplace.h"
#include "dynamo/codegen/lowering.h"
#include "dynamo/core/graph.h"
#include "dynamo_catch.h"
#include "graph_meta.h"

using namespace dynamo;
using namespace dynamo::codegen;
using namespace dynamo::codegen::testing;

namespace {

// b0: input [4, 8]; b1 = a: intermediate [4, 8]; b2 = b: output [4, 8] (b3: [4, 8] of `bType`).
Program program(DType bType = DType::kFloat32) {
  Program p;
  for (int i = 0; i < 3; ++i) {
    Buffer b;
    b.id = i;
    b.node = "n" + std::to_string(i);
    b.dtype = i == 2 ? bType : DType::kFloat32;
    b.shape = {4, 8};
    b.strides = {8, 1};
    b.kind = i == 0 ? BufferKind::kInput : i == 1 ? BufferKind::kIntermediate : BufferKind::kOutput;
    p.buffers.push_back(b);
  }
  return p;
}

Affine idx(int64_t c0, std::vector<int64_t> coeffs) { return Affine{c0, std::move(coeffs)}; }
Expr load(int b, Affine i) { return ExprNode::makeLoad(b, DType::kFloat32, std::move(i)); }

Stage reduce(Expr v) {
  Stage s;
  s.kind = Stage::Kind::kReduce;
  s.value = std::move(v);
  s.finish = ExprNode::makeReduced(0, DType::kFloat32);
  return s;
}

Stage store(Stage::Kind kind, int buffer, Affine i, Expr v) {
  Stage s;
  s.kind = kind;
  s.buffer = buffer;
  s.index = std::move(i);
  s.value = std::move(v);
  return s;
}

// A row kernel over [4 rows] x [8 elements]: its stages.
Kernel rows(std::vector<Stage> stages) {
  Kernel k;
  k.name = "k0";
  k.outerSizes = {4};
  k.innerSizes = {8};
  k.stages = std::move(stages);
  return k;
}

const Affine kRow = idx(0, {8, 1});  // [x0, r0] of a contiguous [4, 8]

Expr minusAcc(Expr v) { return ExprNode::makeBinary(BinaryOp::kSub, std::move(v), ExprNode::makeReduced(0, DType::kFloat32)); }

}  // namespace

TEST_CASE("in place: a row's statistics, then the row rewritten element by element, is safe") {
  Program p = program();
  Kernel k = rows({reduce(load(1, kRow)), store(Stage::Kind::kStoreInner, 2, kRow, minusAcc(load(1, kRow)))});
  CHECK(inPlaceSafe(p, k, 1, 2));
  CHECK_FALSE(inPlaceSafe(p, k, 2, 1));  // b is never stored over: a is what the kernel writes
}

TEST_CASE("in place: a pointwise kernel reading and writing one element is safe") {
  Program p = program();
  Kernel k;
  k.outerSizes = {4, 8};
  k.stages = {store(Stage::Kind::kStoreInner, 2, kRow, ExprNode::makeUnary(UnaryOp::kExp, load(1, kRow)))};
  CHECK(inPlaceSafe(p, k, 1, 2));
}

TEST_CASE("in place: a neighbour's element, a transposed, broadcast or column read are never safe") {
  Program p = program();
  auto with = [&](Affine aRead) {
    return rows({reduce(load(1, kRow)), store(Stage::Kind::kStoreInner, 2, kRow,
                                              ExprNode::makeBinary(BinaryOp::kAdd, load(1, kRow), load(1, aRead)))});
  };
  CHECK(inPlaceSafe(p, with(kRow), 1, 2));
  CHECK_FALSE(inPlaceSafe(p, with(idx(1, {8, 1})), 1, 2));  // the next element (a stencil)
  CHECK_FALSE(inPlaceSafe(p, with(idx(0, {1, 4})), 1, 2));  // a [8, 4] read transposed
  CHECK_FALSE(inPlaceSafe(p, with(idx(0, {8, 0})), 1, 2));  // the row's first element, broadcast
  // a reduction over the other dim: row x0's output needs column x0 of a, which other rows write
  Kernel col = rows({reduce(load(1, idx(0, {1, 8}))), store(Stage::Kind::kStoreInner, 2, kRow, minusAcc(load(1, kRow)))});
  CHECK_FALSE(inPlaceSafe(p, col, 1, 2));
}

TEST_CASE("in place: a read after the store, a store per outer point, another dtype are never safe") {
  Program p = program();
  // a is read again by a stage after b's store
  Kernel after = rows({store(Stage::Kind::kStoreInner, 2, kRow, load(1, kRow)), reduce(load(1, kRow))});
  CHECK_FALSE(inPlaceSafe(p, after, 1, 2));
  // a is stored again by a stage after b's store
  Kernel rewrite = rows({store(Stage::Kind::kStoreInner, 2, kRow, load(1, kRow)), store(Stage::Kind::kStoreInner, 1, kRow, load(0, kRow))});
  CHECK_FALSE(inPlaceSafe(p, rewrite, 1, 2));
  // one store per row while the inner loop reads the whole row: not injective over r0
  Kernel outer = rows({reduce(load(1, kRow)), store(Stage::Kind::kStoreOuter, 2, idx(0, {8}), ExprNode::makeReduced(0, DType::kFloat32))});
  CHECK_FALSE(inPlaceSafe(p, outer, 1, 2));
  // b read before its store: its old contents would be a's
  Kernel early = rows({reduce(load(2, kRow)), store(Stage::Kind::kStoreInner, 2, kRow, minusAcc(load(1, kRow)))});
  CHECK_FALSE(inPlaceSafe(p, early, 1, 2));
  Program ints = program(DType::kInt32);
  Kernel k = rows({store(Stage::Kind::kStoreInner, 2, kRow, ExprNode::makeCast(DType::kInt32, load(1, kRow)))});
  CHECK_FALSE(inPlaceSafe(ints, k, 1, 2));
}

TEST_CASE("in place: softmax then layer_norm writes the output over the softmax (no arena)") {
  core::GraphBuilder b;
  auto x = b.placeholder("x", meta({16, 32}));
  auto s = b.callFunction(core::Target::atenOp("aten::_softmax"), {N(x), core::Arg::integer(-1), core::Arg::boolean(false)}, {}, meta({16, 32}));
  auto ln = b.callFunction(core::Target::atenOp("aten::layer_norm"), {N(s), core::Arg::list({core::Arg::integer(32)})}, {}, meta({16, 32}));
  b.output(N(ln));
  Program p = lowerGraph(b.build());
  REQUIRE(p.kernels.size() == 1);
  CHECK(p.arenaBytes == 0);
  int in = -1;
  for (const Buffer& buf : p.buffers) {
    if (buf.storage >= 0) in = buf.id;
  }
  REQUIRE(in >= 0);
  CHECK(p.buffers[in].kind == BufferKind::kIntermediate);
  CHECK(p.buffers[p.buffers[in].storage].kind == BufferKind::kOutput);
  CHECK(printProgram(p).find(" in b" + std::to_string(p.buffers[in].storage) + "\n") != std::string::npos);
  // one __restrict__ pointer for the shared memory, the other declared from it
  std::string src = emitCpp(p.kernels[0], p);
  CHECK(src.find("// in place: the same memory") != std::string::npos);
  std::string cuda = emitCuda(p.kernels[0], p);
  CHECK(cuda.find("const void* dyn_same_b") != std::string::npos);
}

TEST_CASE("in place: a softmax over dim 0 is written over by the next kernel's row layer_norm") {
  // the first kernel stores the softmax column by column; the second reads each row fully, then
  // rewrites it: the output takes the softmax's memory across the two kernels
  core::GraphBuilder b;
  auto x = b.placeholder("x", meta({16, 32}));
  auto s = b.callFunction(core::Target::atenOp("aten::_softmax"), {N(x), core::Arg::integer(0), core::Arg::boolean(false)}, {}, meta({16, 32}));
  auto ln = b.callFunction(core::Target::atenOp("aten::layer_norm"), {N(s), core::Arg::list({core::Arg::integer(32)})}, {}, meta({16, 32}));
  b.output(N(ln));
  Program p = lowerGraph(b.build());
  REQUIRE(p.kernels.size() == 2);
  int in = -1;
  for (const Buffer& buf : p.buffers) {
    if (buf.storage >= 0) in = buf.id;
  }
  REQUIRE(in >= 0);
  CHECK(p.buffers[in].shape == std::vector<int64_t>{16, 32});
  CHECK(p.arenaBytes < 16 * 32 * 4);  // the softmax has no arena slot
  // the first kernel only writes the softmax: no pointer shared there
  CHECK(emitCpp(p.kernels[0], p).find("in place") == std::string::npos);
  CHECK(emitCpp(p.kernels[1], p).find("// in place: the same memory") != std::string::npos);
}

TEST_CASE("in place: a softmax read transposed is never written over") {
  core::GraphBuilder b;
  auto x = b.placeholder("x", meta({16, 16}));
  auto s = b.callFunction(core::Target::atenOp("aten::_softmax"), {N(x), core::Arg::integer(-1), core::Arg::boolean(false)}, {}, meta({16, 16}));
  core::NodeMeta tm = meta({16, 16});
  tm.tensor->strides = {1, 16};
  auto t = b.callFunction(core::Target::atenOp("aten::t"), {N(s)}, {}, tm);
  auto o = b.callFunction(core::Target::atenOp("aten::add.Tensor"), {N(s), N(t)}, {}, meta({16, 16}));
  b.output(N(o));
  Program p = lowerGraph(b.build());
  CHECK(p.externs.empty());
  for (const Buffer& buf : p.buffers) CHECK(buf.storage < 0);
}
