// Interval bounds of expressions and deciding relations from the symbols' ranges, plus the
// relation helpers. Interval ends saturate at +-infinity (a bound is never wrong, only loose).
#include <algorithm>

#include "internal.h"

namespace dynamo::core::sym {

namespace {

bool isInf(int64_t v) { return v == kInf || v == kNegInf; }

int64_t satAdd(int64_t a, int64_t b) {
  if (isInf(a)) return a;  // (+inf) + (-inf) does not arise: lo adds to lo, hi to hi
  if (isInf(b)) return b;
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return a > 0 ? kInf : kNegInf;
  return r;
}

int64_t satMul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  bool neg = (a < 0) != (b < 0);
  if (isInf(a) || isInf(b)) return neg ? kNegInf : kInf;
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return neg ? kNegInf : kInf;
  return r;
}

Range mulRange(Range x, Range y) {
  int64_t c[4] = {satMul(x.lo, y.lo), satMul(x.lo, y.hi), satMul(x.hi, y.lo), satMul(x.hi, y.hi)};
  return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
}

Range addRange(Range x, Range y) { return {satAdd(x.lo, y.lo), satAdd(x.hi, y.hi)}; }

// floor(v / c) for a positive constant c, infinities kept.
int64_t floorDivEnd(int64_t v, int64_t c) { return isInf(v) ? v : pyFloorDiv(v, c); }

Range atomRange(const Atom& a, const std::vector<Range>& ranges) {
  if (a.kind == Atom::Kind::kSymbol) {
    if (a.symbol < static_cast<int>(ranges.size())) return ranges[a.symbol];
    return {};
  }
  Range x = bounds(a.args[0], ranges);
  Range y = bounds(a.args[1], ranges);
  switch (a.kind) {
    case Atom::Kind::kFloorDiv:
      if (y.lo == y.hi && y.lo > 0) return {floorDivEnd(x.lo, y.lo), floorDivEnd(x.hi, y.lo)};
      if (y.lo > 0 && x.lo >= 0) return {0, x.hi};  // positive divisor, non-negative dividend
      return {};
    case Atom::Kind::kMod:
      if (y.lo > 0) {
        int64_t top = y.hi == kInf ? kInf : y.hi - 1;
        if (x.lo >= 0) top = std::min(top, x.hi);  // x % y <= x for x >= 0
        return {0, top};
      }
      return {};
    case Atom::Kind::kMin: return {std::min(x.lo, y.lo), std::min(x.hi, y.hi)};
    case Atom::Kind::kMax: return {std::max(x.lo, y.lo), std::max(x.hi, y.hi)};
    case Atom::Kind::kSymbol: break;
  }
  return {};
}

}  // namespace

Range bounds(const Expr& e, const std::vector<Range>& symbolRanges) {
  const Expr::Rep& rep = e.rep();
  Range total{rep.constant, rep.constant};
  for (const Term& t : rep.terms) {
    Range p{t.coef, t.coef};
    // A repeated factor (a power) is non-negative when the power is even; interval
    // multiplication alone would lose that, so powers are multiplied out with it in mind.
    for (size_t i = 0; i < t.factors.size();) {
      size_t j = i;
      while (j < t.factors.size() && t.factors[j]->key == t.factors[i]->key) ++j;
      Range base = atomRange(*t.factors[i], symbolRanges);
      Range pw = base;
      for (size_t k = i + 1; k < j; ++k) pw = mulRange(pw, base);
      if ((j - i) % 2 == 0 && pw.lo < 0) pw.lo = 0;
      p = mulRange(p, pw);
      i = j;
    }
    total = addRange(total, p);
  }
  return total;
}

std::optional<bool> decide(const Relation& r, const std::vector<Range>& symbolRanges) {
  Range d = bounds(r.diff(), symbolRanges);
  switch (r.op) {
    case RelOp::kEq:
      if (d.lo == 0 && d.hi == 0) return true;
      if (d.lo > 0 || d.hi < 0) return false;
      return std::nullopt;
    case RelOp::kNe:
      if (d.lo == 0 && d.hi == 0) return false;
      if (d.lo > 0 || d.hi < 0) return true;
      return std::nullopt;
    case RelOp::kLt:
      if (d.hi < 0) return true;
      if (d.lo >= 0) return false;
      return std::nullopt;
    case RelOp::kLe:
      if (d.hi <= 0) return true;
      if (d.lo > 0) return false;
      return std::nullopt;
    case RelOp::kGt:
      if (d.lo > 0) return true;
      if (d.hi <= 0) return false;
      return std::nullopt;
    case RelOp::kGe:
      if (d.lo >= 0) return true;
      if (d.hi < 0) return false;
      return std::nullopt;
  }
  return std::nullopt;
}

const char* relOpText(RelOp op) {
  switch (op) {
    case RelOp::kEq: return "==";
    case RelOp::kNe: return "!=";
    case RelOp::kLt: return "<";
    case RelOp::kLe: return "<=";
    case RelOp::kGt: return ">";
    case RelOp::kGe: return ">=";
  }
  return "?";
}

RelOp negate(RelOp op) {
  switch (op) {
    case RelOp::kEq: return RelOp::kNe;
    case RelOp::kNe: return RelOp::kEq;
    case RelOp::kLt: return RelOp::kGe;
    case RelOp::kLe: return RelOp::kGt;
    case RelOp::kGt: return RelOp::kLe;
    case RelOp::kGe: return RelOp::kLt;
  }
  return op;
}

Relation rel(const Expr& lhs, RelOp op, const Expr& rhs) { return Relation{lhs, op, rhs}; }

bool Relation::holds(const std::vector<int64_t>& values) const {
  int64_t a = lhs.eval(values), b = rhs.eval(values);
  switch (op) {
    case RelOp::kEq: return a == b;
    case RelOp::kNe: return a != b;
    case RelOp::kLt: return a < b;
    case RelOp::kLe: return a <= b;
    case RelOp::kGt: return a > b;
    case RelOp::kGe: return a >= b;
  }
  return false;
}

std::string Relation::str() const { return lhs.str() + " " + relOpText(op) + " " + rhs.str(); }

}  // namespace dynamo::core::sym
