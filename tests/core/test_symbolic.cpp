// The symbolic integer engine: canonical forms, arithmetic with Python semantics, ranges,
// relations, duck sizing and guards of the shape environment.
#include "dynamo/core/symbolic.h"
#include "dynamo_catch.h"

using namespace dynamo::core::sym;

namespace {
Expr s(int id) { return Expr::symbol(id); }
}  // namespace

TEST_CASE("equal expressions have one canonical form") {
  CHECK((s(0) + s(1)) == (s(1) + s(0)));
  CHECK((s(0) + s(0) + s(1)) == (2 * s(0) + s(1)));
  CHECK((s(0) + s(0) + s(1)).str() == "2*s0 + s1");
  CHECK(((s(0) + 1) * (s(0) - 1)) == (s(0) * s(0) - 1));
  CHECK(((s(0) + 1) * (s(0) - 1)).str() == "s0*s0 - 1");
  CHECK((s(1) * s(0) * 3).str() == "3*s0*s1");
  CHECK((s(0) - s(0)).isConstant());
  CHECK((s(0) - s(0)).constant() == 0);
  CHECK((2 * s(0) - 3 * s(1) + 4).str() == "2*s0 - 3*s1 + 4");
  CHECK((-s(0)).str() == "-s0");
  CHECK(Expr(7).str() == "7");
  CHECK(s(3).symbolId() == 3);
  CHECK((s(3) + 1).symbolId() == -1);
  CHECK((s(2) * s(0) + s(2)).symbols() == std::vector<int>{0, 2});
}

TEST_CASE("floor division and modulo follow Python") {
  CHECK(pyFloorDiv(7, 2) == 3);
  CHECK(pyFloorDiv(-7, 2) == -4);
  CHECK(pyFloorDiv(7, -2) == -4);
  CHECK(pyMod(-7, 2) == 1);
  CHECK(pyMod(7, -2) == -1);
  CHECK_THROWS_AS(pyFloorDiv(1, 0), SymbolicError);
  CHECK(floorDiv(Expr(-7), Expr(2)).constant() == -4);
  CHECK(mod(Expr(-7), Expr(2)).constant() == 1);
}

TEST_CASE("floor division simplifies exact parts") {
  CHECK(floorDiv(4 * s(0) + 8, 4) == s(0) + 2);
  CHECK(floorDiv(s(0), 1) == s(0));
  // 2*s0 + 1 = 2*s0 + 1: (2*s0 + 1)//2 == s0 (the remainder 1 is below the divisor).
  CHECK(floorDiv(2 * s(0) + 1, 2) == s(0));
  CHECK(floorDiv(s(0) + 1, 2).str() == "(s0 + 1)//2");
  CHECK(floorDiv(4 * s(0) + s(1), 4).str() == "s0 + s1//4");
  CHECK(floorDiv(s(0), s(1)).str() == "s0//s1");
  CHECK(floorDiv(s(0) + 1, 2) == floorDiv(1 + s(0), 2));
  CHECK_THROWS_AS(floorDiv(s(0), 0), SymbolicError);
  std::vector<int64_t> v{9, 4};
  for (int64_t a = -9; a <= 9; ++a) {
    v[0] = a;
    CHECK(floorDiv(3 * s(0) + 5, 2).eval(v) == pyFloorDiv(3 * a + 5, 2));
    CHECK(mod(3 * s(0) + 5, 4).eval(v) == pyMod(3 * a + 5, 4));
    CHECK(floorDiv(s(0), s(1)).eval(v) == pyFloorDiv(a, 4));
  }
}

TEST_CASE("modulo reduces coefficients") {
  CHECK(mod(4 * s(0), 4) == Expr(0));
  CHECK(mod(4 * s(0) + 6, 4) == Expr(2));
  CHECK(mod(5 * s(0) + 6, 4).str() == "Mod(s0 + 2, 4)");
  CHECK(mod(s(0), 1) == Expr(0));
}

TEST_CASE("ranges simplify min, max, modulo and division") {
  ShapeEnv env;
  Expr a = env.sizeSymbol(8, {0, 0, "x.size()[0]"});
  Expr b = env.sizeSymbol(3, {0, 1, "x.size()[1]"});
  CHECK(min(a, Expr(1), &env) == Expr(1));   // a >= 2
  CHECK(max(a, Expr(1), &env) == a);
  CHECK(max(a + 1, a, &env) == a + 1);
  CHECK(min(a, b, &env).str() == "Min(s0, s1)");
  CHECK(min(a, b, &env) == min(b, a, &env));
  CHECK(mod(a, a, &env) == Expr(0));
  CHECK(floorDiv(a, a, &env) == Expr(1));
  CHECK(floorDiv(a, a) .str() == "s0//s0");  // no ranges: a could be 0
  CHECK(bounds(2 * a + b, env.ranges()).lo == 6);
  CHECK(bounds(2 * a + b, env.ranges()).hi == kInf);
  CHECK(bounds(a - b, env.ranges()).lo == kNegInf);
  CHECK(bounds(mod(a, 4), env.ranges()) == Range{0, 3});
  CHECK(bounds(floorDiv(a, 2), env.ranges()) == Range{1, kInf});
  CHECK(bounds(a * a - 4, env.ranges()).lo == 0);
}

TEST_CASE("relations are decided by ranges when they can be") {
  ShapeEnv env;
  Expr a = env.sizeSymbol(8, {0, 0, "x.size()[0]"});
  Expr b = env.sizeSymbol(5, {1, 0, "y.size()[0]"});
  CHECK(decide(rel(a, RelOp::kGe, 2), env.ranges()) == std::optional<bool>(true));
  CHECK(decide(rel(a, RelOp::kEq, 1), env.ranges()) == std::optional<bool>(false));
  CHECK(decide(rel(a + 1, RelOp::kGt, a), env.ranges()) == std::optional<bool>(true));
  CHECK_FALSE(decide(rel(a, RelOp::kEq, b), env.ranges()).has_value());
  CHECK(rel(a, RelOp::kLt, b).negated().str() == "s0 >= s1");
}

TEST_CASE("sizes 0 and 1 are constants; duck sizing shares symbols") {
  ShapeEnv env;
  CHECK(env.sizeSymbol(1, {0, 0, "x.size()[0]"}) == Expr(1));
  CHECK(env.sizeSymbol(0, {0, 1, "x.size()[1]"}) == Expr(0));
  CHECK(env.numSymbols() == 0);
  Expr a = env.sizeSymbol(16, {0, 2, "x.size()[2]"});
  Expr b = env.sizeSymbol(16, {1, 0, "y.size()[0]"});
  Expr c = env.sizeSymbol(16, {2, 0, "z.size()[0]"}, /*duck=*/false);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(env.numSymbols() == 2);
  CHECK(env.sources(a.symbolId()).size() == 2);
  CHECK(env.describe().find("y.size()[0] == x.size()[2] (duck sizing") != std::string::npos);
  CHECK_THROWS_AS(env.sizeSymbol(50, {3, 0, "w.size()[0]"}, true, Range{2, 10}), SymbolicError);
}

TEST_CASE("evaluate follows the hint and records a guard with its line") {
  ShapeEnv env;
  Expr a = env.sizeSymbol(8, {0, 0, "x.size()[0]"});
  Expr b = env.sizeSymbol(4, {1, 0, "y.size()[0]"});
  CHECK(env.evaluate(rel(a, RelOp::kEq, 2 * b), "model.py:41"));
  CHECK_FALSE(env.evaluate(rel(a, RelOp::kLt, b), "model.py:42"));
  CHECK(env.evaluate(rel(a, RelOp::kGe, 2), "model.py:43"));  // implied by the range: no guard
  REQUIRE(env.guards().size() == 2);
  CHECK(env.guards()[0].where == "model.py:41");
  CHECK(env.guards()[1].relation.str() == "s0 >= s1");
  // The same relation again adds nothing.
  CHECK(env.evaluate(rel(2 * b, RelOp::kEq, a), "model.py:50"));
  CHECK(env.guards().size() == 2);
  CHECK(env.check({8, 4}));
  CHECK(env.check({20, 10}));
  CHECK_FALSE(env.check({8, 5}));
  CHECK(env.failure({8, 5}) ==
        "shape guard failed: x.size()[0] == 2*y.size()[0] (guard created at model.py:41: branch)");
  CHECK(env.failure({1, 5}) ==
        "x.size()[0] is 1, outside [2, inf] (sizes 0 and 1 are specialised: a size that becomes 0 or 1 recompiles)");
  // The same failures as data: the symbol concerned, what was expected, what was seen.
  CHECK_FALSE(env.firstFailure({8, 4}).has_value());
  std::optional<ShapeFailure> rel = env.firstFailure({8, 5});
  REQUIRE(rel.has_value());
  CHECK(rel->symbol == 0);
  CHECK(rel->expected == "x.size()[0] == 2*y.size()[0]");
  CHECK(rel->seen == "x.size()[0] = 8, y.size()[0] = 5");
  CHECK(rel->where == "model.py:41");
  std::optional<ShapeFailure> range = env.firstFailure({8, 1});
  REQUIRE(range.has_value());
  CHECK(range->symbol == 1);
  CHECK(range->expected == "in [2, inf]");
  CHECK(range->seen == "1");
}

TEST_CASE("specialize guards a size that must be concrete") {
  ShapeEnv env;
  Expr a = env.sizeSymbol(6, {0, 0, "x.size()[0]"});
  CHECK(env.specialize(floorDiv(a, 2), "m.py:3", "Python loop count") == 3);
  CHECK(env.check({6}));
  CHECK(env.check({7}));  // 7 // 2 == 3 as well
  CHECK_FALSE(env.check({8}));
  CHECK(env.describe().find("x.size()[0]//2 == 3  # Python loop count at m.py:3") != std::string::npos);
}

TEST_CASE("overflow is an error, not a wrong value") {
  Expr big(INT64_MAX);
  CHECK_THROWS_AS(big + 1, SymbolicError);
  CHECK_THROWS_AS(big * 2, SymbolicError);
  CHECK_THROWS_AS((s(0) * 2).eval({INT64_MAX}), SymbolicError);
}

TEST_CASE("the flat check gives ShapeEnv::check's answer") {
  ShapeEnv env;
  Expr a = env.sizeSymbol(8, {0, 0, "x.size()[0]"});
  Expr b = env.sizeSymbol(4, {1, 0, "y.size()[0]"});
  Expr c = env.sizeSymbol(6, {2, 0, "z.size()[0]"}, true, Range{2, 64});
  Expr n = env.intSymbol(7, {3, -1, "n"});
  CHECK(env.evaluate(rel(a, RelOp::kEq, 2 * b), "m.py:1"));      // linear, two symbols
  CHECK(env.evaluate(rel(n, RelOp::kGt, 4), "m.py:2"));          // linear, one symbol
  CHECK(env.evaluate(rel(c, RelOp::kNe, b), "m.py:3"));          // linear !=
  CHECK(env.evaluate(rel(floorDiv(c, 4), RelOp::kLt, b), "m.py:4"));  // FloorDiv: stays an expression
  CHECK(env.evaluate(rel(a * b, RelOp::kGe, 32), "m.py:5"));     // a product: stays an expression
  FlatShapeCheck flat(env);
  CHECK(flat.generalCount() == 2);
  const int64_t big = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> cases = {
      {8, 4, 6, 7},    {20, 10, 12, 5},  {8, 5, 6, 7},   {8, 4, 4, 7},  {8, 4, 6, 4},  {1, 4, 6, 7},
      {8, 4, 65, 7},   {8, 4, 63, 7},    {4, 2, 6, 9},   {8, 4, 6, big}, {big - 1, big / 2, 6, 7},
      {8, 4, 6, -3},   {2, 1, 2, 5}};
  for (const auto& v : cases) {
    INFO("values " << v[0] << ", " << v[1] << ", " << v[2] << ", " << v[3]);
    CHECK(flat.check(v.data(), v.size()) == env.check(v));
  }
  CHECK_FALSE(flat.check(cases[0].data(), 3));  // a value missing fails, as in ShapeEnv::check
}
