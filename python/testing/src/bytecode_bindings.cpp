// _dynamo_testing.bytecode: the Python test/debug API of the bytecode toolkit (core/bytecode.h).
//
//   decode(code)                    -> [dict]  one dict per instruction (see instrToDict)
//   exception_table(code)           -> [(start, end, target, depth, lasti)]  instruction indices
//   code_options(code)              -> dict    the co_* fields assemble() needs
//   assemble(instructions, options) -> code    from the dict forms above
//   roundtrip(code)                 -> code    assemble(decode(code), code_options(code))
//   dis(code) / dis(instructions, options=None) -> str   the core printer
//   verify(code) / verify(instructions, options=None)    raises dynamo.InternalError
//   stack_depths(instructions)      -> [int]   depth before each instruction, -1 unreachable
//   insert(instructions, pos, added)-> [dict]  Bytecode::insert (targets shifted)
//   opcodes()                       -> [dict]  metadata of every base opcode
//   call_sequence(nargs), pop_jump_if(when_true, target), jump_to(target) -> builder output
// "code" arguments accept a code object or a function (its __code__).
#include <Python.h>

#include <string>
#include <vector>

#include "testing_bindings.h"
#include "dynamo/common/error.h"
#include "dynamo/core/bytecode.h"
#include "py_util.h"

namespace dynamo::py {
namespace {

namespace bc = dynamo::core::bytecode;

[[noreturn]] void badArgument(const std::string& what) {
  throw UserError(UserErrorKind::kInvalidArgument, what);
}

// The code object of a code object or function argument (borrowed ref).
PyCodeObject* asCode(PyObject* obj) {  // obj: borrowed ref
  if (PyCode_Check(obj)) return reinterpret_cast<PyCodeObject*>(obj);
  if (PyFunction_Check(obj)) {
    return reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(obj));  // borrowed ref
  }
  badArgument(std::string("expected a code object or a function, got ") + Py_TYPE(obj)->tp_name);
}

PyObject* intOrNone(int v) {  // new ref
  if (v < 0) Py_RETURN_NONE;
  return PyLong_FromLong(v);
}

PyObject* instrToDict(const bc::Instruction& ins) {  // new ref
  PyRef d = PyRef::steal(checkPy(PyDict_New()));
  setItem(d.get(), "opname", PyUnicode_FromString(ins.name()));
  setItem(d.get(), "opcode", PyLong_FromLong(ins.opcode));
  setItem(d.get(), "arg", PyLong_FromLong(ins.arg));
  setItem(d.get(), "target", intOrNone(ins.target));
  setItem(d.get(), "line", intOrNone(ins.pos.line));
  setItem(d.get(), "end_line", intOrNone(ins.pos.endLine));
  setItem(d.get(), "col", intOrNone(ins.pos.col));
  setItem(d.get(), "end_col", intOrNone(ins.pos.endCol));
  setItem(d.get(), "offset", intOrNone(ins.offset));
  if (ins.handler.active()) {
    setItem(d.get(), "handler", Py_BuildValue("(iiO)", ins.handler.target, ins.handler.depth,
                                              ins.handler.lasti ? Py_True : Py_False));
  } else {
    setItem(d.get(), "handler", Py_NewRef(Py_None));
  }
  return d.release();
}

PyObject* bytecodeToList(const bc::Bytecode& code) {  // new ref
  PyRef list = PyRef::steal(checkPy(PyList_New(0)));
  for (const bc::Instruction& ins : code.instructions) {
    PyRef item = PyRef::steal(instrToDict(ins));
    if (PyList_Append(list.get(), item.get()) < 0) throw PythonError{};
  }
  return list.release();
}

// d[key] as an int (default when absent or None).
int intField(PyObject* d, const char* key, int dflt) {
  PyObject* v = PyDict_GetItemString(d, key);  // borrowed ref
  if (v == nullptr || v == Py_None) return dflt;
  long x = PyLong_AsLong(v);
  if (x == -1 && PyErr_Occurred()) throw PythonError{};
  return static_cast<int>(x);
}

bc::Instruction dictToInstr(PyObject* d) {  // borrowed ref
  if (!PyDict_Check(d)) badArgument("each instruction must be a dict");
  bc::Instruction ins;
  PyObject* name = PyDict_GetItemString(d, "opname");  // borrowed ref
  if (name != nullptr) {
    std::string s = toString(name);
    ins.opcode = bc::opcodeByName(s);
    if (ins.opcode < 0) badArgument("unknown opcode name '" + s + "' for this Python version");
  } else {
    ins.opcode = intField(d, "opcode", -1);
    if (!bc::opcodeInfo(ins.opcode)) badArgument("instruction dict needs a known opname/opcode");
  }
  ins.arg = intField(d, "arg", 0);
  ins.target = intField(d, "target", -1);
  ins.pos.line = intField(d, "line", -1);
  ins.pos.endLine = intField(d, "end_line", -1);
  ins.pos.col = intField(d, "col", -1);
  ins.pos.endCol = intField(d, "end_col", -1);
  ins.offset = intField(d, "offset", -1);
  PyObject* h = PyDict_GetItemString(d, "handler");  // borrowed ref
  if (h != nullptr && h != Py_None) {
    int lasti = 0;
    if (!PyArg_ParseTuple(h, "iip;handler must be (target, depth, lasti)", &ins.handler.target,
                          &ins.handler.depth, &lasti)) {
      throw PythonError{};
    }
    ins.handler.lasti = lasti != 0;
  }
  return ins;
}

bc::Bytecode listToBytecode(PyObject* seq) {  // borrowed ref
  PyRef fast = PyRef::steal(checkPy(PySequence_Fast(seq, "instructions must be a sequence")));
  bc::Bytecode code;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.get());
  for (Py_ssize_t i = 0; i < n; ++i) {
    code.instructions.push_back(dictToInstr(PySequence_Fast_GET_ITEM(fast.get(), i)));  // borrowed
  }
  return code;
}

std::vector<std::string> stringList(PyObject* d, const char* key) {
  std::vector<std::string> out;
  PyObject* v = PyDict_GetItemString(d, key);  // borrowed ref
  if (v == nullptr) return out;
  PyRef fast = PyRef::steal(checkPy(PySequence_Fast(v, "expected a sequence of str")));
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast.get()); ++i) {
    out.push_back(toString(PySequence_Fast_GET_ITEM(fast.get(), i)));  // borrowed ref
  }
  return out;
}

std::string stringField(PyObject* d, const char* key, const char* dflt) {
  PyObject* v = PyDict_GetItemString(d, key);  // borrowed ref
  return v == nullptr ? std::string(dflt) : toString(v);
}

bc::CodeOptions dictToOptions(PyObject* d) {  // borrowed ref
  if (!PyDict_Check(d)) badArgument("options must be a dict (see code_options())");
  bc::CodeOptions o;
  o.argcount = intField(d, "argcount", 0);
  o.posonlyargcount = intField(d, "posonlyargcount", 0);
  o.kwonlyargcount = intField(d, "kwonlyargcount", 0);
  o.flags = intField(d, "flags", 0);
  o.firstlineno = intField(d, "firstlineno", 1);
  if (PyObject* consts = PyDict_GetItemString(d, "consts")) {  // borrowed ref
    PyRef fast = PyRef::steal(checkPy(PySequence_Fast(consts, "consts must be a sequence")));
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast.get()); ++i) {
      o.consts.push_back(bc::ObjRef::borrow(PySequence_Fast_GET_ITEM(fast.get(), i)));
    }
  }
  o.names = stringList(d, "names");
  o.varnames = stringList(d, "varnames");
  o.cellvars = stringList(d, "cellvars");
  o.freevars = stringList(d, "freevars");
  o.filename = stringField(d, "filename", "<dynamo>");
  o.name = stringField(d, "name", "<dynamo>");
  o.qualname = stringField(d, "qualname", o.name.c_str());
  return o;
}

PyObject* optionsToDict(const bc::CodeOptions& o) {  // new ref
  PyRef d = PyRef::steal(checkPy(PyDict_New()));
  setItem(d.get(), "argcount", PyLong_FromLong(o.argcount));
  setItem(d.get(), "posonlyargcount", PyLong_FromLong(o.posonlyargcount));
  setItem(d.get(), "kwonlyargcount", PyLong_FromLong(o.kwonlyargcount));
  setItem(d.get(), "flags", PyLong_FromLong(o.flags));
  setItem(d.get(), "firstlineno", PyLong_FromLong(o.firstlineno));
  PyRef consts = PyRef::steal(checkPy(PyList_New(0)));
  for (const bc::ObjRef& c : o.consts) {
    if (PyList_Append(consts.get(), c.get()) < 0) throw PythonError{};
  }
  setItem(d.get(), "consts", consts.release());
  setItem(d.get(), "names", newStrTuple(o.names));
  setItem(d.get(), "varnames", newStrTuple(o.varnames));
  setItem(d.get(), "cellvars", newStrTuple(o.cellvars));
  setItem(d.get(), "freevars", newStrTuple(o.freevars));
  setItem(d.get(), "filename", PyUnicode_FromString(o.filename.c_str()));
  setItem(d.get(), "name", PyUnicode_FromString(o.name.c_str()));
  setItem(d.get(), "qualname", PyUnicode_FromString(o.qualname.c_str()));
  return d.release();
}

// ---- module functions -------------------------------------------------------------------------

PyObject* pyDecode(PyObject*, PyObject* code) {
  DYNAMO_PY_TRY
  return bytecodeToList(bc::decode(asCode(code)));
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* pyExceptionTable(PyObject*, PyObject* code) {
  DYNAMO_PY_TRY
  PyRef list = PyRef::steal(checkPy(PyList_New(0)));
  for (const bc::ExceptionEntry& e : bc::decode(asCode(code)).exceptionTable()) {
    PyRef t = PyRef::steal(checkPy(Py_BuildValue("(iiiiO)", e.start, e.end, e.target, e.depth,
                                                e.lasti ? Py_True : Py_False)));
    if (PyList_Append(list.get(), t.get()) < 0) throw PythonError{};
  }
  return list.release();
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* pyCodeOptions(PyObject*, PyObject* code) {
  DYNAMO_PY_TRY
  return optionsToDict(bc::codeOptionsFrom(asCode(code)));
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* pyAssemble(PyObject*, PyObject* args) {
  DYNAMO_PY_TRY
  PyObject *instrs = nullptr, *options = nullptr;  // borrowed refs
  if (!PyArg_ParseTuple(args, "OO:assemble", &instrs, &options)) return nullptr;
  return bc::assemble(listToBytecode(instrs), dictToOptions(options)).release();
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* pyRoundtrip(PyObject*, PyObject* code) {
  DYNAMO_PY_TRY
  PyCodeObject* co = asCode(code);  // borrowed ref
  return bc::assemble(bc::decode(co), bc::codeOptionsFrom(co)).release();
  DYNAMO_PY_CATCH(nullptr)
}

// (code) or (instructions[, options]) -> Bytecode and optional options.
struct Parsed {
  bc::Bytecode code;
  bc::CodeOptions options;
  bool hasOptions = false;
};
Parsed parseCodeArgs(PyObject* args, const char* fname) {
  PyObject *first = nullptr, *options = Py_None;  // borrowed refs
  std::string format = std::string("O|O:") + fname;
  if (!PyArg_ParseTuple(args, format.c_str(), &first, &options)) throw PythonError{};
  Parsed p;
  if (PyCode_Check(first) || PyFunction_Check(first)) {
    PyCodeObject* co = asCode(first);  // borrowed ref
    p.code = bc::decode(co);
    p.options = bc::codeOptionsFrom(co);
    p.hasOptions = true;
  } else {
    p.code = listToBytecode(first);
    if (options != Py_None) {
      p.options = dictToOptions(options);
      p.hasOptions = true;
    }
  }
  return p;
}

PyObject* pyDis(PyObject*, PyObject* args) {
  DYNAMO_PY_TRY
  Parsed p = parseCodeArgs(args, "dis");
  return checkPy(PyUnicode_FromString(bc::print(p.code, p.hasOptions ? &p.options : nullptr).c_str()));
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* pyVerify(PyObject*, PyObject* args) {
  DYNAMO_PY_TRY
  Parsed p = parseCodeArgs(args, "verify");
  bc::verify(p.code, p.hasOptions ? &p.options : nullptr);
  return PyLong_FromLong(bc::computeStackSize(p.code, p.hasOptions ? p.options.flags : 0));
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* pyStackDepths(PyObject*, PyObject* args) {
  DYNAMO_PY_TRY
  Parsed p = parseCodeArgs(args, "stack_depths");
  std::vector<int> depths = bc::stackDepths(p.code, p.hasOptions ? p.options.flags : 0);
  PyRef list = PyRef::steal(checkPy(PyList_New(0)));
  for (int d : depths) {
    PyRef v = PyRef::steal(checkPy(PyLong_FromLong(d)));
    if (PyList_Append(list.get(), v.get()) < 0) throw PythonError{};
  }
  return list.release();
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* pyInsert(PyObject*, PyObject* args) {
  DYNAMO_PY_TRY
  PyObject *instrs = nullptr, *added = nullptr;  // borrowed refs
  Py_ssize_t pos = 0;
  if (!PyArg_ParseTuple(args, "OnO:insert", &instrs, &pos, &added)) return nullptr;
  bc::Bytecode code = listToBytecode(instrs);
  if (pos < 0 || static_cast<size_t>(pos) > code.instructions.size()) {
    badArgument("insert position out of range");
  }
  code.insert(static_cast<size_t>(pos), listToBytecode(added).instructions);
  return bytecodeToList(code);
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* pyOpcodes(PyObject*, PyObject*) {
  DYNAMO_PY_TRY
  PyRef list = PyRef::steal(checkPy(PyList_New(0)));
  for (const bc::OpcodeInfo& info : bc::allOpcodes()) {
    PyRef d = PyRef::steal(checkPy(PyDict_New()));
    setItem(d.get(), "name", PyUnicode_FromString(info.name));
    setItem(d.get(), "opcode", PyLong_FromLong(info.opcode));
    setItem(d.get(), "cache_entries", PyLong_FromLong(info.cacheEntries));
    const std::pair<const char*, uint32_t> flags[] = {
        {"jump", bc::kJump},         {"backward", bc::kBackward},
        {"conditional", bc::kConditional}, {"no_fallthrough", bc::kNoFallthrough},
        {"has_name", bc::kHasName},  {"has_const", bc::kHasConst},
        {"has_local", bc::kHasLocal}, {"has_free", bc::kHasFree},
        {"only_311", bc::kOnly311},  {"only_312", bc::kOnly312}};
    for (const auto& [key, bit] : flags) setItem(d.get(), key, PyBool_FromLong(info.has(bit)));
    if (PyList_Append(list.get(), d.get()) < 0) throw PythonError{};
  }
  return list.release();
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* pyCallSequence(PyObject*, PyObject* arg) {
  DYNAMO_PY_TRY
  long nargs = PyLong_AsLong(arg);
  if (nargs == -1 && PyErr_Occurred()) return nullptr;
  bc::CodeOptions unused;
  bc::Bytecode code;
  code.instructions = bc::callFunction(unused, static_cast<int>(nargs));
  return bytecodeToList(code);
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* pyPopJumpIf(PyObject*, PyObject* args) {
  DYNAMO_PY_TRY
  int whenTrue = 0, target = 0;
  if (!PyArg_ParseTuple(args, "pi:pop_jump_if", &whenTrue, &target)) return nullptr;
  return instrToDict(bc::popJumpIf(whenTrue != 0, target));
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* pyJumpTo(PyObject*, PyObject* arg) {
  DYNAMO_PY_TRY
  long target = PyLong_AsLong(arg);
  if (target == -1 && PyErr_Occurred()) return nullptr;
  return instrToDict(bc::jumpTo(static_cast<int>(target)));
  DYNAMO_PY_CATCH(nullptr)
}

PyMethodDef kMethods[] = {
    {"decode", pyDecode, METH_O, "decode(code) -> list of instruction dicts"},
    {"exception_table", pyExceptionTable, METH_O,
     "exception_table(code) -> [(start, end, target, depth, lasti)] over instruction indices"},
    {"code_options", pyCodeOptions, METH_O, "code_options(code) -> dict of co_* fields"},
    {"assemble", pyAssemble, METH_VARARGS, "assemble(instructions, options) -> code object"},
    {"roundtrip", pyRoundtrip, METH_O, "roundtrip(code) -> code assembled from decode(code)"},
    {"dis", pyDis, METH_VARARGS, "dis(code) or dis(instructions, options=None) -> str"},
    {"verify", pyVerify, METH_VARARGS,
     "verify(code) or verify(instructions, options=None) -> max stack depth; raises "
     "dynamo.InternalError naming the bad instruction"},
    {"stack_depths", pyStackDepths, METH_VARARGS,
     "stack_depths(code or instructions) -> depth before each instruction (-1: unreachable)"},
    {"insert", pyInsert, METH_VARARGS,
     "insert(instructions, pos, added) -> instructions with targets shifted"},
    {"opcodes", pyOpcodes, METH_NOARGS, "opcodes() -> metadata of every base opcode"},
    {"call_sequence", pyCallSequence, METH_O,
     "call_sequence(nargs) -> the call instructions of this Python version"},
    {"pop_jump_if", pyPopJumpIf, METH_VARARGS, "pop_jump_if(when_true, target) -> instruction"},
    {"jump_to", pyJumpTo, METH_O, "jump_to(target) -> unconditional jump instruction"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModuleDef = {PyModuleDef_HEAD_INIT,
                          "_dynamo_testing.bytecode",
                          "Decode, verify, print and assemble CPython code objects.",
                          -1,
                          kMethods,
                          nullptr,
                          nullptr,
                          nullptr,
                          nullptr};

}  // namespace

int initBytecodeBindings(PyObject* module) {
  PyObject* sub = PyModule_Create(&kModuleDef);  // new ref
  if (sub == nullptr) return -1;
  if (PyModule_AddStringConstant(sub, "PYTHON_VERSION", PY_VERSION) < 0 ||
      PyModule_AddObject(module, "bytecode", sub) < 0) {  // steals sub on success
    Py_DECREF(sub);
    return -1;
  }
  return 0;
}

}  // namespace dynamo::py
