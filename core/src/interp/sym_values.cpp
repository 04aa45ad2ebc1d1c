// Symbolic Python ints in the tracer (see sym_values.h): int inputs as graph inputs, their
// arithmetic as graph nodes, comparisons as guarded constants, specialisation where a value is
// needed.
#include "sym_values.h"

#include <algorithm>
#include <cmath>

#include "dynamic.h"
#include "torch_api.h"

namespace dynamo::core::interp {

namespace {

ValueRef makeSymInt(CompileContext& ctx, sym::Expr e, NodeRef node) {
  auto v = std::make_shared<Value>();
  v->kind = ValueKind::kSymInt;
  v->obj = PyObjectRef::steal(checkPy(PyLong_FromLongLong(ctx.shapes.evalHint(e))));
  v->data = SymIntData{std::move(e), std::move(node)};
  ++ctx.symIntsMade;
  return v;
}

// The expression of a kSymInt or of an exact int constant that fits in 64 bits.
bool exprOf(const ValueRef& v, sym::Expr& out) {
  if (v->isSymInt()) {
    out = v->as<SymIntData>().expr;
    return true;
  }
  if (!v->isConst() || !PyLong_CheckExact(v->py())) return false;
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(v->py(), &overflow);
  if (overflow || PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  out = sym::Expr(static_cast<int64_t>(x));
  return true;
}

bool comparison(const std::string& name, sym::RelOp& op) {
  static const std::pair<const char*, sym::RelOp> kOps[] = {{"lt", sym::RelOp::kLt}, {"le", sym::RelOp::kLe},
                                                            {"eq", sym::RelOp::kEq}, {"ne", sym::RelOp::kNe},
                                                            {"gt", sym::RelOp::kGt}, {"ge", sym::RelOp::kGe}};
  for (const auto& [n, o] : kOps) {
    if (name == n) {
      op = o;
      return true;
    }
  }
  return false;
}

}  // namespace

ValueRef wrapSymIntInput(CompileContext& ctx, PyObject* obj, const Source& source) {
  if (!ctx.options.dynamic || !ctx.options.symbolicInts || !source) return nullptr;
  auto memo = ctx.symIntInputs.find(source);
  if (memo != ctx.symIntInputs.end()) return memo->second;
  int overflow = 0;
  long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (overflow || PyErr_Occurred()) {
    PyErr_Clear();
    return nullptr;
  }
  std::string why;
  if (!ctx.options.dynamic->planInt(source.name(), value, why)) {
    if (!why.empty() &&
        std::find(ctx.dynamicNotes.begin(), ctx.dynamicNotes.end(), why) == ctx.dynamicNotes.end())
      ctx.dynamicNotes.push_back(why);
    return nullptr;
  }
  sym::SymbolSource where{static_cast<int>(ctx.inputs().size()), -1, source.name()};
  sym::Expr e = ctx.shapes.sizeSymbol(value, where, /*duck=*/false, sym::Range{2, sym::kInf});
  ctx.symbolSources.emplace_back();
  ctx.symbolSources.back().emplace_back(source, -1);
  // Its type here; its value by the entry's shape guards (range and relations).
  ctx.guard(source, makeTypeMatch(obj));
  NodeRef node = ctx.addScalarInput(obj, source);
  ValueRef v = makeSymInt(ctx, e, node);
  v->source = source;
  ctx.symIntInputs.emplace(source, v);
  ctx.dynamicNotes.push_back(source.name() + " is dynamic (" + ctx.shapes.symbolName(e.symbolId()) + "): " + why);
  return v;
}

ValueRef symbolicSize(CompileContext& ctx, const ValueRef& tensor, int64_t dim) {
  if (!ctx.options.dynamic || !ctx.options.symbolicInts || !tensor->isTensor() || tensor->as<TensorData>().symSizes.empty()) return nullptr;
  int64_t n = static_cast<int64_t>(tensor->as<TensorData>().symSizes.size());
  if (dim < -n || dim >= n) return nullptr;
  if (dim < 0) dim += n;
  const sym::Expr& e = tensor->as<TensorData>().symSizes[static_cast<size_t>(dim)];
  bool free = false;
  for (int id : e.symbols()) free = free || !ctx.shapes.pinned(id);
  if (!free) return makeConst(PyObjectRef::steal(checkPy(PyLong_FromLongLong(ctx.shapes.evalHint(e)))).get());
  NodeRef node = ctx.graph.callMethod("size", {Arg::node(tensor->as<TensorData>().node), Arg::integer(dim)}, {}, ctx.metaHere(nullptr));
  return makeSymInt(ctx, e, node);
}

ValueRef symbolicNumel(CompileContext& ctx, const ValueRef& tensor) {
  if (!ctx.options.dynamic || !ctx.options.symbolicInts || !tensor->isTensor() || tensor->as<TensorData>().symSizes.empty()) return nullptr;
  sym::Expr n(1);
  try {
    for (const sym::Expr& e : tensor->as<TensorData>().symSizes) n = n * e;
  } catch (const sym::SymbolicError&) {
    return nullptr;  // overflow: the caller specialises
  }
  bool free = false;
  for (int id : n.symbols()) free = free || !ctx.shapes.pinned(id);
  if (!free) return makeConst(PyObjectRef::steal(checkPy(PyLong_FromLongLong(ctx.shapes.evalHint(n)))).get());
  NodeRef node = ctx.graph.callMethod("numel", {Arg::node(tensor->as<TensorData>().node)}, {}, ctx.metaHere(nullptr));
  return makeSymInt(ctx, n, node);
}

// ---- torch.Size values with symbolic items ---------------------------------------------------

namespace {

// The items of a tuple value: a kTuple's, or a constant tuple's (a torch.Size constant too) as
// constants. False for anything else.
bool tupleItems(const ValueRef& v, std::vector<ValueRef>& out) {
  if (v->kind == ValueKind::kTuple) {
    out = v->items;
    return true;
  }
  if (!v->isConst() || !PyTuple_Check(v->py())) return false;
  out.clear();
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v->py()); ++i) out.push_back(makeConst(PyTuple_GET_ITEM(v->py(), i)));
  return true;
}

bool isSizeValue(const ValueRef& v) {
  return isSymShape(v) || (v->isConst() && Py_TYPE(v->py()) == (PyTypeObject*)torchApi().sizeType);
}

bool isIntItem(const ValueRef& v) { return v->isSymInt() || (v->isConst() && PyLong_CheckExact(v->py())); }

ValueRef sizeOfItems(std::vector<ValueRef> items) {
  ValueRef t = makeTuple(std::move(items));
  t->obj = PyObjectRef::borrow(torchApi().sizeType);
  return t;
}

}  // namespace

ValueRef symbolicShape(CompileContext& ctx, const ValueRef& tensor) {
  if (!ctx.options.dynamic || !ctx.options.symbolicInts || !tensor->isTensor() || tensor->as<TensorData>().symSizes.empty()) return nullptr;
  std::vector<ValueRef> items;
  for (size_t d = 0; d < tensor->as<TensorData>().symSizes.size(); ++d) {
    ValueRef s = symbolicSize(ctx, tensor, static_cast<int64_t>(d));
    if (!s) return nullptr;
    items.push_back(std::move(s));
  }
  return anySymInt(items) ? sizeOfItems(std::move(items)) : nullptr;
}

bool isSymShape(const ValueRef& v) {
  return v && v->kind == ValueKind::kTuple && v->obj && v->obj.get() == torchApi().sizeType;
}

ValueRef makeSymShape(CompileContext&, const ValueRef& seq) {
  std::vector<ValueRef> items;
  if (seq->kind == ValueKind::kList) items = seq->items;
  else if (!tupleItems(seq, items)) return nullptr;
  if (!anySymInt(items) || !std::all_of(items.begin(), items.end(), isIntItem)) return nullptr;
  return sizeOfItems(std::move(items));
}

ValueRef symShapeOperator(CompileContext& ctx, const std::string& name, const std::vector<ValueRef>& args) {
  std::vector<ValueRef> a, b;
  if (args.size() != 2 || !tupleItems(args[0], a) || !tupleItems(args[1], b)) return nullptr;
  if (!anySymInt(a) && !anySymInt(b)) return nullptr;
  if (name == "add") {  // torch.Size + tuple is a torch.Size, tuple + torch.Size a tuple
    a.insert(a.end(), b.begin(), b.end());
    return isSizeValue(args[0]) ? sizeOfItems(std::move(a)) : makeTuple(std::move(a));
  }
  if (name != "eq" && name != "ne") return nullptr;
  // A namedtuple class may define its own __eq__: only tuples and torch.Size compare here.
  for (const ValueRef& v : args) {
    if (v->kind == ValueKind::kTuple && v->obj && !isSymShape(v)) return nullptr;
  }
  // Item by item, as tuple.__eq__: the first unequal item decides; each symbolic one guarded.
  bool equal = a.size() == b.size();
  for (size_t i = 0; equal && i < a.size(); ++i) {
    if (a[i]->isSymInt() || b[i]->isSymInt()) {
      ValueRef r = symIntOperator(ctx, "eq", {a[i], b[i]});
      if (!r || !r->isConst()) return nullptr;
      equal = r->py() == Py_True;
    } else {
      if (!a[i]->isConst() || !b[i]->isConst()) return nullptr;
      int r = PyObject_RichCompareBool(a[i]->py(), b[i]->py(), Py_EQ);
      if (r < 0) throw PythonError{};
      equal = r == 1;
    }
  }
  return makeConst(equal == (name == "eq") ? Py_True : Py_False);
}

ValueRef symShapeNumel(CompileContext& ctx, const ValueRef& shape) {
  if (!isSymShape(shape)) return nullptr;
  PyObjectRef one = PyObjectRef::steal(checkPy(PyLong_FromLong(1)));
  ValueRef n = makeConst(one.get());
  for (const ValueRef& item : shape->items) {
    if (n->isConst() && item->isConst()) {
      n = makeConst(PyObjectRef::steal(checkPy(PyNumber_Multiply(n->py(), item->py()))).get());
    } else {
      n = symIntOperator(ctx, "mul", {n, item});
      if (!n) return nullptr;
    }
  }
  return n;
}

bool symIntExpr(const ValueRef& v, sym::Expr& out) { return exprOf(v, out); }

bool anySymInt(const std::vector<ValueRef>& args) {
  return std::any_of(args.begin(), args.end(), [](const ValueRef& a) { return a->isSymInt(); });
}

bool anySymScalar(const std::vector<ValueRef>& args) {
  return std::any_of(args.begin(), args.end(), [](const ValueRef& a) { return a->isSymScalar(); });
}

// ---- symbolic floats ---------------------------------------------------------------------------

namespace {

// A float input is its own root (SymFloatData::roots empty); a computed kSymFloat lists its roots.
void addRoots(const ValueRef& a, std::vector<ValueRef>& out) {
  auto add = [&](const ValueRef& r) {
    if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
  };
  if (a->isSymFloat() && a->as<SymFloatData>().roots.empty()) {
    add(a);
  } else if (a->isSymFloat()) {
    for (const ValueRef& r : a->as<SymFloatData>().roots) add(r);
  } else if (a->isSymInt()) {
    add(a);
  }
}

// `finite`: known to be a finite float (computed from ints and moderate constants only), so the
// math functions kept symbolic cannot raise on it (SymFloatData::finite).
ValueRef makeSymFloat(CompileContext& ctx, PyObjectRef example, NodeRef node, const std::vector<ValueRef>& args, bool finite) {
  auto v = std::make_shared<Value>();
  v->kind = ValueKind::kSymFloat;
  v->obj = std::move(example);
  SymFloatData data;
  data.node = std::move(node);
  for (const ValueRef& a : args) addRoots(a, data.roots);
  data.finite = finite;
  v->data = std::move(data);
  ++ctx.symIntsMade;
  return v;
}

// An exact int or float constant (not bool, not a subclass).
bool plainNumber(const ValueRef& v, double* out = nullptr) {
  if (!v->isConst() || !(PyLong_CheckExact(v->py()) || PyFloat_CheckExact(v->py()))) return false;
  double x = PyFloat_CheckExact(v->py()) ? PyFloat_AS_DOUBLE(v->py()) : PyLong_AsDouble(v->py());
  if (x == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  if (out) *out = x;
  return true;
}

// Known finite, with a magnitude that keeps +, -, * and / by such values finite.
bool knownFinite(const ValueRef& v) {
  if (v->isSymInt()) return true;
  if (v->isSymFloat()) return v->as<SymFloatData>().finite;
  double x = 0;
  return plainNumber(v, &x) && std::abs(x) < 1e100;
}

// Whether the kSymInt `v` satisfies `v op bound` for every value its range admits.
bool symIntAlways(CompileContext& ctx, const ValueRef& v, sym::RelOp op, int64_t bound) {
  return v->isSymInt() && sym::decide(sym::rel(v->as<SymIntData>().expr, op, bound), ctx.shapes.ranges()).value_or(false);
}

PyObjectRef callOn(PyObject* fn, const std::vector<ValueRef>& args, CompileContext& ctx) {
  PyObjectRef tuple = PyObjectRef::steal(checkPy(PyTuple_New(args.size())));
  for (size_t i = 0; i < args.size(); ++i) PyTuple_SET_ITEM(tuple.get(), i, exampleOf(ctx, args[i]).release());
  PyObject* r = PyObject_Call(fn, tuple.get(), nullptr);  // new ref
  if (r == nullptr) PyErr_Clear();
  return PyObjectRef::steal(r);
}

ValueRef recordFloat(CompileContext& ctx, PyObject* fn, const std::vector<ValueRef>& args, bool finite) {
  PyObjectRef example = callOn(fn, args, ctx);
  if (!example || !PyFloat_CheckExact(example.get())) return nullptr;
  std::vector<Arg> gargs;
  for (const ValueRef& a : args) gargs.push_back(argOf(ctx, a));
  NodeRef node = ctx.graph.callFunction(Target::fromCallable(fn), std::move(gargs), {}, ctx.metaHere(nullptr));
  return makeSymFloat(ctx, std::move(example), std::move(node), args, finite);
}

}  // namespace

ValueRef wrapSymFloatInput(CompileContext& ctx, PyObject* obj, const Source& source) {
  if (!ctx.options.dynamic || !ctx.options.symbolicInts || !source) return nullptr;
  auto memo = ctx.symFloatInputs.find(source);
  if (memo != ctx.symFloatInputs.end()) return memo->second;
  std::string why;
  if (!ctx.options.dynamic->planFloat(source.name(), PyFloat_AS_DOUBLE(obj), why)) return nullptr;
  // Its type here; its value nowhere (until a use needs it: specializeSymFloat).
  ctx.guard(source, makeTypeMatch(obj));
  NodeRef node = ctx.addScalarInput(obj, source);
  ValueRef v = makeSymFloat(ctx, PyObjectRef::borrow(obj), node, {}, false);
  v->source = source;
  ctx.symFloatInputs.emplace(source, v);
  ctx.dynamicNotes.push_back(source.name() + " is dynamic (float): " + why);
  return v;
}

ValueRef symFloatOperator(CompileContext& ctx, const std::string& name, const std::vector<ValueRef>& args) {
  for (const ValueRef& a : args) {
    if (!a->isSymScalar() && !plainNumber(a)) return nullptr;
  }
  bool anyFloat = std::any_of(args.begin(), args.end(), [](const ValueRef& a) { return a->isSymFloat(); });
  PyObjectRef fn = PyObjectRef::steal(checkPy(PyObject_GetAttrString(torchApi().operatorModule, name.c_str())));
  sym::RelOp op;
  if (args.size() == 2 && comparison(name, op)) {
    if (!anyFloat) return nullptr;  // ints with a float constant: the int is needed (specialised)
    for (const ValueRef& a : args) {
      if (a->isSymFloat()) specializeSymFloat(ctx, a, "comparison");
      if (a->isSymInt()) specializeSymInt(ctx, a, "comparison with a float");
    }
    PyObjectRef r = callOn(fn.get(), args, ctx);
    return r && PyBool_Check(r.get()) ? makeConst(r.get()) : nullptr;
  }
  bool finite = std::all_of(args.begin(), args.end(), knownFinite);
  if (args.size() == 1 && (name == "neg" || name == "pos")) return anyFloat ? recordFloat(ctx, fn.get(), args, finite) : nullptr;
  if (args.size() != 2) return nullptr;
  if (name == "add" || name == "sub" || name == "mul") return recordFloat(ctx, fn.get(), args, finite);
  if (name == "truediv" || name == "floordiv" || name == "mod") {
    // A divisor that may be 0 would raise inside the graph: only constants and ints known non-zero.
    double d = 0;
    bool safe = (plainNumber(args[1], &d) && d != 0.0) || symIntAlways(ctx, args[1], sym::RelOp::kNe, 0);
    if (!safe) return nullptr;
    finite = finite && (args[1]->isSymInt() || std::abs(d) >= 1e-100);
    return recordFloat(ctx, fn.get(), args, finite);
  }
  if (name == "pow") {
    // Decays (0.9 ** step): a constant base in (0, 1] and an int exponent >= 0 cannot overflow.
    double base = 0;
    if (plainNumber(args[0], &base) && base > 0 && base <= 1 && symIntAlways(ctx, args[1], sym::RelOp::kGe, 0))
      return recordFloat(ctx, fn.get(), args, true);
    // Scales from sizes (d ** -0.5, n ** 0.5): an int base >= 1 and a float exponent <= 1 give a
    // finite float no larger than the base.
    double exponent = 0;
    if (args[0]->isSymInt() && symIntAlways(ctx, args[0], sym::RelOp::kGe, 1) && plainNumber(args[1], &exponent) &&
        PyFloat_CheckExact(args[1]->py()) && std::isfinite(exponent) && exponent <= 1)
      return recordFloat(ctx, fn.get(), args, true);
    return nullptr;
  }
  return nullptr;
}

ValueRef symFloatMath(CompileContext& ctx, PyObject* fn, const std::string& name, const std::vector<ValueRef>& args) {
  if (args.size() != 1 || !knownFinite(args[0]) || !args[0]->isSymScalar()) return nullptr;
  const ValueRef& a = args[0];
  bool total = name == "cos" || name == "sin" || name == "tanh" || name == "atan";
  if (name == "sqrt") total = symIntAlways(ctx, a, sym::RelOp::kGe, 0);
  if (name == "log") total = symIntAlways(ctx, a, sym::RelOp::kGe, 1);
  if (!total) return nullptr;
  return recordFloat(ctx, fn, args, true);
}

PyObjectRef specializeSymFloat(CompileContext& ctx, const ValueRef& v, const std::string& why) {
  std::vector<ValueRef> roots;
  addRoots(v, roots);
  std::string where = ctx.here().str();
  for (const ValueRef& r : roots) {
    if (r->isSymInt()) {
      specializeSymInt(ctx, r, why);
      continue;
    }
    const std::string name = r->source.name();
    if (!ctx.specialisedFloats.insert(name).second) continue;
    ctx.guard(r->source, makeEqualsMatch(r->py()));
    if (ctx.options.dynamic) ctx.options.dynamic->keepStatic(name, -1, why);
    PyObjectRef text = PyObjectRef::steal(checkPy(PyObject_Repr(r->py())));
    ctx.dynamicNotes.push_back(name + " specialised to " + PyUnicode_AsUTF8(text.get()) + ": " + why +
                               (where.empty() ? "" : " at " + where));
  }
  return v->obj;
}

ValueRef symIntOperator(CompileContext& ctx, const std::string& name, const std::vector<ValueRef>& args) {
  std::vector<sym::Expr> e(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    if (!exprOf(args[i], e[i])) return nullptr;
  }
  sym::RelOp op;
  try {
    if (args.size() == 2 && comparison(name, op)) {
      bool r = ctx.shapes.evaluate(sym::rel(e[0], op, e[1]), ctx.here().str(), "comparison");
      return makeConst(r ? Py_True : Py_False);
    }
    sym::Expr out;
    if (args.size() == 1 && name == "neg") {
      out = -e[0];
    } else if (args.size() == 1 && name == "pos") {
      out = e[0];
    } else if (args.size() == 2 && name == "add") {
      out = e[0] + e[1];
    } else if (args.size() == 2 && name == "sub") {
      out = e[0] - e[1];
    } else if (args.size() == 2 && name == "mul") {
      out = e[0] * e[1];
    } else if (args.size() == 2 && name == "pow" && e[1].isConstant() && e[1].constant() >= 0 && e[1].constant() <= 4) {
      out = sym::Expr(1);  // n ** 2: an int, the product
      for (int64_t k = 0; k < e[1].constant(); ++k) out = out * e[0];
    } else if (args.size() == 2 && (name == "floordiv" || name == "mod")) {
      // A divisor that may be 0 raises in Python: leave that to the value (specialised).
      std::optional<bool> nonzero = sym::decide(sym::rel(e[1], sym::RelOp::kNe, 0), ctx.shapes.ranges());
      if (!nonzero.value_or(false)) return nullptr;
      out = name == "floordiv" ? sym::floorDiv(e[0], e[1], &ctx.shapes) : sym::mod(e[0], e[1], &ctx.shapes);
    } else {
      return nullptr;
    }
    if (out.isConstant()) return makeConst(PyObjectRef::steal(checkPy(PyLong_FromLongLong(out.constant()))).get());
    PyObjectRef fn = PyObjectRef::steal(checkPy(PyObject_GetAttrString(torchApi().operatorModule, name.c_str())));
    std::vector<Arg> gargs;
    for (const ValueRef& a : args) gargs.push_back(argOf(ctx, a));
    NodeRef node = ctx.graph.callFunction(Target::fromCallable(fn.get()), std::move(gargs), {}, ctx.metaHere(nullptr));
    return makeSymInt(ctx, out, node);
  } catch (const sym::SymbolicError&) {
    return nullptr;  // overflow: the caller specialises
  }
}

bool symIntTruth(CompileContext& ctx, const ValueRef& v) {
  return ctx.shapes.evaluate(sym::rel(v->as<SymIntData>().expr, sym::RelOp::kNe, 0), ctx.here().str(), "truth value");
}

int64_t specializeSymInt(CompileContext& ctx, const ValueRef& v, const std::string& why) {
  std::vector<int> ids;
  const sym::Expr& e = v->as<SymIntData>().expr;
  for (int id : e.symbols()) {
    if (!ctx.shapes.pinned(id)) ids.push_back(id);
  }
  specializeSymbols(ctx, ids, why);
  return ctx.shapes.evalHint(e);
}

}  // namespace dynamo::core::interp
