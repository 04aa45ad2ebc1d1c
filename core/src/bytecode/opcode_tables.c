/* Access to CPython's private opcode tables (cache entry counts, de-specialization map).
 *
 * internal/pycore_opcode.h defines the tables with C99 designated initializers
 * ([LOAD_ATTR] = 4), which C++ does not accept, and _PyOpcode_Caches/_PyOpcode_Deopt are not
 * exported by the interpreter. So this C file includes the header with NEED_OPCODE_TABLES and
 * exposes the two tables through functions. The table symbols are renamed with macros so this
 * object file defines no _PyOpcode_* symbol that could clash with (or interpose on) the
 * interpreter's own copies.
 */
#include <Python.h>
#include <stdint.h>

#if PY_VERSION_HEX >= 0x030D0000
#error "Dynamo's bytecode toolkit supports CPython 3.11 and 3.12 only: audit opcode tables for 3.13"
#endif
#if PY_VERSION_HEX < 0x030B0000
#error "Dynamo's bytecode toolkit needs CPython 3.11 or newer"
#endif

#define _PyOpcode_Caches dynamo_bytecode_caches_table
#define _PyOpcode_Deopt dynamo_bytecode_deopt_table
#define _PyOpcode_Jump dynamo_bytecode_jump_table
#define _PyOpcode_RelativeJump dynamo_bytecode_reljump_table
#define _PyOpcode_OpName dynamo_bytecode_opname_table
#define NEED_OPCODE_TABLES 1
#ifndef Py_BUILD_CORE
#define Py_BUILD_CORE 1
#endif
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-const-variable"
#pragma GCC diagnostic ignored "-Wunused-variable"
#include "internal/pycore_opcode.h"
#pragma GCC diagnostic pop

/* Number of inline CACHE code units after opcode op (0..255). */
int dynamo_bytecode_cache_entries(int op) {
  if (op < 0 || op > 255) return 0;
  return dynamo_bytecode_caches_table[op];
}

/* The base opcode of a (possibly specialized) opcode, or 0 when CPython knows none.
 * Note that CACHE is 0 as well. */
int dynamo_bytecode_deopt(int op) {
  if (op < 0 || op > 255) return 0;
  return dynamo_bytecode_deopt_table[op];
}
