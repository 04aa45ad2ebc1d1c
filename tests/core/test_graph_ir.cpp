// The graph IR built in C++ without Python: targets by name (functions, Tensor methods, ATen
// operators), the users map, TensorMeta with strides, and a built graph through JSON and back.
#include <Python.h>

#include "dynamo/core/graph.h"
#include "dynamo/core/graph_printer.h"
#include "dynamo/core/graph_serializer.h"
#include "dynamo_catch.h"

using namespace dynamo::core;

namespace {

std::vector<std::string> names(const std::vector<NodeRef>& nodes) {
  std::vector<std::string> out;
  for (const NodeRef& n : nodes) out.push_back(n->name());
  return out;
}

// add = x + y; mul = add * add; relu = aten relu(mul); view = x.view(-1); out (relu, add, x)
Graph sample() {
  GraphBuilder b;
  TensorMeta meta;  // field by field, as the tracer makes it
  meta.shape = {2, 3};
  meta.dtype = "torch.float32";
  meta.device = "cpu";
  meta.strides = std::vector<int64_t>{3, 1};
  NodeMeta m;
  m.tensor = meta;
  NodeRef x = b.placeholder("x", m);
  NodeRef y = b.placeholder("y");
  NodeRef add = b.callFunction(Target::fromName("torch.add"), {Arg::node(x), Arg::node(y)});
  NodeRef mul = b.callFunction(Target::fromName("operator.mul"), {Arg::node(add), Arg::node(add)});
  NodeRef relu = b.callFunction(Target::atenOp("aten::relu"), {Arg::node(mul)});
  b.callMethod("view", {Arg::node(x), Arg::integer(-1)});
  b.output(Arg::tuple({Arg::node(relu), Arg::node(add), Arg::node(x)}));
  return b.build();
}

}  // namespace

TEST_CASE("targets are known by qualified name and kind", "[graph][target]") {
  Target add = Target::fromName("torch.add");
  CHECK(add.kind() == TargetKind::kFunction);
  CHECK(add.shortName() == "add");
  CHECK(add.resolvable());
  CHECK_FALSE(add.hasCallable());
  CHECK(add.callable() == nullptr);

  Target method = Target::fromName("torch.Tensor.add_");
  CHECK(method.kind() == TargetKind::kMethod);
  CHECK(method.method() == "add_");
  CHECK(Target::fromName("torch.Tensor").kind() == TargetKind::kFunction);

  Target op = Target::atenOp("aten::add.Tensor");
  CHECK(op.kind() == TargetKind::kAtenOp);
  CHECK(op.qualifiedName() == "torch.ops.aten.add.Tensor");
  CHECK(op.schemaName() == "aten::add.Tensor");
  CHECK(op.overloadName() == "Tensor");
  CHECK(op.shortName() == "add");
  Target relu = Target::atenOp("aten::relu");
  CHECK(relu.qualifiedName() == "torch.ops.aten.relu.default");
  CHECK(relu.schemaName() == "aten::relu");
  CHECK(relu.overloadName() == "default");
  Target packet = Target::fromName("torch.ops.aten.add");
  CHECK(packet.kind() == TargetKind::kAtenOp);
  CHECK(packet.overloadName().empty());
  CHECK(packet.schemaName() == "aten::add");
  CHECK(Target::fromName("torch.ops.aten").kind() == TargetKind::kFunction);
  CHECK_THROWS_AS(Target::atenOp("relu"), dynamo::UserError);
  CHECK_THROWS_AS(Target::atenOp("aten::"), dynamo::UserError);

  CHECK(Target::fromName("torch.add") == add);
  CHECK(Target::fromName("torch.add", false) != add);
  CHECK(Target::fromName("torch.sub") != add);
  // Copies and destruction of name-only targets need no interpreter.
  std::vector<Target> copies(100, op);
  CHECK(copies.back() == op);
  CHECK_FALSE(Py_IsInitialized());
}

TEST_CASE("the users map lists each user once, in graph order", "[graph][users]") {
  Graph g = sample();
  CHECK(names(g.users(g.find("x"))) == std::vector<std::string>{"add", "view", "output"});
  CHECK(names(g.users(g.find("y"))) == std::vector<std::string>{"add"});
  CHECK(names(g.users(g.find("add"))) == std::vector<std::string>{"mul", "output"});
  CHECK(names(g.users(g.find("mul"))) == std::vector<std::string>{"relu"});
  CHECK(g.users(g.find("view")).empty());
  CHECK(g.users(g.output()).empty());
  // A graph made from another has its own users.
  GraphBuilder b(g);
  b.output(Arg::node(g.find("view")));
  Graph h = b.build();
  CHECK(names(h.users(h.find("view"))) == std::vector<std::string>{"output"});
  CHECK(names(g.users(g.find("view"))).empty());
  // Users survive the trip through JSON.
  Graph back = readGraphJson(serializeGraph(g));
  CHECK(names(back.users(back.find("add"))) == std::vector<std::string>{"mul", "output"});
}

TEST_CASE("a graph built in C++ goes through JSON and back unchanged", "[graph][json]") {
  Graph g = sample();
  std::string json = serializeGraph(g);
  CHECK(json.find(R"("target":"torch.ops.aten.relu.default","schema":"aten::relu")") !=
        std::string::npos);
  CHECK(json.find(R"("strides":[3,1],"memory_format":"contiguous")") != std::string::npos);
  Graph back = readGraphJson(json);
  CHECK(serializeGraph(back) == json);
  CHECK(printGraph(back) == printGraph(g));
  CHECK(sameGraph(back, g));
  CHECK(back.find("relu")->target() == g.find("relu")->target());
  CHECK(*back.find("x")->meta().tensor == *g.find("x")->meta().tensor);
  CHECK_FALSE(back.find("x")->meta().tensor == TensorMeta{});
  CHECK(printGraph(back) ==
        "graph(%x, %y):\n"
        "  %x: f32[2, 3] = placeholder[source=x]\n"
        "  %y = placeholder[source=y]\n"
        "  %add = torch.add(%x, %y)\n"
        "  %mul = operator.mul(%add, %add)\n"
        "  %relu = torch.ops.aten.relu.default(%mul)\n"
        "  %view = %x.view(-1)\n"
        "  return (%relu, %add, %x)\n");
  CHECK_FALSE(Py_IsInitialized());
}
