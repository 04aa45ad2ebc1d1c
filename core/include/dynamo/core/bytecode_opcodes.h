// Opcode metadata for the CPython version Dynamo is compiled against (3.11 or 3.12).
//
// Opcode numbers and inline cache counts come from that version's headers (<opcode.h>,
// internal/pycore_opcode.h); the list of known base opcodes and their properties (jump kind,
// what the arg indexes, version membership) lives in core/src/bytecode/opcodes.def. Stack effects
// come from CPython itself (PyCompile_OpcodeStackEffectWithJump).
//
// Version differences that callers must know about (see core/src/bytecode/README.md):
//   3.11: POP_JUMP_{FORWARD,BACKWARD}_IF_*, JUMP_IF_*_OR_POP, PRECALL + CALL, LOAD_METHOD.
//   3.12: POP_JUMP_IF_* (forward only), END_FOR, END_SEND, RETURN_CONST, LOAD_ATTR method bit,
//         LOAD_SUPER_ATTR, CALL without PRECALL.
#pragma once

#include <Python.h>

#include <cstdint>
#include <string_view>
#include <vector>

#if PY_VERSION_HEX >= 0x030D0000
#error "Dynamo's bytecode toolkit supports CPython 3.11 and 3.12 only: audit it for 3.13"
#endif
#if PY_VERSION_HEX < 0x030B0000
#error "Dynamo's bytecode toolkit needs CPython 3.11 or newer"
#endif

namespace dynamo::core::bytecode {

/// True when compiled against CPython 3.12 (else 3.11).
inline constexpr bool kPython312 = PY_VERSION_HEX >= 0x030C0000;

/// Properties of an opcode; combined as a bit set in OpcodeInfo::flags.
enum OpFlag : uint32_t {
  kJump = 1u << 0,            ///< relative jump; Instruction::target is meaningful
  kBackward = 1u << 1,        ///< the jump goes backward (arg is subtracted)
  kConditional = 1u << 2,     ///< a jump that can also fall through
  kNoFallthrough = 1u << 3,   ///< never continues with the next instruction
  kHasName = 1u << 4,         ///< arg (or a part of it, see nameIndex) indexes co_names
  kHasConst = 1u << 5,        ///< arg indexes co_consts
  kHasLocal = 1u << 6,        ///< arg indexes the fast locals (co_varnames)
  kHasFree = 1u << 7,         ///< arg indexes co_localsplus (cells and free variables)
  kOnly311 = 1u << 8,         ///< exists in 3.11 only
  kOnly312 = 1u << 9,         ///< exists in 3.12 only
};

/// What Dynamo knows about one base opcode of the running Python version.
struct OpcodeInfo {
  int opcode = 0;             ///< number, from <opcode.h>
  const char* name = "";      ///< name as in the dis module
  uint32_t flags = 0;         ///< OpFlag bits
  int cacheEntries = 0;       ///< inline CACHE code units after the instruction

  /// True when every bit of f is set.
  bool has(uint32_t f) const { return (flags & f) == f; }
};

/// The info of a base opcode, or nullptr for specialized, pseudo or unknown numbers.
const OpcodeInfo* opcodeInfo(int opcode);
/// The info of a base opcode; throws InternalError for an unknown one.
const OpcodeInfo& requireOpcode(int opcode);
/// The opcode named `name` ("LOAD_CONST"), or -1.
int opcodeByName(std::string_view name);
/// The name of an opcode, or "<N>" for unknown numbers (never null).
const char* opcodeName(int opcode);
/// Every base opcode of the running version, ordered by number.
const std::vector<OpcodeInfo>& allOpcodes();

/// The base opcode of a raw opcode as found in code (specialized forms mapped back), or -1
/// when the number is unknown.
int deoptimize(int rawOpcode);
/// Number of inline cache code units after `opcode`.
int cacheEntries(int opcode);
/// Whether `opcode` takes an argument (opcode >= HAVE_ARGUMENT).
bool hasArgument(int opcode);

/// Net stack effect of the instruction: `jump` selects the taken-jump edge of a jump opcode.
/// Throws InternalError when CPython reports the opcode/arg as invalid.
int stackEffect(int opcode, int arg, bool jump);

/// The jump opcode with the same meaning as `opcode` going in the requested direction: on 3.11
/// POP_JUMP_FORWARD_IF_X <-> POP_JUMP_BACKWARD_IF_X and JUMP_FORWARD <-> JUMP_BACKWARD; on 3.12
/// JUMP_FORWARD <-> JUMP_BACKWARD only. Returns -1 when no such variant exists (e.g. a backward
/// 3.12 POP_JUMP_IF_*, or a forward JUMP_BACKWARD_NO_INTERRUPT).
int jumpVariant(int opcode, bool backward);

/// The co_names index an instruction uses, decoding packed bits (LOAD_GLOBAL arg>>1; 3.12
/// LOAD_ATTR arg>>1 and LOAD_SUPER_ATTR arg>>2); -1 if it uses no name.
int nameIndex(int opcode, int arg);

}  // namespace dynamo::core::bytecode
