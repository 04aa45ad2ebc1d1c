// Live targets without the GIL: a graph holding Python callables is copied and destroyed on
// threads that do not hold the GIL; the last owner of a handle takes the GIL to release it. This
// binary starts an interpreter (the others never do).
#include <Python.h>

#include <thread>
#include <vector>

#include "dynamo/core/graph.h"
#include "dynamo/core/graph_python.h"
#include "dynamo/core/graph_serializer.h"
#include "dynamo_catch.h"

using namespace dynamo::core;

namespace {

// A fresh Python function object (a new ref), so its reference count is ours to watch.
PyObject* makeFunction() {
  PyObject* globals = PyDict_New();  // new ref
  PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
  PyObject* r = PyRun_String("def neg(t):\n    return -t\n", Py_file_input, globals, globals);
  REQUIRE(r != nullptr);
  Py_DECREF(r);
  PyObject* fn = PyDict_GetItemString(globals, "neg");  // borrowed ref
  Py_INCREF(fn);
  Py_DECREF(globals);
  return fn;
}

}  // namespace

TEST_CASE("graphs with live targets are copied and destroyed without the GIL", "[graph][gil]") {
  Py_InitializeEx(0);
  PyObject* fn = makeFunction();
  Py_ssize_t before = Py_REFCNT(fn);
  Graph g = [&] {
    GraphBuilder b;
    NodeRef x = b.placeholder("x");
    NodeRef n = b.callFunction(Target::make(PyObjectRef::borrow(fn), "neg", false), {Arg::node(x)});
    b.output(Arg::node(n));
    return b.build();
  }();
  CHECK(Py_REFCNT(fn) == before + 1);  // one handle, shared by every copy
  CHECK(g.find("neg")->target().callable() == fn);

  PyThreadState* state = PyEval_SaveThread();  // release the GIL
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([copy = g] {
      for (int j = 0; j < 1000; ++j) {
        Graph again = copy;
        Target t = again.find("neg")->target();
        (void)serializeGraph(again);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // The last owner is a thread without the GIL: the deleter takes it.
  std::thread last([moved = std::move(g)]() mutable { moved = readGraphJson(serializeGraph(moved)); });
  last.join();
  PyEval_RestoreThread(state);

  CHECK(Py_REFCNT(fn) == before);
  Py_DECREF(fn);
  Py_FinalizeEx();
}
