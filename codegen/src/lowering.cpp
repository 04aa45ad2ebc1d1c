// The lowering driver: walks the graph body in order, lowers each node it can (lower_ops.cpp)
// into a value that users inline, and decides which values must exist in memory:
//
//   - reductions (always: a kernel stage stores them, fusion may keep them in a register);
//   - values a graph output or an extern step needs (they escape: kOutput buffers; a pooling
//     extern's argument may stay in the arena: it returns a fresh tensor);
//   - values with several users whose expression is not cheap (kIntermediate: arena memory).
//
// Unsupported nodes become extern steps. When the graph holds an extern that may mutate memory
// (in-place ops, setitem, out=), every pending value is materialised before it, views are not
// lowered, and fusion does not reorder work across it.
#include <algorithm>
#include <functional>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "dynamo/common/error.h"
#include "lowering_internal.h"

namespace dynamo::codegen {
namespace detail {

std::vector<int64_t> contiguousStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) {
    st[i] = st[i + 1] * std::max<int64_t>(shape[i + 1], 1);
  }
  return st;
}

IndexVec identityIndex(size_t rank, size_t nvars) {
  IndexVec idx(rank);
  for (size_t i = 0; i < rank; ++i) {
    idx[i].coeffs.assign(nvars, 0);
    if (i < nvars) idx[i].coeffs[i] = 1;
  }
  return idx;
}

IndexVec broadcastIndex(const IndexVec& idx, const std::vector<int64_t>& shape) {
  IndexVec out(shape.size());
  size_t nvars = idx.empty() ? 0 : idx[0].coeffs.size();
  size_t lead = idx.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) {
      out[d].coeffs.assign(nvars, 0);
    } else {
      out[d] = idx[lead + d];
    }
  }
  return out;
}

LValue bufferValue(int buffer, DType t, const std::vector<int64_t>& shape,
                   const std::vector<int64_t>& strides) {
  LValue v;
  v.kind = LValue::Kind::kTensor;
  v.dtype = t;
  v.shape = shape;
  v.buffer = buffer;
  v.fn = [buffer, t, strides, shape](const IndexVec& idx) {
    Affine a;
    a.coeffs.assign(idx.empty() ? 0 : idx[0].coeffs.size(), 0);
    for (size_t d = 0; d < idx.size(); ++d) {
      if (shape[d] == 1) continue;  // size-1 dims: any stride, index 0
      a.offset += strides[d] * idx[d].offset;
      for (size_t v2 = 0; v2 < a.coeffs.size(); ++v2) a.coeffs[v2] += strides[d] * idx[d].coeffs[v2];
    }
    return ExprNode::makeLoad(buffer, t, a);
  };
  return v;
}

namespace {

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// True when the node may write memory: in-place methods and ops, setitem, in-place operators,
// inplace=True or out= arguments.
bool mayMutate(const core::Node& n) {
  for (const auto& [k, v] : n.kwargs()) {
    if (k == "out") return true;
  }
  if (inplaceFlag(n)) return true;  // inplace=True, or positional (nn.Hardswish(inplace=True))
  std::string name;
  if (n.op() == core::NodeOp::kCallMethod) {
    name = n.method();
  } else if (n.op() == core::NodeOp::kCallFunction) {
    const core::Target& t = n.target();
    if (t.kind() == core::TargetKind::kAtenOp) {
      std::string s = t.schemaName();
      std::string op = s.substr(s.find("::") + 2);
      op = op.substr(0, op.find('.'));
      if (endsWith(op, "_") || t.overloadName().find("out") != std::string::npos) return true;
      return false;
    }
    name = t.qualifiedName();
    name = name.substr(name.rfind('.') + 1);
    if (name.size() > 1 && name[0] == 'i' && t.qualifiedName().find("operator.") != std::string::npos &&
        name != "is_" && name != "is_not" && name != "index" && name != "invert") {
      return true;  // operator.iadd, operator.imul, ...
    }
    if (name == "setitem" || name == "__setitem__") return true;
  }
  if (name.size() > 4 && name.substr(0, 2) == "__" && endsWith(name, "__")) {
    return name == "__setitem__" || (name.size() > 5 && name[2] == 'i' && name != "__index__" &&
                                     name != "__invert__" && name != "__int__" && name != "__iter__");
  }
  return endsWith(name, "_") && !endsWith(name, "__");
}

bool denseStrides(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  if (shape.size() != strides.size()) return false;
  std::vector<size_t> order(shape.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  int64_t expect = 1;
  for (size_t i : order) {
    if (shape[i] == 1) continue;
    if (strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

// The common refinement of two row-major shapes of one numel (size-1 dims dropped): the sizes
// of the finest dims that each dim of either shape is a run of, or empty when there is none
// ([6, 4] -> [4, 6]). [128, 128, 64] -> [128, 16, 512] refines to [128, 16, 8, 64].
std::vector<int64_t> commonRefinement(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::set<int64_t, std::greater<>> cuts;  // suffix products of both shapes
  for (const auto* s : {&a, &b}) {
    int64_t p = 1;
    cuts.insert(1);
    for (auto it = s->rbegin(); it != s->rend(); ++it) {
      if (*it <= 0) return {};
      cuts.insert(p *= *it);
    }
  }
  std::vector<int64_t> sizes;
  for (auto it = cuts.begin(); std::next(it) != cuts.end(); ++it) {
    if (*it % *std::next(it) != 0) return {};
    sizes.push_back(*it / *std::next(it));
  }
  return sizes;
}

// Per dim of `shape`: the coefficient of each refined dim in that dim's index (0 outside it).
std::vector<std::vector<int64_t>> refinedCoeffs(const std::vector<int64_t>& shape,
                                                const std::vector<int64_t>& refined) {
  std::vector<int64_t> inner(refined.size(), 1);  // product of the refined dims after k
  for (int k = static_cast<int>(refined.size()) - 2; k >= 0; --k) inner[k] = inner[k + 1] * refined[k + 1];
  std::vector<std::vector<int64_t>> out(shape.size(), std::vector<int64_t>(refined.size(), 0));
  int64_t after = 1;  // product of shape's dims after d
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    for (size_t k = 0; k < refined.size(); ++k) {
      if (shape[d] > 1 && inner[k] >= after && inner[k] < after * shape[d]) out[d][k] = inner[k] / after;
    }
    after *= shape[d];
  }
  return out;
}

class Lowerer final : public LoweringContext {
 public:
  Lowerer(const core::Graph& g, const LoweringOptions& o, bool allowViews) : graph_(g), options_(o) {
    const auto& body = g.body();
    mutating_ = !allowViews;
    for (size_t i = 0; i < body.size(); ++i) {
      position_[body[i].get()] = static_cast<int>(i);
      if (mayMutate(*body[i]) && !staticCandidate(*body[i])) mutating_ = true;
    }
    out_.program.nodeBuffer.assign(body.size(), -1);
    out_.program.inputBuffer.assign(g.inputs().size(), -1);
    for (size_t i = 0; i < g.inputs().size(); ++i) inputIndex_[g.inputs()[i].get()] = static_cast<int>(i);
    g.output()->forEachInput([&](const core::NodeRef& n) { outputs_.insert(n.get()); });
  }

  Lowered run() {
    const auto& body = graph_.body();
    for (size_t i = 0; i < body.size(); ++i) step(static_cast<int>(i), body[i]);
    graph_.output()->forEachInput([&](const core::NodeRef& n) {
      auto it = values_.find(resolve(n).get());
      if (it != values_.end() && it->second.kind == LValue::Kind::kTensor) realize(n, true, true);
    });
    return std::move(out_);
  }

  /// True when an in-place conversion that the static check expected failed after views were
  /// lowered: the caller lowers again with views off.
  bool needsRerun() const { return conversionFailed_ && viewsLowered_ > 0; }

  const LoweringOptions& options() const override { return options_; }
  const Buffer& buffer(int id) const override { return out_.program.buffers.at(id); }

  LValue materialize(const LValue& v, const std::string& node) override {
    if (v.buffer >= 0 || v.kind != LValue::Kind::kTensor) return v;
    std::vector<int64_t> strides = followedLayout(v);
    if (strides.empty()) strides = contiguousStrides(v.shape);
    int b = newBuffer(node, v.dtype, v.shape, strides, BufferKind::kIntermediate);
    SNode s;
    s.full = v.shape;
    s.fn = v.fn;
    s.buffer = b;
    s.nodes = {node};
    addSNode(std::move(s));
    return bufferValue(b, v.dtype, v.shape, strides);
  }

  LValue reduce(const LValue& input, const std::vector<int>& dims, bool keepdim, ReduceOp op,
                DType out, std::function<Expr(Expr)> epilogue, const std::string& node) override {
    SNode s;
    s.reduction = true;
    s.full = input.shape;
    s.reduced.assign(input.shape.size(), false);
    for (int d : dims) s.reduced[d] = true;
    s.op = op;
    s.accType = out;
    s.fn = input.fn;
    s.epilogue = std::move(epilogue);
    s.nodes = {node};
    std::vector<int64_t> shape;
    for (size_t d = 0; d < input.shape.size(); ++d) {
      if (!s.reduced[d]) shape.push_back(input.shape[d]);
      else if (keepdim) shape.push_back(1);
    }
    int b = newBuffer(node, out, shape, contiguousStrides(shape), BufferKind::kIntermediate);
    s.buffer = b;
    addSNode(std::move(s));
    return bufferValue(b, out, shape, contiguousStrides(shape));
  }

 private:
  int newBuffer(const std::string& node, DType t, std::vector<int64_t> shape,
                std::vector<int64_t> strides, BufferKind kind) {
    Buffer b;
    b.id = static_cast<int>(out_.program.buffers.size());
    b.node = node;
    b.dtype = t;
    b.shape = std::move(shape);
    b.strides = std::move(strides);
    b.kind = kind;
    out_.program.buffers.push_back(std::move(b));
    return out_.program.buffers.back().id;
  }

  void addSNode(SNode s) {
    IndexVec idx = identityIndex(s.full.size(), s.full.size());
    Expr e = s.fn(idx);
    std::unordered_set<int> reads;
    forEachExpr(e, [&](const ExprNode& x) {
      if (x.kind() == ExprKind::kLoad) reads.insert(x.buffer());
    });
    s.reads.assign(reads.begin(), reads.end());
    std::sort(s.reads.begin(), s.reads.end());
    s.size = e->size();
    Item it;
    it.snode = static_cast<int>(out_.snodes.size());
    out_.snodes.push_back(std::move(s));
    out_.items.push_back(it);
  }

  // The value of a node that is not lowered (a placeholder or an extern's result), as a buffer
  // when it is a CPU tensor of a supported dtype with known strides; kNone otherwise.
  LValue memoryValue(const core::NodeRef& n) {
    auto cached = memory_.find(n.get());
    if (cached != memory_.end()) return cached->second;
    LValue v;
    const auto& meta = n->meta().tensor;
    std::optional<DType> t = meta ? dtypeFromTorch(meta->dtype) : std::nullopt;
    if (meta && t && meta->device == "cpu" && meta->strides && meta->strides->size() == meta->shape.size()) {
      bool input = n->op() == core::NodeOp::kPlaceholder;
      std::vector<int64_t> strides = *meta->strides;
      if (!input && !outputs_.count(n.get())) strides = externLayout(*n, meta->shape, strides);
      int b = newBuffer(n->name(), *t, meta->shape, strides, input ? BufferKind::kInput : BufferKind::kExtern);
      if (input) {
        out_.program.inputBuffer[inputIndex_.at(n.get())] = b;
      } else {
        auto item = externItem_.find(n.get());
        DYNAMO_INTERNAL_ASSERT(item != externItem_.end(), "no extern step for ", n->name());
        out_.items[item->second].result = b;
      }
      v = bufferValue(b, *t, meta->shape, strides);
    } else {
      v.text = "?";  // not readable by a kernel: no lowering accepts it
    }
    memory_[n.get()] = v;
    return v;
  }

  // A Python number graph input that kernels read at call time (options_.scalarInputs), or
  // nullopt. Its slot in Program::scalars is made on first use.
  std::optional<LValue> scalarValue(const core::NodeRef& n) {
    auto in = inputIndex_.find(n.get());
    if (in == inputIndex_.end() || static_cast<size_t>(in->second) >= options_.scalarInputs.size()) return std::nullopt;
    ScalarInput kind = options_.scalarInputs[in->second];
    if (kind == ScalarInput::kNone || n->meta().tensor) return std::nullopt;
    LValue v;
    v.kind = LValue::Kind::kScalar;
    v.dtype = kind == ScalarInput::kInt ? DType::kInt64 : DType::kFloat64;
    auto& scalars = out_.program.scalars;
    for (size_t i = 0; i < scalars.size(); ++i)
      if (scalars[i].input == in->second) v.scalar = static_cast<int>(i);
    if (v.scalar < 0) {
      v.scalar = static_cast<int>(scalars.size());
      scalars.push_back(ScalarArg{in->second, v.dtype, n->name()});
    }
    return v;
  }

  // The node whose value `n` holds now: an in-place op lowered functionally redirects later
  // readers of the tensor it mutated to its own value.
  const core::NodeRef& resolve(const core::NodeRef& n) const {
    auto it = redirect_.find(n.get());
    return it == redirect_.end() ? n : resolve(it->second);
  }

  // An in-place op whose mutated tensor is a lowered, non-view value that no extern has read:
  // nothing else can observe the old contents, so the op is lowered as its functional form.
  bool staticCandidate(const core::Node& n) const {
    if (inplaceBase(n).empty() || n.args().empty() || !n.args()[0].isNode()) return false;
    const core::NodeRef& a = n.args()[0].asNode();
    if (a->op() != core::NodeOp::kCallFunction && a->op() != core::NodeOp::kCallMethod) return false;
    std::string op = canonicalOp(*a);
    return (!op.empty() && !isViewOp(op)) || staticCandidate(*a) ||
           !inplaceBase(*a).empty();
  }

  bool canConvert(const core::Node& n) const {
    if (n.args().empty() || !n.args()[0].isNode()) return false;
    const core::NodeRef& a = resolve(n.args()[0].asNode());
    auto it = values_.find(a.get());
    return it != values_.end() && it->second.kind == LValue::Kind::kTensor && !it->second.isView &&
           !externRead_.count(n.args()[0].asNode().get()) && !externRead_.count(a.get());
  }

  LValue argValue(const core::Arg& a) {
    LValue v;
    switch (a.kind()) {
      case core::ArgKind::kNode: {
        auto it = values_.find(resolve(a.asNode()).get());
        if (it != values_.end()) return it->second;
        if (std::optional<LValue> s = scalarValue(a.asNode())) return *s;
        return memoryValue(resolve(a.asNode()));
      }
      case core::ArgKind::kBool: v.kind = LValue::Kind::kNumber; v.dtype = DType::kBool; v.number = a.asBool(); return v;
      case core::ArgKind::kInt: v.kind = LValue::Kind::kNumber; v.dtype = DType::kInt64; v.number = static_cast<double>(a.asInt()); return v;
      case core::ArgKind::kFloat: v.kind = LValue::Kind::kNumber; v.dtype = DType::kFloat64; v.number = a.asFloat(); return v;
      case core::ArgKind::kStr: case core::ArgKind::kDtype: case core::ArgKind::kDevice:
      case core::ArgKind::kMemoryFormat: case core::ArgKind::kLayout:
        v.kind = LValue::Kind::kText; v.text = a.asString(); return v;
      case core::ArgKind::kTuple: case core::ArgKind::kList:
        v.kind = LValue::Kind::kTuple;
        for (const core::Arg& item : a.items()) v.items.push_back(argValue(item));
        return v;
      case core::ArgKind::kNone: v.kind = LValue::Kind::kNone; v.text = "None"; return v;
      default:
        v.kind = LValue::Kind::kNone;
        v.text = "?";  // unsupported constant: no lowering accepts it
        return v;
    }
  }

  // The layout of the first dense buffer of v's shape that v reads, when it is not contiguous (a
  // channels-last conv output): a value computed from it is stored in the same layout, so the
  // kernel walks both in memory order and the next conv gets channels-last input. Else empty
  // (contiguous). The first operand decides: a residual add of an NCHW conv result (the
  // first operand of `out += identity`) and a channels-last identity stays NCHW, the layout the
  // next conv takes (lower_conv.cpp, convLayout).
  std::vector<int64_t> followedLayout(const LValue& v) const {
    std::vector<int64_t> found;
    bool decided = false;
    if (v.shape.size() < 2) return found;
    forEachExpr(v.fn(identityIndex(v.shape.size(), v.shape.size())), [&](const ExprNode& x) {
      if (decided || x.kind() != ExprKind::kLoad) return;
      const Buffer& b = out_.program.buffers[x.buffer()];
      if (b.shape != v.shape || !denseStrides(b.shape, b.strides)) return;
      decided = true;
      if (b.strides != contiguousStrides(b.shape)) found = b.strides;
    });
    return found;
  }

  // Materialises the lowered value of n (escape: a graph output or an extern's argument;
  // graphOutput: what the user sees, in eager's layout).
  void realize(const core::NodeRef& n0, bool escape, bool graphOutput = false) {
    const core::NodeRef& n = resolve(n0);
    if (n != n0) {
      realize(n, escape, graphOutput);
      out_.program.nodeBuffer[position_.at(n0.get())] = out_.program.nodeBuffer[position_.at(n.get())];
      return;
    }
    LValue& v = values_.at(n.get());
    if (v.kind != LValue::Kind::kTensor) return;
    if (!v.refined.empty()) {  // a refined reshape whose cat did not lower: stored contiguously
      std::vector<int64_t> strides = contiguousStrides(v.shape);
      int b = newBuffer(n->name(), v.dtype, v.shape, strides, escape ? BufferKind::kOutput : BufferKind::kIntermediate);
      storeRefined(v, b, strides, 0, n->name());
      v = bufferValue(b, v.dtype, v.shape, strides);
      out_.program.nodeBuffer[position_.at(n.get())] = b;
      return;
    }
    if (v.buffer >= 0 && !v.isView) {  // a view (even of a buffer) is copied: see below
      if (escape && out_.program.buffers[v.buffer].kind == BufferKind::kIntermediate) {
        out_.program.buffers[v.buffer].kind = BufferKind::kOutput;
      }
      out_.program.nodeBuffer[position_.at(n.get())] = v.buffer;
      return;
    }
    // A lowered view is only materialised when a user that was expected to lower did not (it is
    // functional: views are not lowered in graphs that mutate), so a copy is what it reads.
    std::vector<int64_t> strides = contiguousStrides(v.shape);
    const auto& meta = n->meta().tensor;
    std::vector<int64_t> follow = graphOutput || outputs_.count(n.get()) ? std::vector<int64_t>() : followedLayout(v);
    if (!follow.empty()) {
      strides = follow;
    } else if (escape && meta && meta->strides && meta->shape == v.shape && denseStrides(v.shape, *meta->strides)) {
      strides = *meta->strides;  // eager's layout for what the user sees
    }
    int b = newBuffer(n->name(), v.dtype, v.shape, strides,
                      escape ? BufferKind::kOutput : BufferKind::kIntermediate);
    SNode s;
    s.full = v.shape;
    s.fn = [v, strides, b](const IndexVec& idx) { return v.fn(idx); };
    s.buffer = b;
    s.nodes = {n->name()};
    addSNode(std::move(s));
    v = bufferValue(b, v.dtype, v.shape, strides);
    out_.program.nodeBuffer[position_.at(n.get())] = b;
  }

  // Users of n that are calls of lowerable, non-mutating ops (a view is lowered only then).
  bool onlyLoweredUsers(const core::NodeRef& n) {
    for (const core::NodeRef& u : graph_.users(n)) {
      if (u->op() != core::NodeOp::kCallFunction && u->op() != core::NodeOp::kCallMethod) return false;
      if (canonicalOp(*u).empty() || mayMutate(*u)) return false;
      // a view of it that will not lower (it escapes, or its users do not lower) reads it as an
      // extern would: keep this one an alias too rather than copying it
      if (isViewOp(canonicalOp(*u)) && (outputs_.count(u.get()) || !onlyLoweredUsers(u))) return false;
    }
    return true;
  }

  bool tryLower(const core::NodeRef& n, std::string* why, const std::string& asOp = {}) {
    std::string op = asOp.empty() ? canonicalOp(*n) : asOp;
    if (op.empty()) {
      *why = "no lowering for " + n->opKey();
      return false;
    }
    if ((op == "native_layer_norm") && !onlyGetitemUsers(n)) {
      *why = "multi-output op used other than by getitem";
      return false;
    }
    std::vector<LValue> args;
    for (const core::Arg& a : n->args()) args.push_back(argValue(a));
    std::vector<std::pair<std::string, LValue>> kwargs;
    for (const auto& [k, a] : n->kwargs()) kwargs.emplace_back(k, argValue(a));
    std::optional<LValue> v = lowerNode(*n, args, kwargs, *this, why, asOp);
    if (!v) return false;
    if (v->isView && (mutating_ || outputs_.count(n.get()) || !onlyLoweredUsers(n))) {
      *why = "view whose result escapes or may be mutated (kept as an alias)";
      return false;
    }
    if (v->kind == LValue::Kind::kTensor) {
      const auto& meta = n->meta().tensor;
      if (!meta || meta->shape != v->shape || dtypeFromTorch(meta->dtype) != v->dtype) {
        *why = "lowered value disagrees with the recorded tensor meta";
        return false;
      }
    }
    if (v->isView) ++viewsLowered_;
    place(n, *v);
    return true;
  }

  // n's lowered value v: inlined into its users, or materialised (an output, an expensive value
  // with several users).
  void place(const core::NodeRef& n, const LValue& val) {
    const LValue* v = &val;
    values_[n.get()] = *v;
    out_.program.lowered.push_back(n->name());
    if (v->kind == LValue::Kind::kTensor && v->buffer < 0 && !v->isView) {
      int size = v->fn(identityIndex(v->shape.size(), v->shape.size()))->size();
      if (outputs_.count(n.get()) && !mutatedLater(n)) {
        realize(n, true, true);  // stored here, so the kernel computing it can also feed its users
      } else if (size > options_.maxExprSize ||
          (graph_.users(n).size() > 1 && size > options_.inlineCost)) {
        realize(n, false);
      } else {
        pending_.push_back(n);
      }
    } else if (v->kind == LValue::Kind::kTensor && v->buffer >= 0) {
      out_.program.nodeBuffer[position_.at(n.get())] = v->buffer;
    }
  }

  // True when an in-place op may later write n (its value then changes after this point).
  bool mutatedLater(const core::NodeRef& n) {
    for (const core::NodeRef& u : graph_.users(n)) {
      if (!inplaceBase(*u).empty() || mayMutate(*u)) return true;
    }
    return false;
  }

  bool onlyGetitemUsers(const core::NodeRef& n) {
    for (const core::NodeRef& u : graph_.users(n)) {
      if (u->op() != core::NodeOp::kCallFunction || canonicalOp(*u) != "getitem") return false;
    }
    return true;
  }

  void step(int i, const core::NodeRef& n) {
    std::string why;
    if (folded_.count(n.get())) return;  // an eval batch_norm or relu folded into the conv step before it
    if (tryConv(i, n)) return;
    if (tryMatmul(i, n)) return;
    if (tryCat(n)) return;
    if (tryRefinedReshape(n)) return;
    std::string base = inplaceBase(*n);
    if (!base.empty()) {
      if (canConvert(*n) && tryLower(n, &why, base)) {
        redirect_[n->args()[0].asNode().get()] = n;  // later readers of the mutated tensor read n
        return;
      }
      if (staticCandidate(*n)) conversionFailed_ = true;
      if (why.empty()) why = "in-place op on a tensor the generator does not own";
    } else if (tryLower(n, &why)) {
      return;
    }
    bool barrier = mayMutate(*n);
    if (barrier) {
      // Everything pending is computed before the mutation: a later kernel must not see it.
      for (const core::NodeRef& p : pending_) {
        bool later = false;
        std::vector<core::NodeRef> readers = {p};  // p, and the tensors redirected to p
        for (const auto& [from, to] : redirect_) {
          if (resolve(to) == p) readers.push_back(graph_.find(from->name()));
        }
        for (const core::NodeRef& r : readers) {
          for (const core::NodeRef& u : graph_.users(r)) {
            auto pos = position_.find(u.get());
            if (pos == position_.end() || pos->second > i) later = true;
          }
        }
        if (later) realize(p, false);
      }
      pending_.clear();
    }
    Item it;
    it.extern_ = true;
    it.node = i;
    it.barrier = barrier;
    it.programLayout = !barrier && takesAnyLayout(*n);
    n->forEachInput([&](const core::NodeRef& a0) {
      externRead_.insert(a0.get());
      const core::NodeRef& a = resolve(a0);
      externRead_.insert(a.get());
      auto v = values_.find(a.get());
      if (v == values_.end()) return;
      if (v->second.kind == LValue::Kind::kTuple) {
        for (LValue& item : v->second.items) {
          if (item.buffer >= 0 && out_.program.buffers[item.buffer].kind == BufferKind::kIntermediate) {
            out_.program.buffers[item.buffer].kind = BufferKind::kOutput;
          }
        }
        return;
      }
      // A pooling op (programLayout) returns a fresh tensor: it may read an arena slot, which
      // the plan keeps alive until its step; any other extern's argument escapes (a pool block).
      realize(a0, !it.programLayout);
      if (v->second.buffer >= 0) it.reads.push_back(v->second.buffer);
    });
    externItem_[n.get()] = static_cast<int>(out_.items.size());
    out_.items.push_back(it);
    out_.program.externs.emplace_back(n->name(), why);
    // x.resize_(2, 2), x.t_(): the tensor keeps its identity but not its sizes or strides, so
    // later readers of x read the op's result (the same tensor, with the new meta), not the
    // placeholder's meta (a full reduction after resize_ summed the old number of elements).
    if (changesSizesInPlace(*n) && !n->args().empty() && n->args()[0].isNode()) {
      redirect_[n->args()[0].asNode().get()] = n;
    }
  }

  // ATen ops given a channels-last 4-d input return channels-last results (convolution, pooling,
  // pointwise): an extern whose first 4-d tensor argument is a channels-last buffer is expected
  // to return its result of the same rank in that layout (the runtime copies when it does not).
  std::vector<int64_t> externLayout(const core::Node& n, const std::vector<int64_t>& shape,
                                    const std::vector<int64_t>& recorded) const {
    if (mutating_ || shape.size() != 4 || shape[1] <= 1) return recorded;
    std::vector<int64_t> cl = channelsLastStrides(shape);
    bool first = true, follows = false;
    n.forEachInput([&](const core::NodeRef& a) {
      if (!first) return;
      auto v = values_.find(resolve(a).get());
      auto m = memory_.find(resolve(a).get());
      int b = v != values_.end() ? v->second.buffer : m != memory_.end() ? m->second.buffer : -1;
      if (b < 0 || out_.program.buffers[b].shape.size() != 4) return;
      first = false;
      const Buffer& buf = out_.program.buffers[b];
      follows = buf.shape[1] > 1 && buf.strides == channelsLastStrides(buf.shape);
    });
    return follows ? cl : recorded;
  }

  static std::vector<int64_t> channelsLastStrides(const std::vector<int64_t>& s) {
    int64_t n = std::max<int64_t>(s[0], 1), c = std::max<int64_t>(s[1], 1);
    int64_t h = std::max<int64_t>(s[2], 1), w = std::max<int64_t>(s[3], 1);
    (void)n;
    return {h * w * c, 1, w * c, c};
  }

  // The buffer of a conv or matmul step's operand (a graph input, an extern result or a lowered
  // value, which is materialised: channels-last when it follows a channels-last buffer). A conv
  // step reads it by pointer (planned: it may stay in the arena); a matmul step reads a tensor
  // (escape).
  int operandBuffer(const core::NodeRef& a, bool escape = true) {
    externRead_.insert(a.get());
    externRead_.insert(resolve(a).get());
    if (values_.count(resolve(a).get())) {
      realize(a, escape);
      return values_.at(resolve(a).get()).buffer;
    }
    return memoryValue(resolve(a)).buffer;
  }

  // A 2-d convolution (lower_conv.cpp) as a conv step, with the eval-mode batch_norm that is its
  // only user folded in when the graph does not mutate memory.
  bool tryConv(int i, const core::NodeRef& n) {
    std::string why;
    if (!options_.convSteps) return false;
    std::optional<ConvMatch> m = matchConv(*n, &why);
    if (!m) return false;
    std::optional<BatchNormMatch> bn;
    core::NodeRef result = n;
    const auto& users = graph_.users(n);
    if (!mutating_ && users.size() == 1 && !outputs_.count(n.get())) {
      bn = matchEvalBatchNorm(*users[0], *n);
      if (bn) result = users[0];
    }
    ConvStep c;
    c.weight = memoryValue(m->weight).buffer;
    if (m->bias) c.bias = memoryValue(m->bias).buffer;
    if (c.weight < 0 || (m->bias && c.bias < 0)) return false;
    if (bn) {
      c.bnMean = memoryValue(bn->mean).buffer;
      c.bnVar = memoryValue(bn->var).buffer;
      if (bn->weight) c.bnWeight = memoryValue(bn->weight).buffer;
      if (bn->bias) c.bnBias = memoryValue(bn->bias).buffer;
      c.bnEps = bn->eps;
      if (c.bnMean < 0 || c.bnVar < 0 || (bn->weight && c.bnWeight < 0) || (bn->bias && c.bnBias < 0)) return false;
    }
    int x = operandBuffer(m->input, false);
    if (x < 0) return false;
    c.input = x;
    if (bn) folded_.insert(result.get());
    c.stride = m->stride;
    c.padding = m->padding;
    c.dilation = m->dilation;
    c.groups = m->groups;
    c.nodes = {n->name()};
    if (bn) c.nodes.push_back(result->name());
    // A ReLU of the (folded) result becomes oneDNN's post-op when nothing else reads the value
    // before it: its only user, or an in-place ReLU (nn.ReLU(inplace=True)) that every other
    // reader follows (they read the ReLU's value, as in eager).
    // The same for a hardtanh with number bounds (nn.ReLU6 in the mobilenets).
    if (core::NodeRef post = postOpAfter(result, &c)) {
      if (!inplaceBase(*post).empty()) redirect_[result.get()] = post;  // later readers read the post-op's value
      result = post;
      folded_.insert(result.get());
      c.nodes.push_back(result->name());
    }
    const auto& meta = result->meta().tensor;
    // Graphs that mutate memory keep eager's layouts: a result copied into the expected layout
    // would not see a later in-place write through an alias.
    // Otherwise the layout oneDNN computes fastest in (convTakesNchw); the runtime hands the conv
    // its input in the same layout.
    const Buffer& in = out_.program.buffers[x];
    bool nchw = convTakesNchw(*m, in.strides == contiguousStrides(in.shape));
    std::vector<int64_t> strides = (mutating_ || outputs_.count(result.get())) && meta->strides ? *meta->strides
                                   : nchw ? contiguousStrides(meta->shape)
                                          : channelsLastStrides(meta->shape);
    // A planned buffer: the arena while only kernels, conv steps and pooling externs read it;
    // realize() makes it a pool block (kOutput) when another extern or the graph's output needs it.
    c.result = newBuffer(result->name(), DType::kFloat32, meta->shape, strides,
                         outputs_.count(result.get()) ? BufferKind::kOutput : BufferKind::kIntermediate);
    out_.program.convs.push_back(c);
    Item it;
    it.extern_ = true;
    it.node = i;
    it.conv = static_cast<int>(out_.program.convs.size()) - 1;
    it.result = c.result;
    it.reads = {x};
    externItem_[n.get()] = static_cast<int>(out_.items.size());
    out_.items.push_back(it);
    values_[result.get()] = bufferValue(c.result, DType::kFloat32, meta->shape, strides);
    out_.program.nodeBuffer[position_.at(result.get())] = c.result;
    std::string folded;
    for (size_t k = 1; k < c.nodes.size(); ++k) folded += (folded.empty() ? "" : ", ") + c.nodes[k];
    const std::string layout = strides == channelsLastStrides(meta->shape) ? "channels-last" : "NCHW";
    out_.program.externs.emplace_back(n->name(), folded.empty() ? "conv step (" + layout + ")"
                                                                : "conv step (" + layout + ", " + folded + " folded in)");
    return true;
  }

  // The ReLU or hardtanh a conv step can apply as its post-op (tryConv; sets c's post-op), or null.
  core::NodeRef postOpAfter(const core::NodeRef& result, ConvStep* c) const {
    const auto& users = graph_.users(result);
    if (mutating_ || users.empty() || outputs_.count(result.get())) return nullptr;
    core::NodeRef relu;
    bool clip = false;
    std::pair<double, double> bounds{0.0, 0.0};
    for (const core::NodeRef& u : users) {
      if (relu && position_.at(u.get()) >= position_.at(relu.get())) continue;
      if (isReluOf(*u, *result)) {
        relu = u;
        clip = false;
      } else if (auto b = clipBoundsOf(*u, *result)) {
        relu = u;
        clip = true;
        bounds = *b;
      }
    }
    if (!relu || (users.size() > 1 && inplaceBase(*relu).empty())) return nullptr;
    for (const core::NodeRef& u : users) {
      if (u != relu && position_.at(u.get()) < position_.at(relu.get())) return nullptr;
    }
    c->post = clip ? ConvPostOp::kClip : ConvPostOp::kRelu;
    if (clip) std::tie(c->clipLo, c->clipHi) = bounds;
    return relu;
  }

  // A linear / mm / addmm (lower_matmul.cpp) as a matmul step: the product goes into pooled
  // memory, and the node's value is `product + bias` as a lowered pointwise value, so the bias,
  // an activation and a residual after it become one kernel over the product.
  bool tryMatmul(int i, const core::NodeRef& n) {
    if (!options_.matmulSteps || mutating_) return false;
    std::optional<MatmulMatch> m = matchMatmul(*n);
    if (!m) return false;
    const auto& meta = n->meta().tensor;
    LValue bias;
    if (m->bias) {
      bias = argValue(core::Arg::node(m->bias));
      if (bias.kind != LValue::Kind::kTensor || bias.dtype != DType::kFloat32) return false;
    }
    MatmulStep s;
    s.a = operandBuffer(m->a);
    s.b = operandBuffer(m->b);
    if (s.a < 0 || s.b < 0) return false;
    s.transposeB = m->transposeB;
    s.batched = m->batched;
    s.nodes = {n->name()};
    std::vector<int64_t> strides = contiguousStrides(meta->shape);
    s.result = newBuffer(n->name() + (m->bias ? "_mm" : ""), DType::kFloat32, meta->shape, strides,
                         BufferKind::kExtern);
    out_.program.matmuls.push_back(s);
    Item it;
    it.extern_ = true;
    it.node = i;
    it.matmul = static_cast<int>(out_.program.matmuls.size()) - 1;
    it.result = s.result;
    it.reads = {s.a, s.b};
    externItem_[n.get()] = static_cast<int>(out_.items.size());
    out_.items.push_back(it);
    LValue product = bufferValue(s.result, DType::kFloat32, meta->shape, strides);
    out_.program.externs.emplace_back(n->name(), m->bias ? "matmul step (at::mm_out; the bias is fused into the epilogue)"
                                                         : "matmul step (at::mm_out)");
    if (!m->bias) {
      values_[n.get()] = product;
      out_.program.nodeBuffer[position_.at(n.get())] = s.result;
      return true;
    }
    LValue v = product;
    v.buffer = -1;
    std::vector<int64_t> shape = meta->shape;
    v.fn = [product, bias, shape](const IndexVec& idx) {
      return ExprNode::makeBinary(BinaryOp::kAdd, product.fn(idx), bias.fn(broadcastIndex(idx, bias.shape)));
    };
    place(n, v);
    return true;
  }

  // aten::cat of tensors of one dtype and rank: no copy of its own. Each input is a scheduler
  // node that stores straight into its slice of the cat's buffer (storeOffset), so a kernel that
  // computes an input (a transpose, a scale) writes it where the cat wants it, and the inputs'
  // own buffers are never made. Readers of the cat run after every slice (fusion.cpp).
  bool tryCat(const core::NodeRef& n) {
    if (mutating_ || n->op() != core::NodeOp::kCallFunction || canonicalOp(*n) != "cat") return false;
    const auto& meta = n->meta().tensor;
    std::optional<DType> t = meta ? dtypeFromTorch(meta->dtype) : std::nullopt;
    const auto& args = n->args();
    if (!t || meta->device != "cpu" || args.empty() || args.size() > 2) return false;
    if (args[0].kind() != core::ArgKind::kList && args[0].kind() != core::ArgKind::kTuple) return false;
    const core::Arg* dimArg = args.size() == 2 ? &args[1] : nullptr;
    for (const auto& [k, v] : n->kwargs()) {  // torch.cat(xs, dim=1)
      if (k != "dim" || dimArg) return false;
      dimArg = &v;
    }
    if (dimArg && dimArg->kind() != core::ArgKind::kInt) return false;
    const size_t rank = meta->shape.size();
    int64_t dim = dimArg ? dimArg->asInt() : 0;
    if (std::find(meta->shape.begin(), meta->shape.end(), 0) != meta->shape.end()) return false;  // nothing to store
    if (rank == 0 || dim < -static_cast<int64_t>(rank) || dim >= static_cast<int64_t>(rank)) return false;
    if (dim < 0) dim += static_cast<int64_t>(rank);
    std::vector<LValue> inputs;
    int64_t along = 0;
    for (const core::Arg& a : args[0].items()) {
      LValue v = argValue(a);
      if (v.kind != LValue::Kind::kTensor || (!v.fn && v.refined.empty()) || v.dtype != *t || v.shape.size() != rank) return false;
      for (size_t d = 0; d < rank; ++d) {
        if (d != static_cast<size_t>(dim) && v.shape[d] != meta->shape[d]) return false;
      }
      along += v.shape[dim];
      inputs.push_back(std::move(v));
    }
    if (inputs.empty() || along != meta->shape[dim]) return false;
    std::vector<int64_t> strides = meta->strides && denseStrides(meta->shape, *meta->strides)
                                       ? *meta->strides : contiguousStrides(meta->shape);
    int b = newBuffer(n->name(), *t, meta->shape, strides, BufferKind::kIntermediate);
    int64_t at = 0;
    for (const LValue& v : inputs) {
      if (!v.refined.empty()) {
        storeRefined(v, b, strides, at * strides[dim], n->name());
      } else if (std::find(v.shape.begin(), v.shape.end(), 0) == v.shape.end()) {
        SNode s;
        s.full = v.shape;
        s.fn = v.fn;
        s.buffer = b;
        s.storeOffset = at * strides[dim];
        s.nodes = {n->name()};
        addSNode(std::move(s));
      }
      at += v.shape[dim];
    }
    values_[n.get()] = bufferValue(b, *t, meta->shape, strides);
    out_.program.lowered.push_back(n->name());
    out_.program.nodeBuffer[position_.at(n.get())] = b;
    return true;
  }

  // view / _unsafe_view / reshape (aten) of a lowered value that is not a contiguous buffer, whose
  // only user is an aten::cat: the index map is not affine when dims are both split and merged
  // (the q/k/v gradients of attention, [S, B*H, D] -> [S, B, H*D]), so the value is deferred and
  // the cat stores its source over the shapes' common refinement, straight into its slice.
  bool tryRefinedReshape(const core::NodeRef& n) {
    std::string op = canonicalOp(*n);
    if (mutating_ || (op != "view" && op != "_unsafe_view" && op != "reshape") ||
        n->op() != core::NodeOp::kCallFunction || n->target().kind() != core::TargetKind::kAtenOp || outputs_.count(n.get()) || n->args().size() != 2 ||
        !n->args()[0].isNode() || !n->kwargs().empty()) {
      return false;
    }
    const auto& users = graph_.users(n);
    if (users.size() != 1 || users[0]->op() != core::NodeOp::kCallFunction || canonicalOp(*users[0]) != "cat") {
      return false;
    }
    auto src = values_.find(resolve(n->args()[0].asNode()).get());
    if (src == values_.end() || src->second.kind != LValue::Kind::kTensor || !src->second.fn) return false;
    const LValue& x = src->second;
    if (x.buffer >= 0 && !x.isView) return false;  // a buffer in memory: the plain view lowers
    const auto& meta = n->meta().tensor;
    if (!meta || dtypeFromTorch(meta->dtype) != x.dtype) return false;
    std::vector<int64_t> refined = commonRefinement(x.shape, meta->shape);
    if (refined.empty()) return false;
    LValue v;
    v.kind = LValue::Kind::kTensor;
    v.dtype = x.dtype;
    v.shape = meta->shape;
    v.items = {x};
    v.refined = std::move(refined);
    values_[n.get()] = v;
    out_.program.lowered.push_back(n->name());
    return true;
  }

  // Stores refined reshape v (its source over the refined shape) into `buffer` of v's shape and
  // `strides`, from element `offset` on.
  void storeRefined(const LValue& v, int buffer, const std::vector<int64_t>& strides, int64_t offset,
                    const std::string& node) {
    const LValue& x = v.items.at(0);
    auto from = refinedCoeffs(x.shape, v.refined);
    auto to = refinedCoeffs(v.shape, v.refined);
    SNode s;
    s.full = v.refined;
    s.buffer = buffer;
    s.storeOffset = offset;
    s.storeStrides.assign(v.refined.size(), 0);
    for (size_t d = 0; d < v.shape.size(); ++d) {
      for (size_t k = 0; k < v.refined.size(); ++k) s.storeStrides[k] += strides[d] * to[d][k];
    }
    auto fn = x.fn;
    s.fn = [fn, from](const IndexVec& idx) {
      IndexVec src(from.size());
      size_t nv = idx.empty() ? 0 : idx[0].coeffs.size();
      for (size_t d = 0; d < from.size(); ++d) {
        src[d].coeffs.assign(nv, 0);
        for (size_t k = 0; k < idx.size(); ++k) {
          src[d].offset += from[d][k] * idx[k].offset;
          for (size_t j = 0; j < nv; ++j) src[d].coeffs[j] += from[d][k] * idx[k].coeffs[j];
        }
      }
      return fn(src);
    };
    s.nodes = {node};
    addSNode(std::move(s));
  }

  const core::Graph& graph_;
  LoweringOptions options_;
  Lowered out_;
  bool mutating_ = false;
  bool conversionFailed_ = false;
  int viewsLowered_ = 0;
  std::unordered_map<const core::Node*, core::NodeRef> redirect_;
  std::unordered_set<const core::Node*> externRead_;
  std::unordered_map<const core::Node*, int> position_;
  std::unordered_map<const core::Node*, int> inputIndex_;
  std::unordered_map<const core::Node*, int> externItem_;
  std::unordered_map<const core::Node*, LValue> values_;
  std::unordered_map<const core::Node*, LValue> memory_;
  std::vector<core::NodeRef> pending_;
  std::unordered_set<const core::Node*> outputs_;  // graph outputs
  std::unordered_set<const core::Node*> folded_;   // batch_norm nodes folded into a conv step
};

}  // namespace
}  // namespace detail

Program lowerGraph(const core::Graph& graph, const LoweringOptions& options) {
  detail::Lowerer first(graph, options, true);
  detail::Lowered lowered = first.run();
  if (first.needsRerun()) lowered = detail::Lowerer(graph, options, false).run();
  return detail::fuseProgram(std::move(lowered), options);
}

const std::vector<LoweredOpInfo>& loweredOps() {
  static const std::vector<LoweredOpInfo> kList = {
#define DYNAMO_LOWERED_OP(name, kind, forms) {#name, kind, forms},
#include "../lowered_ops.def"
  };
  return kList;
}

}  // namespace dynamo::codegen
