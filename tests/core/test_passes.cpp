// Unit tests of the pass pipeline (core/src/passes, passes.def) on graphs built by name, without
// Python: dead-code elimination keeps what could change anything, the rewriter remaps arguments,
// the pipeline records what each pass did and skips disabled passes.
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

std::vector<std::string> bodyNames(const Graph& g) {
  std::vector<std::string> out;
  for (const NodeRef& n : g.body()) out.push_back(n->name());
  return out;
}

}  // namespace

TEST_CASE("dead-code elimination drops only pure unused nodes", "[passes][dce]") {
  Graph g = sample();
  Graph out = runDeadCodeElimination(g);
  CHECK(bodyNames(out) == std::vector<std::string>{"getitem", "add_", "rand", "add", "add_1"});
  // Inputs keep their order and names; the output refers to the copy of `add`.
  REQUIRE(out.inputs().size() == 2);
  CHECK(out.inputs()[0]->name() == "x");
  CHECK(out.output()->outputValue().items()[0].asNode()->name() == "add_1");
  CHECK(out.users(out.inputs()[0]).size() == 3);
}

TEST_CASE("a pass that changes nothing returns its input", "[passes][dce]") {
  Graph once = runDeadCodeElimination(sample());
  Graph twice = runDeadCodeElimination(once);
  CHECK(twice.body() == once.body());
  CHECK(printGraph(twice) == printGraph(once));
}

TEST_CASE("the pipeline records each pass and skips disabled ones", "[passes][pipeline]") {
  REQUIRE(passList().size() == 1);
  CHECK(std::string(passList()[0].name) == "dead_code_elimination");
  std::vector<PassRecord> records;
  Graph out = runPasses(sample(), {}, &records);
  REQUIRE(records.size() == 1);
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
