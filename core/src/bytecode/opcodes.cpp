// Opcode metadata: the table built from opcodes.def with numbers from <opcode.h>, cache counts
// and de-specialization from CPython's private tables (opcode_tables.c), stack effects from
// PyCompile_OpcodeStackEffectWithJump.
#include "dynamo/core/bytecode_opcodes.h"

#include <opcode.h>

#include <array>
#include <string>

#include "dynamo/common/error.h"

extern "C" {
int dynamo_bytecode_cache_entries(int op);  // opcode_tables.c
int dynamo_bytecode_deopt(int op);          // opcode_tables.c
}

namespace dynamo::core::bytecode {
namespace {

struct Table {
  std::vector<OpcodeInfo> list;          // ordered by number
  std::array<int, 256> byNumber{};       // index into list, or -1
};

Table buildTable() {
  Table t;
  t.byNumber.fill(-1);
  std::vector<OpcodeInfo> raw;
// (Each macro stringizes NAME itself: forwarding to DYNAMO_OPCODE would expand NAME to its
// number before the # operator sees it.)
#define DYNAMO_OPCODE(NAME, FLAGS) raw.push_back(OpcodeInfo{NAME, #NAME, (FLAGS), 0});
#if PY_VERSION_HEX >= 0x030C0000
#define DYNAMO_OPCODE_311(NAME, FLAGS)
#define DYNAMO_OPCODE_312(NAME, FLAGS) raw.push_back(OpcodeInfo{NAME, #NAME, (FLAGS), 0});
#else
#define DYNAMO_OPCODE_311(NAME, FLAGS) raw.push_back(OpcodeInfo{NAME, #NAME, (FLAGS), 0});
#define DYNAMO_OPCODE_312(NAME, FLAGS)
#endif
#include "opcodes.def"
#undef DYNAMO_OPCODE
#undef DYNAMO_OPCODE_311
#undef DYNAMO_OPCODE_312
  std::array<const OpcodeInfo*, 256> slots{};
  for (const OpcodeInfo& info : raw) {
    DYNAMO_INTERNAL_ASSERT(info.opcode >= 0 && info.opcode < 256 && !slots[info.opcode],
                           "opcodes.def: bad or duplicate opcode ", info.name);
    slots[info.opcode] = &info;
  }
  for (int op = 0; op < 256; ++op) {
    if (!slots[op]) continue;
    OpcodeInfo info = *slots[op];
    info.cacheEntries = dynamo_bytecode_cache_entries(op);
    t.byNumber[op] = static_cast<int>(t.list.size());
    t.list.push_back(info);
  }
  return t;
}

const Table& table() {
  static const Table t = buildTable();
  return t;
}

}  // namespace

const OpcodeInfo* opcodeInfo(int opcode) {
  if (opcode < 0 || opcode > 255) return nullptr;
  int i = table().byNumber[opcode];
  return i < 0 ? nullptr : &table().list[i];
}

const OpcodeInfo& requireOpcode(int opcode) {
  const OpcodeInfo* info = opcodeInfo(opcode);
  DYNAMO_INTERNAL_ASSERT(info != nullptr, "opcode ", opcode,
                         " is not a base opcode of this Python version");
  return *info;
}

int opcodeByName(std::string_view name) {
  for (const OpcodeInfo& info : table().list) {
    if (name == info.name) return info.opcode;
  }
  return -1;
}

const char* opcodeName(int opcode) {
  if (const OpcodeInfo* info = opcodeInfo(opcode)) return info->name;
  static thread_local std::string unknown;
  unknown = "<" + std::to_string(opcode) + ">";
  return unknown.c_str();
}

const std::vector<OpcodeInfo>& allOpcodes() { return table().list; }

int deoptimize(int rawOpcode) {
  if (rawOpcode == CACHE) return CACHE;
  int base = dynamo_bytecode_deopt(rawOpcode);
  if (base == 0 || !opcodeInfo(base)) return -1;
  return base;
}

int cacheEntries(int opcode) { return dynamo_bytecode_cache_entries(opcode); }

bool hasArgument(int opcode) { return opcode >= HAVE_ARGUMENT; }

int stackEffect(int opcode, int arg, bool jump) {
  int effect = PyCompile_OpcodeStackEffectWithJump(opcode, arg, jump ? 1 : 0);
  DYNAMO_INTERNAL_ASSERT(effect != PY_INVALID_STACK_EFFECT, "CPython reports no stack effect for ",
                         opcodeName(opcode), " ", arg);
  return effect;
}

int jumpVariant(int opcode, bool backward) {
  const OpcodeInfo& info = requireOpcode(opcode);
  if (!info.has(kJump)) return -1;
  if (info.has(kBackward) == backward) return opcode;
  switch (opcode) {
    case JUMP_FORWARD: return JUMP_BACKWARD;
    case JUMP_BACKWARD: return JUMP_FORWARD;
#if PY_VERSION_HEX < 0x030C0000
    case POP_JUMP_FORWARD_IF_FALSE: return POP_JUMP_BACKWARD_IF_FALSE;
    case POP_JUMP_FORWARD_IF_TRUE: return POP_JUMP_BACKWARD_IF_TRUE;
    case POP_JUMP_FORWARD_IF_NONE: return POP_JUMP_BACKWARD_IF_NONE;
    case POP_JUMP_FORWARD_IF_NOT_NONE: return POP_JUMP_BACKWARD_IF_NOT_NONE;
    case POP_JUMP_BACKWARD_IF_FALSE: return POP_JUMP_FORWARD_IF_FALSE;
    case POP_JUMP_BACKWARD_IF_TRUE: return POP_JUMP_FORWARD_IF_TRUE;
    case POP_JUMP_BACKWARD_IF_NONE: return POP_JUMP_FORWARD_IF_NONE;
    case POP_JUMP_BACKWARD_IF_NOT_NONE: return POP_JUMP_FORWARD_IF_NOT_NONE;
#endif
    default: return -1;  // 3.12 POP_JUMP_IF_*, FOR_ITER, SEND, JUMP_IF_*_OR_POP: one way only
  }
}

int nameIndex(int opcode, int arg) {
  const OpcodeInfo* info = opcodeInfo(opcode);
  if (!info || !info->has(kHasName)) return -1;
  if (opcode == LOAD_GLOBAL) return arg >> 1;
#if PY_VERSION_HEX >= 0x030C0000
  if (opcode == LOAD_ATTR) return arg >> 1;
  if (opcode == LOAD_SUPER_ATTR) return arg >> 2;
#endif
  return arg;
}

}  // namespace dynamo::core::bytecode
