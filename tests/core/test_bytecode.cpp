// The bytecode toolkit (core/src/bytecode) in C++, on code objects compiled by a real
// interpreter: decode -> assemble round trips that run, jump and handler targets kept, the
// printer, and verify() catching a broken stack. This binary starts an interpreter.
#include <Python.h>

#include <string>

#include "dynamo/common/error.h"
#include "dynamo/core/bytecode.h"
#include "dynamo_catch.h"

namespace bc = dynamo::core::bytecode;
using dynamo::core::PyObjectRef;

namespace {

constexpr const char* kSource =
    "def f(x, n):\n"
    "    total = 0\n"
    "    for i in range(n):\n"
    "        try:\n"
    "            total += x // (i - 2)\n"
    "        except ZeroDivisionError:\n"
    "            total -= 100\n"
    "    return total\n";

// One interpreter for the whole binary, started by the first test that needs it.
void ensureInterpreter() {
  static const bool started = (Py_InitializeEx(0), true);
  (void)started;
}

// The function `name` defined by kSource, in `globals` (new refs both).
PyObjectRef defineFunction(PyObjectRef& globals) {
  globals = PyObjectRef::steal(PyDict_New());
  PyDict_SetItemString(globals.get(), "__builtins__", PyEval_GetBuiltins());
  PyObjectRef r = PyObjectRef::steal(PyRun_String(kSource, Py_file_input, globals.get(), globals.get()));
  REQUIRE(r);
  return PyObjectRef::borrow(PyDict_GetItemString(globals.get(), "f"));
}

long callWith(PyObject* fn, long x, long n) {
  PyObjectRef out = PyObjectRef::steal(PyObject_CallFunction(fn, "ll", x, n));
  REQUIRE(out);
  return PyLong_AsLong(out.get());
}

}  // namespace

TEST_CASE("decode and assemble round-trip a function with a loop and a handler", "[bytecode]") {
  ensureInterpreter();
  {
    PyObjectRef globals;
    PyObjectRef fn = defineFunction(globals);
    auto* code = reinterpret_cast<PyCodeObject*>(PyFunction_GetCode(fn.get()));  // borrowed ref
    bc::Bytecode decoded = bc::decode(code);
    bc::CodeOptions opts = bc::codeOptionsFrom(code);
    REQUIRE_NOTHROW(bc::verify(decoded, &opts));
    CHECK(!decoded.exceptionTable().empty());

    PyObjectRef again = bc::assemble(decoded, opts);
    REQUIRE(again);
    // The same instructions, targets and handlers come back out of the assembled code.
    bc::Bytecode redecoded = bc::decode(reinterpret_cast<PyCodeObject*>(again.get()));
    REQUIRE(redecoded.instructions.size() == decoded.instructions.size());
    for (size_t i = 0; i < decoded.instructions.size(); ++i) {
      INFO("instruction " << i << ": " << decoded.instructions[i].name());
      CHECK(redecoded.instructions[i].opcode == decoded.instructions[i].opcode);
      CHECK(redecoded.instructions[i].arg == decoded.instructions[i].arg);
      CHECK(redecoded.instructions[i].target == decoded.instructions[i].target);
    }
    // And it runs as the original does (the handler included: i == 2 divides by zero).
    PyObjectRef copy = PyObjectRef::steal(PyFunction_New(again.get(), globals.get()));
    REQUIRE(copy);
    for (long n : {0L, 2L, 5L}) CHECK(callWith(copy.get(), 12, n) == callWith(fn.get(), 12, n));

    std::string listing = bc::print(decoded, &opts);
    CHECK(listing.find("FOR_ITER") != std::string::npos);
    CHECK(listing.find("RETURN_VALUE") != std::string::npos);
  }
}

TEST_CASE("verify names a stack underflow", "[bytecode]") {
  ensureInterpreter();
  {
    PyObjectRef globals;
    PyObjectRef fn = defineFunction(globals);
    auto* code = reinterpret_cast<PyCodeObject*>(PyFunction_GetCode(fn.get()));  // borrowed ref
    bc::Bytecode broken = bc::decode(code);
    bc::CodeOptions opts = bc::codeOptionsFrom(code);
    // A POP_TOP right after RESUME pops from an empty stack.
    size_t resume = 0;
    while (std::string(broken.instructions[resume].name()) != "RESUME") ++resume;
    broken.insert(resume + 1, {bc::Instruction::make(bc::opcodeByName("POP_TOP"))});
    CHECK_THROWS_AS(bc::verify(broken, &opts), dynamo::InternalError);
  }
}

namespace {

constexpr const char* kHandlersSource =
    "def g(xs, y, ctx):\n"
    "    try:\n"
    "        a = y + 1\n"                          // 3: under the try's handler
    "    except ValueError:\n"
    "        a = y - 2\n"                          // 5: the except body's cleanup only
    "    c = [v * 3 for v in xs]\n"                // 6: 3.12: the comprehension's restore only
    "    with ctx:\n"
    "        d = y * 4\n"                          // 8: the with's exit
    "    try:\n"
    "        e = [v * 5 for v in xs]\n"            // 10: 3.12: restore, then the try's handler
    "    finally:\n"
    "        y = 0\n"
    "    return a, c, d, e\n";

// The first BINARY_OP on `line` of g's decoded body, or -1.
int binaryOpOnLine(const bc::Bytecode& code, int line) {
  for (size_t i = 0; i < code.instructions.size(); ++i)
    if (code.instructions[i].pos.line == line && std::string(code.instructions[i].name()) == "BINARY_OP")
      return static_cast<int>(i);
  return -1;
}

}  // namespace

TEST_CASE("firstUserHandler walks out through CPython's cleanup handlers", "[bytecode]") {
  ensureInterpreter();
  {
    PyObjectRef globals = PyObjectRef::steal(PyDict_New());
    PyDict_SetItemString(globals.get(), "__builtins__", PyEval_GetBuiltins());
    PyObjectRef r = PyObjectRef::steal(PyRun_String(kHandlersSource, Py_file_input, globals.get(), globals.get()));
    REQUIRE(r);
    PyObject* fn = PyDict_GetItemString(globals.get(), "g");  // borrowed ref
    REQUIRE(fn);
    bc::Bytecode code = bc::decode(reinterpret_cast<PyCodeObject*>(PyFunction_GetCode(fn)));
    auto userHandlerAt = [&](int line) {
      const int i = binaryOpOnLine(code, line);
      REQUIRE(i >= 0);
      return bc::firstUserHandler(code, code.instructions[i].handler);
    };

    const bc::ExceptionHandler inTry = userHandlerAt(3);
    CHECK(inTry.active());
    CHECK(inTry == code.instructions[binaryOpOnLine(code, 3)].handler);  // the try's own
    CHECK_FALSE(bc::isWithExitHandler(code, inTry));

    const int inExcept = binaryOpOnLine(code, 5);
    CHECK(code.instructions[inExcept].handler.active());  // the exception-state cleanup
    CHECK_FALSE(userHandlerAt(5).active());

    const bc::ExceptionHandler inWith = userHandlerAt(8);
    CHECK(inWith.active());
    CHECK(bc::isWithExitHandler(code, inWith));

    if (bc::kPython312) {
      const int inComprehension = binaryOpOnLine(code, 6);
      CHECK(code.instructions[inComprehension].handler.active());  // the locals' restore
      CHECK_FALSE(userHandlerAt(6).active());
      const bc::ExceptionHandler inTryComprehension = userHandlerAt(10);
      CHECK(inTryComprehension.active());
      CHECK(inTryComprehension != code.instructions[binaryOpOnLine(code, 10)].handler);
      CHECK_FALSE(bc::isWithExitHandler(code, inTryComprehension));
    } else {
      CHECK(binaryOpOnLine(code, 6) == -1);  // 3.11: the comprehension is its own code object
    }
    CHECK_FALSE(bc::firstUserHandler(code, bc::ExceptionHandler{}).active());
  }
}
