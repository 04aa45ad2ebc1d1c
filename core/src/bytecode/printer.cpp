// print(): a dis-like listing of a Bytecode, for logs (DYNAMO_LOGS=bytecode) and golden tests.
//
//   line  >> index OPNAME                     arg  (meaning)
//      3        0 RESUME                       0
//      4        1 LOAD_FAST                    0  (x)
//           >>  2 POP_JUMP_FORWARD_IF_FALSE    3  (to #6)
//   ExceptionTable:
//     #4 to #9 -> #12 [1] lasti
//
// Jump targets are instruction indices ("to #6"), never byte offsets, so a listing does not
// change when EXTENDED_ARG prefixes or caches move code around.
#include <opcode.h>

#include <cstdio>
#include <set>
#include <type_traits>
#include <string>

#include "bytecode_internal.h"
#include "dynamo/core/bytecode.h"

namespace dynamo::core::bytecode {
namespace {

std::string reprOf(PyObject* obj) {  // borrowed ref
  ObjRef r = ObjRef::steal(PyObject_Repr(obj));  // new ref
  const char* s = r ? PyUnicode_AsUTF8(r.get()) : nullptr;
  if (!s) {
    PyErr_Clear();
    return "<repr failed>";
  }
  std::string out = s;
  if (out.size() > 80) out = out.substr(0, 77) + "...";
  return out;
}

const char* binaryOpName(int arg) {
  static const char* const kOps[] = {"+",   "&",   "//",  "<<",  "@",   "*",   "%",
                                     "|",   "**",  ">>",  "-",   "/",   "^",   "+=",
                                     "&=",  "//=", "<<=", "@=",  "*=",  "%=",  "|=",
                                     "**=", ">>=", "-=",  "/=",  "^="};
  return arg >= 0 && arg < 26 ? kOps[arg] : "?";
}

const char* compareOpName(int arg) {
  static const char* const kCmp[] = {"<", "<=", "==", "!=", ">", ">="};
  int index = kPython312 ? (arg >> 4) : arg;
  return index >= 0 && index < 6 ? kCmp[index] : "?";
}

template <typename T>
std::string at(const std::vector<T>& list, int i) {
  if (i < 0 || static_cast<size_t>(i) >= list.size()) return "<index " + std::to_string(i) + "?>";
  if constexpr (std::is_same_v<T, std::string>) {
    return list[i];
  } else {
    return reprOf(list[i].get());
  }
}

// The human meaning of an instruction's arg ("" when there is nothing to add).
std::string argMeaning(const Instruction& ins, const CodeOptions* opts,
                       const std::vector<std::string>& localsPlus) {
  const OpcodeInfo* info = opcodeInfo(ins.opcode);
  if (!info) return {};
  if (info->has(kJump)) return "to #" + std::to_string(ins.target);
  if (ins.opcode == BINARY_OP) return binaryOpName(ins.arg);
  if (ins.opcode == COMPARE_OP) return compareOpName(ins.arg);
  if (ins.opcode == IS_OP) return ins.arg ? "is not" : "is";
  if (ins.opcode == CONTAINS_OP) return ins.arg ? "not in" : "in";
  if (!opts) return {};
  if (info->has(kHasConst)) return at(opts->consts, ins.arg);
  if (info->has(kHasLocal)) return at(opts->varnames, ins.arg);
  if (info->has(kHasFree)) return at(localsPlus, ins.arg);
  if (info->has(kHasName)) {
    std::string name = at(opts->names, nameIndex(ins.opcode, ins.arg));
    if (ins.opcode == LOAD_GLOBAL && (ins.arg & 1)) return "NULL + " + name;
#if PY_VERSION_HEX >= 0x030C0000
    if (ins.opcode == LOAD_ATTR && (ins.arg & 1)) return "NULL|self + " + name;
#endif
    return name;
  }
  return {};
}

}  // namespace

std::string print(const Bytecode& bc, const CodeOptions* opts) {
  std::set<int> targets;
  for (const Instruction& ins : bc.instructions) {
    if (ins.isJump()) targets.insert(ins.target);
    if (ins.handler.active()) targets.insert(ins.handler.target);
  }
  std::vector<std::string> localsPlus;
  if (opts) localsPlus = opts->localsPlusNames();
  std::string out;
  int lastLine = -2;
  char buf[128];
  for (size_t i = 0; i < bc.instructions.size(); ++i) {
    const Instruction& ins = bc.instructions[i];
    std::string line;
    if (ins.pos.line != lastLine) line = ins.pos.line >= 0 ? std::to_string(ins.pos.line) : "--";
    lastLine = ins.pos.line;
    std::snprintf(buf, sizeof buf, "%6s %2s %4zu %-28s", line.c_str(),
                  targets.count(static_cast<int>(i)) ? ">>" : "", i, ins.name());
    std::string row = buf;
    if (hasArgument(ins.opcode)) {
      std::snprintf(buf, sizeof buf, " %5d", ins.isJump() ? ins.target : ins.arg);
      row += buf;
      std::string meaning = argMeaning(ins, opts, localsPlus);
      if (!meaning.empty()) row += "  (" + meaning + ")";
    }
    while (!row.empty() && row.back() == ' ') row.pop_back();
    out += row + "\n";
  }
  std::vector<ExceptionEntry> table = bc.exceptionTable();
  if (!table.empty()) {
    out += "ExceptionTable:\n";
    for (const ExceptionEntry& e : table) {
      out += "  #" + std::to_string(e.start) + " to #" + std::to_string(e.end) + " -> #" +
             std::to_string(e.target) + " [" + std::to_string(e.depth) + "]" +
             (e.lasti ? " lasti" : "") + "\n";
    }
  }
  return out;
}

}  // namespace dynamo::core::bytecode
