// Property tests of the partitioner on randomised joint graphs (fixed seed): for both modes,
// forward + backward run by the toy evaluator give the joint's forward outputs and gradients
// exactly; the min cut never saves more bytes than save-all; random ops and mm are never
// recomputed; saved values are forward values; the result is deterministic.
#include <random>
#include <string>
#include <unordered_set>

#include "dynamo/backends/partition.h"
#include "dynamo/core/graph_printer.h"
#include "dynamo_catch.h"
#include "toy_eval.h"

using namespace dynamo::core;
using namespace dynamo::backends;

namespace {

struct RandomJoint {
  Graph graph;
  JointSignature sig;
  bool allMeta = true;  ///< every tensor node has TensorMeta
};

class JointMaker {
 public:
  JointMaker(std::mt19937& rng, bool withUnknownMeta) : rng_(rng), unknown_(withUnknownMeta) {}

  RandomJoint make() {
    GraphBuilder b;
    bool allMeta = true;
    size_t numPrimals = 1 + pick(3);
    std::vector<NodeRef> fwd, bwd;
    for (size_t i = 0; i < numPrimals; ++i) {
      int64_t size = randomSize();
      fwd.push_back(b.placeholder("p", meta(size), "primals_" + std::to_string(i + 1)));
    }
    // Forward outputs are decided before the tangents are added (they are inputs).
    int numFwdOps = 2 + static_cast<int>(pick(12));
    static const char* kOps[] = {"aten::mul.Tensor", "aten::add.Tensor", "aten::relu", "aten::neg",
                                 "aten::mm",         "aten::bernoulli.p", "aten::sum"};
    // Tangents are inputs, so they are added before the body (their sizes are not checked).
    size_t numFwdOut = 1 + pick(2);
    std::vector<NodeRef> tangents;
    for (size_t i = 0; i < numFwdOut; ++i)
      tangents.push_back(b.placeholder("t", meta(randomSize()), "tangents_" + std::to_string(i + 1)));
    for (int i = 0; i < numFwdOps; ++i) {
      std::string op = kOps[pick(7)];
      NodeRef a = fwd[pick(fwd.size())];
      NodeRef c = fwd[pick(fwd.size())];
      int64_t size = op == "aten::sum" ? 1 : op == "aten::mm" ? randomSize() : sizeOf(a);
      if (op == "aten::mul.Tensor" || op == "aten::add.Tensor") size = std::max(sizeOf(a), sizeOf(c));
      std::vector<Arg> args{Arg::node(a)};
      if (op == "aten::mul.Tensor" || op == "aten::add.Tensor" || op == "aten::mm") args.push_back(Arg::node(c));
      if (op == "aten::bernoulli.p") args.push_back(Arg::floating(0.5));
      bool noMeta = unknown_ && pick(10) == 0;
      allMeta = allMeta && !noMeta;
      fwd.push_back(b.callFunction(Target::atenOp(op), std::move(args), {}, noMeta ? NodeMeta{} : meta(size)));
    }
    std::vector<Arg> outputs;
    for (size_t i = 0; i < numFwdOut; ++i) outputs.push_back(Arg::node(fwd[pick(fwd.size())]));
    bwd = tangents;
    int numBwdOps = 1 + static_cast<int>(pick(10));
    static const char* kBwdOps[] = {"aten::mul.Tensor", "aten::add.Tensor", "aten::threshold_backward",
                                    "aten::neg"};
    for (int i = 0; i < numBwdOps; ++i) {
      std::string op = kBwdOps[pick(4)];
      NodeRef g = bwd[pick(bwd.size())];
      NodeRef f = pick(4) == 0 ? bwd[pick(bwd.size())] : fwd[pick(fwd.size())];
      std::vector<Arg> args{Arg::node(g)};
      if (op != "aten::neg") args.push_back(Arg::node(f));
      if (op == "aten::threshold_backward") args.push_back(Arg::integer(0));
      bwd.push_back(b.callFunction(Target::atenOp(op), std::move(args), {}, meta(sizeOf(g))));
    }
    for (size_t i = 0; i < numPrimals; ++i) {
      size_t kind = pick(10);
      if (kind < 3) outputs.push_back(Arg::none());
      else if (kind == 3) outputs.push_back(Arg::node(fwd[pick(fwd.size())]));
      else outputs.push_back(Arg::node(bwd[pick(bwd.size())]));
    }
    b.output(Arg::tuple(std::move(outputs)));
    return RandomJoint{b.build(), {numPrimals, numFwdOut}, allMeta};
  }

 private:
  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  int64_t randomSize() { return int64_t{1} << (2 * pick(4)); }
  static NodeMeta meta(int64_t size) {
    NodeMeta m;
    m.tensor = TensorMeta{};
    m.tensor->shape = {size};
    m.tensor->dtype = "torch.float32";
    return m;
  }
  static int64_t sizeOf(const NodeRef& n) { return n->meta().tensor ? n->meta().tensor->shape[0] : 16; }

  std::mt19937& rng_;
  bool unknown_;
};

/// Runs joint and forward + backward on the same random inputs; true when all results match.
bool sameResults(const RandomJoint& j, const Partition& p, std::mt19937& rng) {
  std::uniform_real_distribution<double> value(-2, 2);
  std::vector<double> primals, tangents;
  for (size_t i = 0; i < j.sig.numPrimals; ++i) primals.push_back(value(rng));
  for (size_t i = j.sig.numPrimals; i < j.graph.inputs().size(); ++i) tangents.push_back(value(rng));
  std::vector<double> jointIn = primals;
  jointIn.insert(jointIn.end(), tangents.begin(), tangents.end());
  toy::randomCounter() = 0;
  std::vector<toy::Value> expected = toy::run(j.graph, jointIn);
  toy::randomCounter() = 0;
  std::vector<toy::Value> fwd = toy::run(p.forward, primals);
  if (fwd.size() != j.sig.numFwdOutputs + p.saved.size()) return false;
  std::vector<double> bwdIn;
  for (size_t i = j.sig.numFwdOutputs; i < fwd.size(); ++i) bwdIn.push_back(*fwd[i]);
  bwdIn.insert(bwdIn.end(), tangents.begin(), tangents.end());
  std::vector<toy::Value> grads = toy::run(p.backward, bwdIn);
  if (grads.size() != j.sig.numPrimals) return false;
  for (size_t i = 0; i < j.sig.numFwdOutputs; ++i)
    if (fwd[i] != expected[i]) return false;
  for (size_t i = 0; i < j.sig.numPrimals; ++i)
    if (grads[i] != expected[j.sig.numFwdOutputs + i]) return false;
  return true;
}

}  // namespace

TEST_CASE("forward + backward equal the joint on random graphs", "[partition][property]") {
  std::mt19937 rng(20261124);
  int minCutRecomputes = 0;
  for (int iter = 0; iter < 600; ++iter) {
    JointMaker maker(rng, iter % 2 == 1);
    RandomJoint j = maker.make();
    INFO("graph " << iter << "\n" << printGraph(j.graph));
    Partition cut = partitionJoint(j.graph, j.sig);
    Partition all = partitionJoint(j.graph, j.sig, {PartitionMode::kSaveAll, {}});
    INFO(cut.summary() << "\nforward:\n" << printGraph(cut.forward) << "backward:\n" << printGraph(cut.backward));
    REQUIRE(sameResults(j, cut, rng));
    REQUIRE(sameResults(j, all, rng));
    CHECK(all.recomputed.empty());
    if (j.allMeta) CHECK(cut.bytesSaved <= all.bytesSaved);
    for (const std::string& r : cut.recomputed) {
      NodeRef node = j.graph.find(r);
      REQUIRE(node);
      CHECK(node->target().schemaName() != "aten::mm");
      CHECK(node->target().schemaName() != "aten::bernoulli.p");
    }
    for (const std::string& s : cut.saved) CHECK(j.graph.find(s) != nullptr);
    minCutRecomputes += !cut.recomputed.empty();
    Partition again = partitionJoint(j.graph, j.sig);
    CHECK(again.saved == cut.saved);
    CHECK(again.recomputed == cut.recomputed);
  }
  CHECK(minCutRecomputes > 50);  // the property is exercised with recompute, not only without
}
