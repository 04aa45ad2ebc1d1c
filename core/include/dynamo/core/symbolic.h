// The symbolic integer engine: sizes that are not fixed at trace time (dynamic shapes).
//
//   Expr       an immutable integer expression in canonical form: a constant plus a sum of
//              coefficient * product-of-atoms terms; an atom is a symbol or an opaque function
//              (FloorDiv, Mod, Min, Max) of canonical arguments. Two expressions that canonicalize
//              alike compare equal (`2*s0 + s1 == s1 + s0 + s0`).
//   Relation   `expr OP 0` for OP in ==, !=, <, <=, >, >= (lhs - rhs moved to one side).
//   ShapeEnv   the symbols of one compile: each with a hint (the example's size), a range
//              ([2, inf) for sizes by default; 0 and 1 are never symbols), the sources that read
//              it (duck sizing: equal sizes at the first compile share a symbol), and the guards
//              (relations with the user line that created them) that the compiled code relies on.
//
// Arithmetic follows Python: floor division and modulo round toward negative infinity.
// Overflow of 64-bit arithmetic throws SymbolicError. Files: core/src/symbolic/ (expr.cpp:
// canonical form and printing; arith.cpp: + - * // % min max; range.cpp: bounds and deciding
// relations; shape_env.cpp: symbols, duck sizing, guards).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace dynamo::core::sym {

/// Misuse of the engine (division by zero, overflow, an unknown symbol in evaluation).
struct SymbolicError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Infinity for ranges.
constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
constexpr int64_t kNegInf = std::numeric_limits<int64_t>::min();

/// A closed integer interval; kInf / kNegInf for unbounded ends.
struct Range {
  int64_t lo = kNegInf;
  int64_t hi = kInf;
  bool contains(int64_t v) const { return lo <= v && v <= hi; }
  bool operator==(const Range& o) const { return lo == o.lo && hi == o.hi; }
  std::string str() const;  ///< "[2, inf]"
};

class Expr;
struct Atom;
using AtomPtr = std::shared_ptr<const Atom>;

/// One term: coefficient * factors (sorted; a factor repeated n times is a power).
struct Term {
  int64_t coef = 0;
  std::vector<AtomPtr> factors;
};

/// An immutable canonical integer expression. Cheap to copy (shared representation).
class Expr {
 public:
  Expr();                      ///< 0
  Expr(int64_t constant);      ///< NOLINT: implicit on purpose (2 * s0)
  static Expr symbol(int id);  ///< the symbol s<id>

  bool isConstant() const;
  /// The constant value; only when isConstant().
  int64_t constant() const;
  /// The symbol id when the expression is exactly one symbol, else -1.
  int symbolId() const;
  /// The ids of every symbol it mentions, ascending.
  std::vector<int> symbols() const;

  /// Canonical text; equal for equal expressions: "2*s0 + s1 - 1", "(s0 + 1)//2", "Mod(s0, 4)".
  const std::string& str() const;
  bool operator==(const Expr& o) const { return str() == o.str(); }
  bool operator!=(const Expr& o) const { return !(*this == o); }
  bool operator<(const Expr& o) const { return str() < o.str(); }

  /// The value for concrete symbol values (indexed by symbol id). Throws for a missing symbol.
  int64_t eval(const std::vector<int64_t>& values) const;

  // Internals, for core/src/symbolic.
  struct Rep;
  explicit Expr(std::shared_ptr<const Rep> rep) : rep_(std::move(rep)) {}
  const Rep& rep() const { return *rep_; }

 private:
  std::shared_ptr<const Rep> rep_;
};

/// Canonical representation: constant + sum of terms (terms sorted by their factor keys, no zero
/// coefficients, no two with the same factors).
struct Expr::Rep {
  int64_t constant = 0;
  std::vector<Term> terms;
  std::string text;  ///< canonical text (printing and equality)
};

/// An opaque atom: a symbol or a function that the polynomial form cannot absorb.
struct Atom {
  enum class Kind { kSymbol, kFloorDiv, kMod, kMin, kMax };
  Kind kind = Kind::kSymbol;
  int symbol = -1;         ///< kSymbol
  std::vector<Expr> args;  ///< functions: (a, b)
  std::string key;         ///< canonical text, also the sort key
};

// Arithmetic (arith.cpp). `range` lets floor division, modulo, min and max simplify with what is
// known about the symbols' ranges; without it they simplify only on constants.
class ShapeEnv;
Expr operator+(const Expr& a, const Expr& b);
Expr operator-(const Expr& a, const Expr& b);
Expr operator-(const Expr& a);
Expr operator*(const Expr& a, const Expr& b);
Expr floorDiv(const Expr& a, const Expr& b, const ShapeEnv* env = nullptr);
Expr mod(const Expr& a, const Expr& b, const ShapeEnv* env = nullptr);
Expr min(const Expr& a, const Expr& b, const ShapeEnv* env = nullptr);
Expr max(const Expr& a, const Expr& b, const ShapeEnv* env = nullptr);

/// Python semantics on plain integers (throw on division by zero / overflow).
int64_t pyFloorDiv(int64_t a, int64_t b);
int64_t pyMod(int64_t a, int64_t b);

/// A comparison `lhs OP rhs`, stored as `expr OP 0` with expr = lhs - rhs.
enum class RelOp { kEq, kNe, kLt, kLe, kGt, kGe };
const char* relOpText(RelOp op);
RelOp negate(RelOp op);

struct Relation {
  Expr lhs;
  RelOp op = RelOp::kEq;
  Expr rhs;
  /// lhs - rhs, canonical: two relations with the same diff and op are the same relation.
  Expr diff() const { return lhs - rhs; }
  bool holds(const std::vector<int64_t>& values) const;
  Relation negated() const { return {lhs, negate(op), rhs}; }
  std::string str() const;  ///< "s0 == 2*s1"
};
Relation rel(const Expr& lhs, RelOp op, const Expr& rhs);

/// Interval bounds of an expression given each symbol's range (range.cpp).
Range bounds(const Expr& e, const std::vector<Range>& symbolRanges);
/// True / false when the ranges decide the relation for every value, nullopt otherwise.
std::optional<bool> decide(const Relation& r, const std::vector<Range>& symbolRanges);

/// A guard the compiled code relies on, with the user line that created it.
struct ShapeGuard {
  Relation relation;
  std::string where;  ///< "model.py:41" (empty when not from a user line)
  std::string why;    ///< "branch", "specialized: Python loop count", "duck sizing", ...
};

/// Where a symbol's value is read from at run time: input tensor `input`, dimension `dim`
/// (`name` is how users see it: "x.size()[0]"), or a Python int input (dim = -1).
struct SymbolSource {
  int input = -1;
  int dim = -1;
  std::string name;
};

/// Why a set of symbol values fails a ShapeEnv, as data (ShapeEnv::firstFailure).
struct ShapeFailure {
  std::string reason;    ///< the text: "x.size()[0] is 1, outside [2, inf] (...)"
  int symbol = -1;       ///< the symbol whose range failed, or the first one of the failing relation
  std::string expected;  ///< "in [2, inf]", "== 8", or the relation: "x.size()[0] == 2*y.size()[0]"
  std::string seen;      ///< "1", or each symbol of the relation with its value: "x.size()[0] = 6, y.size()[0] = 4"
  std::string where;     ///< the user line of the guard or of the specialisation ("model.py:41"), "" when none
};

/// The symbols and guards of one compile (shape_env.cpp).
class ShapeEnv {
 public:
  /// A symbol for a size read from `source` whose example value is `hint`. Sizes 0 and 1 are
  /// constants (specialised); with `duck`, a size equal to an earlier duck-sized one shares its
  /// symbol (the sharing is recorded as an equality guard on the new source).
  Expr sizeSymbol(int64_t hint, const SymbolSource& source, bool duck = true, Range range = {2, kInf});
  /// A symbol for a Python int input (any value; range unbounded; never duck-sized).
  Expr intSymbol(int64_t hint, const SymbolSource& source);

  int numSymbols() const { return static_cast<int>(hints_.size()); }
  int64_t hint(int id) const { return hints_.at(id); }
  const std::vector<int64_t>& hints() const { return hints_; }
  const std::vector<Range>& ranges() const { return ranges_; }
  /// Every source of symbol `id`, the defining one first.
  const std::vector<SymbolSource>& sources(int id) const { return sources_.at(id); }
  std::string symbolName(int id) const { return "s" + std::to_string(id); }

  /// The value of `e` for the example (hint) values.
  int64_t evalHint(const Expr& e) const { return e.eval(hints_); }
  /// The truth of `r` now: decided by ranges when possible (no guard), else by the hints, and
  /// the outcome (r or its negation) is recorded as a guard created at `where`.
  bool evaluate(const Relation& r, const std::string& where, const std::string& why = "branch");
  /// Symbol `id` must be concrete: its range becomes [hint, hint] (a different size fails the
  /// guard with this reason). Returns the hint.
  int64_t pin(int id, const std::string& where, const std::string& why);
  bool pinned(int id) const { return ranges_.at(id).lo == ranges_.at(id).hi; }
  /// `e` must be concrete: returns its hint value and guards `e == value` (a bare symbol is pinned).
  int64_t specialize(const Expr& e, const std::string& where, const std::string& why);
  /// Records a guard (deduplicated; one the ranges already imply is dropped). True when added.
  bool addGuard(const Relation& r, const std::string& where, const std::string& why);

  const std::vector<ShapeGuard>& guards() const { return guards_; }
  /// True when every symbol is in its range and every guard holds for `values`.
  bool check(const std::vector<int64_t>& values) const;
  /// The first reason `values` fail, with the guard's line, or "" when they pass.
  std::string failure(const std::vector<int64_t>& values) const;
  /// The same as data; nullopt when they pass.
  std::optional<ShapeFailure> firstFailure(const std::vector<int64_t>& values) const;
  /// Text of every guard with sources substituted for symbols, one per line.
  std::string describe() const;
  /// `e` with symbols written as their defining source names ("2*x.size()[0]").
  std::string sourceText(const Expr& e) const;

 private:
  Expr newSymbol(int64_t hint, const SymbolSource& source, Range range);
  std::vector<int64_t> hints_;
  std::vector<Range> ranges_;
  std::vector<std::vector<SymbolSource>> sources_;
  std::map<int64_t, int> duck_;
  std::map<int, std::string> pinReasons_;  // symbol -> "Python loop count at m.py:3"
  std::map<int, std::string> pinWhere_;    // symbol -> "m.py:3", the line that pinned it
  std::vector<ShapeGuard> guards_;
};

/// The guards of a ShapeEnv compiled for the hot path (flat_check.cpp): per-symbol bounds, the
/// linear relations (sum of coefficient * symbol + constant OP 0, the common case) as flat
/// coefficient lists, and any other relation kept as an expression. check() allocates nothing,
/// builds no text and throws nothing: it gives ShapeEnv::check's answer (an overflow fails).
class FlatShapeCheck {
 public:
  FlatShapeCheck() = default;
  explicit FlatShapeCheck(const ShapeEnv& env);
  /// values[id] for every symbol (n == number of symbols).
  bool check(const int64_t* values, std::size_t n) const noexcept;
  /// Number of relations left as expressions (not linear), for tests.
  std::size_t generalCount() const { return general_.size(); }

 private:
  struct Linear {
    int64_t constant = 0;  ///< the diff's constant
    RelOp op = RelOp::kEq;
    uint32_t begin = 0;    ///< its terms: terms_[begin, end)
    uint32_t end = 0;
  };
  std::vector<int64_t> lo_, hi_;                 // each symbol's range
  std::vector<std::pair<int64_t, int>> terms_;   // (coefficient, symbol) of the linear relations
  std::vector<Linear> linear_;
  std::vector<Relation> general_;                // non-linear relations
};

}  // namespace dynamo::core::sym
