// Arithmetic on symbolic expressions: + - * stay polynomial; floor division, modulo, min and max
// simplify what they can (constants, exact divisions, ranges) and otherwise become atoms.
#include <algorithm>

#include "internal.h"

namespace dynamo::core::sym {

using detail::addChecked;
using detail::build;
using detail::mulChecked;

int64_t pyFloorDiv(int64_t a, int64_t b) {
  if (b == 0) throw SymbolicError("integer division by zero");
  if (a == kNegInf && b == -1) throw SymbolicError("integer overflow in symbolic arithmetic");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t pyMod(int64_t a, int64_t b) {
  if (b == 0) throw SymbolicError("integer modulo by zero");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

Expr operator+(const Expr& a, const Expr& b) {
  std::vector<Term> terms = a.rep().terms;
  terms.insert(terms.end(), b.rep().terms.begin(), b.rep().terms.end());
  return build(addChecked(a.rep().constant, b.rep().constant), std::move(terms));
}

Expr operator-(const Expr& a) { return Expr(-1) * a; }
Expr operator-(const Expr& a, const Expr& b) { return a + (-b); }

Expr operator*(const Expr& a, const Expr& b) {
  // (ca + sum ta) * (cb + sum tb), distributed.
  std::vector<Term> terms;
  const Expr::Rep& ra = a.rep();
  const Expr::Rep& rb = b.rep();
  for (const Term& t : ra.terms) terms.push_back(Term{mulChecked(t.coef, rb.constant), t.factors});
  for (const Term& t : rb.terms) terms.push_back(Term{mulChecked(t.coef, ra.constant), t.factors});
  for (const Term& x : ra.terms) {
    for (const Term& y : rb.terms) {
      Term t{mulChecked(x.coef, y.coef), x.factors};
      t.factors.insert(t.factors.end(), y.factors.begin(), y.factors.end());
      terms.push_back(std::move(t));
    }
  }
  return build(mulChecked(ra.constant, rb.constant), std::move(terms));
}

namespace {

const std::vector<Range>* rangesOf(const ShapeEnv* env) { return env != nullptr ? &env->ranges() : nullptr; }

// Splits `e` for a positive constant divisor c: e = c*q + r where q holds the parts whose
// coefficients c divides (their floor quotient for the constant) and r the rest (0 <= constant < c).
void splitByDivisor(const Expr& e, int64_t c, Expr& q, Expr& r) {
  const Expr::Rep& rep = e.rep();
  std::vector<Term> qTerms, rTerms;
  for (const Term& t : rep.terms) {
    if (t.coef % c == 0) {
      qTerms.push_back(Term{t.coef / c, t.factors});
    } else {
      rTerms.push_back(t);
    }
  }
  q = build(pyFloorDiv(rep.constant, c), std::move(qTerms));
  r = build(pyMod(rep.constant, c), std::move(rTerms));
}

}  // namespace

Expr floorDiv(const Expr& a, const Expr& b, const ShapeEnv* env) {
  if (b.isConstant()) {
    int64_t c = b.constant();
    if (c == 0) throw SymbolicError("integer division by zero");
    if (a.isConstant()) return pyFloorDiv(a.constant(), c);
    if (c == 1) return a;
    if (c > 0) {
      Expr q, r;
      splitByDivisor(a, c, q, r);
      if (r.isConstant()) return q + Expr(pyFloorDiv(r.constant(), c));
      if (const auto* ranges = rangesOf(env)) {
        Range rr = bounds(r, *ranges);
        if (rr.lo >= 0 && rr.hi < c) return q;  // 0 <= r < c: r // c == 0
      }
      return q + detail::ofAtom(detail::functionAtom(Atom::Kind::kFloorDiv, r, b));
    }
  }
  if (a == b) {
    if (const auto* ranges = rangesOf(env)) {
      Range rb = bounds(b, *ranges);
      if (rb.lo > 0 || rb.hi < 0) return 1;  // b != 0 for every value
    }
  }
  return detail::ofAtom(detail::functionAtom(Atom::Kind::kFloorDiv, a, b));
}

Expr mod(const Expr& a, const Expr& b, const ShapeEnv* env) {
  if (b.isConstant()) {
    int64_t c = b.constant();
    if (c == 0) throw SymbolicError("integer modulo by zero");
    if (a.isConstant()) return pyMod(a.constant(), c);
    if (c == 1 || c == -1) return 0;
    if (c > 0) {
      // Terms whose coefficient c divides vanish; the others reduce modulo c.
      const Expr::Rep& rep = a.rep();
      std::vector<Term> terms;
      for (const Term& t : rep.terms) {
        int64_t m = pyMod(t.coef, c);
        if (m != 0) terms.push_back(Term{m, t.factors});
      }
      Expr r = build(pyMod(rep.constant, c), std::move(terms));
      if (r.isConstant()) return pyMod(r.constant(), c);
      if (const auto* ranges = rangesOf(env)) {
        Range rr = bounds(r, *ranges);
        if (rr.lo >= 0 && rr.hi < c) return r;
      }
      return detail::ofAtom(detail::functionAtom(Atom::Kind::kMod, r, b));
    }
  }
  if (a == b) {
    if (const auto* ranges = rangesOf(env)) {
      Range rb = bounds(b, *ranges);
      if (rb.lo > 0 || rb.hi < 0) return 0;
    }
  }
  return detail::ofAtom(detail::functionAtom(Atom::Kind::kMod, a, b));
}

namespace {
Expr minMax(const Expr& a, const Expr& b, const ShapeEnv* env, bool isMin) {
  if (a == b) return a;
  if (a.isConstant() && b.isConstant()) return isMin ? std::min(a.constant(), b.constant()) : std::max(a.constant(), b.constant());
  if (const auto* ranges = rangesOf(env)) {
    Range d = bounds(a - b, *ranges);
    if (d.hi <= 0) return isMin ? a : b;  // a <= b always
    if (d.lo >= 0) return isMin ? b : a;  // a >= b always
  }
  // Commutative: arguments in canonical order.
  const Expr& x = a.str() < b.str() ? a : b;
  const Expr& y = a.str() < b.str() ? b : a;
  return detail::ofAtom(detail::functionAtom(isMin ? Atom::Kind::kMin : Atom::Kind::kMax, x, y));
}
}  // namespace

Expr min(const Expr& a, const Expr& b, const ShapeEnv* env) { return minMax(a, b, env, true); }
Expr max(const Expr& a, const Expr& b, const ShapeEnv* env) { return minMax(a, b, env, false); }

}  // namespace dynamo::core::sym
