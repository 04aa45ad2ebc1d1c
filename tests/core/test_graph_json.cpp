// The C++ graph reader (readGraphJson) without Python: every fixture graph reads back, prints and
// re-serializes byte for byte; bad input is refused with a message naming the node and member.
#include <Python.h>

#include <fstream>
#include <sstream>
#include <string>

#include "dynamo/core/graph_printer.h"
#include "dynamo/core/graph_serializer.h"
#include "dynamo_catch.h"

using namespace dynamo::core;
using dynamo::UserError;
using dynamo::UserErrorKind;

namespace {

std::string readFixture(const std::string& name) {
  std::ifstream in(std::string(DYNAMO_GRAPH_TEST_DATA) + "/" + name, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The message of the UserError readGraphJson throws for text.
std::string refusal(const std::string& text) {
  try {
    readGraphJson(text);
  } catch (const UserError& e) {
    CHECK(e.kind() == UserErrorKind::kInvalidArgument);
    return e.what();
  }
  FAIL("readGraphJson accepted: " << text);
  return {};
}

const char* const kPretty[] = {"conv_bn_relu.json", "dtypes.json", "inplace.json",
                               "pointwise.json", "views.json"};
const char* const kCompact[] = {"kinds.json", "resnet18.json"};

// A minimal valid document around the given nodes.
std::string doc(const std::string& nodes) {
  return R"({"format":"dynamo.graph","version":1,"nodes":[)" + nodes + "]}";
}
const std::string kX = R"({"op":"placeholder","name":"x","source":"x","meta":{}})";
const std::string kOut = R"({"op":"output","name":"output","args":[{"node":"x"}],"meta":{}})";

}  // namespace

TEST_CASE("every fixture graph round-trips byte for byte, printed forms equal", "[graph][json]") {
  auto check = [](const char* name, bool pretty) {
    INFO(name);
    std::string text = readFixture(name);
    SerializeOptions options;
    options.pretty = pretty;
    Graph g = readGraphJson(text);
    std::string again = serializeGraph(g, options);
    CHECK(again == text);
    Graph g2 = readGraphJson(again);
    CHECK(serializeGraph(g2, options) == text);
    CHECK(printGraph(g2) == printGraph(g));
    CHECK(sameGraph(g, g2));
    // Compact and pretty forms are the same graph.
    options.pretty = !pretty;
    CHECK(sameGraph(readGraphJson(serializeGraph(g, options)), g));
  };
  for (const char* name : kPretty) check(name, true);
  for (const char* name : kCompact) check(name, false);
  CHECK_FALSE(Py_IsInitialized());
}

TEST_CASE("a captured resnet18 prints from a process without Python", "[graph][json]") {
  Graph g = readGraphJson(readFixture("resnet18.json"));
  std::string text = printGraph(g);
  CHECK(contains(text, "graph(%x, %self_conv1_weight"));
  CHECK(contains(text, "%x: f32[2, 3, 64, 64] = placeholder[source=x]"));
  CHECK(contains(text, "  return "));
  std::map<std::string, int> counts = g.opCounts();
  CHECK(counts["torch.conv2d"] == 20);
  CHECK(counts["torch.nn.functional.batch_norm"] + counts["torch.batch_norm"] == 20);
  for (const NodeRef& n : g.body()) {
    if (n->op() != NodeOp::kCallFunction) continue;
    CHECK_FALSE(n->target().hasCallable());
    CHECK(n->target().resolvable());
  }
  CHECK_FALSE(Py_IsInitialized());
}

TEST_CASE("targets, tensor layouts and every argument kind read back", "[graph][json]") {
  Graph g = readGraphJson(readFixture("kinds.json"));
  const Target& print = g.find("print_1")->target();
  CHECK(print.kind() == TargetKind::kFunction);
  CHECK(print.qualifiedName() == "builtins.print");
  const Target& add = g.find("add_Tensor")->target();
  CHECK(add.kind() == TargetKind::kAtenOp);
  CHECK(add.schemaName() == "aten::add.Tensor");
  CHECK(add.overloadName() == "Tensor");
  CHECK(g.find("relu_default")->target().schemaName() == "aten::relu");
  const Target& method = g.find("add_")->target();
  CHECK(method.kind() == TargetKind::kMethod);
  CHECK(method.method() == "add_");
  CHECK_FALSE(g.find("_lambda_")->target().resolvable());

  const TensorMeta& x = *g.find("x")->meta().tensor;
  CHECK(x.shape == std::vector<int64_t>{2, 3, 4, 5});
  CHECK(x.strides == std::vector<int64_t>{60, 1, 15, 3});
  CHECK(x.memoryFormat == MemoryFormat::kChannelsLast);
  CHECK(g.find("y")->meta().tensor->memoryFormat == MemoryFormat::kOther);
  CHECK(g.find("z")->meta().tensor->requiresGrad);
  CHECK(g.find("x")->meta().userStack.size() == 2);
  CHECK(g.find("y")->meta().stackTrace == "File m.py, line 1");

  std::string text = printGraph(g);
  CHECK(contains(text, "%add_Tensor: f32[2, 3, 4, 5] = torch.ops.aten.add.Tensor(%x, %x, alpha=2)"));
  CHECK(contains(text, "-9223372036854775808, 9223372036854775807, 1.5, -0.0, inf, -inf, nan, "
                       "1e+16, 5e-324"));
  CHECK(contains(text, "slice(None, %x, 2), (%x, (1, [2, %y])), [], (), {'a': %x, 'b': [None]}"));
  CHECK(contains(text, "%view = %y.view(-1)"));
  CHECK_FALSE(Py_IsInitialized());
}

TEST_CASE("symbolic sizes read back and round-trip; graphs without them have no sym_shape", "[graph][json]") {
  const std::string meta = R"("dtype":"torch.float32","device":"cpu","requires_grad":false,"sym_shape":)";
  std::string text = doc(R"({"op":"placeholder","name":"x","source":"x","meta":{"tensor":{"shape":[8,16],)" + meta +
                         R"(["s0",null]}}},)" +
                         R"({"op":"call_function","name":"cat","target":"torch.cat","args":[[{"node":"x"},{"node":"x"}]],"meta":{"tensor":{"shape":[16,16],)" +
                         meta + R"(["2*s0",null]}}},)" +
                         R"({"op":"output","name":"output","args":[{"node":"cat"}],"meta":{}})");
  Graph g = readGraphJson(text);
  CHECK(g.find("x")->meta().tensor->symShape == std::vector<std::string>{"s0", ""});
  CHECK(g.find("cat")->meta().tensor->symShape == std::vector<std::string>{"2*s0", ""});
  std::string again = serializeGraph(g);
  CHECK(contains(again, R"("sym_shape":["2*s0",null])"));
  Graph g2 = readGraphJson(again);
  CHECK(sameGraph(g, g2));
  CHECK(serializeGraph(g2) == again);
  // A different expression is a different graph.
  std::string other = text;
  other.replace(other.find("2*s0"), 4, "2*s1");
  CHECK_FALSE(sameGraph(readGraphJson(other), g));
  // Static fixtures carry no symbolic sizes.
  CHECK_FALSE(contains(readFixture("resnet18.json"), "sym_shape"));
  CHECK(readGraphJson(readFixture("resnet18.json")).find("x")->meta().tensor->symShape.empty());
  CHECK_FALSE(Py_IsInitialized());
}

TEST_CASE("bad graph text is refused with a message naming what is wrong", "[graph][json]") {
  CHECK(contains(refusal("{"), "not valid JSON"));
  CHECK(contains(refusal("[]"), "expected a JSON object"));
  CHECK(contains(refusal(R"({"format":"x"})"), "not a Dynamo graph"));
  CHECK(contains(refusal(R"({"format":"dynamo.graph","version":99,"nodes":[]})"),
                 "graph format version 99 is not supported"));
  CHECK(contains(refusal(doc(kX)), "the graph has no output node"));
  CHECK(contains(refusal(doc(R"({"op":"frob","name":"x"})")), "node 0 'x': unknown node op \"frob\""));
  CHECK(contains(refusal(doc(R"({"op":"placeholder","name":"x"})")),
                 "node 0 'x': missing member \"source\""));
  CHECK(contains(refusal(doc(R"({"op":"placeholder","name":3,"source":"x"})")),
                 "member \"name\" must be a string, got number"));
  CHECK(contains(refusal(doc(R"({"op":"output","name":"output","args":[{"node":"q"}]})")),
                 "node 0 'output': uses node 'q', which is not defined before it"));
  CHECK(contains(refusal(doc(kX + "," + kX + "," + kOut)), "node 1 'x': node name 'x' is a duplicate"));
  CHECK(contains(refusal(doc(R"({"op":"placeholder","name":"def","source":"x"},)" + kOut)),
                 "node name 'def' is a duplicate or not a valid node name"));
  CHECK(contains(refusal(doc(kX + "," + kOut + "," + kX)), "nodes after the output node"));
  std::string call = R"({"op":"call_function","name":"neg","target":"torch.neg","args":[{"node":"x"}]})";
  CHECK(contains(refusal(doc(kX + "," + call + "," + R"({"op":"placeholder","name":"y","source":"y"})")),
                 "placeholders must come before the call nodes"));
  CHECK(contains(refusal(doc(kX + R"(,{"op":"call_function","name":"neg","target":"torch.neg","args":[{"bogus":1}]})")),
                 "node 1 'neg': unknown argument tag \"bogus\""));
  CHECK(contains(refusal(doc(kX + R"(,{"op":"call_function","name":"neg","target":"torch.neg","args":[18446744073709551615]})")),
                 "does not fit in 64 bits"));
  CHECK(contains(refusal(doc(kX + R"(,{"op":"call_function","name":"add","target":"torch.add","schema":"aten::add.Tensor","args":[]})")),
                 "schema \"aten::add.Tensor\" does not match target \"torch.add\""));
  CHECK(contains(refusal(doc(kX + R"(,{"op":"call_method","name":"view","target":"view","args":[]})")),
                 "needs the object it is called on"));
  CHECK(contains(refusal(doc(R"({"op":"placeholder","name":"x","source":"x","meta":{"tensor":{"shape":[2],"dtype":"torch.float32","device":"cpu","requires_grad":false,"strides":[1,1],"memory_format":"contiguous"}}},)" + kOut)),
                 "tensor meta has 1 sizes but 2 strides"));
  CHECK(contains(refusal(doc(R"({"op":"placeholder","name":"x","source":"x","meta":{"tensor":{"shape":[2],"dtype":"torch.float32","device":"cpu","requires_grad":false,"strides":[1],"memory_format":"nchw"}}},)" + kOut)),
                 "unknown memory format \"nchw\""));
  CHECK(contains(refusal(doc(R"({"op":"placeholder","name":"x","source":"x","meta":{"tensor":{"shape":[2],"dtype":"torch.float32","device":"cpu","requires_grad":false,"sym_shape":["s0",null]}}},)" + kOut)),
                 "tensor meta has 1 sizes but 2 symbolic sizes"));
  CHECK(contains(refusal(doc(R"({"op":"placeholder","name":"x","source":"x","meta":{"tensor":{"shape":[2],"dtype":"torch.float32","device":"cpu","requires_grad":false,"sym_shape":[3]}}},)" + kOut)),
                 "tensor meta \"sym_shape\" items must be strings or null"));
  CHECK(contains(refusal(doc(kX + R"(,{"op":"output","name":"output","args":[{"slice":[1]}]})")),
                 "a slice needs [start, stop, step]"));
  // A minimal valid graph is accepted.
  Graph g = readGraphJson(doc(kX + "," + kOut));
  CHECK(g.size() == 2);
  CHECK_FALSE(Py_IsInitialized());
}
