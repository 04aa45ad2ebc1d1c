// The shape environment of one compile: symbols (hint, range, sources), duck sizing, and the
// guards that the compiled code relies on.
#include <cctype>

#include "internal.h"

namespace dynamo::core::sym {

namespace {
RelOp mirrored(RelOp op) {
  switch (op) {
    case RelOp::kLt: return RelOp::kGt;
    case RelOp::kLe: return RelOp::kGe;
    case RelOp::kGt: return RelOp::kLt;
    case RelOp::kGe: return RelOp::kLe;
    default: return op;
  }
}
// `diff OP 0` with the diff's leading coefficient positive: a == b and b == a, a < b and b > a
// become the same pair.
std::pair<Expr, RelOp> normalized(const Relation& r) {
  Expr d = r.diff();
  if (!d.rep().terms.empty() && d.rep().terms[0].coef < 0) return {-d, mirrored(r.op)};
  return {d, r.op};
}
}  // namespace

Expr ShapeEnv::newSymbol(int64_t hint, const SymbolSource& source, Range range) {
  if (!range.contains(hint)) {
    throw SymbolicError("size " + std::to_string(hint) + " of " + source.name + " is outside its range " + range.str());
  }
  int id = numSymbols();
  hints_.push_back(hint);
  ranges_.push_back(range);
  sources_.push_back({source});
  return Expr::symbol(id);
}

Expr ShapeEnv::sizeSymbol(int64_t hint, const SymbolSource& source, bool duck, Range range) {
  if (hint == 0 || hint == 1) return hint;  // 0 and 1 are always specialised
  if (range.lo < 2) range.lo = 2;           // a symbol stands for sizes >= 2
  if (duck) {
    auto it = duck_.find(hint);
    if (it != duck_.end()) {
      int id = it->second;
      // The shared symbol must satisfy both sources' ranges.
      ranges_[id].lo = std::max(ranges_[id].lo, range.lo);
      ranges_[id].hi = std::min(ranges_[id].hi, range.hi);
      sources_[id].push_back(source);
      return Expr::symbol(id);
    }
  }
  Expr s = newSymbol(hint, source, range);
  if (duck) duck_[hint] = s.symbolId();
  return s;
}

Expr ShapeEnv::intSymbol(int64_t hint, const SymbolSource& source) { return newSymbol(hint, source, Range{}); }

bool ShapeEnv::addGuard(const Relation& r, const std::string& where, const std::string& why) {
  std::optional<bool> known = decide(r, ranges_);
  if (known.has_value()) {
    if (*known) return false;  // implied by the ranges
    throw SymbolicError("guard " + r.str() + " can never hold");
  }
  auto [d, op] = normalized(r);
  for (const ShapeGuard& g : guards_) {
    auto [gd, gop] = normalized(g.relation);
    if (gop == op && gd == d) return false;
  }
  guards_.push_back(ShapeGuard{r, where, why});
  return true;
}

bool ShapeEnv::evaluate(const Relation& r, const std::string& where, const std::string& why) {
  std::optional<bool> known = decide(r, ranges_);
  if (known.has_value()) return *known;
  bool value = r.holds(hints_);
  addGuard(value ? r : r.negated(), where, why);
  return value;
}

int64_t ShapeEnv::pin(int id, const std::string& where, const std::string& why) {
  int64_t h = hints_.at(id);
  if (!pinned(id)) {
    ranges_[id] = Range{h, h};
    pinReasons_[id] = why + (where.empty() ? "" : " at " + where);
    pinWhere_[id] = where;
  }
  return h;
}

int64_t ShapeEnv::specialize(const Expr& e, const std::string& where, const std::string& why) {
  if (e.symbolId() >= 0) return pin(e.symbolId(), where, why);
  int64_t v = evalHint(e);
  if (!e.isConstant()) addGuard(rel(e, RelOp::kEq, v), where, why);
  return v;
}

bool ShapeEnv::check(const std::vector<int64_t>& values) const { return failure(values).empty(); }

std::string ShapeEnv::failure(const std::vector<int64_t>& values) const {
  std::optional<ShapeFailure> f = firstFailure(values);
  return f ? f->reason : std::string();
}

std::optional<ShapeFailure> ShapeEnv::firstFailure(const std::vector<int64_t>& values) const {
  if (values.size() < hints_.size()) return ShapeFailure{"missing values for symbols", -1, "", "", ""};
  for (int id = 0; id < numSymbols(); ++id) {
    if (!ranges_[id].contains(values[id])) {
      int64_t v = values[id];
      std::string why = (v == 0 || v == 1) ? " (sizes 0 and 1 are specialised: a size that becomes 0 or 1 recompiles)" : "";
      if (sources_[id][0].dim < 0) why = v < 2 ? " (ints below 2 are constants: a value below 2 recompiles)" : "";
      auto pr = pinReasons_.find(id);
      if (pr != pinReasons_.end()) why = " (specialised: " + pr->second + ")";
      ShapeFailure f;
      f.reason = sources_[id][0].name + " is " + std::to_string(v) + ", outside " + ranges_[id].str() + why;
      f.symbol = id;
      f.expected = pinned(id) ? "== " + std::to_string(ranges_[id].lo) : "in " + ranges_[id].str();
      auto pw = pinWhere_.find(id);
      if (pw != pinWhere_.end()) f.where = pw->second;
      f.seen = std::to_string(v);
      return f;
    }
  }
  for (const ShapeGuard& g : guards_) {
    bool ok;
    try {
      ok = g.relation.holds(values);
    } catch (const SymbolicError& e) {
      ok = false;
    }
    if (!ok) {
      ShapeFailure f;
      f.expected = sourceText(g.relation.lhs) + " " + relOpText(g.relation.op) + " " + sourceText(g.relation.rhs);
      f.reason = "shape guard failed: " + f.expected;
      if (!g.where.empty()) f.reason += " (guard created at " + g.where + (g.why.empty() ? "" : ": " + g.why) + ")";
      f.where = g.where;
      for (int id : g.relation.diff().symbols()) {
        if (f.symbol < 0) f.symbol = id;
        f.seen += (f.seen.empty() ? "" : ", ") + sources_[id][0].name + " = " + std::to_string(values[id]);
      }
      return f;
    }
  }
  return std::nullopt;
}

std::string ShapeEnv::sourceText(const Expr& e) const {
  const std::string& s = e.str();
  std::string out;
  for (size_t i = 0; i < s.size();) {
    bool start = s[i] == 's' && (i == 0 || !std::isalnum(static_cast<unsigned char>(s[i - 1]))) && i + 1 < s.size() &&
                 std::isdigit(static_cast<unsigned char>(s[i + 1]));
    if (!start) {
      out += s[i++];
      continue;
    }
    size_t j = i + 1;
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
    int id = std::stoi(s.substr(i + 1, j - i - 1));
    out += id < numSymbols() ? sources_[id][0].name : s.substr(i, j - i);
    i = j;
  }
  return out;
}

std::string ShapeEnv::describe() const {
  std::string out;
  for (int id = 0; id < numSymbols(); ++id) {
    const Range& r = ranges_[id];
    auto pr = pinReasons_.find(id);
    if (pr != pinReasons_.end()) {
      out += sources_[id][0].name + " == " + std::to_string(hints_[id]) + "  # specialised: " + pr->second + "\n";
    } else {
      out += symbolName(id) + " = " + sources_[id][0].name + " in " + r.str() + " (dynamic; example " + std::to_string(hints_[id]) + ")\n";
    }
    for (size_t k = 1; k < sources_[id].size(); ++k) {
      out += "  " + sources_[id][k].name + " == " + sources_[id][0].name + " (duck sizing: equal at the first compile)\n";
    }
  }
  for (const ShapeGuard& g : guards_) {
    out += sourceText(g.relation.lhs) + " " + relOpText(g.relation.op) + " " + sourceText(g.relation.rhs);
    if (!g.where.empty() || !g.why.empty()) out += "  # " + g.why + (g.where.empty() ? "" : " at " + g.where);
    out += "\n";
  }
  return out;
}

}  // namespace dynamo::core::sym
