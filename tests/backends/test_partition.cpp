// Unit tests of the joint-graph partitioner (dynamo/backends/partition.h) on small hand-built
// joint graphs: what the min cut saves and recomputes (a relu chain is recomputed from its input;
// mm and random ops never are; a disabled rule stops recompute), the graphs' signatures, None
// gradients, primals read by the backward, symbolic ints, nodes with no tensor meta, determinism,
// the summary text, and a resnet50-sized graph.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "dynamo/backends/partition.h"
#include "dynamo_catch.h"
#include "partition/recompute_rules.h"
#include "toy_eval.h"

using namespace dynamo::core;
using namespace dynamo::backends;

namespace {

NodeMeta meta(std::vector<int64_t> shape, std::string dtype = "torch.float32") {
  NodeMeta m;
  m.tensor = TensorMeta{};
  m.tensor->shape = std::move(shape);
  m.tensor->dtype = std::move(dtype);
  m.tensor->device = "cpu";
  return m;
}

NodeRef call(GraphBuilder& b, const std::string& schema, std::vector<Arg> args, NodeMeta m = {}) {
  return b.callFunction(Target::atenOp(schema), std::move(args), {}, std::move(m));
}

Arg n(const NodeRef& r) { return Arg::node(r); }

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::vector<std::string> names(const std::vector<NodeRef>& nodes) {
  std::vector<std::string> out;
  for (const NodeRef& r : nodes) out.push_back(r->name());
  return out;
}

// x -> relu -> relu -> relu (output); the backward's threshold_backward reads each relu.
Graph reluChain() {
  GraphBuilder b;
  NodeRef x = b.placeholder("x", meta({1024}), "primals_1");
  NodeRef t = b.placeholder("t", meta({1024}), "tangents_1");
  NodeRef r1 = call(b, "aten::relu", {n(x)}, meta({1024}));
  NodeRef r2 = call(b, "aten::relu", {n(r1)}, meta({1024}));
  NodeRef r3 = call(b, "aten::relu", {n(r2)}, meta({1024}));
  NodeRef g3 = call(b, "aten::threshold_backward", {n(t), n(r3), Arg::integer(0)}, meta({1024}));
  NodeRef g2 = call(b, "aten::threshold_backward", {n(g3), n(r2), Arg::integer(0)}, meta({1024}));
  NodeRef g1 = call(b, "aten::threshold_backward", {n(g2), n(r1), Arg::integer(0)}, meta({1024}));
  b.output(Arg::tuple({n(r3), n(g1)}));
  return b.build();
}

void checkAgainstJoint(const Graph& joint, const JointSignature& sig, const Partition& p,
                       const std::vector<double>& primals, const std::vector<double>& tangents) {
  std::vector<double> jointIn = primals;
  jointIn.insert(jointIn.end(), tangents.begin(), tangents.end());
  toy::randomCounter() = 0;
  std::vector<toy::Value> expected = toy::run(joint, jointIn);
  toy::randomCounter() = 0;
  std::vector<toy::Value> fwd = toy::run(p.forward, primals);
  std::vector<double> bwdIn;
  for (size_t i = sig.numFwdOutputs; i < fwd.size(); ++i) bwdIn.push_back(*fwd[i]);
  bwdIn.insert(bwdIn.end(), tangents.begin(), tangents.end());
  std::vector<toy::Value> grads = toy::run(p.backward, bwdIn);
  REQUIRE(grads.size() == sig.numPrimals);
  for (size_t i = 0; i < sig.numFwdOutputs; ++i) CHECK(fwd[i] == expected[i]);
  for (size_t i = 0; i < sig.numPrimals; ++i) CHECK(grads[i] == expected[sig.numFwdOutputs + i]);
}

}  // namespace

TEST_CASE("a relu chain is recomputed from its input", "[partition]") {
  Graph joint = reluChain();
  JointSignature sig{1, 1};
  Partition p = partitionJoint(joint, sig);
  CHECK(p.saved == std::vector<std::string>{"primals_1"});
  CHECK(p.recomputed == std::vector<std::string>{"relu", "relu_1", "relu_2"});
  CHECK(p.bytesSaved == 4096);
  CHECK(names(p.forward.inputs()) == std::vector<std::string>{"primals_1"});
  CHECK(names(p.backward.inputs()) == std::vector<std::string>{"primals_1", "tangents_1"});
  CHECK(p.backward.body().size() == 6);
  checkAgainstJoint(joint, sig, p, {0.5}, {2.0});
  checkAgainstJoint(joint, sig, p, {-0.5}, {2.0});

  Partition all = partitionJoint(joint, sig, {PartitionMode::kSaveAll, {}});
  CHECK(all.saved == std::vector<std::string>{"relu", "relu_1", "relu_2"});
  CHECK(all.recomputed.empty());
  CHECK(all.bytesSaved == 3 * 4096);
  checkAgainstJoint(joint, sig, all, {0.5}, {2.0});
}

TEST_CASE("a disabled recompute rule stops recompute", "[partition]") {
  Graph joint = reluChain();
  Partition p = partitionJoint(joint, {1, 1}, {PartitionMode::kMinCut, {"aten::relu"}});
  CHECK(p.saved == std::vector<std::string>{"relu", "relu_1", "relu_2"});
  CHECK(p.recomputed.empty());
  CHECK(contains(dynamo::backends::partition::recomputeOpNames(), "aten::relu"));
}

TEST_CASE("mm and random ops are never recomputed", "[partition]") {
  GraphBuilder b;
  NodeRef x = b.placeholder("x", meta({64}), "primals_1");
  NodeRef w = b.placeholder("w", meta({64}), "primals_2");
  NodeRef t = b.placeholder("t", meta({64}), "tangents_1");
  NodeRef y = call(b, "aten::mm", {n(x), n(w)}, meta({64}));
  NodeRef mask = call(b, "aten::bernoulli.p", {n(y), Arg::floating(0.5)}, meta({64}));
  NodeRef d = call(b, "aten::mul.Tensor", {n(y), n(mask)}, meta({64}));
  NodeRef g = call(b, "aten::mul.Tensor", {n(t), n(mask)}, meta({64}));
  NodeRef gy = call(b, "aten::mul.Tensor", {n(g), n(y)}, meta({64}));
  NodeRef gx = call(b, "aten::mul.Tensor", {n(gy), n(w)}, meta({64}));
  b.output(Arg::tuple({n(d), n(gx), Arg::none()}));
  Graph joint = b.build();
  JointSignature sig{2, 1};
  Partition p = partitionJoint(joint, sig);
  CHECK(p.saved == std::vector<std::string>{"primals_2", "mm", "bernoulli"});
  CHECK(p.recomputed.empty());
  for (int i = 0; i < 5; ++i) checkAgainstJoint(joint, sig, p, {0.3 * i, 1.5}, {2.0});
  // Even with large inputs that make recomputing mm look cheap, mm stays saved.
  CHECK(!contains(p.recomputed, "mm"));
}

TEST_CASE("a value an mm of the backward reads is saved, not recomputed", "[partition]") {
  // The MLP step's shape: h = gelu-like pointwise of the forward mm; the backward reads h in an
  // mm (the weight gradient) and the pre-activation a in pointwise ops.
  auto build = [](bool mmReadsH) {
    GraphBuilder b;
    NodeRef x = b.placeholder("x", meta({4, 4}), "primals_1");
    NodeRef w = b.placeholder("w", meta({4, 4}), "primals_2");
    NodeRef t = b.placeholder("t", meta({4, 4}), "tangents_1");
    NodeRef a = call(b, "aten::mm", {n(x), n(w)}, meta({4, 4}));
    NodeRef h = call(b, "aten::relu", {n(a)}, meta({4, 4}));
    NodeRef y = call(b, "aten::mul.Tensor", {n(h), n(h)}, meta({4, 4}));
    NodeRef ga = call(b, "aten::mul.Tensor", {n(t), n(a)}, meta({4, 4}));
    NodeRef gw = mmReadsH ? call(b, "aten::mm", {n(h), n(ga)}, meta({4, 4}))
                          : call(b, "aten::mul.Tensor", {n(ga), n(h)}, meta({4, 4}));
    b.output(Arg::tuple({n(y), Arg::none(), n(gw)}));
    return b.build();
  };
  JointSignature sig{2, 1};
  Graph joint = build(true);
  Partition p = partitionJoint(joint, sig);
  CHECK(p.saved == std::vector<std::string>{"mm", "relu"});
  CHECK(p.recomputed.empty());
  checkAgainstJoint(joint, sig, p, {0.5, -1.5}, {2.0});
  checkAgainstJoint(joint, sig, p, {0.5, 1.5}, {2.0});
  // Read only by pointwise backward ops, the same value is recomputed from the saved mm.
  Graph pointwise = build(false);
  Partition q = partitionJoint(pointwise, sig);
  CHECK(q.saved == std::vector<std::string>{"mm"});
  CHECK(q.recomputed == std::vector<std::string>{"relu"});
  checkAgainstJoint(pointwise, sig, q, {0.5, 1.5}, {2.0});
}

TEST_CASE("None gradients, primals as gradients and forward outputs, views", "[partition]") {
  GraphBuilder b;
  NodeRef x = b.placeholder("x", meta({8}), "primals_1");
  NodeRef y = b.placeholder("y", meta({8}), "primals_2");
  NodeRef t1 = b.placeholder("t1", meta({8}), "tangents_1");
  NodeRef t2 = b.placeholder("t2", meta({8}), "tangents_2");
  NodeRef v = call(b, "aten::neg", {n(x)}, meta({8}));
  NodeRef g = call(b, "aten::add.Tensor", {n(t1), n(t2)}, meta({8}));
  // outputs: x itself, neg(x); grads: t1 + t2 for x, y itself for y (a forward value), None.
  b.output(Arg::tuple({n(x), n(v), n(g), n(y)}));
  Graph joint = b.build();
  JointSignature sig{2, 2};
  Partition p = partitionJoint(joint, sig);
  CHECK(p.saved == std::vector<std::string>{"primals_2"});
  CHECK(p.bytesSaved == 32);
  CHECK(p.forward.output()->outputValue().items().size() == 3);
  checkAgainstJoint(joint, sig, p, {1.0, 2.0}, {3.0, 4.0});
}

TEST_CASE("symbolic ints are saved after tensors; nodes without meta are avoided", "[partition]") {
  GraphBuilder b;
  NodeRef x = b.placeholder("x", meta({16}), "primals_1");
  NodeRef t = b.placeholder("t", meta({16}), "tangents_1");
  NodeRef size = call(b, "aten::sym_size", {n(x), Arg::integer(0)});
  NodeRef unknown = call(b, "aten::mm", {n(x), n(x)});  // no meta
  NodeRef e = call(b, "aten::expand", {n(t), Arg::list({n(size)})}, meta({16}));
  NodeRef g = call(b, "aten::mul.Tensor", {n(e), n(unknown)}, meta({16}));
  b.output(Arg::tuple({n(unknown), n(g)}));
  Partition p = partitionJoint(b.build(), {1, 1});
  // mm is banned so it is saved; sym_size is cheaper to save than x is.
  CHECK(p.saved == std::vector<std::string>{"mm", "sym_size"});
  CHECK(p.bytesSaved == 0);
  const auto& fouts = p.forward.output()->outputValue().items();
  REQUIRE(fouts.size() == 3);
  CHECK(fouts[2].asNode()->name() == "sym_size");
}

TEST_CASE("in-place writes keep their readers from being recomputed", "[partition]") {
  GraphBuilder b;
  NodeRef x = b.placeholder("x", meta({16}), "primals_1");
  NodeRef buf = b.placeholder("buf", meta({16}), "primals_2");
  NodeRef t = b.placeholder("t", meta({16}), "tangents_1");
  NodeRef r = call(b, "aten::relu", {n(buf)}, meta({16}));
  NodeRef y = call(b, "aten::mul.Tensor", {n(x), n(r)}, meta({16}));
  call(b, "aten::add_.Tensor", {n(buf), n(x)}, meta({16}));  // mutates buf after relu read it
  NodeRef g = call(b, "aten::mul.Tensor", {n(t), n(r)}, meta({16}));
  b.output(Arg::tuple({n(y), n(g), Arg::none()}));
  Partition p = partitionJoint(b.build(), {2, 1});
  CHECK(p.saved == std::vector<std::string>{"relu"});
  CHECK(p.recomputed.empty());
  CHECK(p.forward.body().size() == 3);  // the add_ stays in the forward
}

TEST_CASE("partition is deterministic and summarised", "[partition]") {
  Graph joint = reluChain();
  Partition a = partitionJoint(joint, {1, 1});
  Partition b2 = partitionJoint(joint, {1, 1});
  CHECK(a.saved == b2.saved);
  CHECK(a.recomputed == b2.recomputed);
  CHECK(a.summary() == "1 saved (4096 bytes), 3 recomputed");
}

TEST_CASE("a graph that does not match its signature is an internal error", "[partition]") {
  Graph joint = reluChain();
  std::string message;
  try {
    partitionJoint(joint, {1, 2});
  } catch (const dynamo::InternalError& e) {
    message = e.what();
  }
  CHECK(message.find("partition: the joint output is not (2 forward outputs, 1 gradients)") != std::string::npos);
}

TEST_CASE("a resnet50-sized joint graph partitions quickly", "[partition][benchmark]") {
  // 450 blocks of mm -> mul (scale) -> add (residual) -> relu, with a mirrored backward: ~5,000
  // nodes. Only completion is checked; the time is printed for docs/partitioner.md.
  GraphBuilder b;
  const int kBlocks = 450;
  NodeRef h = b.placeholder("x", meta({32, 64, 56, 56}), "primals_x");
  std::vector<NodeRef> weights, pre, post, act;
  for (int i = 0; i < kBlocks; ++i) weights.push_back(b.placeholder("w", meta({64, 64, 3, 3}), "primals_w"));
  NodeRef t = b.placeholder("t", meta({32, 64, 56, 56}), "tangents_1");
  for (int i = 0; i < kBlocks; ++i) {
    NodeRef c = call(b, "aten::mm", {n(h), n(weights[i])}, meta({32, 64, 56, 56}));
    NodeRef s = call(b, "aten::mul.Tensor", {n(c), Arg::floating(0.5)}, meta({32, 64, 56, 56}));
    NodeRef a = call(b, "aten::add.Tensor", {n(s), n(h)}, meta({32, 64, 56, 56}));
    NodeRef r = call(b, "aten::relu", {n(a)}, meta({32, 64, 56, 56}));
    pre.push_back(h);
    post.push_back(s);
    act.push_back(r);
    h = r;
  }
  NodeRef g = t;
  std::vector<Arg> grads(kBlocks + 1, Arg::none());
  for (int i = kBlocks - 1; i >= 0; --i) {
    NodeRef gr = call(b, "aten::threshold_backward", {n(g), n(act[i]), Arg::integer(0)}, meta({32, 64, 56, 56}));
    NodeRef gs = call(b, "aten::mul.Tensor", {n(gr), Arg::floating(0.5)}, meta({32, 64, 56, 56}));
    NodeRef gw = call(b, "aten::mm", {n(gs), n(pre[i])}, meta({64, 64, 3, 3}));
    NodeRef gw2 = call(b, "aten::mul.Tensor", {n(gw), n(post[i])}, meta({64, 64, 3, 3}));
    NodeRef gx = call(b, "aten::mm", {n(gs), n(weights[i])}, meta({32, 64, 56, 56}));
    g = call(b, "aten::add.Tensor", {n(gx), n(gr)}, meta({32, 64, 56, 56}));
    grads[i + 1] = n(gw2);
  }
  grads[0] = n(g);
  std::vector<Arg> outs{n(h)};
  outs.insert(outs.end(), grads.begin(), grads.end());
  b.output(Arg::tuple(outs));
  Graph joint = b.build();
  CHECK(joint.size() > 4500);
  auto start = std::chrono::steady_clock::now();
  Partition p = partitionJoint(joint, {static_cast<size_t>(kBlocks + 1), 1});
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("partition of a %zu-node joint graph: %.1f ms; %s; forward %zu ops, backward %zu ops\n",
              joint.size(), ms, p.summary().c_str(), p.forward.body().size(), p.backward.body().size());
  CHECK(!p.saved.empty());
}
