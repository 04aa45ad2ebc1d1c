// Guards (core/src/guards) in C++ on real Python values: the fast check, failures as data (kind,
// source, what differed, expected, seen, the user line that made the guard), deduplication and
// the listing. This binary starts an interpreter.
#include <Python.h>

#include <string>

#include "dynamo/core/graph_pyref.h"
#include "dynamo/core/guards.h"
#include "dynamo_catch.h"

using namespace dynamo::core;

namespace {

// One interpreter for the whole binary, started by the first test that needs it.
void ensureInterpreter() {
  static const bool started = (Py_InitializeEx(0), true);
  (void)started;
}

// Frame values over two slots (borrowed refs) and an empty globals dict.
struct Frame {
  PyObject* slots[2];
  PyObjectRef globals = PyObjectRef::steal(PyDict_New());
  FrameValues values() const {
    FrameValues v;
    v.locals = slots;
    v.nlocals = 2;
    v.globals = globals.get();
    v.builtins = PyEval_GetBuiltins();
    return v;
  }
};

PyObjectRef eval(const char* expr) {
  PyObjectRef globals = PyObjectRef::steal(PyDict_New());
  PyDict_SetItemString(globals.get(), "__builtins__", PyEval_GetBuiltins());
  PyObjectRef r = PyObjectRef::steal(PyRun_String(expr, Py_eval_input, globals.get(), globals.get()));
  REQUIRE(r);
  return r;
}

GuardSet twoGuards() {
  PyObjectRef three = eval("3");
  GuardSetBuilder b;
  Source n = Source::local(0, "n");
  Source items = Source::local(1, "items");
  CHECK(b.add(n, makeEqualsMatch(three.get()), {"model.py", 4, "y = x * n"}));
  CHECK_FALSE(b.add(n, makeEqualsMatch(three.get()), {"model.py", 9, "z = y * n"}));  // dedup
  CHECK(b.add(items, makeLengthCheck(2), {"model.py", 5, "a, b = items"}));
  CHECK(b.size() == 2);
  return b.build();
}

}  // namespace

TEST_CASE("a guard set passes on what it was made for and fails on the rest", "[guards]") {
  ensureInterpreter();
  GuardSet guards = twoGuards();
  REQUIRE(guards.size() == 2);
  PyObjectRef three = eval("3"), pair = eval("[1, 2]"), four = eval("4"), triple = eval("[1, 2, 3]");
  Frame same{{three.get(), pair.get()}};
  CHECK(guards.check(same.values()));
  CHECK(guards.failures(same.values()).empty());
  CHECK(guards.failureReason(same.values()).empty());

  Frame other{{four.get(), triple.get()}};
  CHECK_FALSE(guards.check(other.values()));
  std::vector<GuardFailure> failures = guards.failures(other.values());
  REQUIRE(failures.size() == 2);
  const GuardFailure* equals = nullptr;
  const GuardFailure* length = nullptr;
  for (const GuardFailure& f : failures) (f.kind == GuardKind::kEqualsMatch ? equals : length) = &f;
  REQUIRE(equals != nullptr);
  REQUIRE(length != nullptr);
  CHECK(equals->sourceName == "n");
  CHECK(equals->expected == "3");
  CHECK(equals->seen == "4");
  CHECK(equals->where.file == "model.py");
  CHECK(equals->where.line == 4);  // the first guard kept, not the duplicate's line
  CHECK(equals->reason.find("'n'") != std::string::npos);
  CHECK(length->kind == GuardKind::kLengthCheck);
  CHECK(length->sourceName == "items");
  CHECK(length->expected == "2");
  CHECK(length->seen == "3");
  CHECK(!PyErr_Occurred());
}

TEST_CASE("an unbound slot fails the check without leaving a Python error", "[guards]") {
  ensureInterpreter();
  GuardSet guards = twoGuards();
  PyObjectRef pair = eval("[1, 2]");
  Frame unbound{{nullptr, pair.get()}};
  CHECK_FALSE(guards.check(unbound.values()));
  CHECK(!PyErr_Occurred());
  CHECK_FALSE(guards.failures(unbound.values()).empty());
}

TEST_CASE("the listing names each guard with its user line", "[guards]") {
  ensureInterpreter();
  std::string text = twoGuards().describe();
  CHECK(text.find("EQUALS_MATCH") != std::string::npos);
  CHECK(text.find("LENGTH_CHECK") != std::string::npos);
  CHECK(text.find("model.py:5: a, b = items") != std::string::npos);
}
