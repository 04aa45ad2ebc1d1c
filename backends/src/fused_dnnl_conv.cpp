// oneDNN conv primitives of the fused backend's conv steps (fused_dnnl_conv.h). Built only when
// CMake found oneDNN's headers and library (DYNAMO_HAVE_DNNL); the runtime falls back to ATen's
// convolution whenever make() throws.
#include "fused_dnnl_conv.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

namespace dynamo::backends {
namespace {

using dnnl::memory;

const dnnl::engine& cpuEngine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

size_t align64(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

struct DnnlConv::Impl {
  memory::desc userSrc, userDst;             // the buffers' layouts
  dnnl::convolution_forward conv;            // the primitive
  dnnl::convolution_forward::primitive_desc pd;
  memory packedWeight;                       // oneDNN's blocked copy (owned by oneDNN)
  std::vector<float> bias;                   // empty: no bias
  memory biasMem;
  bool srcReorder = false, dstReorder = false;
  dnnl::reorder toConv, fromConv;            // user -> pd.src, pd.dst -> user (when needed)
  size_t scratchBytes = 0, toConvScratch = 0, fromConvScratch = 0;
  size_t srcOffset = 0, dstOffset = 0, reorderScratchOffset = 0, total = 0;
};

DnnlConv::DnnlConv(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DnnlConv::~DnnlConv() = default;

std::unique_ptr<DnnlConv> DnnlConv::make(const DnnlConvShape& s, const float* weight, const float* bias) {
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
    memory::desc b({s.weight[0]}, f32, memory::format_tag::x);
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
                                                         dnnl::algorithm::convolution_direct, src, w, b, dst,
                                                         s.stride, dil, s.padding, s.padding)
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

    // The weight, reordered once into the primitive's format.
    dnnl::stream stream(eng);
    memory userW(memory::desc(wdims, f32, plainW), eng, const_cast<float*>(weight));
    impl->packedWeight = memory(impl->pd.weights_desc(), eng);
    dnnl::reorder(userW, impl->packedWeight).execute(stream, userW, impl->packedWeight);
    if (bias) {
      impl->bias.assign(bias, bias + s.weight[0]);
      impl->biasMem = memory(b, eng, impl->bias.data());
    }
    stream.wait();

    dnnl::primitive_attr reorderAttr;
    reorderAttr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    size_t at = align64(impl->scratchBytes);
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
    impl->total = at;
    return std::unique_ptr<DnnlConv>(new DnnlConv(std::move(impl)));
  } catch (const dnnl::error& e) {
    throw std::runtime_error(std::string("oneDNN: ") + e.what());
  }
}

size_t DnnlConv::workspaceBytes() const { return impl_->total; }

void DnnlConv::run(const float* src, float* dst, void* workspace) const {
  const Impl& m = *impl_;
  const dnnl::engine& eng = cpuEngine();
  char* ws = static_cast<char*>(workspace);
  dnnl::stream stream(eng);
  memory userSrc(m.userSrc, eng, const_cast<float*>(src));
  memory userDst(m.userDst, eng, dst);
  memory convSrc = m.srcReorder ? memory(m.pd.src_desc(), eng, ws + m.srcOffset) : userSrc;
  memory convDst = m.dstReorder ? memory(m.pd.dst_desc(), eng, ws + m.dstOffset) : userDst;
  memory scratch(m.pd.scratchpad_desc(), eng, ws);
  memory reorderScratch(memory::desc({static_cast<memory::dim>(std::max<size_t>({m.toConvScratch, m.fromConvScratch, 1}))},
                                     memory::data_type::u8, memory::format_tag::x),
                        eng, ws + m.reorderScratchOffset);
  if (m.srcReorder) {
    m.toConv.execute(stream, {{DNNL_ARG_FROM, userSrc}, {DNNL_ARG_TO, convSrc}, {DNNL_ARG_SCRATCHPAD, reorderScratch}});
  }
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, convSrc}, {DNNL_ARG_WEIGHTS, m.packedWeight}, {DNNL_ARG_DST, convDst}, {DNNL_ARG_SCRATCHPAD, scratch}};
  if (!m.bias.empty()) args.emplace(DNNL_ARG_BIAS, m.biasMem);
  m.conv.execute(stream, args);
  if (m.dstReorder) {
    m.fromConv.execute(stream, {{DNNL_ARG_FROM, convDst}, {DNNL_ARG_TO, userDst}, {DNNL_ARG_SCRATCHPAD, reorderScratch}});
  }
  stream.wait();
}

std::string DnnlConv::describe() const {
  return std::string(impl_->pd.impl_info_str()) + (impl_->srcReorder ? " (src reordered)" : "") +
         (impl_->dstReorder ? " (dst reordered)" : "");
}

}  // namespace dynamo::backends
