// The symbolic interpreter's values (core/src/interp/value.h): a kind that has data of its own
// is made with it and read through as<T>(), which refuses a value of another kind.
#include <string>

#include "dynamo/common/error.h"
#include "dynamo_catch.h"
#include "value.h"

using namespace dynamo::core::interp;

TEST_CASE("a cell carries its box and slot, read through as<CellData>()", "[values]") {
  ValueRef cell = makeCell(nullptr, 3);
  CHECK(cell->kind == ValueKind::kCell);
  CellData& data = cell->as<CellData>();
  REQUIRE(data.box);
  CHECK(data.slot == 3);
  CHECK_FALSE(data.box->contents);
  auto shared = std::make_shared<CellBox>();
  CHECK(makeCell(shared, 1)->as<CellData>().box == shared);  // closures share the box
}

TEST_CASE("as<T>() on a value of another kind is an internal error naming both kinds", "[values]") {
  Value list;
  list.kind = ValueKind::kList;
  try {
    list.as<CellData>();
    FAIL("as<CellData>() accepted a list");
  } catch (const dynamo::InternalError& e) {
    CHECK(std::string(e.what()).find("a list value used as a cell") != std::string::npos);
  }
  Value relabelled;  // a cell's kind without its data is refused too
  relabelled.kind = ValueKind::kCell;
  CHECK_THROWS_AS(relabelled.as<CellData>(), dynamo::InternalError);
}

TEST_CASE("a grad-mode manager carries its role and modes, read through as<GradModeData>()", "[values]") {
  ValueRef exit = makeGradMode({GradModeData::Role::kInferenceExit, true, false});
  CHECK(exit->kind == ValueKind::kGradMode);
  const GradModeData& data = exit->as<GradModeData>();
  CHECK(data.role == GradModeData::Role::kInferenceExit);
  CHECK(data.mode);
  CHECK_FALSE(data.restore);
  try {
    makeCell(nullptr, 0)->as<GradModeData>();
    FAIL("as<GradModeData>() accepted a cell");
  } catch (const dynamo::InternalError& e) {
    CHECK(std::string(e.what()).find("a cell value used as a grad-mode context manager") != std::string::npos);
  }
  CHECK_THROWS_AS(exit->as<CellData>(), dynamo::InternalError);
}

TEST_CASE("an iterator over a list is live; over anything else it walks a snapshot", "[values]") {
  ValueRef list = makeList({makeNull()});
  ValueRef live = makeIterator(list, {});
  CHECK(live->as<IteratorData>().list == list);
  CHECK(live->as<IteratorData>().position == 0);
  CHECK_FALSE(live->as<IteratorData>().lazy);
  list->items.push_back(makeNull());  // the loop appends: the iterator sees it
  CHECK(iteratorItems(*live).size() == 2);
  ValueRef tuple = makeTuple({makeNull()});
  ValueRef snap = makeIterator(tuple, tuple->items);
  CHECK_FALSE(snap->as<IteratorData>().list);
  tuple->items.push_back(makeNull());
  CHECK(iteratorItems(*snap).size() == 1);
  CHECK_THROWS_AS(list->as<IteratorData>(), dynamo::InternalError);
}

TEST_CASE("a function made in the trace keeps its closure and keyword defaults in FunctionData", "[values]") {
  auto box = std::make_shared<CellBox>();
  FunctionData data;
  data.closure = {box};
  data.kwdefaults = makeList({});  // any Value: the constructor stores what MAKE_FUNCTION popped
  ValueRef fn = makeFunction(nullptr, {makeNull()}, "outer.<locals>.inner", data);
  CHECK(fn->kind == ValueKind::kFunction);
  CHECK(fn->name == "outer.<locals>.inner");
  CHECK(fn->items.size() == 1);  // positional defaults stay in items, walked like a container's
  REQUIRE(fn->as<FunctionData>().closure.size() == 1);
  CHECK(fn->as<FunctionData>().closure[0] == box);
  CHECK(fn->as<FunctionData>().kwdefaults == data.kwdefaults);
  CHECK_THROWS_AS(fn->as<IteratorData>(), dynamo::InternalError);
}

TEST_CASE("a tensor keeps its node, device and sizes in TensorData; graphNode() reads any graph-valued kind", "[values]") {
  dynamo::core::GraphBuilder b;
  dynamo::core::NodeRef x = b.placeholder("x");
  ValueRef t = makeTensor(x, {}, {});
  CHECK(t->kind == ValueKind::kTensor);
  const TensorData& data = t->as<TensorData>();
  CHECK(data.node == x);
  CHECK_FALSE(data.exactType);  // only a graph input records its exact type
  CHECK(data.symSizes.empty());
  CHECK_FALSE(data.constValue);
  CHECK(t->graphNode() == x);
  CHECK_FALSE(t->external());  // no source: a tensor made in the trace
  CHECK_THROWS_AS(t->as<SymIntData>(), dynamo::InternalError);
  try {
    makeList({})->graphNode();
    FAIL("graphNode() accepted a list");
  } catch (const dynamo::InternalError& e) {
    CHECK(std::string(e.what()).find("a list value has no graph node") != std::string::npos);
  }
  CHECK_THROWS_AS(makeList({})->as<TensorData>(), dynamo::InternalError);
}
