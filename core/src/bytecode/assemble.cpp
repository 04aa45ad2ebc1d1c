// assemble(): Bytecode + CodeOptions -> co_code, co_linetable, co_exceptiontable,
// co_stacksize and a new code object.
//
// Layout is a fixed point: every instruction starts with the EXTENDED_ARG prefixes its current
// argument needs; jump arguments depend on offsets, offsets on prefix counts. Prefix counts only
// ever grow between rounds, so the loop ends (at most 3 prefixes per instruction).
#include <opcode.h>

#include <string>
#include <vector>

#include "bytecode_internal.h"
#include "dynamo/common/error.h"
#include "dynamo/core/bytecode.h"

namespace dynamo::core::bytecode {
namespace {

int prefixesFor(unsigned arg) {
  if (arg > 0xFFFFFFu) return 3;
  if (arg > 0xFFFFu) return 2;
  if (arg > 0xFFu) return 1;
  return 0;
}

// One line table entry of `units` code units (1..8) at position p; updates prevLine.
void writeLineEntry(std::string& out, const Position& p, int units, long& prevLine) {
  auto header = [&](int code) { out.push_back(static_cast<char>(0x80 | (code << 3) | (units - 1))); };
  if (p.line < 0) {
    header(15);  // no location
    return;
  }
  bool noColumns = p.col < 0 && p.endCol < 0 && (p.endLine == p.line || p.endLine < 0);
  if (noColumns) {
    header(13);
    detail::writeLineSvarint(out, p.line - prevLine);
  } else {
    header(14);  // long form: line delta, end line delta, col + 1, end col + 1
    int endLine = p.endLine < p.line ? p.line : p.endLine;
    detail::writeLineSvarint(out, p.line - prevLine);
    detail::writeLineVarint(out, static_cast<unsigned long>(endLine - p.line));
    detail::writeLineVarint(out, static_cast<unsigned long>(p.col + 1));
    detail::writeLineVarint(out, static_cast<unsigned long>(p.endCol + 1));
  }
  prevLine = p.line;
}

std::string lineTable(const Bytecode& bc, const std::vector<int>& unitOffsets, int firstlineno) {
  std::string out;
  long prevLine = firstlineno;
  for (size_t i = 0; i < bc.instructions.size(); ++i) {
    int units = unitOffsets[i + 1] - unitOffsets[i];
    while (units > 0) {
      int chunk = units > 8 ? 8 : units;
      writeLineEntry(out, bc.instructions[i].pos, chunk, prevLine);
      units -= chunk;
    }
  }
  return out;
}

std::string exceptionTable(const Bytecode& bc, const std::vector<int>& unitOffsets) {
  std::string out;
  for (const ExceptionEntry& e : bc.exceptionTable()) {
    detail::writeExceptionVarint(out, unitOffsets[e.start], true);
    detail::writeExceptionVarint(out, unitOffsets[e.end + 1] - unitOffsets[e.start], false);
    detail::writeExceptionVarint(out, unitOffsets[e.target], false);
    detail::writeExceptionVarint(out, (static_cast<unsigned long>(e.depth) << 1) | e.lasti, false);
  }
  return out;
}

PyObject* stringTuple(const std::vector<std::string>& items) {  // returns a new ref
  ObjRef tuple = ObjRef::steal(PyTuple_New(static_cast<Py_ssize_t>(items.size())));  // new ref
  if (!tuple) return nullptr;
  for (size_t i = 0; i < items.size(); ++i) {
    PyObject* s = PyUnicode_InternFromString(items[i].c_str());  // new ref
    if (!s) return nullptr;
    PyTuple_SET_ITEM(tuple.get(), static_cast<Py_ssize_t>(i), s);  // steals s
  }
  return tuple.release();
}

}  // namespace

AssembledTables assembleTables(const Bytecode& bc, const CodeOptions& opts) {
  verify(bc, &opts);
  const auto& instrs = bc.instructions;
  size_t n = instrs.size();
  std::vector<int> ops(n), caches(n), prefixes(n, 0), units(n + 1, 0);
  std::vector<unsigned> args(n);
  for (size_t i = 0; i < n; ++i) {
    ops[i] = instrs[i].opcode;
    args[i] = static_cast<unsigned>(instrs[i].arg);
    caches[i] = cacheEntries(ops[i]);
  }
  for (bool changed = true; changed;) {
    for (size_t i = 0; i < n; ++i) units[i + 1] = units[i] + prefixes[i] + 1 + caches[i];
    for (size_t i = 0; i < n; ++i) {
      if (!requireOpcode(instrs[i].opcode).has(kJump)) continue;
      int target = instrs[i].target;
      bool backward = target <= static_cast<int>(i);
      ops[i] = jumpVariant(instrs[i].opcode, backward);
      // verify() rejected jumps without a variant for their direction (e.g. 3.12 backward
      // POP_JUMP_IF_*); this is a second line of defence.
      DYNAMO_INTERNAL_ASSERT(ops[i] >= 0, "no ", backward ? "backward" : "forward", " form of ",
                             instrs[i].name(), " at #", i);
      int next = units[i + 1];
      args[i] = static_cast<unsigned>(backward ? next - units[target] : units[target] - next);
    }
    changed = false;
    for (size_t i = 0; i < n; ++i) {
      int need = prefixesFor(args[i]);
      if (need > prefixes[i]) {
        prefixes[i] = need;
        changed = true;
      }
    }
  }

  AssembledTables out;
  out.code.reserve(2 * units[n]);
  for (size_t i = 0; i < n; ++i) {
    for (int k = prefixes[i]; k > 0; --k) {
      out.code.push_back(static_cast<char>(EXTENDED_ARG));
      out.code.push_back(static_cast<char>((args[i] >> (8 * k)) & 0xFF));
    }
    out.code.push_back(static_cast<char>(ops[i]));
    out.code.push_back(static_cast<char>(args[i] & 0xFF));
    out.code.append(2 * static_cast<size_t>(caches[i]), '\0');
  }
  out.linetable = lineTable(bc, units, opts.firstlineno);
  out.exceptiontable = exceptionTable(bc, units);
  out.stacksize = computeStackSize(bc, opts.flags);
  for (size_t i = 0; i <= n; ++i) out.offsets.push_back(2 * units[i]);
  return out;
}

ObjRef assemble(const Bytecode& bc, const CodeOptions& opts) {
  AssembledTables t = assembleTables(bc, opts);
  auto bytes = [](const std::string& s) {  // new ref
    return ObjRef::steal(PyBytes_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size())));
  };
  ObjRef code = bytes(t.code), linetable = bytes(t.linetable), exctable = bytes(t.exceptiontable);
  ObjRef consts = ObjRef::steal(PyTuple_New(static_cast<Py_ssize_t>(opts.consts.size())));
  DYNAMO_INTERNAL_ASSERT(code && linetable && exctable && consts, detail::takePythonError());
  for (size_t i = 0; i < opts.consts.size(); ++i) {
    DYNAMO_INTERNAL_ASSERT(opts.consts[i], "co_consts[", i, "] is NULL");
    PyObject* c = ObjRef(opts.consts[i]).release();  // new ref, stolen by the tuple
    PyTuple_SET_ITEM(consts.get(), static_cast<Py_ssize_t>(i), c);
  }
  ObjRef names = ObjRef::steal(stringTuple(opts.names));            // new ref
  ObjRef varnames = ObjRef::steal(stringTuple(opts.varnames));      // new ref
  ObjRef cellvars = ObjRef::steal(stringTuple(opts.cellvars));      // new ref
  ObjRef freevars = ObjRef::steal(stringTuple(opts.freevars));      // new ref
  ObjRef filename = ObjRef::steal(PyUnicode_FromString(opts.filename.c_str()));  // new ref
  ObjRef name = ObjRef::steal(PyUnicode_FromString(opts.name.c_str()));          // new ref
  ObjRef qualname = ObjRef::steal(PyUnicode_FromString(
      (opts.qualname.empty() ? opts.name : opts.qualname).c_str()));  // new ref
  DYNAMO_INTERNAL_ASSERT(names && varnames && cellvars && freevars && filename && name && qualname,
                         detail::takePythonError());
  int nlocals = static_cast<int>(opts.varnames.size());
#if PY_VERSION_HEX >= 0x030C0000
  PyCodeObject* co = PyUnstable_Code_NewWithPosOnlyArgs(  // new ref
#else
  PyCodeObject* co = PyCode_NewWithPosOnlyArgs(  // new ref
#endif
      opts.argcount, opts.posonlyargcount, opts.kwonlyargcount, nlocals, t.stacksize, opts.flags,
      code.get(), consts.get(), names.get(), varnames.get(), freevars.get(), cellvars.get(),
      filename.get(), name.get(), qualname.get(), opts.firstlineno, linetable.get(),
      exctable.get());
  DYNAMO_INTERNAL_ASSERT(co != nullptr, "CPython rejected the assembled code object: ",
                         detail::takePythonError());
  return ObjRef::steal(reinterpret_cast<PyObject*>(co));
}

}  // namespace dynamo::core::bytecode
