// Canonical form, printing and evaluation of symbolic integer expressions.
#include <algorithm>

#include "internal.h"

namespace dynamo::core::sym {
namespace detail {

int64_t addChecked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw SymbolicError("integer overflow in symbolic arithmetic");
  return r;
}

int64_t mulChecked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw SymbolicError("integer overflow in symbolic arithmetic");
  return r;
}

bool atomLess(const Atom& a, const Atom& b) {
  bool as = a.kind == Atom::Kind::kSymbol, bs = b.kind == Atom::Kind::kSymbol;
  if (as != bs) return as;
  if (as) return a.symbol < b.symbol;
  return a.key < b.key;
}

namespace {

bool factorsLess(const std::vector<AtomPtr>& a, const std::vector<AtomPtr>& b) {
  size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (atomLess(*a[i], *b[i])) return true;
    if (atomLess(*b[i], *a[i])) return false;
  }
  return a.size() < b.size();
}

bool sameFactors(const std::vector<AtomPtr>& a, const std::vector<AtomPtr>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i]->key != b[i]->key) return false;
  }
  return true;
}

std::string monomialText(const std::vector<AtomPtr>& factors) {
  std::string s;
  for (size_t i = 0; i < factors.size(); ++i) {
    if (i) s += "*";
    const Atom& a = *factors[i];
    // A floor division inside a product is parenthesised: 2*((s0 + 1)//2).
    s += a.kind == Atom::Kind::kFloorDiv && factors.size() > 1 ? "(" + a.key + ")" : a.key;
  }
  return s;
}

std::string render(int64_t constant, const std::vector<Term>& terms) {
  if (terms.empty()) return std::to_string(constant);
  std::string s;
  bool first = true;
  auto piece = [&](int64_t coef, const std::string& body) {
    bool neg = coef < 0;
    // |coef| without overflow for INT64_MIN: print from the unsigned value.
    uint64_t mag = neg ? uint64_t(0) - static_cast<uint64_t>(coef) : static_cast<uint64_t>(coef);
    std::string text = body.empty() ? std::to_string(mag) : (mag == 1 ? body : std::to_string(mag) + "*" + body);
    if (first) {
      s += neg ? "-" + text : text;
    } else {
      s += neg ? " - " + text : " + " + text;
    }
    first = false;
  };
  for (const Term& t : terms) piece(t.coef, monomialText(t.factors));
  if (constant != 0) piece(constant, "");
  return s;
}

}  // namespace

Expr build(int64_t constant, std::vector<Term> terms) {
  for (Term& t : terms) {
    std::sort(t.factors.begin(), t.factors.end(), [](const AtomPtr& a, const AtomPtr& b) { return atomLess(*a, *b); });
  }
  std::stable_sort(terms.begin(), terms.end(), [](const Term& a, const Term& b) { return factorsLess(a.factors, b.factors); });
  auto rep = std::make_shared<Expr::Rep>();
  rep->constant = constant;
  for (Term& t : terms) {
    if (t.factors.empty()) {
      rep->constant = addChecked(rep->constant, t.coef);
      continue;
    }
    if (!rep->terms.empty() && sameFactors(rep->terms.back().factors, t.factors)) {
      rep->terms.back().coef = addChecked(rep->terms.back().coef, t.coef);
    } else {
      rep->terms.push_back(std::move(t));
    }
  }
  rep->terms.erase(std::remove_if(rep->terms.begin(), rep->terms.end(), [](const Term& t) { return t.coef == 0; }),
                   rep->terms.end());
  rep->text = render(rep->constant, rep->terms);
  return Expr(std::shared_ptr<const Expr::Rep>(std::move(rep)));
}

Expr ofAtom(AtomPtr atom) { return build(0, {Term{1, {std::move(atom)}}}); }

namespace {
// An argument as it appears inside a function's text: a plain atom or a constant bare,
// anything else parenthesised (so "(s0 + 1)//2" and "s0//2" read unambiguously).
std::string argText(const Expr& e) {
  if (e.isConstant() && e.constant() >= 0) return e.str();
  if (soleAtom(e) != nullptr) return e.str();
  return "(" + e.str() + ")";
}
}  // namespace

AtomPtr functionAtom(Atom::Kind kind, const Expr& a, const Expr& b) {
  auto atom = std::make_shared<Atom>();
  atom->kind = kind;
  atom->args = {a, b};
  switch (kind) {
    case Atom::Kind::kFloorDiv: atom->key = argText(a) + "//" + argText(b); break;
    case Atom::Kind::kMod: atom->key = "Mod(" + a.str() + ", " + b.str() + ")"; break;
    case Atom::Kind::kMin: atom->key = "Min(" + a.str() + ", " + b.str() + ")"; break;
    case Atom::Kind::kMax: atom->key = "Max(" + a.str() + ", " + b.str() + ")"; break;
    case Atom::Kind::kSymbol: throw SymbolicError("functionAtom: a symbol is not a function");
  }
  return atom;
}

const Atom* soleAtom(const Expr& e) {
  const Expr::Rep& r = e.rep();
  if (r.constant != 0 || r.terms.size() != 1) return nullptr;
  const Term& t = r.terms[0];
  if (t.coef != 1 || t.factors.size() != 1) return nullptr;
  return t.factors[0].get();
}

}  // namespace detail

std::string Range::str() const {
  std::string l = lo == kNegInf ? "-inf" : std::to_string(lo);
  std::string h = hi == kInf ? "inf" : std::to_string(hi);
  return "[" + l + ", " + h + "]";
}

Expr::Expr() : Expr(int64_t{0}) {}

Expr::Expr(int64_t constant) {
  auto rep = std::make_shared<Rep>();
  rep->constant = constant;
  rep->text = std::to_string(constant);
  rep_ = std::move(rep);
}

Expr Expr::symbol(int id) {
  if (id < 0) throw SymbolicError("symbol ids are non-negative");
  auto atom = std::make_shared<Atom>();
  atom->kind = Atom::Kind::kSymbol;
  atom->symbol = id;
  atom->key = "s" + std::to_string(id);
  return detail::ofAtom(std::move(atom));
}

bool Expr::isConstant() const { return rep_->terms.empty(); }

int64_t Expr::constant() const {
  if (!isConstant()) throw SymbolicError("'" + str() + "' is not a constant");
  return rep_->constant;
}

int Expr::symbolId() const {
  const Atom* a = detail::soleAtom(*this);
  return a != nullptr && a->kind == Atom::Kind::kSymbol ? a->symbol : -1;
}

namespace {
void collectSymbols(const Expr& e, std::vector<int>& out) {
  for (const Term& t : e.rep().terms) {
    for (const AtomPtr& a : t.factors) {
      if (a->kind == Atom::Kind::kSymbol) {
        out.push_back(a->symbol);
      } else {
        for (const Expr& arg : a->args) collectSymbols(arg, out);
      }
    }
  }
}

int64_t evalAtom(const Atom& a, const std::vector<int64_t>& values) {
  if (a.kind == Atom::Kind::kSymbol) {
    if (a.symbol >= static_cast<int>(values.size())) throw SymbolicError("no value for symbol " + a.key);
    return values[a.symbol];
  }
  int64_t x = a.args[0].eval(values), y = a.args[1].eval(values);
  switch (a.kind) {
    case Atom::Kind::kFloorDiv: return pyFloorDiv(x, y);
    case Atom::Kind::kMod: return pyMod(x, y);
    case Atom::Kind::kMin: return std::min(x, y);
    case Atom::Kind::kMax: return std::max(x, y);
    case Atom::Kind::kSymbol: break;
  }
  return 0;
}
}  // namespace

std::vector<int> Expr::symbols() const {
  std::vector<int> ids;
  collectSymbols(*this, ids);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

const std::string& Expr::str() const { return rep_->text; }

int64_t Expr::eval(const std::vector<int64_t>& values) const {
  int64_t total = rep_->constant;
  for (const Term& t : rep_->terms) {
    int64_t p = t.coef;
    for (const AtomPtr& a : t.factors) p = detail::mulChecked(p, evalAtom(*a, values));
    total = detail::addChecked(total, p);
  }
  return total;
}

}  // namespace dynamo::core::sym
