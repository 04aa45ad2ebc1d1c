// The editable data model: Instruction constructors, Bytecode::exceptionTable/insert,
// CodeOptions tables, and builders for code generation (constants, globals, locals, calls,
// jumps) that pick the right opcodes for the running Python version.
#include <opcode.h>

#include "bytecode_internal.h"
#include "dynamo/common/error.h"
#include "dynamo/core/bytecode.h"

namespace dynamo::core::bytecode {

Instruction Instruction::make(int opcode, int arg) {
  const OpcodeInfo& info = requireOpcode(opcode);
  DYNAMO_INTERNAL_ASSERT(!info.has(kJump), "use Instruction::jump for ", info.name);
  Instruction ins;
  ins.opcode = opcode;
  ins.arg = arg;
  return ins;
}

Instruction Instruction::jump(int opcode, int target) {
  const OpcodeInfo& info = requireOpcode(opcode);
  DYNAMO_INTERNAL_ASSERT(info.has(kJump), info.name, " is not a jump");
  Instruction ins;
  ins.opcode = opcode;
  ins.target = target;
  return ins;
}

bool Instruction::isJump() const {
  const OpcodeInfo* info = opcodeInfo(opcode);
  return info && info->has(kJump);
}

std::vector<ExceptionEntry> Bytecode::exceptionTable() const {
  std::vector<ExceptionEntry> out;
  int n = static_cast<int>(instructions.size());
  for (int i = 0; i < n;) {
    const ExceptionHandler& h = instructions[i].handler;
    if (!h.active()) {
      ++i;
      continue;
    }
    int j = i;
    while (j + 1 < n && instructions[j + 1].handler == h) ++j;
    out.push_back(ExceptionEntry{i, j, h.target, h.depth, h.lasti});
    i = j + 1;
  }
  return out;
}

void Bytecode::insert(size_t pos, std::vector<Instruction> added) {
  DYNAMO_INTERNAL_ASSERT(pos <= instructions.size(), "insert position ", pos, " out of range");
  int shift = static_cast<int>(added.size());
  int at = static_cast<int>(pos);
  for (Instruction& ins : instructions) {
    if (ins.target >= at) ins.target += shift;
    if (ins.handler.active() && ins.handler.target >= at) ins.handler.target += shift;
  }
  instructions.insert(instructions.begin() + static_cast<std::ptrdiff_t>(pos),
                      std::make_move_iterator(added.begin()), std::make_move_iterator(added.end()));
}

namespace {
// Whether two constants may share a co_consts slot: same exact simple type and equal.
bool sameConstant(PyObject* a, PyObject* b) {  // borrowed refs
  if (a == b) return true;
  if (Py_TYPE(a) != Py_TYPE(b)) return false;
  if (!PyLong_CheckExact(a) && !PyUnicode_CheckExact(a) && !PyBytes_CheckExact(a)) return false;
  int eq = PyObject_RichCompareBool(a, b, Py_EQ);
  if (eq < 0) PyErr_Clear();
  return eq == 1;
}

int indexOf(std::vector<std::string>& list, const std::string& s) {
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i] == s) return static_cast<int>(i);
  }
  list.push_back(s);
  return static_cast<int>(list.size() - 1);
}
}  // namespace

int CodeOptions::addConst(PyObject* obj) {
  DYNAMO_INTERNAL_ASSERT(obj != nullptr, "addConst(NULL)");
  for (size_t i = 0; i < consts.size(); ++i) {
    if (sameConstant(consts[i].get(), obj)) return static_cast<int>(i);
  }
  consts.push_back(ObjRef::borrow(obj));  // new ref held by consts
  return static_cast<int>(consts.size() - 1);
}

int CodeOptions::addName(const std::string& n) { return indexOf(names, n); }

int CodeOptions::addVarname(const std::string& n) { return indexOf(varnames, n); }

std::vector<std::string> CodeOptions::localsPlusNames() const {
  std::vector<std::string> out = varnames;
  for (const std::string& c : cellvars) {
    bool isArgument = false;
    for (const std::string& v : varnames) isArgument = isArgument || v == c;
    if (!isArgument) out.push_back(c);
  }
  out.insert(out.end(), freevars.begin(), freevars.end());
  return out;
}

Instruction loadConst(CodeOptions& opts, PyObject* obj) {
  return Instruction::make(LOAD_CONST, opts.addConst(obj));
}

Instruction loadGlobal(CodeOptions& opts, const std::string& name, bool pushNull) {
  return Instruction::make(LOAD_GLOBAL, (opts.addName(name) << 1) | (pushNull ? 1 : 0));
}

Instruction loadFast(CodeOptions& opts, const std::string& name) {
  return Instruction::make(LOAD_FAST, opts.addVarname(name));
}

Instruction storeFast(CodeOptions& opts, const std::string& name) {
  return Instruction::make(STORE_FAST, opts.addVarname(name));
}

std::vector<Instruction> callFunction(CodeOptions& opts, int nargs,
                                      const std::vector<std::string>& kwNames) {
  DYNAMO_INTERNAL_ASSERT(static_cast<int>(kwNames.size()) <= nargs,
                         "more keyword names than arguments");
  std::vector<Instruction> out;
  if (!kwNames.empty()) {
    ObjRef tuple = ObjRef::steal(PyTuple_New(static_cast<Py_ssize_t>(kwNames.size())));  // new ref
    DYNAMO_INTERNAL_ASSERT(tuple, detail::takePythonError());
    for (size_t i = 0; i < kwNames.size(); ++i) {
      PyObject* s = PyUnicode_InternFromString(kwNames[i].c_str());  // new ref
      DYNAMO_INTERNAL_ASSERT(s, detail::takePythonError());
      PyTuple_SET_ITEM(tuple.get(), static_cast<Py_ssize_t>(i), s);  // steals s
    }
    out.push_back(Instruction::make(KW_NAMES, opts.addConst(tuple.get())));
  }
#if PY_VERSION_HEX < 0x030C0000
  out.push_back(Instruction::make(PRECALL, nargs));
#endif
  out.push_back(Instruction::make(CALL, nargs));
  return out;
}

Instruction popJumpIf(bool whenTrue, int target) {
#if PY_VERSION_HEX >= 0x030C0000
  return Instruction::jump(whenTrue ? POP_JUMP_IF_TRUE : POP_JUMP_IF_FALSE, target);
#else
  return Instruction::jump(whenTrue ? POP_JUMP_FORWARD_IF_TRUE : POP_JUMP_FORWARD_IF_FALSE, target);
#endif
}

Instruction jumpTo(int target) { return Instruction::jump(JUMP_FORWARD, target); }

}  // namespace dynamo::core::bytecode
