// codegen/program_io.h: a lowered Program written as bytes and read back prints and emits exactly
// as the lowered one (softmax's reductions, an extern step, a shared subexpression, an arena, a
// float constant that decimal text would round); bytes it cannot read throw ProgramFormatError
// with the exact message.
#include <cmath>
#include <string>

#include "dynamo/codegen/emit.h"
#include "dynamo/codegen/lowering.h"
#include "dynamo/codegen/program_io.h"
#include "dynamo/core/graph.h"
#include "dynamo_catch.h"
#include "graph_meta.h"

using namespace dynamo;
using namespace dynamo::codegen;
using namespace dynamo::codegen::testing;

namespace {

Program lowered() {
  core::GraphBuilder b;
  auto x = b.placeholder("x", meta({3, 5}));
  auto s = b.callFunction(core::Target::atenOp("aten::_softmax"), {N(x), core::Arg::integer(-1), core::Arg::boolean(false)}, {}, meta({3, 5}));
  auto m = b.callFunction(core::Target::atenOp("aten::mul.Tensor"), {N(s), core::Arg::floating(0.1)}, {}, meta({3, 5}));
  auto c = b.callFunction(core::Target::atenOp("aten::cumsum"), {N(m), core::Arg::integer(1)}, {}, meta({3, 5}));
  auto a = b.callFunction(core::Target::atenOp("aten::add.Tensor"), {N(c), N(m)}, {}, meta({3, 5}));
  b.output(core::Arg::tuple({N(a), N(s)}));
  return lowerGraph(b.build());
}

std::string errorOf(const std::string& bytes) {
  try {
    readProgram(bytes);
  } catch (const ProgramFormatError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("a program read back prints and emits as the lowered one") {
  Program p = lowered();
  REQUIRE(p.kernels.size() >= 2);
  REQUIRE(p.externs.size() == 1);
  const std::string bytes = writeProgram(p);
  Program q = readProgram(bytes);
  CHECK(printProgram(q) == printProgram(p));
  REQUIRE(q.kernels.size() == p.kernels.size());
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    CHECK(emitCppMarked(q.kernels[i], q) == emitCppMarked(p.kernels[i], p));
    CHECK(emitCuda(q.kernels[i], q) == emitCuda(p.kernels[i], p));
  }
  CHECK(q.inputBuffer == p.inputBuffer);
  CHECK(q.nodeBuffer == p.nodeBuffer);
  CHECK(q.arenaBytes == p.arenaBytes);
  CHECK(q.externs == p.externs);
  CHECK(writeProgram(q) == bytes);
}

TEST_CASE("a shared subexpression is read back shared, and constants keep every bit") {
  Program p;
  Buffer in;
  in.id = 0;
  in.node = "x";
  in.shape = {4};
  in.strides = {1};
  in.kind = BufferKind::kInput;
  Buffer out = in;
  out.id = 1;
  out.node = "y";
  out.kind = BufferKind::kOutput;
  p.buffers = {in, out};
  Expr load = ExprNode::makeLoad(0, DType::kFloat32, Affine{0, {1}});
  Expr third = ExprNode::makeConst(DType::kFloat32, 1.0 / 3.0);
  Expr shared = ExprNode::makeBinary(BinaryOp::kMul, load, third);
  Kernel k;
  k.name = "k0";
  k.outerSizes = {4};
  Stage s;
  s.kind = Stage::Kind::kStoreOuter;
  s.buffer = 1;
  s.index = Affine{0, {1}};
  s.value = ExprNode::makeBinary(BinaryOp::kAdd, shared, shared);
  k.stages = {s};
  k.reads = {0};
  k.writes = {1};
  p.kernels = {k};
  Program q = readProgram(writeProgram(p));
  const Expr& v = q.kernels[0].stages[0].value;
  REQUIRE(v->operands().size() == 2);
  CHECK(v->operands()[0] == v->operands()[1]);  // one node, as written
  CHECK(v->operands()[0]->operands()[1]->value() == 1.0 / 3.0);
  CHECK(printProgram(q) == printProgram(p));
}

TEST_CASE("bytes that are not a program throw with what and where") {
  const std::string bytes = writeProgram(lowered());
  CHECK(errorOf("") == "not a lowered program: truncated in the magic at byte 0");
  CHECK(errorOf("DYNQ" + bytes.substr(4)) == "not a lowered program: no DYNP magic at byte 0");
  std::string v2 = bytes;
  v2[4] = static_cast<char>(kProgramFormatVersion + 1);
  CHECK(errorOf(v2) == "not a lowered program: format version " + std::to_string(kProgramFormatVersion + 1) + " at byte 12");
  // (the last field is the extern's reason: its length is read, its text is cut short)
  const std::string reason = "no lowering for torch.ops.aten.cumsum.default";
  REQUIRE(bytes.compare(bytes.size() - reason.size(), reason.size(), reason) == 0);
  CHECK(errorOf(bytes.substr(0, bytes.size() - 3)) ==
        "not a lowered program: truncated in a string at byte " + std::to_string(bytes.size() - reason.size()));
  CHECK(errorOf(bytes.substr(0, bytes.size() - reason.size() - 2)) ==
        "not a lowered program: truncated in an integer at byte " + std::to_string(bytes.size() - reason.size() - 8));
  CHECK(errorOf(bytes + "x") == "not a lowered program: bytes after the program at byte " + std::to_string(bytes.size()));
}
