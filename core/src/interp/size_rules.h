// Result sizes by rule (size_rules.def): the symbolic sizes of a call's tensor result computed
// from its arguments' symbolic sizes and symbolic ints, for the calls whose shape functions
// probing cannot fit (dynamic.cpp inferResultSizes tries these first).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tracer.h"

namespace dynamo::core::interp {

/// When `what` has a rule in size_rules.def and the rule applies to these arguments: the symSizes
/// of the result's tensors `outs` (in order; empty when every size is a constant) are set, the
/// comparisons the rule made are guarded in ctx.shapes, and true. False (nothing changed but
/// possibly guards that hold at the hints) when no rule applies: the caller probes as before.
bool sizesByRule(CompileContext& ctx, const std::string& what, const std::vector<ValueRef>& args,
                 const std::vector<std::pair<std::string, ValueRef>>& kwargs, const std::vector<ValueRef>& outs);

/// Not an integer linear form of symbols: a floor division, modulo, min, max or product in it.
bool isNonAffine(const sym::Expr& e);

/// The expressions of a tensor value's sizes: its symbolic sizes, or its example's sizes.
std::vector<sym::Expr> sizeExprs(const ValueRef& tensor);

}  // namespace dynamo::core::interp
