// Internals shared by the files of the symbolic integer engine (not part of the public header).
#pragma once

#include "dynamo/core/symbolic.h"

namespace dynamo::core::sym::detail {

/// Checked 64-bit arithmetic (throws SymbolicError on overflow).
int64_t addChecked(int64_t a, int64_t b);
int64_t mulChecked(int64_t a, int64_t b);

/// The canonical expression for constant + sum(terms): sorts factors and terms, merges equal
/// monomials, drops zero coefficients, computes the canonical text.
Expr build(int64_t constant, std::vector<Term> terms);
/// An expression that is one atom: 1 * atom.
Expr ofAtom(AtomPtr atom);
/// A function atom (FloorDiv, Mod, Min, Max) over canonical arguments.
AtomPtr functionAtom(Atom::Kind kind, const Expr& a, const Expr& b);
/// The single atom of an expression that is exactly 1 * atom, else null.
const Atom* soleAtom(const Expr& e);
/// Total order on atoms (symbols by id first, then functions by key).
bool atomLess(const Atom& a, const Atom& b);

}  // namespace dynamo::core::sym::detail
