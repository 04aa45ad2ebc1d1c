// FlatShapeCheck: a ShapeEnv's guards compiled for the per-call check (see symbolic.h).
//
// ShapeEnv::check walks the canonical expressions (shared atoms, checked arithmetic that throws)
// and goes through the failure path; on every call of a compiled function that costs more than
// the rest of the guards. Here the ranges become two arrays, and each relation whose diff is a
// sum of coefficient * symbol terms becomes a run of (coefficient, symbol) pairs evaluated with
// overflow checks (an overflow fails the check, as the SymbolicError it raises in ShapeEnv does).
// Relations with products of symbols, FloorDiv, Mod, Min or Max keep Relation::holds.
#include "internal.h"

namespace dynamo::core::sym {

namespace {
bool compare(int64_t v, RelOp op) {
  switch (op) {
    case RelOp::kEq: return v == 0;
    case RelOp::kNe: return v != 0;
    case RelOp::kLt: return v < 0;
    case RelOp::kLe: return v <= 0;
    case RelOp::kGt: return v > 0;
    case RelOp::kGe: return v >= 0;
  }
  return false;
}
}  // namespace

FlatShapeCheck::FlatShapeCheck(const ShapeEnv& env) {
  for (const Range& r : env.ranges()) {
    lo_.push_back(r.lo);
    hi_.push_back(r.hi);
  }
  for (const ShapeGuard& g : env.guards()) {
    Expr d = g.relation.diff();
    bool linear = true;
    for (const Term& t : d.rep().terms) {
      linear = linear && t.factors.size() == 1 && t.factors[0]->kind == Atom::Kind::kSymbol;
    }
    if (!linear) {
      general_.push_back(g.relation);
      continue;
    }
    Linear l;
    l.constant = d.rep().constant;
    l.op = g.relation.op;
    l.begin = static_cast<uint32_t>(terms_.size());
    for (const Term& t : d.rep().terms) terms_.emplace_back(t.coef, t.factors[0]->symbol);
    l.end = static_cast<uint32_t>(terms_.size());
    linear_.push_back(l);
  }
}

bool FlatShapeCheck::check(const int64_t* values, std::size_t n) const noexcept {
  const std::size_t count = lo_.size();
  if (n < count) return false;
  const int64_t* lo = lo_.data();
  const int64_t* hi = hi_.data();
  for (std::size_t id = 0; id < count; ++id) {
    if (values[id] < lo[id] || values[id] > hi[id]) return false;
  }
  if (linear_.empty() && general_.empty()) return true;
  for (const Linear& l : linear_) {
    int64_t total = l.constant;
    for (uint32_t k = l.begin; k < l.end; ++k) {
      int64_t p;
      if (__builtin_mul_overflow(terms_[k].first, values[terms_[k].second], &p) ||
          __builtin_add_overflow(total, p, &total)) {
        return false;
      }
    }
    if (!compare(total, l.op)) return false;
  }
  if (general_.empty()) return true;
  try {
    std::vector<int64_t> v(values, values + n);
    for (const Relation& r : general_) {
      if (!r.holds(v)) return false;
    }
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace dynamo::core::sym
