// Fusion: scheduler nodes -> kernels, then the memory plan.
//
// A group (future kernel) has an iteration shape `full` with some dims reduced. Walking the
// lowered sequence in order, each scheduler node joins the latest open group it is compatible
// with, else starts a group:
//   - same iteration space: a pointwise node of shape `full` (an inner stage), a pointwise node
//     of the group's outer shape (an outer stage: a reduction's epilogue), or a reduction with the
//     same full shape and reduced dims; a pointwise-only group of shape S becomes a reduction group
//     when a reduction over S joins (its stores become inner stages: a prologue);
//   - same index: every value the node reads from the group is read where the group wrote it;
//   - the size cap: options.maxFusedNodes nodes per group;
//   - the cycle check: a group that something outside it has already read is closed (the group
//     runs at its last member's place, so a reader before that place would see no data);
//   - extern steps that may mutate memory close every group;
//   - a buffer that several nodes store into (the slices of a cat) is never read by a member of
//     a group that writes it: its readers run after every slice is written.
// Reductions whose result only this kernel reads stay in registers (no buffer). Pointwise-only
// kernels get their loops coalesced where every access allows it.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "dynamo/codegen/inplace.h"
#include "dynamo/common/error.h"
#include "lowering_internal.h"

namespace dynamo::codegen::detail {
namespace {

struct Group {
  std::vector<int> members;     // snode indices, in order
  std::vector<int64_t> full;
  std::vector<bool> reduced;
  bool reduction = false;
  bool closed = false;
  int position = 0;             // item index of the last member
  std::set<int> writes;         // buffers written
};

size_t countOuter(const std::vector<bool>& reduced) {
  return static_cast<size_t>(std::count(reduced.begin(), reduced.end(), false));
}

// True when some kept dim comes after a reduced one (the reduction walks its rows with a stride).
bool columnReduction(const std::vector<bool>& reduced) {
  bool seenReduced = false;
  for (bool r : reduced) {
    if (r) seenReduced = true;
    else if (seenReduced) return true;
  }
  return false;
}

// Index of the group's full shape over its vars (outer vars first, then inner).
IndexVec fullIndex(const std::vector<bool>& reduced) {
  size_t nOuter = countOuter(reduced), nv = reduced.size();
  IndexVec idx(reduced.size());
  size_t o = 0, r = nOuter;
  for (size_t d = 0; d < reduced.size(); ++d) {
    idx[d].coeffs.assign(nv, 0);
    idx[d].coeffs[reduced[d] ? r++ : o++] = 1;
  }
  return idx;
}

std::vector<int64_t> keepShape(const Group& g) {
  std::vector<int64_t> s = g.full;
  for (size_t d = 0; d < s.size(); ++d) {
    if (g.reduced[d]) s[d] = 1;
  }
  return s;
}

std::vector<int64_t> dropShape(const Group& g) {
  std::vector<int64_t> s;
  for (size_t d = 0; d < g.full.size(); ++d) {
    if (!g.reduced[d]) s.push_back(g.full[d]);
  }
  return s;
}

enum class Place { kNone, kInner, kOuterKeep, kOuterDrop };

// Where a pointwise node of `shape` sits in group g.
Place placeOf(const Group& g, const std::vector<int64_t>& shape) {
  if (shape == g.full) return g.reduction ? Place::kInner : Place::kOuterKeep;
  if (!g.reduction) return Place::kNone;
  if (shape == keepShape(g)) return Place::kOuterKeep;
  if (shape == dropShape(g)) return Place::kOuterDrop;
  return Place::kNone;
}

// The node's index (one affine per dim of its value or reduced input) in group g.
IndexVec memberIndex(const Group& g, const SNode& s, Place p) {
  IndexVec full = fullIndex(g.reduced);
  if (s.reduction || p == Place::kInner || !g.reduction) return full;
  if (p == Place::kOuterKeep) {
    for (size_t d = 0; d < full.size(); ++d) {
      if (g.reduced[d]) full[d].coeffs.assign(full[d].coeffs.size(), 0);
    }
    return full;
  }
  IndexVec out;
  for (size_t d = 0; d < full.size(); ++d) {
    if (!g.reduced[d]) out.push_back(full[d]);
  }
  return out;
}

Affine dot(const std::vector<int64_t>& strides, const std::vector<int64_t>& shape, const IndexVec& idx, size_t nv) {
  Affine a;
  a.coeffs.assign(nv, 0);
  for (size_t d = 0; d < idx.size(); ++d) {
    if (shape[d] == 1) continue;
    a.offset += strides[d] * idx[d].offset;
    for (size_t v = 0; v < nv; ++v) a.coeffs[v] += strides[d] * idx[d].coeffs[v];
  }
  return a;
}

// Where member s stores its buffer, in group g's vars.
Affine storeIndex(const Group& g, const SNode& s, Place p, const Buffer& buf) {
  size_t nv = g.full.size();
  if (!s.reduction) {
    Affine a = s.storeStrides.empty() ? dot(buf.strides, buf.shape, memberIndex(g, s, p), nv)
                                      : dot(s.storeStrides, s.full, memberIndex(g, s, p), nv);
    a.offset += s.storeOffset;
    return a;
  }
  IndexVec full = fullIndex(g.reduced);
  IndexVec out;
  bool keep = buf.shape.size() == g.full.size();
  for (size_t d = 0; d < full.size(); ++d) {
    if (!g.reduced[d]) {
      out.push_back(full[d]);
    } else if (keep) {
      Affine z;
      z.coeffs.assign(nv, 0);
      out.push_back(z);
    }
  }
  return dot(buf.strides, buf.shape, out, nv);
}

Place placeOfMember(const Group& g, const SNode& s) {
  return s.reduction ? Place::kInner : placeOf(g, s.full);
}

class Fuser {
 public:
  Fuser(Lowered& l, const LoweringOptions& o) : l_(l), options_(o) {
    std::map<int, int> writers;
    for (const SNode& s : l_.snodes) {
      if (++writers[s.buffer] == 2) sliced_.insert(s.buffer);
    }
  }

  Program run() {
    for (size_t i = 0; i < l_.items.size(); ++i) visit(static_cast<int>(i));
    // Steps in place order: groups at their last member, externs where they were.
    std::vector<std::pair<int, int>> order;  // (position, group or -1 - item)
    for (size_t gi = 0; gi < groups_.size(); ++gi) order.emplace_back(groups_[gi].position, static_cast<int>(gi));
    for (size_t i = 0; i < l_.items.size(); ++i) {
      if (l_.items[i].extern_) order.emplace_back(static_cast<int>(i), -1 - static_cast<int>(i));
    }
    std::sort(order.begin(), order.end());
    Program& p = l_.program;
    for (const auto& [pos, id] : order) {
      Step st;
      if (id >= 0) {
        st.isKernel = true;
        st.kernel = static_cast<int>(p.kernels.size());
        p.kernels.push_back(finish(groups_[id], st.kernel));
      } else {
        const Item& it = l_.items[-1 - id];
        st.isKernel = false;
        st.node = it.node;
        st.result = it.result;
        st.conv = it.conv;
        st.matmul = it.matmul;
        st.programLayout = it.programLayout;
        st.reads = it.reads;
      }
      p.steps.push_back(st);
    }
    plan(p);
    return std::move(p);
  }

 private:
  void visit(int i) {
    const Item& it = l_.items[i];
    if (it.extern_) {
      for (Group& g : groups_) {
        if (it.barrier) g.closed = true;
        for (int b : it.reads) {
          if (g.writes.count(b)) g.closed = true;
        }
      }
      return;
    }
    const SNode& s = l_.snodes[it.snode];
    int chosen = -1;
    if (options_.fuse) {
      for (int gi = static_cast<int>(groups_.size()) - 1; gi >= 0; --gi) {
        if (!groups_[gi].closed && canJoin(groups_[gi], s)) {
          chosen = gi;
          break;
        }
      }
    }
    // Whoever reads a group without joining it closes the group (cycle check).
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      if (static_cast<int>(gi) == chosen) continue;
      for (int b : s.reads) {
        if (groups_[gi].writes.count(b)) groups_[gi].closed = true;
      }
    }
    if (chosen < 0) {
      Group g;
      g.full = s.full;
      g.reduced = s.reduction ? s.reduced : std::vector<bool>(s.full.size(), false);
      g.reduction = s.reduction;
      groups_.push_back(g);
      chosen = static_cast<int>(groups_.size()) - 1;
    }
    Group& g = groups_[chosen];
    if (s.reduction && !g.reduction) {
      g.reduction = true;
      g.reduced = s.reduced;
    }
    g.members.push_back(it.snode);
    g.position = i;
    g.writes.insert(s.buffer);
  }

  bool canJoin(const Group& g0, const SNode& s) {
    if (static_cast<int>(g0.members.size()) >= options_.maxFusedNodes) return false;
    Group g = g0;
    if (s.reduction) {
      if (s.full != g.full) return false;
      if (g.reduction && s.reduced != g.reduced) return false;
      if (!g.reduction) {
        g.reduction = true;
        g.reduced = s.reduced;
      }
    } else if (placeOf(g, s.full) == Place::kNone ||
               (!s.storeStrides.empty() && placeOf(g, s.full) == Place::kOuterDrop)) {
      return false;  // (a store along its own strides needs every dim of its shape)
    }
    bool reads = false;
    for (int b : s.reads) {
      if (g.writes.count(b) && sliced_.count(b)) return false;  // a cat: read once all slices are written
      reads = reads || g.writes.count(b);
    }
    // Unrelated work shares a loop only between pointwise nodes (a reduction group's loop
    // nest may be serial: a full reduction has no outer loop to run in parallel).
    // Nor does unrelated pointwise work join a reduction over leading dims (a column sum: a
    // layer_norm weight gradient over [B, T, C]): its loops walk rows with a stride, which a
    // pointwise store would inherit, and the sums alone can be emitted column-blocked.
    if (!reads) {
      if (!g0.reduction) return !s.reduction;
      return countOuter(g0.reduced) > 0 && (s.reduction || !columnReduction(g0.reduced));
    }
    // Same index: every load of a buffer the group writes must be where the group stored it.
    std::map<int, Affine> stores;
    for (int m : g.members) {
      const SNode& ms = l_.snodes[m];
      stores[ms.buffer] = storeIndex(g, ms, placeOfMember(g, ms), l_.program.buffers[ms.buffer]);
    }
    Expr e = pad(s.fn(memberIndex(g, s, placeOfMember(g, s))), g.full.size());
    bool ok = true;
    forEachExpr(e, [&](const ExprNode& x) {
      if (x.kind() != ExprKind::kLoad) return;
      auto it = stores.find(x.buffer());
      if (it != stores.end() && it->second != x.index()) ok = false;
    });
    return ok;
  }

  Kernel finish(const Group& g, int id) {
    Kernel k;
    for (size_t d = 0; d < g.full.size(); ++d) (g.reduced[d] ? k.innerSizes : k.outerSizes).push_back(g.full[d]);
    std::map<int, int> reducedStage;  // buffer -> stage holding it in a register
    std::set<int> members(g.members.begin(), g.members.end());
    for (int m : g.members) {
      const SNode& s = l_.snodes[m];
      Place p = placeOfMember(g, s);
      Expr e = substitute(pad(s.fn(memberIndex(g, s, p)), g.full.size()), reducedStage);
      Stage st;
      st.nodes = s.nodes;
      st.value = e;
      st.buffer = s.buffer;
      st.index = storeIndex(g, s, p, l_.program.buffers[s.buffer]);
      if (s.reduction) {
        st.kind = Stage::Kind::kReduce;
        st.reduce = s.op;
        int self = static_cast<int>(k.stages.size());
        Expr acc = ExprNode::makeReduced(self, s.accType);
        st.finish = s.epilogue ? s.epilogue(acc) : acc;
        reducedStage[s.buffer] = self;
        if (isLocal(s.buffer, members)) st.buffer = -1;
      } else {
        st.kind = (p == Place::kInner) ? Stage::Kind::kStoreInner : Stage::Kind::kStoreOuter;
      }
      k.stages.push_back(st);
    }
    if (k.innerSizes.empty()) {
      coalesce(k);
    } else {
      coalesceInner(k);
    }
    std::set<int> reads, writes;
    for (const Stage& st : k.stages) {
      if (st.buffer >= 0) writes.insert(st.buffer);
      forEachExpr(st.value, [&](const ExprNode& x) {
        if (x.kind() == ExprKind::kLoad) reads.insert(x.buffer());
      });
    }
    k.reads.assign(reads.begin(), reads.end());
    k.writes.assign(writes.begin(), writes.end());
    k.name = "k" + std::to_string(id);
    for (const std::string& n : k.nodes()) {
      if (k.name.size() > 40) break;
      k.name += "_" + n;
    }
    return k;
  }

  bool isLocal(int buffer, const std::set<int>& members) const {
    if (l_.program.buffers[buffer].kind != BufferKind::kIntermediate) return false;
    for (size_t i = 0; i < l_.snodes.size(); ++i) {
      if (members.count(static_cast<int>(i))) continue;
      const auto& r = l_.snodes[i].reads;
      if (std::binary_search(r.begin(), r.end(), buffer)) return false;
    }
    // (a conv step reads its planned input by pointer)
    for (const Item& it : l_.items) {
      if (it.extern_ && std::find(it.reads.begin(), it.reads.end(), buffer) != it.reads.end()) return false;
    }
    return true;
  }

  static Expr rebuild(const Expr& e, const std::function<Expr(const Expr&)>& leaf) {
    if (e->kind() == ExprKind::kLoad) return leaf(e);
    if (e->operands().empty()) return e;
    std::vector<Expr> ops;
    bool changed = false;
    for (const Expr& o : e->operands()) {
      ops.push_back(rebuild(o, leaf));
      changed = changed || ops.back() != o;
    }
    if (!changed) return e;
    switch (e->kind()) {
      case ExprKind::kUnary: return ExprNode::makeUnary(e->unary(), ops[0]);
      case ExprKind::kBinary: return ExprNode::makeBinary(e->binary(), ops[0], ops[1]);
      case ExprKind::kWhere: return ExprNode::makeWhere(ops[0], ops[1], ops[2]);
      case ExprKind::kCast: return ExprNode::makeCast(e->dtype(), ops[0]);
      default: return e;
    }
  }

  // Loads of 0-d values carry no coefficients: give every load one per loop variable.
  static Expr pad(const Expr& e, size_t nv) {
    return rebuild(e, [&](const Expr& x) {
      if (x->index().coeffs.size() == nv) return x;
      Affine a = x->index();
      a.coeffs.resize(nv, 0);
      return ExprNode::makeLoad(x->buffer(), x->dtype(), a);
    });
  }

  static Expr substitute(const Expr& e, const std::map<int, int>& reducedStage) {
    if (reducedStage.empty()) return e;
    return rebuild(e, [&](const Expr& x) {
      auto it = reducedStage.find(x->buffer());
      return it == reducedStage.end() ? x : ExprNode::makeReduced(it->second, x->dtype());
    });
  }

  // Merges adjacent loop dims that every access walks contiguously; drops size-1 dims.
  static void coalesce(Kernel& k) {
    // Every access's coefficients: the stores', and the loads' inside the expressions.
    std::vector<std::vector<int64_t>> coeffSets;
    auto collect = [&](const Affine& a) { coeffSets.push_back(a.coeffs); };
    for (const Stage& st : k.stages) {
      collect(st.index);
      forEachExpr(st.value, [&](const ExprNode& x) {
        if (x.kind() == ExprKind::kLoad) collect(x.index());
      });
    }
    std::vector<int64_t>& sizes = k.outerSizes;
    size_t n = sizes.size();
    // Loop order follows the memory order of the first store (a channels-last buffer is walked
    // channels innermost): any order is valid for a pointwise kernel, this one is contiguous.
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    const std::vector<int64_t>& lead = coeffSets.front();
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return std::llabs(lead[a]) > std::llabs(lead[b]);
    });
    if (!std::is_sorted(order.begin(), order.end())) {
      auto permute = [&](const std::vector<int64_t>& v) {
        std::vector<int64_t> r;
        for (size_t d : order) r.push_back(v[d]);
        return r;
      };
      for (auto& c : coeffSets) c = permute(c);
      sizes = permute(sizes);
      auto reorder = [&](const Affine& a) {
        Affine r;
        r.offset = a.offset;
        r.coeffs = permute(a.coeffs);
        return r;
      };
      for (Stage& st : k.stages) {
        st.index = reorder(st.index);
        st.value = rebuild(st.value, [&](const Expr& x) {
          return ExprNode::makeLoad(x->buffer(), x->dtype(), reorder(x->index()));
        });
      }
    }
    // groups of old dims forming each new dim
    std::vector<std::vector<size_t>> dims;
    for (size_t d = 0; d < n; ++d) {
      if (sizes[d] == 1 && n > 1) continue;
      if (!dims.empty()) {
        size_t prev = dims.back().back();
        bool ok = true;
        for (const auto& c : coeffSets) ok = ok && c[prev] == c[d] * sizes[d];
        if (ok) {
          dims.back().push_back(d);
          continue;
        }
      }
      dims.push_back({d});
    }
    if (dims.size() == n) return;
    std::vector<int64_t> newSizes;
    for (const auto& grp : dims) {
      int64_t s = 1;
      for (size_t d : grp) s *= sizes[d];
      newSizes.push_back(s);
    }
    auto remap = [&](const Affine& a) {
      Affine r;
      r.offset = a.offset;
      for (const auto& grp : dims) r.coeffs.push_back(a.coeffs[grp.back()]);
      return r;
    };
    for (Stage& st : k.stages) {
      st.index = remap(st.index);
      st.value = rebuild(st.value, [&](const Expr& x) {
        return ExprNode::makeLoad(x->buffer(), x->dtype(), remap(x->index()));
      });
    }
    sizes = newSizes;
  }

  // A reduction kernel's inner (reduced) dims: adjacent ones that every access walks
  // contiguously merge into one (a batch_norm statistic over [N, C, H, W] walks H*W as one loop,
  // not H rows of W), and size-1 ones drop. The order is kept: a sum's order of accumulation
  // changes only within what was already one contiguous run.
  static void coalesceInner(Kernel& k) {
    size_t nOuter = k.outerSizes.size(), n = k.innerSizes.size();
    std::vector<std::vector<int64_t>> coeffSets;
    auto collect = [&](const Affine& a) { coeffSets.push_back(a.coeffs); };
    for (const Stage& st : k.stages) {
      collect(st.index);
      forEachExpr(st.value, [&](const ExprNode& x) {
        if (x.kind() == ExprKind::kLoad) collect(x.index());
      });
    }
    for (const auto& c : coeffSets) {
      if (c.size() != nOuter + n) return;  // not padded to the kernel's vars: leave it alone
    }
    const std::vector<int64_t>& sizes = k.innerSizes;
    std::vector<std::vector<size_t>> dims;  // groups of old inner dims forming each new one
    for (size_t d = 0; d < n; ++d) {
      if (sizes[d] == 1 && n > 1) continue;
      if (!dims.empty()) {
        size_t prev = dims.back().back();
        bool ok = true;
        for (const auto& c : coeffSets) ok = ok && c[nOuter + prev] == c[nOuter + d] * sizes[d];
        if (ok) {
          dims.back().push_back(d);
          continue;
        }
      }
      dims.push_back({d});
    }
    if (dims.empty()) dims.push_back({0});
    if (dims.size() == n) return;
    std::vector<int64_t> newSizes;
    for (const auto& grp : dims) {
      int64_t s = 1;
      for (size_t d : grp) s *= sizes[d];
      newSizes.push_back(s);
    }
    auto remap = [&](const Affine& a) {
      if (a.coeffs.size() != nOuter + n) return a;  // an outer-only index (a finish's loads)
      Affine r;
      r.offset = a.offset;
      r.coeffs.assign(a.coeffs.begin(), a.coeffs.begin() + static_cast<std::ptrdiff_t>(nOuter));
      for (const auto& grp : dims) r.coeffs.push_back(a.coeffs[nOuter + grp.back()]);
      return r;
    };
    for (Stage& st : k.stages) {
      st.index = remap(st.index);
      st.value = rebuild(st.value, [&](const Expr& x) {
        return ExprNode::makeLoad(x->buffer(), x->dtype(), remap(x->index()));
      });
      if (st.finish) {
        st.finish = rebuild(st.finish, [&](const Expr& x) {
          return ExprNode::makeLoad(x->buffer(), x->dtype(), remap(x->index()));
        });
      }
    }
    k.innerSizes = newSizes;
  }

  // Memory planning: intermediates (written by kernels and conv steps, read by those and by the
  // pooling externs, Step::programLayout) share one arena, reused by liveness (first fit by
  // offset, 64-byte aligned): an extern's read of a slot ends the slot's life no earlier than the
  // extern's step (its result is a fresh tensor; the runtime copies one that aliases the slot,
  // fused_backend.cpp). First the in-place pass (inplace.h): an
  // intermediate written over in place lives in its chain's last buffer: in that output's pool
  // block (no arena slot), or in one arena slot with the chain's whole live range.
  static void plan(Program& p) {
    planInPlace(p);
    std::vector<int> first, last, order;
    stepRanges(p, &first, &last);
    std::vector<int64_t> need(p.buffers.size(), 1);
    for (size_t b = 0; b < p.buffers.size(); ++b) {
      if (first[b] < 0) continue;
      const int root = p.buffers[b].storage >= 0 ? p.buffers[b].storage : static_cast<int>(b);
      if (p.buffers[root].kind != BufferKind::kIntermediate) continue;  // in an output's block
      need[root] = std::max(need[root], arenaBytes(p.buffers[b]));
      if (root == static_cast<int>(b)) order.push_back(root);
    }
    const std::vector<std::pair<int, int>> range = slotRanges(p, first, last);
    for (size_t b = 0; b < p.buffers.size(); ++b) std::tie(first[b], last[b]) = range[b];
    struct Live { int64_t offset, size; int end; };
    std::vector<Live> live;
    std::sort(order.begin(), order.end(), [&](int a, int b) { return first[a] < first[b]; });
    int64_t total = 0;
    for (int b : order) {
      live.erase(std::remove_if(live.begin(), live.end(), [&](const Live& l) { return l.end < first[b]; }), live.end());
      std::sort(live.begin(), live.end(), [](const Live& a, const Live& c) { return a.offset < c.offset; });
      int64_t bytes = (need[b] + 63) / 64 * 64;
      int64_t at = 0;
      for (const Live& l : live) {
        if (at + bytes <= l.offset) break;
        at = std::max(at, l.offset + l.size);
      }
      p.buffers[b].arenaOffset = at;
      live.push_back({at, bytes, last[b]});
      total = std::max(total, at + bytes);
    }
    for (Buffer& b : p.buffers) {
      if (b.storage >= 0 && p.buffers[b.storage].kind == BufferKind::kIntermediate) b.arenaOffset = p.buffers[b.storage].arenaOffset;
    }
    p.arenaBytes = total;
  }

  Lowered& l_;
  LoweringOptions options_;
  std::vector<Group> groups_;
  std::set<int> sliced_;  // buffers stored by several scheduler nodes (the inputs of a cat)
};

}  // namespace

Program fuseProgram(Lowered lowered, const LoweringOptions& options) {
  return Fuser(lowered, options).run();
}

void stepRanges(const Program& p, std::vector<int>* first, std::vector<int>* last) {
  first->assign(p.buffers.size(), -1);
  last->assign(p.buffers.size(), -1);
  auto touch = [&](int b, size_t s, bool writes) {
    if (writes && (*first)[b] < 0) (*first)[b] = static_cast<int>(s);
    (*last)[b] = std::max((*last)[b], static_cast<int>(s));
  };
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& st = p.steps[s];
    if (!st.isKernel && st.conv >= 0) {  // a conv step writes and reads planned buffers
      touch(p.convs[st.conv].result, s, true);
      touch(p.convs[st.conv].input, s, false);
    } else if (!st.isKernel) {  // an extern call reads its arguments (the plan: pooling's slots)
      for (int b : st.reads) touch(b, s, false);
    } else {
      const Kernel& k = p.kernels[st.kernel];
      for (int b : k.writes) touch(b, s, true);
      for (int b : k.reads) touch(b, s, false);
    }
  }
}

std::vector<std::pair<int, int>> slotRanges(const Program& p, const std::vector<int>& first,
                                            const std::vector<int>& last) {
  std::vector<std::pair<int, int>> range(p.buffers.size(), {-1, -1});
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    if (first[b] < 0) continue;
    const int root = p.buffers[b].storage >= 0 ? p.buffers[b].storage : static_cast<int>(b);
    if (p.buffers[root].kind != BufferKind::kIntermediate) continue;  // in an output's block
    auto& r = range[root];
    r.first = r.first < 0 ? first[b] : std::min(r.first, first[b]);
    r.second = std::max(r.second, last[b]);
  }
  return range;
}

}  // namespace dynamo::codegen::detail

namespace dynamo::codegen {

std::vector<std::pair<int, int>> arenaLiveRanges(const Program& p) {
  std::vector<int> first, last;
  detail::stepRanges(p, &first, &last);
  return detail::slotRanges(p, first, last);
}

int64_t arenaBytes(const Buffer& b) {
  return std::max(b.numel() * dtypeSize(b.dtype), spanBytes(b));
}

}  // namespace dynamo::codegen
