// In-place memory planning (inplace.h): which kernel outputs may be written over an intermediate
// that dies in the same kernel. One pass, called by the memory plan (fusion.cpp) before the
// arena; it only sets Buffer::storage.
//
// The element-level argument. A kernel runs its stages in order for each outer point (outer
// points in parallel); a stage walks the inner loops (a reduction, a store) or stores once.
// When every access of a and b in the kernel is buf[S(x, r)] for one affine S that is injective
// over the whole iteration space, the memory element S(x, r) is touched only by iteration (x, r)
// of each stage, so its accesses happen in stage order, and within one stage's iteration the
// value is computed (loads) before it is stored. Then "no stage after b's first store touches a,
// and that stage only loads a" is exactly "each element of a is read before b's value replaces
// it". A row reduction followed by a store loop over the same row passes; a neighbour's element
// (another offset), a transposed or broadcast read (another S), a store per outer point while
// the inner loops read (S not injective) or a later read of a fail.
#include "dynamo/codegen/inplace.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

namespace dynamo::codegen {
namespace {

struct Access {
  size_t stage;   // stage index in the kernel
  bool store;     // a store (else a load)
  int buffer;
  Affine index;   // coefficients padded to every loop variable
};

// An outer-only index has coefficients for the outer loops only: pad it with zeros.
Affine padded(Affine a, size_t vars) {
  if (a.coeffs.size() < vars) a.coeffs.resize(vars, 0);
  return a;
}

// Every load and store of buffers a and b in kernel k, in stage order.
std::vector<Access> accessesOf(const Kernel& k, int a, int b) {
  const size_t vars = k.outerSizes.size() + k.innerSizes.size();
  std::vector<Access> out;
  auto loads = [&](size_t i, const Expr& e) {
    if (!e) return;
    forEachExpr(e, [&](const ExprNode& x) {
      if (x.kind() == ExprKind::kLoad && (x.buffer() == a || x.buffer() == b))
        out.push_back({i, false, x.buffer(), padded(x.index(), vars)});
    });
  };
  for (size_t i = 0; i < k.stages.size(); ++i) {
    const Stage& st = k.stages[i];
    loads(i, st.value);
    loads(i, st.finish);
    if (st.buffer == a || st.buffer == b) out.push_back({i, true, st.buffer, padded(st.index, vars)});
  }
  return out;
}

// True when distinct points of the loops (extents) give distinct values of s: the coefficients of
// the non-trivial loops, sorted by magnitude, each exceed the reach of the smaller ones (a mixed
// radix; sufficient, and what contiguous or strided layouts give).
bool injective(const Affine& s, const std::vector<int64_t>& extents) {
  if (s.coeffs.size() != extents.size()) return false;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (|coefficient|, extent)
  for (size_t v = 0; v < extents.size(); ++v) {
    if (extents[v] <= 0) return true;  // an empty loop nest touches nothing
    if (extents[v] == 1) continue;
    if (s.coeffs[v] == 0) return false;
    dims.emplace_back(std::llabs(s.coeffs[v]), extents[v]);
  }
  std::sort(dims.begin(), dims.end());
  int64_t reach = 0;  // the largest |difference| the smaller dims can make
  for (const auto& [c, n] : dims) {
    if (c <= reach) return false;
    reach += c * (n - 1);
  }
  return true;
}

}  // namespace

int64_t spanBytes(const Buffer& b) {
  if (b.numel() == 0) return 0;
  int64_t last = 0;
  for (size_t d = 0; d < b.shape.size(); ++d) {
    if (b.strides[d] < 0) return -1;
    last += (b.shape[d] - 1) * b.strides[d];
  }
  return (last + 1) * dtypeSize(b.dtype);
}

bool inPlaceSafe(const Program& p, const Kernel& k, int a, int b) {
  if (a == b || p.buffers[a].dtype != p.buffers[b].dtype) return false;
  std::vector<Access> acc = accessesOf(k, a, b);
  auto firstStore = std::find_if(acc.begin(), acc.end(), [&](const Access& x) { return x.store && x.buffer == b; });
  if (firstStore == acc.end()) return false;
  std::vector<int64_t> extents(k.outerSizes);
  extents.insert(extents.end(), k.innerSizes.begin(), k.innerSizes.end());
  const Affine& s = firstStore->index;
  if (!injective(s, extents)) return false;
  const size_t sb = firstStore->stage;
  for (const Access& x : acc) {
    if (x.index != s) return false;                                    // another element
    if (x.buffer == a && (x.stage > sb || (x.stage == sb && x.store))) return false;  // a after b's store
    if (x.buffer == b && !x.store && x.stage < sb) return false;       // b read before it is written
  }
  return true;
}

void planInPlace(Program& p) {
  const size_t n = p.buffers.size();
  std::vector<int> first(n, -1), last(n, -1);  // kernel steps that access each buffer
  for (size_t s = 0; s < p.steps.size(); ++s) {
    if (!p.steps[s].isKernel) {
      // An extern call that reads a buffer after a kernel (a pooling op on an arena slot): no
      // kernel before it may write over that buffer.
      for (int b : p.steps[s].reads) last[b] = static_cast<int>(s);
      continue;
    }
    const Kernel& k = p.kernels[p.steps[s].kernel];
    for (const std::vector<int>* list : {&k.reads, &k.writes}) {
      for (int b : *list) {
        if (first[b] < 0) first[b] = static_cast<int>(s);
        last[b] = static_cast<int>(s);
      }
    }
  }
  // Buffers a conv step reads or writes (by pointer, planned) take part in no chain: the step is
  // no kernel this pass sees, so it could read a buffer already written over, or write one
  // whose memory is not there yet.
  std::vector<bool> conv(n, false);
  for (const ConvStep& c : p.convs) {
    for (int b : {c.input, c.result}) {
      if (b >= 0) conv[b] = true;
    }
  }
  std::vector<int> pred(n, -1), succ(n, -1);
  for (size_t s = 0; s < p.steps.size(); ++s) {
    if (!p.steps[s].isKernel) continue;
    const Kernel& k = p.kernels[p.steps[s].kernel];
    for (int b : k.writes) {
      const Buffer& bb = p.buffers[b];
      if (conv[b] || first[b] != static_cast<int>(s) || pred[b] >= 0 || spanBytes(bb) <= 0) continue;
      if (bb.kind != BufferKind::kOutput && bb.kind != BufferKind::kIntermediate) continue;
      std::vector<int> touched(k.reads);
      touched.insert(touched.end(), k.writes.begin(), k.writes.end());
      for (int a : touched) {
        const Buffer& ab = p.buffers[a];
        if (conv[a] || ab.kind != BufferKind::kIntermediate || last[a] != static_cast<int>(s) || succ[a] >= 0) continue;
        const int64_t span = spanBytes(ab);
        if (span <= 0 || span > spanBytes(bb) || !inPlaceSafe(p, k, a, b)) continue;
        pred[b] = a;
        succ[a] = b;
        break;
      }
    }
  }
  for (size_t t = 0; t < n; ++t) {  // each chain's last buffer holds the memory
    if (succ[t] >= 0 || pred[t] < 0) continue;
    for (int m = pred[t]; m >= 0; m = pred[m]) p.buffers[m].storage = static_cast<int>(t);
  }
}

}  // namespace dynamo::codegen
