// Test inputs of the inspector's tests (see gui_test_support.h).
#include "gui_test_support.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dynamo/core/graph_serializer.h"
#include "dynamo/storage/trace_writer.h"

namespace dynamo::gui::testing {

using core::Arg;
using core::GraphBuilder;
using core::NodeMeta;
using core::NodeRef;
using core::Target;

TempDir::TempDir() {
  std::string tmpl = (std::getenv("TMPDIR") ? std::string(std::getenv("TMPDIR")) : "/tmp") + "/dynamo-gui-XXXXXX";
  path_ = mkdtemp(tmpl.data()) ? tmpl : "/tmp";
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string layoutProgram() { return DYNAMO_TEST_LAYOUT_PROGRAM; }

namespace {

const char* kResnet = "/models/resnet.py";
const char* kContainer = "/torch/nn/modules/container.py";

SourceLocation at(const char* file, int line, const char* text) { return SourceLocation{file, line, text}; }

NodeMeta meta(std::vector<SourceLocation> stack, std::vector<int64_t> shape = {}) {
  NodeMeta m;
  if (!stack.empty()) m.location = stack.back();
  m.userStack = std::move(stack);
  if (!shape.empty()) {
    core::TensorMeta t;
    t.shape = std::move(shape);
    t.dtype = "torch.float32";
    t.device = "cpu";
    m.tensor = t;
  }
  return m;
}

struct Resnet {
  GraphBuilder b;
  int channels;
  std::vector<SourceLocation> top() { return {at(kResnet, 285, "return self._forward_impl(x)")}; }

  std::vector<SourceLocation> leaf(std::vector<SourceLocation> s, const char* file, int line, const char* text) {
    s.push_back(at(file, line, text));
    return s;
  }

  NodeRef conv(NodeRef in, const std::string& module, std::vector<SourceLocation> stack) {
    NodeRef w = b.placeholder("self." + module + ".weight", meta({}, {channels, channels, 3, 3}));
    stack.push_back(at("/torch/nn/modules/conv.py", 463, "return self._conv_forward(input, self.weight, self.bias)"));
    stack.push_back(at("/torch/nn/modules/conv.py", 459, "return F.conv2d(input, weight, bias, self.stride,"));
    return b.callFunction(Target::fromName("torch.conv2d"), {Arg::node(in), Arg::node(w)}, {},
                          meta(stack, {1, channels, 8, 8}));
  }
  NodeRef bn(NodeRef in, const std::string& module, std::vector<SourceLocation> stack) {
    NodeRef w = b.placeholder("self." + module + ".weight", meta({}, {channels}));
    stack.push_back(at("/torch/nn/modules/batchnorm.py", 171, "return F.batch_norm("));
    return b.callFunction(Target::fromName("torch.nn.functional.batch_norm"), {Arg::node(in), Arg::node(w)}, {},
                          meta(stack, {1, channels, 8, 8}));
  }
  NodeRef relu(NodeRef in, std::vector<SourceLocation> stack) {
    stack.push_back(at("/torch/nn/modules/activation.py", 102, "return F.relu(input, inplace=self.inplace)"));
    return b.callFunction(Target::fromName("torch.nn.functional.relu"), {Arg::node(in)}, {},
                          meta(stack, {1, channels, 8, 8}));
  }
  NodeRef block(NodeRef x, int i, bool extraAdd) {
    const std::string m = "layer1." + std::to_string(i);
    auto s = top();
    s.push_back(at(kResnet, 273, "x = self.layer1(x)"));
    s.push_back(at(kContainer, 204, "input = module(input)"));
    NodeRef out = conv(x, m + ".conv1", leaf(s, kResnet, 92, "out = self.conv1(x)"));
    out = bn(out, m + ".bn1", leaf(s, kResnet, 93, "out = self.bn1(out)"));
    out = relu(out, leaf(s, kResnet, 94, "out = self.relu(out)"));
    out = conv(out, m + ".conv2", leaf(s, kResnet, 96, "out = self.conv2(out)"));
    out = bn(out, m + ".bn2", leaf(s, kResnet, 97, "out = self.bn2(out)"));
    out = b.callFunction(Target::fromName("operator.iadd"), {Arg::node(out), Arg::node(x)}, {},
                         meta(leaf(s, kResnet, 102, "out += identity"), {1, channels, 8, 8}));
    if (extraAdd && i == 1)
      out = b.callFunction(Target::fromName("operator.add"), {Arg::node(out), Arg::integer(1)}, {},
                           meta(leaf(s, kResnet, 104, "out = out + 1"), {1, channels, 8, 8}));
    return relu(out, leaf(s, kResnet, 103, "out = self.relu(out)"));
  }
};

}  // namespace

core::Graph makeResnetLike(int channels, bool extraAdd) {
  Resnet r{GraphBuilder(), channels};
  NodeRef x = r.b.placeholder("x", meta({at(kResnet, 285, "return self._forward_impl(x)")}, {1, 3, 8, 8}));
  NodeRef h = r.conv(x, "conv1", r.leaf(r.top(), kResnet, 268, "x = self.conv1(x)"));
  h = r.bn(h, "bn1", r.leaf(r.top(), kResnet, 269, "x = self.bn1(x)"));
  h = r.relu(h, r.leaf(r.top(), kResnet, 270, "x = self.relu(x)"));
  h = r.block(h, 0, extraAdd);
  h = r.block(h, 1, extraAdd);
  h = r.b.callFunction(Target::fromName("torch.flatten"), {Arg::node(h), Arg::integer(1)}, {},
                       meta(r.leaf(r.top(), kResnet, 279, "x = torch.flatten(x, 1)"), {1, channels * 64}));
  NodeRef w = r.b.placeholder("self.fc.weight", meta({}, {10, channels * 64}));
  auto s = r.leaf(r.top(), kResnet, 280, "x = self.fc(x)");
  s.push_back(at("/torch/nn/modules/linear.py", 114, "return F.linear(input, self.weight, self.bias)"));
  h = r.b.callFunction(Target::fromName("torch._C._nn.linear"), {Arg::node(h), Arg::node(w)}, {}, meta(s, {1, 10}));
  r.b.output(Arg::tuple({Arg::node(h)}));
  return r.b.build();
}

core::Graph makeChain(int n) {
  GraphBuilder b;
  NodeRef x = b.placeholder("x", meta({at("chain.py", 1, "def f(x):")}, {4}));
  NodeRef h = x;
  for (int i = 0; i < n; ++i) {
    auto m = meta({at("chain.py", 2 + i % 50, "x = x.relu() + 1")}, {4});
    h = i % 2 ? b.callFunction(Target::fromName("torch.relu"), {Arg::node(h)}, {}, m)
              : b.callFunction(Target::fromName("operator.add"), {Arg::node(h), Arg::integer(1)}, {}, m);
  }
  b.output(Arg::tuple({Arg::node(h)}));
  return b.build();
}

core::Graph makeSynthetic(int blocks, int layers, int ops) {
  GraphBuilder b;
  NodeRef h = b.placeholder("x", meta({at("model.py", 10, "def forward(self, x):")}, {1, 64}));
  for (int i = 0; i < blocks; ++i) {
    for (int j = 0; j < layers; ++j) {
      const std::string path = "blocks." + std::to_string(i) + ".l" + std::to_string(j);
      std::vector<SourceLocation> stack = {at("model.py", 12, "x = block(x)"),
                                           at("model.py", 30, ("x = self.l" + std::to_string(j) + "(x)").c_str()),
                                           at("layer.py", 5, "return self.act(F.linear(x, self.weight))")};
      NodeRef w = b.placeholder("self." + path + ".weight", meta({}, {64, 64}));
      h = b.callFunction(Target::fromName("torch._C._nn.linear"), {Arg::node(h), Arg::node(w)}, {}, meta(stack, {1, 64}));
      for (int k = 1; k < ops; ++k) {
        auto m = meta(stack, {1, 64});
        h = k % 3 == 0 ? b.callFunction(Target::fromName("torch.nn.functional.gelu"), {Arg::node(h)}, {}, m)
            : k % 3 == 1 ? b.callFunction(Target::fromName("operator.mul"), {Arg::node(h), Arg::floating(0.5)}, {}, m)
                         : b.callFunction(Target::fromName("operator.add"), {Arg::node(h), Arg::integer(1)}, {}, m);
      }
    }
  }
  b.output(Arg::tuple({Arg::node(h)}));
  return b.build();
}

StoreIds makeStore(const std::string& path) {
  using namespace storage;
  StoreIds ids;
  RunRecord run;
  run.argv = {"train.py", "--epochs", "1"};
  auto w = TraceWriter::open(path, run);
  auto graphRow = [](RowId compile, int index, const core::Graph& g) {
    GraphRecord r;
    r.compileId = compile;
    r.index = index;
    r.format = "dynamo.graph/1";
    r.serialized = core::serializeGraph(g);
    r.printed = "graph";
    r.numNodes = static_cast<int>(g.size());
    for (const NodeRef& n : g.inputs()) r.inputs.push_back(n->name());
    r.outputs = {"out"};
    return r;
  };
  const std::int64_t t0 = nowMicros() - 1000000;
  ids.frameModel = w->recordFrame({0, 0, "/models/resnet.py", 284, "ResNet.forward"});
  CompileRecord cm;
  cm.frameId = ids.frameModel;
  cm.status = "ok";
  cm.reason = "first call";
  cm.startTimeUs = t0;
  cm.durationUs = 12000;
  cm.phases = {{"capture", 9000}, {"guards", 2000}, {"backend", 1000}};
  ids.compileModel = w->recordCompile(cm);
  w->recordGraph(graphRow(ids.compileModel, 0, makeResnetLike()));
  GuardRecord gm;
  gm.compileId = ids.compileModel;
  gm.kind = "TENSOR_MATCH";
  gm.checks = "x: f32[1, 3, 8, 8]";
  gm.source = "L['x']";
  gm.location = {"/models/resnet.py", 285, "return self._forward_impl(x)"};
  w->recordGuard(gm);

  ids.frameStep = w->recordFrame({0, 0, "/work/step.py", 3, "step"});
  CompileRecord c0;
  c0.frameId = ids.frameStep;
  c0.status = "graph_break";
  c0.reason = "first call";
  c0.startTimeUs = t0 + 100000;
  c0.durationUs = 3000;
  ids.compileStep0 = w->recordCompile(c0);
  w->recordGraph(graphRow(ids.compileStep0, 0, makeChain(4)));
  GraphBreakRecord br;
  br.compileId = ids.compileStep0;
  br.kind = "data-dependent-branch";
  br.location = {"/work/step.py", 5, "if y.sum() > 10:"};
  br.explanation = "the branch condition depends on the values inside a tensor";
  br.hints = {"use torch.where"};
  br.userStack = {"/work/step.py:5: if y.sum() > 10:"};
  w->recordGraphBreak(br);
  GuardRecord gx;
  gx.compileId = ids.compileStep0;
  gx.kind = "TENSOR_MATCH";
  gx.checks = "x: f32[8]";
  gx.source = "L['x']";
  gx.location = {"/work/step.py", 4, "y = torch.relu(x) * 2"};
  const RowId guardX = w->recordGuard(gx);

  ids.frameResume = w->recordFrame({0, 0, "/work/step.py", 3, "<resume in step>"});
  CompileRecord cr;
  cr.frameId = ids.frameResume;
  cr.status = "ok";
  cr.reason = "first call";
  cr.startTimeUs = t0 + 200000;
  cr.durationUs = 1000;
  ids.compileResume = w->recordCompile(cr);
  w->recordGraph(graphRow(ids.compileResume, 0, makeChain(2)));

  CompileRecord c1 = c0;
  c1.attempt = 1;
  c1.reason = "tensor 'x' size mismatch at dim 0: expected 8, got 16";
  c1.startTimeUs = t0 + 300000;
  ids.compileStep1 = w->recordCompile(c1);
  w->recordGraph(graphRow(ids.compileStep1, 0, makeChain(5)));
  br.compileId = ids.compileStep1;
  w->recordGraphBreak(br);
  GuardFailureRecord gf;
  gf.compileId = ids.compileStep0;
  gf.frameId = ids.frameStep;
  gf.guardId = guardX;
  gf.timeUs = c1.startTimeUs + c1.durationUs;
  gf.reason = "tensor 'x' size mismatch at dim 0: expected 8, got 16";
  gf.guardKind = "TENSOR_MATCH";  // schema v3: the failure as data, as the compile sink writes it
  gf.guardSource = "x";
  gf.property = "size";
  gf.dim = 0;
  gf.expected = "8";
  gf.seen = "16";
  gf.location.file = "/work/step.py";
  gf.location.line = 4;
  gf.location.sourceLine = "y = torch.relu(x) * 2";
  gf.causedCompileId = ids.compileStep1;
  w->recordGuardFailure(gf);
  w->close();
  ids.run = 1;
  return ids;
}

}  // namespace dynamo::gui::testing
