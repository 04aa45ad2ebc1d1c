// The op table of lowered_ops.def: how each ATen (or torch-level) op becomes a loop-IR value.
//
// Arguments are bound by name against a small schema per op (ATen's parameter names; "input" is
// accepted for "self"), so aten::add.Tensor(x, y, alpha=2), torch.add(x, y, alpha=2),
// operator.add(x, y) and x.add(y) lower the same way. Result dtypes come from the node's recorded
// tensor meta and are cross-checked against ATen's type promotion; any disagreement, unsupported
// dtype, argument or device leaves the node as an extern call.
#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "dynamo/common/error.h"
#include "lowering_internal.h"

namespace dynamo::codegen::detail {
namespace {

using E = Expr;
using Args = std::vector<LValue>;
using KwArgs = std::vector<std::pair<std::string, LValue>>;

// ---- names ------------------------------------------------------------------------------------

const std::unordered_set<std::string>& supported() {
  static const std::unordered_set<std::string> kOps = {
      "add", "sub", "rsub", "mul", "div", "neg", "abs", "relu", "sigmoid", "tanh", "exp", "log",
      "sqrt", "rsqrt", "reciprocal", "pow", "gelu", "clamp", "clamp_min", "clamp_max", "maximum",
      "minimum", "where", "eq", "ne", "lt", "le", "gt", "ge", "_to_copy", "to", "float", "double",
      "int", "long", "bool", "clone", "sum", "mean", "amax", "amin", "_softmax", "_log_softmax",
      "softmax", "log_softmax", "native_layer_norm", "layer_norm", "getitem", "expand", "permute",
      "t", "transpose", "unsqueeze", "view", "_unsafe_view", "reshape", "alias", "detach",
      "contiguous", "scalar_tensor", "F_batch_norm", "hardtanh", "erf", "F_dropout", "var_mean",
      "convert_element_type", "cat"};
  return kOps;
}

}  // namespace

bool isViewOp(const std::string& op) {
  static const std::unordered_set<std::string> kViews = {
      "expand", "permute", "t", "transpose", "unsqueeze", "view", "_unsafe_view", "reshape",
      "alias", "detach", "contiguous"};
  return kViews.count(op) > 0;
}

std::string canonicalOp(const core::Node& n) {
  std::string name;
  if (n.op() == core::NodeOp::kCallMethod) {
    name = n.method();
  } else if (n.op() == core::NodeOp::kCallFunction) {
    const core::Target& t = n.target();
    const std::string& q = t.qualifiedName();
    if (t.kind() == core::TargetKind::kAtenOp) {
      const std::string& s = t.schemaName();
      // prims.convert_element_type: the decompositions' dtype casts (layer_norm's backward
      // saves its statistics through it); a new tensor, never an alias, as _to_copy
      if (s == "prims::convert_element_type") return "convert_element_type";
      if (s.rfind("aten::", 0) != 0) return {};
      name = s.substr(6);
      name = name.substr(0, name.find('.'));
    } else if (t.kind() == core::TargetKind::kMethod) {
      name = t.method();
    } else {
      std::string prefix = q.substr(0, q.rfind('.') + 1);
      name = q.substr(q.rfind('.') + 1);
      if (prefix == "operator." || prefix == "_operator.") {
        static const std::unordered_map<std::string, std::string> kOperators = {
            {"add", "add"}, {"sub", "sub"}, {"mul", "mul"}, {"truediv", "div"}, {"neg", "neg"},
            {"eq", "eq"}, {"ne", "ne"}, {"lt", "lt"}, {"le", "le"}, {"gt", "gt"}, {"ge", "ge"},
            {"getitem", "getitem"}};
        auto it = kOperators.find(name);
        return it == kOperators.end() ? std::string() : it->second;
      }
      if (prefix != "torch." && prefix != "torch.nn.functional." && prefix != "torch._C._nn.") {
        return {};
      }
      if (isViewOp(name) || name == "clone") return {};  // torch.reshape & co: keep it simple
      // F.batch_norm and torch.batch_norm order their arguments differently: only F's is lowered.
      if (name == "batch_norm") name = prefix == "torch.nn.functional." ? "F_batch_norm" : "";
      if (name == "dropout") name = prefix == "torch.nn.functional." ? "F_dropout" : "";
    }
  } else {
    return {};
  }
  return supported().count(name) ? name : std::string();
}

bool positionalInplace(const core::Node& n, size_t at) {
  return n.args().size() > at && n.args()[at].kind() == core::ArgKind::kBool && n.args()[at].asBool();
}

bool inplaceFlag(const core::Node& n) {
  for (const auto& [k, v] : n.kwargs()) {
    if (k == "inplace" && v.kind() == core::ArgKind::kBool && v.asBool()) return true;
  }
  if (n.op() != core::NodeOp::kCallFunction || n.target().kind() == core::TargetKind::kAtenOp ||
      n.target().kind() == core::TargetKind::kMethod) {
    return false;
  }
  static const std::unordered_map<std::string, size_t> kPositions = {
#define DYNAMO_INPLACE_FUNCTION(name, position) {"torch.nn.functional." name, position},
#include "../inplace_functions.def"
#undef DYNAMO_INPLACE_FUNCTION
  };
  auto it = kPositions.find(n.target().qualifiedName());
  return it != kPositions.end() && positionalInplace(n, it->second);
}

std::string inplaceBase(const core::Node& n) {
  static const std::unordered_set<std::string> kOps = {
      "relu", "add", "sub", "mul", "div", "sigmoid", "tanh", "exp", "neg", "abs", "sqrt",
      "clamp", "clamp_min", "clamp_max"};
  std::string name;
  bool inplaceKw = inplaceFlag(n);  // keyword or positional (F.relu(x, True))
  if (n.op() == core::NodeOp::kCallMethod) {
    name = n.method();
  } else if (n.op() == core::NodeOp::kCallFunction) {
    const core::Target& t = n.target();
    const std::string& q = t.qualifiedName();
    if (t.kind() == core::TargetKind::kAtenOp) {
      name = t.schemaName().rfind("aten::", 0) == 0 ? t.schemaName().substr(6) : "";
      name = name.substr(0, name.find('.'));
    } else if (t.kind() == core::TargetKind::kMethod) {
      name = t.method();
    } else {
      std::string prefix = q.substr(0, q.rfind('.') + 1);
      std::string last = q.substr(q.rfind('.') + 1);
      if (prefix == "operator." || prefix == "_operator.") {
        static const std::unordered_map<std::string, std::string> kI = {
            {"iadd", "add"}, {"isub", "sub"}, {"imul", "mul"}, {"itruediv", "div"}};
        auto it = kI.find(last);
        return it == kI.end() ? std::string() : it->second;
      }
      if (prefix == "torch.nn.functional." && last == "relu" && inplaceKw) return "relu";
      if (prefix == "torch.nn.functional." && last == "hardtanh" && inplaceKw) {
        return "hardtanh";
      }
      if (prefix == "torch." && last.size() > 1 && last.back() == '_') name = last;
      else return {};
    }
  } else {
    return {};
  }
  if (name.size() < 2 || name.back() != '_' || name[name.size() - 2] == '_') return {};
  name.pop_back();
  return kOps.count(name) ? name : std::string();
}

namespace {

// The bare name of a call: a method's name, an ATen op's without namespace and overload
// ("aten::set_.source_Tensor" -> "set_"), a function's last dotted part; "" for other nodes.
std::string bareCallName(const core::Node& n) {
  if (n.op() == core::NodeOp::kCallMethod) return n.method();
  if (n.op() != core::NodeOp::kCallFunction) return {};
  const core::Target& t = n.target();
  if (t.kind() == core::TargetKind::kAtenOp) {
    const std::string& s = t.schemaName();
    return s.rfind("aten::", 0) == 0 ? s.substr(6, s.find('.') == std::string::npos ? std::string::npos : s.find('.') - 6)
                                     : std::string();
  }
  if (t.kind() == core::TargetKind::kMethod) return t.method();
  const std::string& q = t.qualifiedName();
  return q.substr(q.rfind('.') + 1);
}

}  // namespace

bool changesSizesInPlace(const core::Node& n) {
  static const std::unordered_set<std::string> kOps = {
      "resize_", "resize_as_", "t_", "transpose_", "swapdims_", "swapaxes_", "unsqueeze_",
      "squeeze_", "as_strided_", "set_"};
  return kOps.count(bareCallName(n)) > 0;
}

namespace {

// ---- argument binding -------------------------------------------------------------------------

struct Bound {
  std::unordered_map<std::string, LValue> values;
  bool has(const std::string& k) const {
    auto it = values.find(k);
    return it != values.end() && it->second.kind != LValue::Kind::kNone;
  }
  const LValue& get(const std::string& k) const { return values.at(k); }
};

// Binds args/kwargs to params; kwargs in `ignore` are accepted when they hold their default
// (None/False/"none" text); anything else fails.
bool bindArgs(const std::vector<std::string>& params, const Args& args, const KwArgs& kwargs,
          Bound* out, std::string* why,
          const std::unordered_map<std::string, std::string>& ignore = {}) {
  if (args.size() > params.size()) {
    *why = "more positional arguments than the lowering knows";
    return false;
  }
  for (size_t i = 0; i < args.size(); ++i) out->values[params[i]] = args[i];
  for (const auto& [k0, v] : kwargs) {
    std::string k = k0 == "input" ? "self" : k0;
    if (std::find(params.begin(), params.end(), k) != params.end()) {
      out->values[k] = v;
      continue;
    }
    auto ig = ignore.find(k);
    if (ig != ignore.end()) {
      bool isDefault = v.kind == LValue::Kind::kNone ||
                       (v.kind == LValue::Kind::kNumber && v.number == 0 && ig->second == "false") ||
                       (v.kind == LValue::Kind::kText && v.text == ig->second) || ig->second == "*";
      if (isDefault) continue;
    }
    *why = "keyword argument '" + k0 + "' is not lowered";
    return false;
  }
  for (const auto& [k, v] : out->values) {
    if (v.kind == LValue::Kind::kNone && v.text == "?") {
      *why = "argument '" + k + "' has an unsupported kind";
      return false;
    }
  }
  return true;
}

bool isTensor(const LValue& v) { return v.kind == LValue::Kind::kTensor; }
bool isNumber(const LValue& v) { return v.kind == LValue::Kind::kNumber; }

// ---- type promotion (ATen's result_type) --------------------------------------------------------

std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (isFloating(*higher)) return higher;
  if (*higher == DType::kBool || isFloating(*lower)) return promote(*higher, *lower);
  return higher;
}

std::optional<DType> resultType(const std::vector<const LValue*>& ops) {
  std::optional<DType> dim, zero, wrapped;
  auto upd = [](std::optional<DType>& s, DType t) { s = s ? promote(*s, t) : t; };
  for (const LValue* v : ops) {
    if (isTensor(*v)) {
      upd(v->shape.empty() ? zero : dim, v->dtype);
    } else if (isNumber(*v) || v->kind == LValue::Kind::kScalar) {  // a wrapped number: its category only
      upd(wrapped, v->dtype == DType::kFloat64 ? DType::kFloat32 : v->dtype);
    }
  }
  return combine(dim, combine(zero, wrapped));
}

std::optional<std::vector<int64_t>> broadcastShapes(const std::vector<const LValue*>& ops) {
  std::vector<int64_t> out;
  for (const LValue* v : ops) {
    if (!isTensor(*v)) continue;
    const auto& s = v->shape;
    if (s.size() > out.size()) out.insert(out.begin(), s.size() - out.size(), 1);
    size_t lead = out.size() - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[lead + i];
      if (o == s[i] || s[i] == 1) continue;
      if (o != 1) return std::nullopt;
      o = s[i];
    }
  }
  return out;
}

// An operand of a pointwise body: a tensor broadcast to the output index, or a number, in `t`.
E operand(const LValue& v, const IndexVec& idx, DType t) {
  if (isTensor(v)) return ExprNode::makeCast(t, v.fn(broadcastIndex(idx, v.shape)));
  // A number read at call time: its int64 or double converted to `t` in the kernel, as ATen
  // converts a wrapped number to the common dtype (static_cast from int64: exact beyond 2^53).
  if (v.kind == LValue::Kind::kScalar) return ExprNode::makeCast(t, ExprNode::makeScalar(v.scalar, v.dtype));
  return ExprNode::makeConst(t, v.number);
}

using Body = std::function<E(const std::vector<E>&)>;

// A pointwise value over `ops` broadcast together, each cast to `compute`, result cast to `out`.
std::optional<LValue> pointwise(std::vector<LValue> ops, DType compute, DType out, Body body,
                                std::string* why) {
  std::vector<const LValue*> ptrs;
  for (const LValue& v : ops) ptrs.push_back(&v);
  auto shape = broadcastShapes(ptrs);
  if (!shape) {
    *why = "shapes do not broadcast";
    return std::nullopt;
  }
  // Numbers travel as doubles: an integer scalar from 2^53 on may have lost its low bits (ATen uses
  // the exact int64), so integer arithmetic with one stays an extern call.
  for (const LValue& v : ops) {
    if (isNumber(v) && !isFloating(compute) && compute != DType::kBool && std::fabs(v.number) >= 9007199254740992.0) {
      *why = "an integer scalar beyond 2^53 (not exact as a double)";
      return std::nullopt;
    }
  }
  LValue r;
  r.kind = LValue::Kind::kTensor;
  r.dtype = out;
  r.shape = *shape;
  r.fn = [ops, compute, out, body](const IndexVec& idx) {
    std::vector<E> xs;
    for (const LValue& v : ops) xs.push_back(operand(v, idx, compute));
    return ExprNode::makeCast(out, body(xs));
  };
  return r;
}

E num(DType t, double v) { return ExprNode::makeConst(t, v); }
E bin(BinaryOp op, E a, E b) { return ExprNode::makeBinary(op, std::move(a), std::move(b)); }
E un(UnaryOp op, E a) { return ExprNode::makeUnary(op, std::move(a)); }

// ---- the lowerings ----------------------------------------------------------------------------

struct Ctx {
  const core::Node& node;
  LoweringContext& lc;
  std::string* why;
  std::optional<DType> out;  // the recorded result dtype (tensor results)
  bool aten;
  bool fail(const std::string& w) const { *why = w; return false; }
};

std::optional<LValue> none(const Ctx& c, const std::string& w) {
  *c.why = w;
  return std::nullopt;
}

int normDim(int64_t d, size_t rank) {
  int64_t r = static_cast<int64_t>(std::max<size_t>(rank, 1));
  return static_cast<int>(d < 0 ? d + r : d);
}

std::optional<std::vector<int>> dimList(const LValue& v, size_t rank, bool emptyIsAll) {
  std::vector<int> dims;
  if (v.kind == LValue::Kind::kNone) {
    for (size_t i = 0; i < rank; ++i) dims.push_back(static_cast<int>(i));
    return dims;
  }
  if (isNumber(v)) {
    dims.push_back(normDim(static_cast<int64_t>(v.number), rank));
  } else if (v.kind == LValue::Kind::kTuple) {
    for (const LValue& i : v.items) {
      if (!isNumber(i)) return std::nullopt;
      dims.push_back(normDim(static_cast<int64_t>(i.number), rank));
    }
    if (dims.empty() && emptyIsAll) {
      for (size_t i = 0; i < rank; ++i) dims.push_back(static_cast<int>(i));
    }
  } else {
    return std::nullopt;
  }
  for (int d : dims) {
    if (d < 0 || d >= static_cast<int>(std::max<size_t>(rank, 1))) return std::nullopt;
  }
  if (rank == 0) dims.clear();
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  return dims;
}

std::optional<LValue> lowerArith(const std::string& op, const Bound& b, const Ctx& c) {
  if (!b.has("self") || !b.has("other") || !c.out) return none(c, "missing operands");
  LValue x = b.get("self"), y = b.get("other");
  if (op == "rsub") std::swap(x, y);
  if (!isTensor(x) && !isTensor(y)) return none(c, "no tensor operand");
  auto rt = resultType({&x, &y});
  DType out = *c.out;
  if (op == "div" && rt && !isFloating(*rt) && !b.has("rounding_mode")) rt = DType::kFloat32;
  if (!rt || *rt != out) return none(c, "result dtype differs from ATen's promotion");
  double alpha = 1;
  if (b.has("alpha")) {
    const LValue& a = b.get("alpha");
    if (!isNumber(a) || (a.dtype == DType::kFloat64 && !isFloating(out))) return none(c, "alpha");
    // Like any integer scalar (pointwise()): from 2^53 on the double may have lost low bits.
    if (!isFloating(out) && std::fabs(a.number) >= 9007199254740992.0) return none(c, "an integer alpha beyond 2^53");
    alpha = a.number;
  }
  if (out == DType::kBool && (op == "sub" || op == "rsub" || op == "div")) return none(c, "bool arithmetic");
  if (op == "div" && b.has("rounding_mode")) {
    const LValue& m = b.get("rounding_mode");
    if (!isFloating(out)) return none(c, "integer division with rounding (eager checks for zero)");
    if (m.text == "trunc") {
      return pointwise({x, y}, out, out, [](const std::vector<E>& v) { return un(UnaryOp::kTrunc, bin(BinaryOp::kDiv, v[0], v[1])); }, c.why);
    }
    if (m.text == "floor") {
      return pointwise({x, y}, out, out, [](const std::vector<E>& v) { return bin(BinaryOp::kFloorDiv, v[0], v[1]); }, c.why);
    }
    return none(c, "rounding_mode");
  }
  BinaryOp bo = op == "add" ? BinaryOp::kAdd : op == "mul" ? BinaryOp::kMul
                : op == "div" ? BinaryOp::kDiv : BinaryOp::kSub;
  return pointwise({x, y}, out, out, [bo, alpha, out](const std::vector<E>& v) {
    E rhs = alpha == 1 ? v[1] : bin(BinaryOp::kMul, num(out, alpha), v[1]);
    return bin(bo, v[0], rhs);
  }, c.why);
}

std::optional<LValue> lowerUnary(const std::string& op, const Bound& b, const Ctx& c) {
  if (!b.has("self") || !isTensor(b.get("self")) || !c.out) return none(c, "operand");
  const LValue& x = b.get("self");
  DType out = *c.out;
  static const std::unordered_map<std::string, UnaryOp> kFloatOps = {
      {"sigmoid", UnaryOp::kSigmoid}, {"tanh", UnaryOp::kTanh}, {"exp", UnaryOp::kExp},
      {"log", UnaryOp::kLog}, {"sqrt", UnaryOp::kSqrt}, {"rsqrt", UnaryOp::kRsqrt},
      {"reciprocal", UnaryOp::kReciprocal}, {"erf", UnaryOp::kErf}};
  auto f = kFloatOps.find(op);
  if (f != kFloatOps.end()) {
    if (!isFloating(out)) return none(c, "floating op with a non-floating result");
    UnaryOp u = f->second;
    return pointwise({x}, out, out, [u](const std::vector<E>& v) { return un(u, v[0]); }, c.why);
  }
  if (out != x.dtype || out == DType::kBool) return none(c, "dtype");
  if (op == "neg") return pointwise({x}, out, out, [](const std::vector<E>& v) { return un(UnaryOp::kNeg, v[0]); }, c.why);
  if (op == "abs") return pointwise({x}, out, out, [](const std::vector<E>& v) { return un(UnaryOp::kAbs, v[0]); }, c.why);
  if (op == "relu") {
    return pointwise({x}, out, out, [out](const std::vector<E>& v) { return bin(BinaryOp::kMax, v[0], num(out, 0)); }, c.why);
  }
  return none(c, "unary op");
}

std::optional<LValue> lowerGelu(const Bound& b, const Ctx& c) {
  if (!b.has("self") || !c.out || !isFloating(*c.out)) return none(c, "gelu operand");
  std::string approx = b.has("approximate") ? b.get("approximate").text : "none";
  DType t = *c.out;
  if (approx == "none") {
    return pointwise({b.get("self")}, t, t, [t](const std::vector<E>& v) {
      E cdf = bin(BinaryOp::kMul, num(t, 0.5),
                  bin(BinaryOp::kAdd, num(t, 1), un(UnaryOp::kErf, bin(BinaryOp::kMul, v[0], num(t, M_SQRT1_2)))));
      return bin(BinaryOp::kMul, v[0], cdf);
    }, c.why);
  }
  if (approx == "tanh") {
    return pointwise({b.get("self")}, t, t, [t](const std::vector<E>& v) {
      E x = v[0];
      E cube = bin(BinaryOp::kMul, bin(BinaryOp::kMul, x, x), x);
      E inner = bin(BinaryOp::kMul, num(t, M_SQRT2 * M_2_SQRTPI * 0.5),
                    bin(BinaryOp::kAdd, x, bin(BinaryOp::kMul, num(t, 0.044715), cube)));
      return bin(BinaryOp::kMul, bin(BinaryOp::kMul, num(t, 0.5), x),
                 bin(BinaryOp::kAdd, num(t, 1), un(UnaryOp::kTanh, inner)));
    }, c.why);
  }
  return none(c, "gelu approximate");
}

std::optional<LValue> lowerPow(const Bound& b, const Ctx& c) {
  if (!b.has("self") || !b.has("exponent") || !c.out || !isFloating(*c.out)) return none(c, "pow on non-floating");
  const LValue& x = b.get("self");
  const LValue& e = b.get("exponent");
  DType t = *c.out;
  if (!isTensor(x)) return none(c, "pow with a scalar base");
  if (isTensor(e)) {
    return pointwise({x, e}, t, t, [](const std::vector<E>& v) { return bin(BinaryOp::kPow, v[0], v[1]); }, c.why);
  }
  double p = e.number;
  return pointwise({x}, t, t, [p, t](const std::vector<E>& v) {
    E x0 = v[0];
    if (p == 1) return x0;
    if (p == 2) return bin(BinaryOp::kMul, x0, x0);
    if (p == 3) return bin(BinaryOp::kMul, bin(BinaryOp::kMul, x0, x0), x0);
    if (p == 0.5) return un(UnaryOp::kSqrt, x0);
    if (p == -0.5) return un(UnaryOp::kRsqrt, x0);
    if (p == -1) return un(UnaryOp::kReciprocal, x0);
    if (p == -2) return un(UnaryOp::kReciprocal, bin(BinaryOp::kMul, x0, x0));
    return bin(BinaryOp::kPow, x0, num(t, p));
  }, c.why);
}

// Whether the scalar `v` converts to `t` the way ATen's checked scalar conversion accepts (clamp
// bounds and where's scalar operands raise "value cannot be converted to type int without
// overflow" otherwise; an extern call raises it as eager does). NaN fits only floating types.
bool scalarFits(double v, DType t) {
  if (isFloating(t)) return true;
  if (std::isnan(v)) return false;
  switch (t) {
    case DType::kBool: return true;
    case DType::kUInt8: return v >= 0 && v <= 255;
    case DType::kInt8: return v >= -128 && v <= 127;
    case DType::kInt16: return v >= -32768 && v <= 32767;
    case DType::kInt32: return v >= -2147483648.0 && v <= 2147483647.0;
    default: return v >= -9223372036854775808.0 && v < 9223372036854775808.0;
  }
}

std::optional<LValue> lowerClamp(const std::string& op, const Bound& b, const Ctx& c) {
  if (!b.has("self") || !isTensor(b.get("self")) || !c.out || *c.out != b.get("self").dtype ||
      *c.out == DType::kBool) {
    return none(c, "clamp operand");
  }
  bool hasMin = (op != "clamp_max") && b.has("min");
  bool hasMax = (op != "clamp_min") && b.has("max");
  if ((hasMin && !isNumber(b.get("min"))) || (hasMax && !isNumber(b.get("max")))) return none(c, "tensor bounds");
  if (!hasMin && !hasMax) return none(c, "clamp without bounds");
  double lo = hasMin ? b.get("min").number : 0, hi = hasMax ? b.get("max").number : 0;
  DType t = *c.out;
  // A NaN bound makes every element NaN in ATen (max/min below would keep x); an integer tensor's
  // out-of-range bound raises there. Both stay extern calls.
  if ((hasMin && (std::isnan(lo) || !scalarFits(lo, t))) || (hasMax && (std::isnan(hi) || !scalarFits(hi, t)))) {
    return none(c, "a NaN clamp bound or one outside the tensor's dtype");
  }
  return pointwise({b.get("self")}, t, t, [=](const std::vector<E>& v) {
    E r = v[0];
    if (hasMin) r = bin(BinaryOp::kMax, r, num(t, lo));
    if (hasMax) r = bin(BinaryOp::kMin, r, num(t, hi));
    return r;
  }, c.why);
}

std::optional<LValue> lowerCompare(const std::string& op, const Bound& b, const Ctx& c) {
  if (!b.has("self") || !b.has("other") || c.out != DType::kBool) return none(c, "comparison operands");
  const LValue &x = b.get("self"), &y = b.get("other");
  if (!isTensor(x) && !isTensor(y)) return none(c, "no tensor operand");
  auto rt = resultType({&x, &y});
  if (!rt) return none(c, "promotion");
  static const std::unordered_map<std::string, BinaryOp> kOps = {
      {"eq", BinaryOp::kEq}, {"ne", BinaryOp::kNe}, {"lt", BinaryOp::kLt},
      {"le", BinaryOp::kLe}, {"gt", BinaryOp::kGt}, {"ge", BinaryOp::kGe}};
  BinaryOp bo = kOps.at(op);
  return pointwise({x, y}, *rt, DType::kBool, [bo](const std::vector<E>& v) { return bin(bo, v[0], v[1]); }, c.why);
}

std::optional<LValue> lowerMaxMin(const std::string& op, const Bound& b, const Ctx& c) {
  if (!b.has("self") || !b.has("other") || !isTensor(b.get("self")) || !isTensor(b.get("other")) || !c.out) {
    return none(c, "operands");
  }
  const LValue &x = b.get("self"), &y = b.get("other");
  auto rt = resultType({&x, &y});
  if (!rt || *rt != *c.out || *rt == DType::kBool) return none(c, "dtype");
  BinaryOp bo = op == "maximum" ? (isFloating(*rt) ? BinaryOp::kMaxNan : BinaryOp::kMax)
                                : (isFloating(*rt) ? BinaryOp::kMinNan : BinaryOp::kMin);
  return pointwise({x, y}, *rt, *rt, [bo](const std::vector<E>& v) { return bin(bo, v[0], v[1]); }, c.why);
}

std::optional<LValue> lowerWhere(const Bound& b, const Ctx& c) {
  if (!b.has("condition") || !b.has("self") || !b.has("other") || !c.out) return none(c, "where takes 3 arguments here");
  const LValue &cond = b.get("condition"), &x = b.get("self"), &y = b.get("other");
  if (!isTensor(cond) || cond.dtype != DType::kBool) return none(c, "condition must be a bool tensor");
  auto rt = resultType({&x, &y});
  if (!rt || *rt != *c.out) return none(c, "dtype");
  DType t = *c.out;
  for (const LValue* v : {&x, &y}) {
    if (isNumber(*v) && !scalarFits(v->number, t)) return none(c, "a scalar outside the result's dtype");
  }
  LValue cnd = cond;
  return pointwise({cnd, x, y}, t, t, [](const std::vector<E>& v) {
    return ExprNode::makeWhere(ExprNode::makeCast(DType::kBool, v[0]), v[1], v[2]);
  }, c.why);
}

std::optional<LValue> lowerConvert(const std::string& op, const Bound& b, const Ctx& c) {
  if (!b.has("self") || !isTensor(b.get("self")) || !c.out) return none(c, "operand");
  LValue x = b.get("self");
  DType out = *c.out;
  if (op == "_to_copy") {
    if (b.has("device") && b.get("device").text != "cpu") return none(c, "device change");
    if (b.has("layout") && b.get("layout").text != "torch.strided") return none(c, "layout");
  } else if (op == "to") {
    if (!b.has("dtype") || b.get("dtype").kind != LValue::Kind::kText) return none(c, "to() other than to(dtype)");
  }
  bool aliasing = (op == "to" || op == "float" || op == "double" || op == "int" || op == "long" ||
                   op == "bool") && out == x.dtype;
  LValue r = x;
  r.dtype = out;
  r.buffer = -1;
  r.isView = aliasing;
  if (aliasing) {
    r.buffer = x.buffer;
    return r;
  }
  auto fn = x.fn;
  r.fn = [fn, out](const IndexVec& idx) { return ExprNode::makeCast(out, fn(idx)); };
  return r;
}

std::optional<LValue> lowerReduction(const std::string& op, const Bound& b, const Ctx& c) {
  if (!b.has("self") || !isTensor(b.get("self")) || !c.out) return none(c, "operand");
  const LValue& x = b.get("self");
  DType out = *c.out;
  LValue dimArg = b.has("dim") ? b.get("dim") : LValue();
  auto dims = dimList(dimArg, x.shape.size(), true);
  if (!dims) return none(c, "dim argument");
  bool keepdim = b.has("keepdim") && b.get("keepdim").number != 0;
  int64_t n = 1;
  for (int d : *dims) n *= x.shape[d];
  LValue in = x;
  auto fn = x.fn;
  in.fn = [fn, out](const IndexVec& idx) { return ExprNode::makeCast(out, fn(idx)); };
  in.dtype = out;
  const std::string& name = c.node.name();
  if (op == "sum") {
    if (out == DType::kBool) return none(c, "bool sum");
    return c.lc.reduce(in, *dims, keepdim, ReduceOp::kSum, out, nullptr, name);
  }
  if (op == "mean") {
    if (!isFloating(out)) return none(c, "mean of a non-floating dtype");
    return c.lc.reduce(in, *dims, keepdim, ReduceOp::kSum, out,
                       [out, n](E acc) { return bin(BinaryOp::kDiv, acc, num(out, static_cast<double>(n))); }, name);
  }
  if (out != x.dtype || out == DType::kBool) return none(c, "dtype");
  for (int d : *dims) {
    if (x.shape[d] == 0) return none(c, "amax/amin over an empty dimension (eager raises)");
  }
  if (x.shape.empty() || n == 0) return none(c, "amax/amin of an empty tensor");
  return c.lc.reduce(in, *dims, keepdim, op == "amax" ? ReduceOp::kMax : ReduceOp::kMin, out, nullptr, name);
}

// Eval-mode batch norm over dim 1, as ATen's CPU inference kernel computes it:
// alpha = weight / sqrt(var + eps), beta = bias - mean * alpha, out = x * alpha + beta.
std::optional<LValue> lowerBatchNorm(const Bound& b, const Ctx& c) {
  if (!b.has("self") || !isTensor(b.get("self")) || !b.has("running_mean") || !b.has("running_var")) {
    return none(c, "batch_norm without running statistics");
  }
  if (b.has("training") && b.get("training").number != 0) return none(c, "training-mode batch_norm");
  const LValue& x = b.get("self");
  DType t = x.dtype;
  if (!isFloating(t) || x.shape.size() < 2 || c.out != t) return none(c, "batch_norm dtype or rank");
  int64_t channels = x.shape[1];
  std::vector<LValue> stats;
  for (const char* k : {"running_mean", "running_var", "weight", "bias"}) {
    if (!b.has(k)) {
      stats.push_back(LValue());
      continue;
    }
    const LValue& v = b.get(k);
    if (!isTensor(v) || v.dtype != t || v.shape != std::vector<int64_t>{channels}) return none(c, "batch_norm statistics");
    stats.push_back(v);
  }
  double eps = b.has("eps") ? b.get("eps").number : 1e-5;
  LValue r = x;
  r.buffer = -1;
  r.isView = false;
  auto xf = x.fn;
  r.fn = [xf, stats, t, eps](const IndexVec& idx) {
    IndexVec ch = {idx[1]};
    E invstd = un(UnaryOp::kReciprocal, un(UnaryOp::kSqrt, bin(BinaryOp::kAdd, stats[1].fn(ch), num(t, eps))));
    E alpha = stats[2].kind == LValue::Kind::kTensor ? bin(BinaryOp::kMul, invstd, stats[2].fn(ch)) : invstd;
    E beta0 = stats[3].kind == LValue::Kind::kTensor ? stats[3].fn(ch) : num(t, 0);
    E beta = bin(BinaryOp::kSub, beta0, bin(BinaryOp::kMul, stats[0].fn(ch), alpha));
    return bin(BinaryOp::kAdd, bin(BinaryOp::kMul, xf(idx), alpha), beta);
  };
  return r;
}

// A composite reads its input 3-4 times: an input that is more than a few loads and operations
// is computed once into an intermediate (which fusion keeps in the same kernel as a prologue).
LValue cheapInput(const LValue& x, const Ctx& c) {
  if (x.buffer >= 0) return x;
  int size = x.fn(identityIndex(x.shape.size(), x.shape.size()))->size();
  return size > 2 ? c.lc.materialize(x, c.node.name()) : x;
}

std::optional<LValue> lowerSoftmax(bool log, const Bound& b, const Ctx& c) {
  if (!b.has("self") || !isTensor(b.get("self")) || !b.has("dim") || !c.out || !isFloating(*c.out)) {
    return none(c, "softmax operands");
  }
  LValue x = b.get("self");
  if (x.shape.empty() || !isNumber(b.get("dim"))) return none(c, "softmax of a 0-d tensor");
  if (b.has("half_to_float") && b.get("half_to_float").number != 0) return none(c, "half_to_float");
  DType t = *c.out;
  x = cheapInput(x, c);
  auto fn0 = x.fn;
  x.fn = [fn0, t](const IndexVec& idx) { return ExprNode::makeCast(t, fn0(idx)); };
  x.dtype = t;
  int d = normDim(static_cast<int64_t>(b.get("dim").number), x.shape.size());
  if (d < 0 || d >= static_cast<int>(x.shape.size())) return none(c, "dim");
  const std::string& name = c.node.name();
  LValue m = c.lc.reduce(x, {d}, true, ReduceOp::kMax, t, nullptr, name);
  auto xf = x.fn, mf = m.fn;
  auto mshape = m.shape;
  auto shifted = [xf, mf, mshape](const IndexVec& idx) {
    return bin(BinaryOp::kSub, xf(idx), mf(broadcastIndex(idx, mshape)));
  };
  LValue e = x;
  e.fn = [shifted](const IndexVec& idx) { return un(UnaryOp::kExp, shifted(idx)); };
  LValue s = c.lc.reduce(e, {d}, true, ReduceOp::kSum, t, nullptr, name);
  auto sf = s.fn;
  auto ef = e.fn;
  LValue r = x;
  r.buffer = -1;
  if (log) {
    r.fn = [shifted, sf, mshape](const IndexVec& idx) {
      return bin(BinaryOp::kSub, shifted(idx), un(UnaryOp::kLog, sf(broadcastIndex(idx, mshape))));
    };
  } else {
    r.fn = [ef, sf, mshape](const IndexVec& idx) {
      return bin(BinaryOp::kDiv, ef(idx), sf(broadcastIndex(idx, mshape)));
    };
  }
  return r;
}

std::optional<LValue> lowerLayerNorm(bool native, const Bound& b, const Ctx& c) {
  if (!b.has("self") || !isTensor(b.get("self")) || !b.has("normalized_shape")) return none(c, "operands");
  LValue x = b.get("self");
  const LValue& ns = b.get("normalized_shape");
  if (!isFloating(x.dtype) || ns.kind != LValue::Kind::kTuple) return none(c, "layer_norm dtype");
  size_t k = ns.items.size();
  if (k == 0 || k > x.shape.size()) return none(c, "normalized_shape");
  std::vector<int> dims;
  int64_t n = 1;
  for (size_t i = 0; i < k; ++i) {
    size_t d = x.shape.size() - k + i;
    if (!isNumber(ns.items[i]) || static_cast<int64_t>(ns.items[i].number) != x.shape[d]) return none(c, "normalized_shape");
    dims.push_back(static_cast<int>(d));
    n *= x.shape[d];
  }
  if (n == 0) return none(c, "layer_norm over an empty shape");
  DType t = x.dtype;
  x = cheapInput(x, c);
  std::optional<LValue> w, bias;
  for (const char* key : {"weight", "bias"}) {
    if (!b.has(key)) continue;
    const LValue& v = b.get(key);
    if (!isTensor(v) || v.dtype != t || v.shape.size() != k) return none(c, "weight/bias");
    (std::string(key) == "weight" ? w : bias) = v;
  }
  double eps = b.has("eps") ? b.get("eps").number : 1e-5;
  const std::string& name = c.node.name();
  double nd = static_cast<double>(n);
  LValue mean = c.lc.reduce(x, dims, true, ReduceOp::kSum, t,
                            [t, nd](E acc) { return bin(BinaryOp::kDiv, acc, num(t, nd)); }, name);
  auto xf = x.fn, mf = mean.fn;
  auto mshape = mean.shape;
  auto centered = [xf, mf, mshape](const IndexVec& idx) {
    return bin(BinaryOp::kSub, xf(idx), mf(broadcastIndex(idx, mshape)));
  };
  LValue sq = x;
  sq.fn = [centered](const IndexVec& idx) { E d = centered(idx); return bin(BinaryOp::kMul, d, d); };
  LValue var = c.lc.reduce(sq, dims, true, ReduceOp::kSum, t,
                           [t, nd](E acc) { return bin(BinaryOp::kDiv, acc, num(t, nd)); }, name);
  auto vf = var.fn;
  auto rstdAt = [vf, t, eps](const IndexVec& idx) {
    return un(UnaryOp::kRsqrt, bin(BinaryOp::kAdd, vf(idx), num(t, eps)));
  };
  LValue out = x;
  out.buffer = -1;
  out.fn = [=](const IndexVec& idx) {
    E r = bin(BinaryOp::kMul, centered(idx), rstdAt(broadcastIndex(idx, mshape)));
    IndexVec tail(idx.end() - static_cast<long>(k), idx.end());
    if (w) r = bin(BinaryOp::kMul, r, w->fn(broadcastIndex(tail, w->shape)));
    if (bias) r = bin(BinaryOp::kAdd, r, bias->fn(broadcastIndex(tail, bias->shape)));
    return r;
  };
  if (!native) return out;
  LValue rstd = mean;
  rstd.buffer = -1;
  rstd.fn = rstdAt;
  LValue tuple;
  tuple.kind = LValue::Kind::kTuple;
  tuple.items = {out, mean, rstd};
  return tuple;
}

// var_mean(x, [dims], correction=c, keepdim=True) -> (var, mean), as the layer_norm decomposition
// writes it: the mean, then the centred sum of squares over N - c (two passes over each row, as
// lowerLayerNorm computes them; ATen's CPU var_mean is a slower Welford loop). Only a list of
// dims and keepdim=True are lowered (a bare positional bool would be var_mean(x, unbiased)).
std::optional<LValue> lowerVarMean(const Bound& b, const Ctx& c) {
  if (!b.has("self") || !isTensor(b.get("self"))) return none(c, "operand");
  LValue x = b.get("self");
  DType t = x.dtype;
  if (!isFloating(t)) return none(c, "var_mean of a non-floating dtype");
  if (!b.has("dim") || b.get("dim").kind != LValue::Kind::kTuple) return none(c, "var_mean without a list of dims");
  if (!b.has("keepdim") || b.get("keepdim").number == 0) return none(c, "var_mean without keepdim");
  auto dims = dimList(b.get("dim"), x.shape.size(), true);
  if (!dims || dims->empty()) return none(c, "dim argument");
  double correction = 1;
  if (b.has("correction")) {
    if (!isNumber(b.get("correction"))) return none(c, "correction");
    correction = b.get("correction").number;
  } else if (b.has("unbiased")) {
    if (!isNumber(b.get("unbiased"))) return none(c, "unbiased");
    correction = b.get("unbiased").number != 0 ? 1 : 0;
  }
  int64_t n = 1;
  for (int d : *dims) n *= x.shape[d];
  double nd = static_cast<double>(n), denom = nd - correction;
  if (n == 0 || denom <= 0) return none(c, "var_mean with N - correction <= 0 (eager gives inf/nan)");
  x = cheapInput(x, c);
  const std::string& name = c.node.name();
  LValue mean = c.lc.reduce(x, *dims, true, ReduceOp::kSum, t,
                            [t, nd](E acc) { return bin(BinaryOp::kDiv, acc, num(t, nd)); }, name);
  auto xf = x.fn, mf = mean.fn;
  auto mshape = mean.shape;
  LValue sq = x;
  sq.fn = [xf, mf, mshape](const IndexVec& idx) {
    E d = bin(BinaryOp::kSub, xf(idx), mf(broadcastIndex(idx, mshape)));
    return bin(BinaryOp::kMul, d, d);
  };
  LValue var = c.lc.reduce(sq, *dims, true, ReduceOp::kSum, t,
                           [t, denom](E acc) { return bin(BinaryOp::kDiv, acc, num(t, denom)); }, name);
  LValue tuple;
  tuple.kind = LValue::Kind::kTuple;
  tuple.items = {var, mean};
  return tuple;
}

std::optional<LValue> lowerView(const std::string& op, const Bound& b, const Ctx& c) {
  if (!b.has("self") || !isTensor(b.get("self"))) return none(c, "operand");
  const LValue& x = b.get("self");
  LValue r = x;
  r.isView = true;
  r.buffer = -1;
  auto fn = x.fn;
  size_t rank = x.shape.size();
  if (op == "alias" || op == "detach" || op == "contiguous") {
    r.buffer = x.buffer;
    return r;
  }
  if (op == "expand") {
    const LValue& size = b.get("size");
    if (size.kind != LValue::Kind::kTuple || size.items.size() < rank) return none(c, "expand size");
    std::vector<int64_t> shape;
    size_t lead = size.items.size() - rank;
    for (size_t i = 0; i < size.items.size(); ++i) {
      int64_t s = static_cast<int64_t>(size.items[i].number);
      if (s == -1 && i >= lead) s = x.shape[i - lead];
      if (s < 0 || (i >= lead && x.shape[i - lead] != 1 && x.shape[i - lead] != s)) return none(c, "expand size");
      shape.push_back(s);
    }
    auto xshape = x.shape;
    r.shape = shape;
    r.fn = [fn, xshape](const IndexVec& idx) { return fn(broadcastIndex(idx, xshape)); };
    return r;
  }
  std::vector<int> perm(rank);
  for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int>(i);
  if (op == "permute") {
    const LValue& dims = b.get("dims");
    if (dims.kind != LValue::Kind::kTuple || dims.items.size() != rank) return none(c, "permute dims");
    for (size_t i = 0; i < rank; ++i) perm[i] = normDim(static_cast<int64_t>(dims.items[i].number), rank);
  } else if (op == "t" || op == "transpose") {
    if (op == "t" && rank < 2) return r;
    int d0 = op == "t" ? 0 : normDim(static_cast<int64_t>(b.get("dim0").number), rank);
    int d1 = op == "t" ? 1 : normDim(static_cast<int64_t>(b.get("dim1").number), rank);
    if (d0 < 0 || d1 < 0 || d0 >= static_cast<int>(rank) || d1 >= static_cast<int>(rank)) return none(c, "dims");
    std::swap(perm[d0], perm[d1]);
  } else if (op == "unsqueeze") {
    int d = static_cast<int>(b.get("dim").number);
    if (d < 0) d += static_cast<int>(rank) + 1;
    if (d < 0 || d > static_cast<int>(rank)) return none(c, "unsqueeze dim");
    r.shape.insert(r.shape.begin() + d, 1);
    r.fn = [fn, d](const IndexVec& idx) {
      IndexVec in = idx;
      in.erase(in.begin() + d);
      return fn(in);
    };
    return r;
  } else {  // view / _unsafe_view / reshape of a contiguous buffer
    if (x.buffer < 0) return none(c, "view of a value that is not in memory");
    const Buffer& buf = c.lc.buffer(x.buffer);
    if (buf.strides != contiguousStrides(buf.shape) || buf.shape != x.shape) return none(c, "view of a non-contiguous buffer");
    const LValue& size = b.get("size");
    if (size.kind != LValue::Kind::kTuple) return none(c, "view size");
    std::vector<int64_t> shape;
    int64_t known = 1, numel = buf.numel();
    int infer = -1;
    for (size_t i = 0; i < size.items.size(); ++i) {
      int64_t s = static_cast<int64_t>(size.items[i].number);
      if (s == -1) infer = static_cast<int>(i);
      else known *= s;
      shape.push_back(s);
    }
    if (infer >= 0) {
      if (known == 0) return none(c, "view size");
      shape[infer] = numel / known;
    }
    int64_t total = 1;
    for (int64_t s : shape) total *= s;
    if (total != numel) return none(c, "view size");
    LValue v = bufferValue(x.buffer, x.dtype, shape, contiguousStrides(shape));
    v.isView = true;
    v.buffer = -1;
    return v;
  }
  std::vector<bool> seen(rank, false);
  for (int p : perm) {
    if (p < 0 || p >= static_cast<int>(rank) || seen[p]) return none(c, "permutation");
    seen[p] = true;
  }
  r.shape.clear();
  for (int p : perm) r.shape.push_back(x.shape[p]);
  r.fn = [fn, perm](const IndexVec& idx) {
    IndexVec in(idx.size());
    for (size_t i = 0; i < perm.size(); ++i) in[perm[i]] = idx[i];
    return fn(in);
  };
  return r;
}

const std::vector<std::string>& paramsOf(const std::string& op, bool aten) {
  static const std::unordered_map<std::string, std::vector<std::string>> kParams = {
      {"add", {"self", "other", "alpha"}}, {"sub", {"self", "other", "alpha"}},
      {"rsub", {"self", "other", "alpha"}}, {"mul", {"self", "other"}},
      {"div", {"self", "other", "rounding_mode"}}, {"pow", {"self", "exponent"}},
      {"gelu", {"self", "approximate"}}, {"clamp", {"self", "min", "max"}},
      {"clamp_min", {"self", "min"}}, {"clamp_max", {"self", "max"}},
      {"maximum", {"self", "other"}}, {"minimum", {"self", "other"}},
      {"where", {"condition", "self", "other"}}, {"eq", {"self", "other"}},
      {"ne", {"self", "other"}}, {"lt", {"self", "other"}}, {"le", {"self", "other"}},
      {"gt", {"self", "other"}}, {"ge", {"self", "other"}},
      {"_to_copy", {"self", "dtype", "layout", "device", "pin_memory", "non_blocking", "memory_format"}},
      {"to", {"self", "dtype"}}, {"clone", {"self", "memory_format"}},
      {"convert_element_type", {"self", "dtype"}},
      {"sum", {"self", "dim", "keepdim", "dtype"}}, {"mean", {"self", "dim", "keepdim", "dtype"}},
      {"amax", {"self", "dim", "keepdim"}}, {"amin", {"self", "dim", "keepdim"}},
      {"var_mean", {"self", "dim", "unbiased", "keepdim", "correction"}},
      {"_softmax", {"self", "dim", "half_to_float"}}, {"_log_softmax", {"self", "dim", "half_to_float"}},
      {"softmax", {"self", "dim", "dtype"}}, {"log_softmax", {"self", "dim", "dtype"}},
      {"native_layer_norm", {"self", "normalized_shape", "weight", "bias", "eps"}},
      {"layer_norm", {"self", "normalized_shape", "weight", "bias", "eps", "cudnn_enable"}},
      {"getitem", {"self", "index"}}, {"expand", {"self", "size", "implicit"}},
      {"permute", {"self", "dims"}}, {"transpose", {"self", "dim0", "dim1"}},
      {"unsqueeze", {"self", "dim"}}, {"view", {"self", "size"}}, {"_unsafe_view", {"self", "size"}},
      {"reshape", {"self", "size"}},
      {"scalar_tensor", {"self", "dtype", "layout", "device", "pin_memory"}},
      {"hardtanh", {"self", "min_val", "max_val", "inplace"}},
      {"F_dropout", {"self", "p", "training", "inplace"}},
      {"F_batch_norm", {"self", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"}}};
  static const std::vector<std::string> kSelf = {"self"};
  (void)aten;
  auto it = kParams.find(op);
  return it == kParams.end() ? kSelf : it->second;
}

// view(2, 3) / permute(1, 0) as methods take varargs: gather them into one tuple.
Args gatherVarargs(const std::string& op, const Args& args) {
  static const std::unordered_set<std::string> kVar = {"view", "reshape", "permute", "expand"};
  if (!kVar.count(op) || args.size() < 2 || !isNumber(args[1])) return args;
  LValue t;
  t.kind = LValue::Kind::kTuple;
  t.items.assign(args.begin() + 1, args.end());
  return {args[0], t};
}

}  // namespace

// True when a (a positional node argument of n) was given to the lowering as a number read at
// call time.
static bool isScalarArg(const core::Arg& a, const Args& args0, const core::Node& n) {
  for (size_t i = 0; i < n.args().size() && i < args0.size(); ++i)
    if (&n.args()[i] == &a) return args0[i].kind == LValue::Kind::kScalar;
  return false;
}

static bool containsScalar(const LValue& v) {
  if (v.kind == LValue::Kind::kScalar) return true;
  for (const LValue& item : v.items)
    if (containsScalar(item)) return true;
  return false;
}

static bool hasInexactInt(const LValue& v) {
  if (v.kind == LValue::Kind::kNumber && v.dtype == DType::kInt64 && std::fabs(v.number) >= 9007199254740992.0) return true;
  for (const LValue& item : v.items)
    if (hasInexactInt(item)) return true;
  return false;
}

// A number read at call time is taken only as an operand of pointwise arithmetic (add, sub, mul,
// div, rsub: self / other), where it is a run-time kernel argument. Everywhere else (an alpha, a
// clamp bound, a dim, a size, an exponent the lowering specialises on) a lowering would bake its
// value in: the node stays an extern call, which takes the value as it is at call time.
static bool scalarsOnlyAsOperands(const std::string& op, const Bound& b, std::string* why) {
  bool arith = op == "add" || op == "sub" || op == "mul" || op == "div" || op == "rsub";
  for (const auto& [k, v] : b.values) {
    if (!containsScalar(v)) continue;
    if (arith && (k == "self" || k == "other") && v.kind == LValue::Kind::kScalar) continue;
    *why = "argument '" + k + "' is a Python number read at call time (kernels take one only as an operand of "
           "add, sub, mul or div)";
    return false;
  }
  return true;
}

std::optional<LValue> lowerNode(const core::Node& n, const Args& args0, const KwArgs& kwargs,
                                LoweringContext& lc, std::string* why, const std::string& asOp) {
  std::string op = asOp.empty() ? canonicalOp(n) : asOp;
  bool aten = n.op() == core::NodeOp::kCallFunction && n.target().kind() == core::TargetKind::kAtenOp;
  Ctx c{n, lc, why, std::nullopt, aten};
  if (n.meta().tensor) {
    if (n.meta().tensor->device != "cpu") return none(c, "device " + n.meta().tensor->device + " (CPU kernels only)");
    c.out = dtypeFromTorch(n.meta().tensor->dtype);
    if (!c.out) return none(c, "dtype " + n.meta().tensor->dtype);
  }
  Args args = gatherVarargs(op, args0);
  Bound b;
  std::unordered_map<std::string, std::string> ignore = {
      {"inplace", "false"}, {"_stacklevel", "*"}, {"memory_format", "torch.preserve_format"},
      {"non_blocking", "false"}, {"pin_memory", "false"}, {"copy", "false"}};
  if (op == "softmax" || op == "log_softmax") ignore["dtype"] = "";
  if (!asOp.empty()) ignore["inplace"] = "*";  // an in-place op lowered functionally
  if (!bindArgs(paramsOf(op, aten), args, kwargs, &b, why, ignore)) return std::nullopt;
  if (!scalarsOnlyAsOperands(op, b, why)) return std::nullopt;
  for (const auto& [k, v] : b.values) {
    // Numbers travel as doubles: an int from 2^53 on may have lost its low bits, and even a float
    // result then differs (ATen converts the exact int64: (float)(2^53 + 2^29 + 1) is 2^53 + 2^30,
    // through a double it is 2^53). A number read at call time (kScalar) is exact.
    if (hasInexactInt(v)) return none(c, "argument '" + k + "' is an integer beyond 2^53 (not exact as a double)");
  }
  for (const auto& [k, v] : b.values) {
    if (isTensor(v) && v.fn == nullptr) return none(c, "argument '" + k + "' is not a CPU tensor the generator reads");
    if (v.kind == LValue::Kind::kNone && v.text == "?") return none(c, "argument '" + k + "'");
  }
  // Tensor arguments whose memory the generator cannot read are kNone: extern.
  for (const core::Arg& a : n.args()) {
    if (a.isNode() && !a.asNode()->meta().tensor && op != "getitem" && !isScalarArg(a, args0, n)) {
      return none(c, "non-tensor node argument");
    }
  }
  if (b.has("self") && isTensor(b.get("self")) && b.get("self").kind == LValue::Kind::kTensor &&
      b.values.at("self").fn == nullptr) {
    return none(c, "input");
  }
  if (op == "add" || op == "sub" || op == "mul" || op == "div" || op == "rsub") return lowerArith(op, b, c);
  if (op == "gelu") return lowerGelu(b, c);
  if (op == "pow") return lowerPow(b, c);
  if (op == "clamp" || op == "clamp_min" || op == "clamp_max") return lowerClamp(op, b, c);
  if (op == "hardtanh") {  // F.hardtanh(x, min_val, max_val): clamp (ReLU6 in mobilenets)
    if (asOp.empty() && b.has("inplace") && b.get("inplace").number != 0) return none(c, "in-place hardtanh");
    Bound cb;
    cb.values["self"] = b.has("self") ? b.get("self") : LValue();
    LValue lo, hi;
    lo.kind = hi.kind = LValue::Kind::kNumber;
    lo.dtype = hi.dtype = DType::kFloat64;
    lo.number = -1, hi.number = 1;
    if (b.has("min_val")) lo = b.get("min_val");
    if (b.has("max_val")) hi = b.get("max_val");
    cb.values["min"] = lo;
    cb.values["max"] = hi;
    return lowerClamp("clamp", cb, c);
  }
  if (op == "eq" || op == "ne" || op == "lt" || op == "le" || op == "gt" || op == "ge") return lowerCompare(op, b, c);
  if (op == "maximum" || op == "minimum") return lowerMaxMin(op, b, c);
  if (op == "where") return lowerWhere(b, c);
  if (op == "_to_copy" || op == "to" || op == "float" || op == "double" || op == "int" ||
      op == "long" || op == "bool" || op == "clone" || op == "convert_element_type") {
    return lowerConvert(op, b, c);
  }
  if (op == "sum" || op == "mean" || op == "amax" || op == "amin") return lowerReduction(op, b, c);
  if (op == "_softmax" || op == "softmax") return lowerSoftmax(false, b, c);
  if (op == "_log_softmax" || op == "log_softmax") return lowerSoftmax(true, b, c);
  if (op == "native_layer_norm" || op == "layer_norm") return lowerLayerNorm(op == "native_layer_norm", b, c);
  if (op == "F_batch_norm") return lowerBatchNorm(b, c);
  if (op == "var_mean") return lowerVarMean(b, c);
  if (op == "F_dropout") {
    // eval mode (training=False given): ATen returns its input itself, so it is lowered as an
    // alias (a view: only when the result does not escape)
    if (!b.has("self") || !isTensor(b.get("self"))) return none(c, "dropout operand");
    if (!b.has("training") || b.get("training").kind != LValue::Kind::kNumber || b.get("training").number != 0) {
      return none(c, "dropout in training mode (random)");
    }
    if (b.has("inplace") && (b.get("inplace").kind != LValue::Kind::kNumber || b.get("inplace").number != 0)) {
      return none(c, "in-place dropout");
    }
    LValue r = b.get("self");
    r.isView = true;
    return r;
  }
  if (op == "cat") return none(c, "cat other than of tensors of the result's dtype and rank (lowering.cpp)");
  if (op == "getitem") {
    if (!b.has("self") || b.get("self").kind != LValue::Kind::kTuple || !b.has("index") || !isNumber(b.get("index"))) {
      return none(c, "getitem of something other than a lowered tuple");
    }
    const auto& items = b.get("self").items;
    int64_t i = static_cast<int64_t>(b.get("index").number);
    if (i < 0 || i >= static_cast<int64_t>(items.size())) return none(c, "getitem index");
    return items[i];
  }
  if (isViewOp(op)) return lowerView(op, b, c);
  if (op == "scalar_tensor") {  // a 0-d constant (make_fx writes where(c, x, 0.5) this way)
    if (!b.has("self") || !isNumber(b.get("self")) || !c.out) return none(c, "scalar_tensor value");
    if (b.has("device") && b.get("device").text != "cpu") return none(c, "device");
    LValue r;
    r.kind = LValue::Kind::kTensor;
    r.dtype = *c.out;
    double v = b.get("self").number;
    DType t = *c.out;
    r.fn = [t, v](const IndexVec&) { return ExprNode::makeConst(t, v); };
    return r;
  }
  if (!b.has("self") || !isTensor(b.get("self"))) return none(c, "operand is not a tensor the generator reads");
  return lowerUnary(op, b, c);
}

}  // namespace dynamo::codegen::detail

namespace dynamo::codegen {

bool replacesStorage(const core::Node& n) {
  const std::string name = detail::bareCallName(n);
  return name == "resize_" || name == "resize_as_" || name == "set_";
}

}  // namespace dynamo::codegen
