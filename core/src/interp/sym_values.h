// Symbolic Python ints in the tracer (kSymInt values): an int input that changes between calls
// (a step counter, a loop index passed in) becomes a graph input instead of a constant, so one
// graph serves every value.
//
//   frame int `step` (changed since the last compile)      kSymInt: expr = s0, node = placeholder
//   x.size(0), x.shape[0], b, t = x.shape (dynamic dims)    kSymInt: expr = s0, node = x.size(0)
//   x.shape, x.size() read whole (dynamic dims)             kTuple of class torch.Size, its items
//                                                           kSymInts (or constants): x.size(d)
//   step * 2, step + n, step // 4 ...                       kSymInt: expr = 2*s0 ..., node = operator.mul
//   x * step, torch.add(x, step)                            graph node taking the int node as argument
//   step > 10, if step % 10: ...                            constant bool, guard `s0 > 10` with its line
//   anything else that needs the value (range(step),        specialised: s0 pinned to its example value
//   list[step], str(step), float math)                      (guarded; the int stays static afterwards)
//
// Python floats (kSymFloat: a learning rate, a scale) follow the same policy, without the size
// semantics: a float input that changed since the last compile is a graph input guarded by type.
//
//   frame float `lr` (changed since the last compile)      kSymFloat: node = placeholder
//   lr * 2, -lr, step / 100, math.pi * step, 0.9 ** step    kSymFloat: node = operator.mul ...
//   math.cos(step / 100) (of ints only)                     kSymFloat: node = math.cos
//   x * lr, p.add_(g, alpha=-lr)                            graph node taking the float node
//   lr > 0.1, if lr:, int(lr), str(lr), lr / lr2, ...       specialised: every float input it came
//                                                           from is guarded by value (EQUALS_MATCH),
//                                                           every int pinned; static afterwards
//
// Only operations that cannot raise are kept symbolic (a division by a symbolic float, or math
// of a float input that may be inf, specialises), so the graph never raises where eager would
// have raised at another point of the function.
//
// The ShapeGuards of the entry read the int (a SymbolSource with dim -1) and check its range
// ([2, inf]: 0 and 1 stay constants, as sizes do) and every relation traced on it. A graph break
// in a trace that made symbolic ints is traced again without them (compiler.cpp), so a break
// never comes from an int being symbolic.
#pragma once

#include <string>
#include <vector>

#include "tracer.h"

namespace dynamo::core::interp {

/// The int `obj` read through `source`, when the code's dynamic policy makes it symbolic: a
/// kSymInt whose run-time value is a graph input (one per source), guarded by type only (its value
/// by the shape guards). Null when it stays a constant.
ValueRef wrapSymIntInput(CompileContext& ctx, PyObject* obj, const Source& source);

/// Size `dim` of the tensor value `tensor` (x.size(0), x.shape[1], b, t = x.shape) as a kSymInt
/// whose run-time value is an `x.size(dim)` node, when it depends on a free symbol; a constant
/// int when it does not; null when symbolic ints are off or `dim` is out of range (the caller
/// then reads the sizes as before: specialised).
ValueRef symbolicSize(CompileContext& ctx, const ValueRef& tensor, int64_t dim);

/// `x.shape` / `x.size()` of the tensor value `tensor` read as a whole, as a torch.Size whose
/// items are symbolic where the dimension is dynamic: a kTuple whose obj is torch.Size, each item
/// from symbolicSize. Null when symbolic ints are off or no size depends on a free symbol (the
/// caller then reads the example's torch.Size: a constant). Its sizes become Python ints
/// (specialised, with the line) only where the value is needed as a Python object: hashed, formatted,
/// given to a Python function evaluated while tracing (concrete()).
ValueRef symbolicShape(CompileContext& ctx, const ValueRef& tensor);

/// A kTuple standing for a torch.Size (symbolicShape, torch.Size(...) of symbolic ints, a slice
/// or a sum of one).
bool isSymShape(const ValueRef& v);

/// Operations on torch.Size values and tuples of symbolic ints that keep them symbolic:
/// `a + b` (concatenation; a torch.Size on the left stays one), `a == b` / `a != b` (item by item,
/// each symbolic comparison guarded), `s.numel()` (the product), `torch.Size(seq)`. Null when
/// the operation does not apply (the caller then folds it: specialised).
ValueRef symShapeOperator(CompileContext& ctx, const std::string& name, const std::vector<ValueRef>& args);
ValueRef symShapeNumel(CompileContext& ctx, const ValueRef& shape);
ValueRef makeSymShape(CompileContext& ctx, const ValueRef& seq);

/// `x.numel()` / `x.nelement()` of the tensor value `tensor` as a kSymInt (the product of its
/// symbolic sizes) whose run-time value is an `x.numel()` node; a constant when no free symbol is
/// in it; null when symbolic ints are off or the tensor's sizes are static.
ValueRef symbolicNumel(CompileContext& ctx, const ValueRef& tensor);

/// The float `obj` read through `source`, when the code's dynamic policy makes it symbolic (it
/// changed since an earlier compile): a kSymFloat whose run-time value is a graph input (one per
/// source), guarded by type only. Null when it stays a constant.
ValueRef wrapSymFloatInput(CompileContext& ctx, PyObject* obj, const Source& source);

/// The expression of a kSymInt, or of an exact int constant that fits in 64 bits; false for
/// anything else.
bool symIntExpr(const ValueRef& v, sym::Expr& out);

/// True when some argument is a kSymInt (not looking into containers).
bool anySymInt(const std::vector<ValueRef>& args);
/// True when some argument is a kSymInt or a kSymFloat (not looking into containers).
bool anySymScalar(const std::vector<ValueRef>& args);

/// `operator.<name>(*args)` where an argument is symbolic and the result a float (`lr * 2`,
/// `step / 100`, `0.9 ** step`): a kSymFloat recorded as a graph node. A comparison with a
/// kSymFloat specialises it and gives a constant bool. Null for anything else (the caller then
/// needs the value: specialised).
ValueRef symFloatOperator(CompileContext& ctx, const std::string& name, const std::vector<ValueRef>& args);

/// `math.<name>(arg)` of a kSymFloat or kSymInt computed from ints only, for the functions that
/// cannot raise on it (cos, sin, tanh, atan; sqrt and log of an int known positive): a kSymFloat
/// recorded as a graph node. Null otherwise.
ValueRef symFloatMath(CompileContext& ctx, PyObject* fn, const std::string& name, const std::vector<ValueRef>& args);

/// The value of a kSymFloat now (a new ref): every float input it came from is guarded by value
/// from here on (and stays a constant in later compiles), every int it came from is pinned.
PyObjectRef specializeSymFloat(CompileContext& ctx, const ValueRef& v, const std::string& why);

/// `operator.<name>(*args)` where an argument is a kSymInt and the others are kSymInts or int
/// constants: arithmetic (add, sub, mul, floordiv, mod, neg, pos, abs via neg/pos) gives a new
/// kSymInt recorded as a graph node; a comparison (lt, le, eq, ne, gt, ge) a constant bool whose
/// outcome is guarded. Null for anything else (the caller then needs the value: specialised).
ValueRef symIntOperator(CompileContext& ctx, const std::string& name, const std::vector<ValueRef>& args);

/// The truth of a kSymInt (its value != 0), guarded.
bool symIntTruth(CompileContext& ctx, const ValueRef& v);

/// The value of a kSymInt now; its symbols are pinned to their example values (guarded with `why`
/// and the current line) and stay static in later compiles.
int64_t specializeSymInt(CompileContext& ctx, const ValueRef& v, const std::string& why);

}  // namespace dynamo::core::interp
