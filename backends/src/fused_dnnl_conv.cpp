// oneDNN conv primitives of the fused backend's conv steps (fused_dnnl_conv.h), packing the live
// weight on every call. Built only when CMake found oneDNN's headers and library
// (DYNAMO_HAVE_DNNL); the runtime falls back to ATen's convolution whenever make() throws.
#include "fused_dnnl_conv.h"
#include "fused_dnnl_common.h"
#include "float_scan.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

namespace dynamo::backends {
namespace {

using dnnl::memory;

size_t align64(size_t n) { return (n + 63) / 64 * 64; }

// Below this many floats a weight is folded on the calling thread (a parallel region costs more).
constexpr size_t kParallelFoldFloats = size_t{1} << 16;

// out[o, :] = w[o, :] * scale[o] over rows of `inner` floats; returns the max exponent bits of
// the products (a NaN or inf in w or scale, or a product that overflowed). Large weights are
// split over the output channels on OpenMP's threads (as many as torch.set_num_threads asked).
uint32_t scaleRows(const float* w, const float* scale, size_t rows, size_t inner, float* out) {
  uint32_t top = 0;
  const auto n = static_cast<std::ptrdiff_t>(rows);
#pragma omp parallel for schedule(static) reduction(max : top) if (rows * inner >= kParallelFoldFloats)
  for (std::ptrdiff_t o = 0; o < n; ++o) {
    const auto row = static_cast<size_t>(o);
    const float s = scale[row];
    const float* src = w + row * inner;
    float* dst = out + row * inner;
    for (size_t i = 0; i < inner; ++i) {
      const float v = src[i] * s;
      dst[i] = v;
      uint32_t u;
      std::memcpy(&u, &v, sizeof u);
      top = std::max(top, u & 0x7f800000u);
    }
  }
  return top;
}

constexpr uint32_t kNonFinite = 0x7f800000u;

}  // namespace

struct DnnlConv::Impl {
  memory::desc userSrc, userDst, plainWeight, biasDesc;  // the buffers' layouts
  dnnl::convolution_forward conv;            // the primitive
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::reorder packWeight;                  // plain weight -> pd.weights_desc() (every call)
  size_t packScratch = 0;                    // its scratchpad
  size_t outChannels = 0, weightInner = 0;   // O and C / groups * KH * KW
  bool bias = false;
  bool srcReorder = false, dstReorder = false;
  dnnl::reorder toConv, fromConv;            // user -> pd.src, pd.dst -> user (when needed)
  size_t scratchBytes = 0, toConvScratch = 0, fromConvScratch = 0;
  // Workspace offsets (see the header's diagram): the packed weight first, then either phase.
  size_t packedOffset = 0, foldedOffset = 0, packScratchOffset = 0;
  size_t scratchOffset = 0, srcOffset = 0, dstOffset = 0, reorderScratchOffset = 0, total = 0;
};

DnnlConv::DnnlConv(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DnnlConv::~DnnlConv() = default;

std::unique_ptr<DnnlConv> DnnlConv::make(const DnnlConvShape& s) {
  try {
    const dnnl::engine& eng = cpuEngine();
    auto impl = std::make_unique<Impl>();
    const memory::data_type f32 = memory::data_type::f32;
    impl->userSrc = memory::desc(s.input, f32, s.inputStrides);
    impl->userDst = memory::desc(s.output, f32, s.outputStrides);
    // Not blocked: the primitive works in channels-last (the layout those steps chose); the
    // buffers are reordered when they are in another one.
    const memory::format_tag act = s.blocked ? memory::format_tag::any : memory::format_tag::nhwc;
    memory::desc src(s.input, f32, act), dst(s.output, f32, act);
    memory::dims wdims = s.weight;
    memory::format_tag plainW = memory::format_tag::oihw;
    if (s.groups > 1) {
      wdims = {s.groups, s.weight[0] / s.groups, s.weight[1], s.weight[2], s.weight[3]};
      plainW = memory::format_tag::goihw;
    }
    memory::desc w(wdims, f32, memory::format_tag::any);
    impl->biasDesc = memory::desc({s.weight[0]}, f32, memory::format_tag::x);
    impl->plainWeight = memory::desc(wdims, f32, plainW);
    impl->outChannels = static_cast<size_t>(s.weight[0]);
    impl->weightInner = static_cast<size_t>(s.weight[1] * s.weight[2] * s.weight[3]);
    impl->bias = s.bias;
    memory::dims dil = {s.dilation[0] - 1, s.dilation[1] - 1};
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (s.post != DnnlPostOp::kNone) {
      dnnl::post_ops po;
      if (s.post == DnnlPostOp::kRelu) po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
      else po.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, s.clipLo, s.clipHi);
      attr.set_post_ops(po);
    }
    auto desc = s.bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                         dnnl::algorithm::convolution_direct, src, w, impl->biasDesc,
                                                         dst, s.stride, dil, s.padding, s.padding)
                       : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                         dnnl::algorithm::convolution_direct, src, w, dst, s.stride,
                                                         dil, s.padding, s.padding);
    impl->pd = dnnl::convolution_forward::primitive_desc(desc, attr, eng);
    // oneDNN's reference kernels are far slower than ATen's own paths: not a conv step's job.
    const std::string implName = impl->pd.impl_info_str();
    if (implName.rfind("ref", 0) == 0) {
      throw std::runtime_error("oneDNN has only its reference kernel (" + implName + ")");
    }
    impl->conv = dnnl::convolution_forward(impl->pd);
    impl->scratchBytes = impl->pd.scratchpad_desc().get_size();

    dnnl::primitive_attr reorderAttr;
    reorderAttr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::reorder::primitive_desc wpd(eng, impl->plainWeight, eng, impl->pd.weights_desc(), reorderAttr);
    impl->packWeight = dnnl::reorder(wpd);
    impl->packScratch = wpd.scratchpad_desc().get_size();

    // Phase 1 (packing the weight) and phase 2 (the conv) share the memory after the packed weight.
    const size_t phase = align64(impl->pd.weights_desc().get_size());
    impl->packedOffset = 0;
    impl->foldedOffset = phase;
    impl->packScratchOffset = phase + align64(impl->plainWeight.get_size());
    const size_t phase1End = impl->packScratchOffset + align64(std::max<size_t>(impl->packScratch, 1));
    size_t at = phase;
    impl->scratchOffset = at;
    at += align64(std::max<size_t>(impl->scratchBytes, 1));
    if (impl->pd.src_desc() != impl->userSrc) {
      impl->srcReorder = true;
      dnnl::reorder::primitive_desc rpd(eng, impl->userSrc, eng, impl->pd.src_desc(), reorderAttr);
      impl->toConv = dnnl::reorder(rpd);
      impl->toConvScratch = rpd.scratchpad_desc().get_size();
      impl->srcOffset = at;
      at += align64(impl->pd.src_desc().get_size());
    }
    if (impl->pd.dst_desc() != impl->userDst) {
      impl->dstReorder = true;
      dnnl::reorder::primitive_desc rpd(eng, impl->pd.dst_desc(), eng, impl->userDst, reorderAttr);
      impl->fromConv = dnnl::reorder(rpd);
      impl->fromConvScratch = rpd.scratchpad_desc().get_size();
      impl->dstOffset = at;
      at += align64(impl->pd.dst_desc().get_size());
    }
    impl->reorderScratchOffset = at;
    at += align64(std::max<size_t>({impl->toConvScratch, impl->fromConvScratch, 1}));
    impl->total = std::max(at, phase1End);
    return std::unique_ptr<DnnlConv>(new DnnlConv(std::move(impl)));
  } catch (const dnnl::error& e) {
    throw std::runtime_error(std::string("oneDNN: ") + e.what());
  }
}

size_t DnnlConv::workspaceBytes() const { return impl_->total; }

namespace {
memory bytes(const dnnl::engine& eng, char* at, size_t n) {
  return memory(memory::desc({static_cast<memory::dim>(std::max<size_t>(n, 1))}, memory::data_type::u8,
                             memory::format_tag::x),
                eng, at);
}
}  // namespace

bool DnnlConv::run(const float* src, float* dst, const DnnlConvWeights& wts, bool checkFinite, void* workspace) const {
  const Impl& m = *impl_;
  const dnnl::engine& eng = cpuEngine();
  char* ws = static_cast<char*>(workspace);
  const size_t o = m.outChannels, weightCount = m.outChannels * m.weightInner;

  // Phase 1: the weight as it is now (times the folded scale) into the primitive's format.
  const float* plain = wts.weight;
  uint32_t top = 0;
  if (wts.scale) {
    auto* folded = reinterpret_cast<float*>(ws + m.foldedOffset);
    top = scaleRows(wts.weight, wts.scale, o, m.weightInner, folded);
    plain = folded;
  } else if (checkFinite) {
    top = topExponent(wts.weight, weightCount);
  }
  if (checkFinite && m.bias) top = std::max(top, topExponent(wts.bias, o));
  if (checkFinite && top == kNonFinite) return false;
  dnnl::stream stream(eng);
  memory userW(m.plainWeight, eng, const_cast<float*>(plain));
  memory packed(m.pd.weights_desc(), eng, ws + m.packedOffset);
  m.packWeight.execute(stream, {{DNNL_ARG_FROM, userW}, {DNNL_ARG_TO, packed},
                                {DNNL_ARG_SCRATCHPAD, bytes(eng, ws + m.packScratchOffset, m.packScratch)}});
  stream.wait();

  // Phase 2: the conv (its scratchpad and reorder buffers over phase 1's memory).
  memory userSrc(m.userSrc, eng, const_cast<float*>(src));
  memory userDst(m.userDst, eng, dst);
  memory convSrc = m.srcReorder ? memory(m.pd.src_desc(), eng, ws + m.srcOffset) : userSrc;
  memory convDst = m.dstReorder ? memory(m.pd.dst_desc(), eng, ws + m.dstOffset) : userDst;
  memory scratch(m.pd.scratchpad_desc(), eng, ws + m.scratchOffset);
  memory reorderScratch = bytes(eng, ws + m.reorderScratchOffset, std::max(m.toConvScratch, m.fromConvScratch));
  if (m.srcReorder) {
    m.toConv.execute(stream, {{DNNL_ARG_FROM, userSrc}, {DNNL_ARG_TO, convSrc}, {DNNL_ARG_SCRATCHPAD, reorderScratch}});
  }
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, convSrc}, {DNNL_ARG_WEIGHTS, packed}, {DNNL_ARG_DST, convDst}, {DNNL_ARG_SCRATCHPAD, scratch}};
  if (m.bias) args.emplace(DNNL_ARG_BIAS, memory(m.biasDesc, eng, const_cast<float*>(wts.bias)));
  m.conv.execute(stream, args);
  if (m.dstReorder) {
    m.fromConv.execute(stream, {{DNNL_ARG_FROM, convDst}, {DNNL_ARG_TO, userDst}, {DNNL_ARG_SCRATCHPAD, reorderScratch}});
  }
  stream.wait();
  return true;
}

std::string DnnlConv::describe() const {
  return std::string(impl_->pd.impl_info_str()) + (impl_->srcReorder ? " (src reordered)" : "") +
         (impl_->dstReorder ? " (dst reordered)" : "");
}

}  // namespace dynamo::backends
