// Dynamo's bytecode toolkit: decode a CPython 3.11/3.12 code object into a list of
// instructions, edit or generate such lists, and assemble them back into a new code object.
//
//   PyCodeObject --decode()--> Bytecode --(edit / generate)--> Bytecode --assemble()--> code
//                                  |                                |
//                               print()                          verify()
//
// In a Bytecode, jump targets and exception handlers are instruction indices, never byte
// offsets; CACHE and EXTENDED_ARG entries do not appear. assemble() chooses offsets,
// EXTENDED_ARG prefixes, jump directions, the line table, the exception table and co_stacksize.
// Design notes: core/src/bytecode/README.md. All functions need the GIL.
#pragma once

#include <Python.h>

#include <string>
#include <utility>
#include <vector>

#include "dynamo/core/bytecode_opcodes.h"
#include "dynamo/core/graph_pyref.h"

namespace dynamo::core::bytecode {

/// An owned (strong) reference to a Python object: the core's one such type.
using ObjRef = dynamo::core::PyObjectRef;

/// Source position of an instruction (PEP 626/657). -1 means "unknown".
struct Position {
  int line = -1;     ///< 1-based start line; -1 when the instruction has no location
  int endLine = -1;  ///< end line; -1 when unknown
  int col = -1;      ///< 0-based start column (UTF-8 bytes); -1 when unknown
  int endCol = -1;   ///< 0-based end column; -1 when unknown

  bool operator==(const Position& o) const {
    return line == o.line && endLine == o.endLine && col == o.col && endCol == o.endCol;
  }
  bool operator!=(const Position& o) const { return !(*this == o); }
};

/// The exception handler covering an instruction (one exception table entry, seen per
/// instruction). Inactive when target < 0.
struct ExceptionHandler {
  int target = -1;     ///< index of the handler's first instruction; -1: no handler
  int depth = 0;       ///< stack depth the handler pops down to before pushing
  bool lasti = false;  ///< whether the offset of the raising instruction is pushed too

  bool active() const { return target >= 0; }
  bool operator==(const ExceptionHandler& o) const {
    return target == o.target && depth == o.depth && lasti == o.lasti;
  }
  bool operator!=(const ExceptionHandler& o) const { return !(*this == o); }
};

/// One decoded instruction. Plain value; edit freely, assemble() recomputes jump args.
struct Instruction {
  int opcode = 0;            ///< base (de-specialized) opcode number
  int arg = 0;               ///< full argument, EXTENDED_ARG prefixes folded in; 0 if none
  int target = -1;           ///< jumps only: index of the target instruction
  Position pos;              ///< source position (line table)
  int offset = -1;           ///< byte offset of the opcode in the decoded code; -1 if generated
  ExceptionHandler handler;  ///< the exception handler covering this instruction, if any

  /// A non-jump instruction with the given opcode and argument, no position.
  static Instruction make(int opcode, int arg = 0);
  /// A jump instruction to the instruction at index `target`. The direction of the opcode is
  /// a hint only: assemble() picks the variant matching the real direction (see jumpVariant).
  static Instruction jump(int opcode, int target);

  /// The opcode's name ("LOAD_CONST").
  const char* name() const { return opcodeName(opcode); }
  /// True for relative jumps (target is meaningful).
  bool isJump() const;
};

/// An exception table entry over instruction indices, as derived from per-instruction handlers.
struct ExceptionEntry {
  int start = 0;       ///< first covered instruction index
  int end = 0;         ///< last covered instruction index (inclusive)
  int target = 0;      ///< handler instruction index
  int depth = 0;       ///< stack depth to pop down to
  bool lasti = false;  ///< push the offset of the raising instruction
};

/// A decoded (or generated) function body.
///
/// The per-instruction handler fields are the single source of truth for exception handling:
/// exceptionTable() derives the ranges from them, so inserting or removing instructions never
/// leaves a stale table behind.
struct Bytecode {
  std::vector<Instruction> instructions;  ///< the instructions, in order

  /// Exception table entries: maximal runs of consecutive instructions with the same handler.
  std::vector<ExceptionEntry> exceptionTable() const;
  /// Inserts `added` before index `pos`, shifting every jump target and handler target >= pos
  /// in the existing instructions. Targets inside `added` are indices in the result.
  void insert(size_t pos, std::vector<Instruction> added);
};

/// Everything besides the instructions that a code object needs (the co_* fields).
///
/// Slots are described as in types.CodeType: varnames (arguments first), cellvars and
/// freevars. A cell variable that is also an argument appears in both varnames and cellvars and
/// shares the argument's slot, exactly as CPython does.
struct CodeOptions {
  int argcount = 0;                   ///< co_argcount
  int posonlyargcount = 0;            ///< co_posonlyargcount
  int kwonlyargcount = 0;             ///< co_kwonlyargcount
  int flags = 0;                      ///< co_flags (CO_OPTIMIZED, CO_NEWLOCALS, ...)
  int firstlineno = 1;                ///< co_firstlineno; the line table starts from it
  std::vector<ObjRef> consts;         ///< co_consts: any Python objects (not NULL)
  std::vector<std::string> names;     ///< co_names
  std::vector<std::string> varnames;  ///< co_varnames (arguments first); co_nlocals = size
  std::vector<std::string> cellvars;  ///< co_cellvars
  std::vector<std::string> freevars;  ///< co_freevars
  std::string filename;               ///< co_filename
  std::string name;                   ///< co_name
  std::string qualname;               ///< co_qualname

  /// Index of `obj` in consts, appending it when absent. Equal constants of the same exact
  /// type (None, bool, int, str, bytes) are shared; anything else is matched by identity.
  int addConst(PyObject* obj);  // borrowed ref
  /// Index of `n` in names, appending it when absent.
  int addName(const std::string& n);
  /// Index of the local `n` in varnames, appending it when absent.
  int addVarname(const std::string& n);
  /// Names of the co_localsplus slots in order: varnames, cellvars not already in varnames,
  /// freevars. Deref opcodes index this list.
  std::vector<std::string> localsPlusNames() const;
};

/// The options of an existing code object (a copy: editing them does not touch `code`).
CodeOptions codeOptionsFrom(PyCodeObject* code);  // borrowed ref

/// Decodes co_code, co_linetable and co_exceptiontable of `code`.
/// Throws InternalError when the code is malformed (a bug in whoever built it).
Bytecode decode(PyCodeObject* code);  // borrowed ref

/// The byte-level result of assembly, before a code object is built.
struct AssembledTables {
  std::string code;            ///< co_code: instructions, EXTENDED_ARG prefixes, zeroed caches
  std::string linetable;       ///< co_linetable (PEP 626/657 format)
  std::string exceptiontable;  ///< co_exceptiontable
  int stacksize = 0;           ///< co_stacksize
  std::vector<int> offsets;    ///< byte offset of each instruction's first code unit (prefixes)
};

/// Lays out the instructions: offsets and EXTENDED_ARG prefixes (fixed point), jump args and
/// directions, line table, exception table and stack size. Runs verify() first.
AssembledTables assembleTables(const Bytecode& bc, const CodeOptions& opts);

/// Assembles a new code object (new ref). Throws InternalError on invalid input.
ObjRef assemble(const Bytecode& bc, const CodeOptions& opts);

/// Stack depth on entry for code with these co_flags: 1 for generators, coroutines and async
/// generators (the value sent on resumption, popped after RETURN_GENERATOR), else 0.
int entryStackDepth(int coFlags);

/// Maximum stack depth over all reachable instructions, following fall-through, jump and
/// exception edges from the entry (see entryStackDepth). Throws InternalError (naming the
/// instruction) on an inconsistent stack.
int computeStackSize(const Bytecode& bc, int coFlags);

/// Checks the bytecode: known opcodes, args in range (when opts is given; its flags also set
/// the entry depth), jump and handler targets in range, and stack depth consistency along every edge (never negative, equal at
/// merge points, at least the handler depth inside a try range). Throws InternalError naming
/// the first offending instruction.
void verify(const Bytecode& bc, const CodeOptions* opts = nullptr);

/// Per-instruction stack depth before each instruction; -1 for unreachable instructions.
/// Throws like verify() on inconsistency.
std::vector<int> stackDepths(const Bytecode& bc, int coFlags);

/// Live local slots before each instruction (a backward data-flow over fall-through, jump and
/// exception edges): slot s is live at i when some path from i reads s (LOAD_FAST, DELETE_FAST
/// and 3.12's LOAD_FAST_CHECK / LOAD_FAST_AND_CLEAR) before a STORE_FAST writes it. Deref slots
/// (cells) are not tracked. Result: [instruction][slot], nlocals slots each.
std::vector<std::vector<bool>> liveLocals(const Bytecode& bc, int nlocals);

/// The handler an exception raised under `h` first reaches that is not one of CPython's
/// pass-through blocks, which only clean up and re-raise into whatever handler covers them: the
/// exception-state cleanup around an `except` body or a `with` exit (COPY 3, POP_EXCEPT,
/// RERAISE), 3.12's restore of the locals an inlined comprehension shadowed (PEP 709), and
/// 3.12's StopIteration guard around a generator body (PEP 479). Inactive when the exception
/// leaves the frame. A handler whose target is out of range counts as the user's. The one walk
/// behind "is this instruction inside the user's try block" (the tracer's capture decision and
/// the compiler's "graph break inside a try block").
ExceptionHandler firstUserHandler(const Bytecode& bc, ExceptionHandler h);
/// True when `h` is a `with` statement's exit on an exception (PUSH_EXC_INFO, WITH_EXCEPT_START):
/// its context manager's __exit__ sits at stack depth h.depth - 1 under the handler.
bool isWithExitHandler(const Bytecode& bc, ExceptionHandler h);

/// dis-like listing: one line per instruction (line, index, opcode, arg, arg meaning, jump
/// target as "to #N", handler), then the exception table. Uses opts for arg meanings when given.
std::string print(const Bytecode& bc, const CodeOptions* opts = nullptr);

// ---- building instructions --------------------------------------------------------------------

/// LOAD_CONST of `obj` (borrowed ref), adding it to opts.consts.
Instruction loadConst(CodeOptions& opts, PyObject* obj);
/// LOAD_GLOBAL of `name`; pushNull also pushes NULL (for calls), as LOAD_GLOBAL's low bit does.
Instruction loadGlobal(CodeOptions& opts, const std::string& name, bool pushNull);
/// LOAD_FAST / STORE_FAST of the local `name` (added to varnames if missing).
Instruction loadFast(CodeOptions& opts, const std::string& name);
Instruction storeFast(CodeOptions& opts, const std::string& name);

/// The instructions that call a callable for the running version, given a stack of
/// [NULL, callable, arg0 .. argN-1] (3.11 and 3.12 order): 3.11 [KW_NAMES k] PRECALL n, CALL n;
/// 3.12 [KW_NAMES k] CALL n. With kwNames non-empty, the last kwNames.size() args are keyword
/// arguments and a tuple of the names is added to consts.
std::vector<Instruction> callFunction(CodeOptions& opts, int nargs,
                                      const std::vector<std::string>& kwNames = {});

/// A conditional "pop and jump if false/true" to `target` for the running version
/// (POP_JUMP_FORWARD_IF_* on 3.11, POP_JUMP_IF_* on 3.12); assemble() flips the 3.11 direction.
Instruction popJumpIf(bool whenTrue, int target);
/// An unconditional jump to `target` (JUMP_FORWARD; flipped to JUMP_BACKWARD when needed).
Instruction jumpTo(int target);

}  // namespace dynamo::core::bytecode
