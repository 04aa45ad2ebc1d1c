// Unit tests of the pass pipeline (core/src/passes, passes.def) on graphs built by name, without
// Python: dead-code elimination keeps what could change anything, the rewriter remaps arguments,
// the pipeline records what each pass did and skips disabled passes, numbers each application
// and lets only the first N go ahead under a limit (DYNAMO_BISECT_PASS), and the test-only pass
// corrupts the one node it is told to.
#include "dynamo/core/graph_printer.h"
#include "dynamo/core/passes.h"
#include "dynamo_catch.h"

using namespace dynamo::core;

namespace {

// x, y -> dead chain (mul, relu), a possibly raising getitem, an in-place add_, used add.
Graph sample() {
  GraphBuilder b;
  NodeRef x = b.placeholder("x");
  NodeRef y = b.placeholder("y");
  NodeRef mul = b.callFunction(Target::fromName("operator.mul"), {Arg::node(x), Arg::integer(2)});
  b.callMethod("relu", {Arg::node(mul)});                                          // dead, pure
  b.callFunction(Target::fromName("operator.getitem"), {Arg::node(x), Arg::node(y)});  // may raise
  b.callMethod("add_", {Arg::node(y), Arg::integer(1)});                            // mutates
  b.callFunction(Target::fromName("torch.rand"), {Arg::integer(3)});                // random
  b.callFunction(Target::fromName("torch.add"), {Arg::node(x), Arg::integer(1)},
                 {{"out", Arg::node(y)}});                                          // writes y
  NodeRef add = b.callFunction(Target::fromName("operator.add"), {Arg::node(x), Arg::integer(1)});
  b.output(Arg::tuple({Arg::node(add)}));
  return b.build();
}

// Runs dead-code elimination alone, with no limit; its applications go to `apps`.
Graph dce(const Graph& g, std::vector<PassApplication>* apps = nullptr) {
  PassOptions options;
  std::atomic<std::int64_t> counter{0};
  std::vector<PassApplication> local;
  PassContext ctx(options, counter, -1, apps ? *apps : local);
  return runDeadCodeElimination(g, ctx);
}

std::vector<std::string> bodyNames(const Graph& g) {
  std::vector<std::string> out;
  for (const NodeRef& n : g.body()) out.push_back(n->name());
  return out;
}

}  // namespace

TEST_CASE("dead-code elimination drops only pure unused nodes", "[passes][dce]") {
  Graph g = sample();
  Graph out = dce(g);
  CHECK(bodyNames(out) == std::vector<std::string>{"getitem", "add_", "rand", "add", "add_1"});
  // Inputs keep their order and names; the output refers to the copy of `add`.
  REQUIRE(out.inputs().size() == 2);
  CHECK(out.inputs()[0]->name() == "x");
  CHECK(out.output()->outputValue().items()[0].asNode()->name() == "add_1");
  CHECK(out.users(out.inputs()[0]).size() == 3);
}

TEST_CASE("dead-code elimination keeps an unused op that reads mixed dtypes", "[passes][dce]") {
  // bfloat16 @ float32 raises in eager; the meta kernel traced it. Same dtypes may go.
  auto meta = [](const char* dtype) {
    NodeMeta m;
    m.tensor = TensorMeta{{3, 3}, dtype, "cpu"};
    return m;
  };
  GraphBuilder b;
  NodeRef a = b.placeholder("a", meta("torch.bfloat16"));
  NodeRef w = b.placeholder("w", meta("torch.float32"));
  NodeRef v = b.placeholder("v", meta("torch.float32"));
  b.callFunction(Target::fromName("operator.matmul"), {Arg::node(a), Arg::node(w)});  // mixed
  b.callFunction(Target::fromName("operator.matmul"), {Arg::node(v), Arg::node(w)});  // same
  b.output(Arg::tuple({Arg::node(w)}));
  CHECK(bodyNames(dce(b.build())) == std::vector<std::string>{"matmul"});
}

TEST_CASE("a pass that changes nothing returns its input", "[passes][dce]") {
  Graph once = dce(sample());
  Graph twice = dce(once);
  CHECK(twice.body() == once.body());
  CHECK(printGraph(twice) == printGraph(once));
}

TEST_CASE("the pipeline records each pass and skips disabled ones", "[passes][pipeline]") {
  REQUIRE(passList().size() == 2);
  CHECK(std::string(passList()[0].name) == "dead_code_elimination");
  CHECK(std::string(passList()[1].name) == "test_corrupt_node");
  CHECK(passList()[1].testOnly);
  std::vector<PassRecord> records;
  Graph out = runPasses(sample(), {}, &records);
  REQUIRE(records.size() == 1);  // the test-only pass is off: not even recorded
  CHECK(records[0].status == "changed");
  CHECK(records[0].nodesBefore - records[0].nodesAfter == 2);
  CHECK(records[0].graphText == printGraph(out));

  records.clear();
  PassOptions off;
  off.disabled = {"dead_code_elimination"};
  Graph same = runPasses(sample(), off, &records);
  CHECK(records[0].status == "disabled");
  CHECK(records[0].graphText.empty());
  CHECK(same.body().size() == sample().body().size());
}

TEST_CASE("applications are numbered and a limit lets only the first N go ahead", "[passes][bisect]") {
  // Dead-code elimination walks backwards: relu (1), then mul (2), which is dead only once relu is.
  std::vector<PassApplication> apps;
  dce(sample(), &apps);
  REQUIRE(apps.size() == 2);
  CHECK(apps[0].index == 1);
  CHECK(apps[0].node == "relu");
  CHECK(apps[0].op == "torch.Tensor.relu");
  CHECK(apps[1].node == "mul");
  CHECK(apps[1].applied);

  auto counters = std::make_shared<PassCounters>();
  PassOptions one;
  one.counters = counters;
  one.limits = {{"dead_code_elimination", 1}};
  std::vector<PassRecord> records;
  Graph out = runPasses(sample(), one, &records);
  // Only relu goes; mul stays (its removal, the second application, is skipped).
  CHECK(bodyNames(out) == std::vector<std::string>{"mul", "getitem", "add_", "rand", "add", "add_1"});
  REQUIRE(records[0].applications.size() == 2);
  CHECK(records[0].applications[0].applied);
  CHECK_FALSE(records[0].applications[1].applied);
  // The counters are shared: a second run numbers on from 3, past the limit, and removes nothing.
  records.clear();
  out = runPasses(sample(), one, &records);
  REQUIRE(records[0].applications.size() == 1);
  CHECK(records[0].applications[0].index == 3);
  CHECK_FALSE(records[0].applications[0].applied);
  CHECK(records[0].status == "unchanged");
  CHECK(out.body().size() == sample().body().size());
  // A limit of 0 is the pass disabled, application by application.
  PassOptions none;
  none.limits = {{"dead_code_elimination", 0}};
  CHECK(runPasses(sample(), none).body().size() == sample().body().size());
}

TEST_CASE("test_corrupt_node: one application per call node, one node made wrong", "[passes][bisect]") {
  PassOptions on;
  on.disabled = {"dead_code_elimination"};
  on.corruptNode = "relu";
  std::vector<PassRecord> records;
  Graph out = runPasses(sample(), on, &records);
  REQUIRE(records.size() == 2);
  CHECK(records[1].name == "test_corrupt_node");
  CHECK(records[1].applications.size() == sample().body().size());
  CHECK(records[1].applications[1].node == "relu");
  CHECK(bodyNames(out) == std::vector<std::string>{"mul", "relu", "relu_corrupted", "getitem", "add_", "rand",
                                                   "add", "add_1"});
  // Capped before relu's application (the second), it changes nothing that matters.
  on.limits = {{"test_corrupt_node", 1}};
  CHECK(bodyNames(runPasses(sample(), on)) ==
        std::vector<std::string>{"mul", "relu", "getitem", "add_", "rand", "add", "add_1"});
}

TEST_CASE("test_corrupt_node in its value mode: the node's value plus 0.01", "[passes][bisect]") {
  PassOptions on;
  on.disabled = {"dead_code_elimination"};
  on.corruptNode = "relu:value";
  Graph out = runPasses(sample(), on);
  CHECK(bodyNames(out) == std::vector<std::string>{"mul", "relu", "relu_corrupted", "getitem", "add_", "rand",
                                                   "add", "add_1"});
  const NodeRef& wrong = out.body()[2];
  CHECK(wrong->method() == "add");
  INFO(printGraph(out));
  CHECK(printGraph(out).find("%relu_corrupted = %relu.add(0.01)") != std::string::npos);
}
