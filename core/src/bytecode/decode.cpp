// decode(): co_code + co_linetable + co_exceptiontable -> Bytecode, and codeOptionsFrom().
//
// co_code is read through PyCode_GetCode (de-specialized, caches zeroed) and every opcode is
// additionally mapped through deoptimize(). Byte offsets are turned into instruction indices;
// EXTENDED_ARG prefixes are folded into the argument of the instruction they precede, and a
// jump or table entry pointing at a prefix refers to that instruction.
#include <opcode.h>

#include <string>
#include <vector>

#include "bytecode_internal.h"
#include "dynamo/common/error.h"
#include "dynamo/core/bytecode.h"

namespace dynamo::core::bytecode {

namespace detail {
std::string takePythonError() {
  if (!PyErr_Occurred()) return {};
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);  // new refs (each may be NULL)
  PyErr_NormalizeException(&type, &value, &tb);
  std::string out = type ? reinterpret_cast<PyTypeObject*>(type)->tp_name : "error";
  if (value) {
    ObjRef str = ObjRef::steal(PyObject_Str(value));  // new ref
    if (str) {
      const char* s = PyUnicode_AsUTF8(str.get());  // borrowed buffer
      if (s) out += std::string(": ") + s;
    }
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  PyErr_Clear();
  return out;
}
}  // namespace detail

namespace {

// The raw bytes of a bytes object (borrowed); throws when `obj` is not bytes.
std::string_view bytesOf(PyObject* obj, const char* what) {
  DYNAMO_INTERNAL_ASSERT(obj && PyBytes_Check(obj), what, " is not a bytes object");
  return {PyBytes_AS_STRING(obj), static_cast<size_t>(PyBytes_GET_SIZE(obj))};
}

// Per code unit positions from the PEP 626/657 line table.
std::vector<Position> parseLineTable(std::string_view table, int firstlineno, size_t nunits) {
  std::vector<Position> out(nunits);
  auto data = reinterpret_cast<const uint8_t*>(table.data());
  size_t size = table.size(), pos = 0, unit = 0;
  long line = firstlineno;
  auto need = [&](long v) {
    DYNAMO_INTERNAL_ASSERT(v >= 0, "truncated line table entry at byte ", pos);
    return v;
  };
  while (pos < size) {
    uint8_t first = data[pos++];
    DYNAMO_INTERNAL_ASSERT(first & 0x80, "line table byte ", pos - 1, " does not start an entry");
    int code = (first >> 3) & 15;
    int length = (first & 7) + 1;
    Position p;
    if (code == 15) {
      // no location
    } else if (code == 14) {
      line += detail::unfoldSigned(need(detail::readLineVarint(data, size, pos)));
      p.line = static_cast<int>(line);
      p.endLine = static_cast<int>(line + need(detail::readLineVarint(data, size, pos)));
      p.col = static_cast<int>(need(detail::readLineVarint(data, size, pos))) - 1;
      p.endCol = static_cast<int>(need(detail::readLineVarint(data, size, pos))) - 1;
    } else if (code == 13) {
      line += detail::unfoldSigned(need(detail::readLineVarint(data, size, pos)));
      p.line = p.endLine = static_cast<int>(line);
    } else if (code >= 10) {
      DYNAMO_INTERNAL_ASSERT(pos + 2 <= size, "truncated line table entry");
      line += code - 10;
      p.line = p.endLine = static_cast<int>(line);
      p.col = data[pos++];
      p.endCol = data[pos++];
    } else {
      DYNAMO_INTERNAL_ASSERT(pos < size, "truncated line table entry");
      uint8_t second = data[pos++];
      p.line = p.endLine = static_cast<int>(line);
      p.col = code * 8 + ((second >> 4) & 7);
      p.endCol = p.col + (second & 15);
    }
    for (int k = 0; k < length && unit < nunits; ++k) out[unit++] = p;
  }
  return out;
}

// Sets the handler of every instruction covered by an exception table entry.
void parseExceptionTable(std::string_view table, const std::vector<int>& unitToInstr,
                         const std::vector<int>& startUnit, std::vector<Instruction>& instrs) {
  auto data = reinterpret_cast<const uint8_t*>(table.data());
  size_t size = table.size(), pos = 0;
  auto instrAt = [&](long unit, const char* what) {
    DYNAMO_INTERNAL_ASSERT(unit >= 0 && static_cast<size_t>(unit) < unitToInstr.size() &&
                               startUnit[unitToInstr[unit]] == unit,
                           "exception table ", what, " (code unit ", unit,
                           ") is not the start of an instruction");
    return unitToInstr[unit];
  };
  while (pos < size) {
    DYNAMO_INTERNAL_ASSERT(data[pos] & 0x80, "exception table byte ", pos,
                           " does not start an entry");
    long start = detail::readExceptionVarint(data, size, pos);
    long length = detail::readExceptionVarint(data, size, pos);
    long target = detail::readExceptionVarint(data, size, pos);
    long depthLasti = detail::readExceptionVarint(data, size, pos);
    DYNAMO_INTERNAL_ASSERT(start >= 0 && length > 0 && target >= 0 && depthLasti >= 0,
                           "truncated exception table");
    int first = instrAt(start, "start");
    int end = static_cast<size_t>(start + length) == unitToInstr.size()
                  ? static_cast<int>(instrs.size())
                  : instrAt(start + length, "end");
    ExceptionHandler h{instrAt(target, "target"), static_cast<int>(depthLasti >> 1),
                       (depthLasti & 1) != 0};
    for (int i = first; i < end; ++i) {
      DYNAMO_INTERNAL_ASSERT(!instrs[i].handler.active(), "overlapping exception table entries at ",
                             "instruction ", i);
      instrs[i].handler = h;
    }
  }
}

std::vector<std::string> stringTuple(PyObject* code, const char* attr) {
  ObjRef tuple = ObjRef::steal(PyObject_GetAttrString(code, attr));  // new ref
  DYNAMO_INTERNAL_ASSERT(tuple && PyTuple_Check(tuple.get()), "code object has no tuple ", attr,
                         ": ", detail::takePythonError());
  std::vector<std::string> out;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple.get()); ++i) {
    PyObject* item = PyTuple_GET_ITEM(tuple.get(), i);  // borrowed ref
    const char* s = PyUnicode_Check(item) ? PyUnicode_AsUTF8(item) : nullptr;
    DYNAMO_INTERNAL_ASSERT(s != nullptr, attr, "[", i, "] is not a str ",
                           detail::takePythonError());
    out.emplace_back(s);
  }
  return out;
}

}  // namespace

Bytecode decode(PyCodeObject* code) {
  DYNAMO_INTERNAL_ASSERT(code != nullptr, "decode() of a NULL code object");
  ObjRef raw = ObjRef::steal(PyCode_GetCode(code));  // new ref
  DYNAMO_INTERNAL_ASSERT(raw, "PyCode_GetCode failed: ", detail::takePythonError());
  std::string_view bytes = bytesOf(raw.get(), "co_code");
  auto data = reinterpret_cast<const uint8_t*>(bytes.data());
  size_t nunits = bytes.size() / 2;

  Bytecode bc;
  std::vector<int> unitToInstr(nunits, -1), startUnit, opUnit;
  int ext = 0;
  long prefixStart = -1;
  for (size_t u = 0; u < nunits;) {
    int op = deoptimize(data[2 * u]);
    int arg = data[2 * u + 1];
    DYNAMO_INTERNAL_ASSERT(op >= 0, "unknown opcode ", int(data[2 * u]), " at offset ", 2 * u);
    DYNAMO_INTERNAL_ASSERT(op != CACHE, "CACHE entry at offset ", 2 * u,
                           " is not preceded by an instruction that owns it");
    if (op == EXTENDED_ARG) {
      if (prefixStart < 0) prefixStart = static_cast<long>(u);
      ext = (ext << 8) | arg;
      ++u;
      continue;
    }
    Instruction ins;
    ins.opcode = op;
    ins.arg = static_cast<int>((static_cast<unsigned>(ext) << 8) | static_cast<unsigned>(arg));
    ins.offset = static_cast<int>(2 * u);
    size_t first = prefixStart >= 0 ? static_cast<size_t>(prefixStart) : u;
    size_t end = u + 1 + cacheEntries(op);
    DYNAMO_INTERNAL_ASSERT(end <= nunits, "caches of ", opcodeName(op), " at offset ", 2 * u,
                           " run past the end of the code");
    for (size_t k = first; k < end; ++k) unitToInstr[k] = static_cast<int>(bc.instructions.size());
    startUnit.push_back(static_cast<int>(first));
    opUnit.push_back(static_cast<int>(u));
    bc.instructions.push_back(ins);
    ext = 0;
    prefixStart = -1;
    u = end;
  }
  DYNAMO_INTERNAL_ASSERT(prefixStart < 0, "code ends with EXTENDED_ARG");

  // Jump targets.
  for (size_t i = 0; i < bc.instructions.size(); ++i) {
    Instruction& ins = bc.instructions[i];
    const OpcodeInfo& info = requireOpcode(ins.opcode);
    if (!info.has(kJump)) continue;
    long next = opUnit[i] + 1 + info.cacheEntries;
    long t = info.has(kBackward) ? next - ins.arg : next + ins.arg;
    DYNAMO_INTERNAL_ASSERT(t >= 0 && static_cast<size_t>(t) < nunits &&
                               startUnit[unitToInstr[t]] == t,
                           "jump ", ins.name(), " at offset ", ins.offset,
                           " does not land on an instruction (code unit ", t, ")");
    ins.target = unitToInstr[t];
  }

  // Positions and exception handlers.
  std::vector<Position> positions =
      parseLineTable(bytesOf(code->co_linetable, "co_linetable"), code->co_firstlineno, nunits);
  for (size_t i = 0; i < bc.instructions.size(); ++i) bc.instructions[i].pos = positions[opUnit[i]];
  parseExceptionTable(bytesOf(code->co_exceptiontable, "co_exceptiontable"), unitToInstr,
                      startUnit, bc.instructions);
  return bc;
}

CodeOptions codeOptionsFrom(PyCodeObject* code) {
  CodeOptions o;
  auto obj = reinterpret_cast<PyObject*>(code);  // borrowed ref
  o.argcount = code->co_argcount;
  o.posonlyargcount = code->co_posonlyargcount;
  o.kwonlyargcount = code->co_kwonlyargcount;
  o.flags = code->co_flags;
  o.firstlineno = code->co_firstlineno;
  PyObject* consts = code->co_consts;  // borrowed ref
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(consts); ++i) {
    o.consts.push_back(ObjRef::borrow(PyTuple_GET_ITEM(consts, i)));  // borrowed -> owned
  }
  o.names = stringTuple(obj, "co_names");
  o.varnames = stringTuple(obj, "co_varnames");
  o.cellvars = stringTuple(obj, "co_cellvars");
  o.freevars = stringTuple(obj, "co_freevars");
  auto str = [](PyObject* s) {  // borrowed ref
    const char* c = PyUnicode_AsUTF8(s);
    DYNAMO_INTERNAL_ASSERT(c != nullptr, "code name field is not a str");
    return std::string(c);
  };
  o.filename = str(code->co_filename);
  o.name = str(code->co_name);
  o.qualname = str(code->co_qualname);
  return o;
}

}  // namespace dynamo::core::bytecode
