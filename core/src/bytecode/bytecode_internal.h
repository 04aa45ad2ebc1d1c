// Private helpers shared by the bytecode toolkit's .cpp files: Python error capture and the two
// varint flavours of CPython's code tables.
//
//   line table (PEP 626/657):  little-endian 6-bit chunks, 0x40 = "more follows";
//                              signed values zig-zag folded (sign in bit 0)
//   exception table:           big-endian 6-bit chunks, 0x40 = "more follows",
//                              0x80 marks the first byte of an entry
#pragma once

#include <Python.h>

#include <cstdint>
#include <string>

namespace dynamo::core::bytecode::detail {

/// The pending Python exception rendered as "Type: message" (clears it); "" when none is set.
std::string takePythonError();

/// Reads an unsigned little-endian varint of the line table at `pos`; advances pos.
/// Returns -1 when the table ends in the middle of the value.
inline long readLineVarint(const uint8_t* data, size_t size, size_t& pos) {
  long value = 0;
  int shift = 0;
  while (pos < size) {
    uint8_t b = data[pos++];
    value |= static_cast<long>(b & 63) << shift;
    shift += 6;
    if (!(b & 64)) return value;
  }
  return -1;
}

/// Decodes a zig-zag folded signed varint value of the line table.
inline long unfoldSigned(long v) { return (v & 1) ? -(v >> 1) : (v >> 1); }

/// Appends an unsigned little-endian varint to a line table.
inline void writeLineVarint(std::string& out, unsigned long v) {
  while (v >= 64) {
    out.push_back(static_cast<char>(64 | (v & 63)));
    v >>= 6;
  }
  out.push_back(static_cast<char>(v));
}

/// Appends a signed varint (zig-zag folded) to a line table.
inline void writeLineSvarint(std::string& out, long v) {
  writeLineVarint(out, v < 0 ? ((static_cast<unsigned long>(-v) << 1) | 1)
                             : (static_cast<unsigned long>(v) << 1));
}

/// Reads a big-endian varint of the exception table at `pos`; advances pos. -1 on truncation.
inline long readExceptionVarint(const uint8_t* data, size_t size, size_t& pos) {
  if (pos >= size) return -1;
  uint8_t b = data[pos++];
  long value = b & 63;
  while (b & 64) {
    if (pos >= size) return -1;
    b = data[pos++];
    value = (value << 6) | (b & 63);
  }
  return value;
}

/// Appends a big-endian varint to an exception table; `first` sets the entry-start bit 0x80.
inline void writeExceptionVarint(std::string& out, unsigned long v, bool first) {
  int chunks = 1;
  while ((v >> (6 * chunks)) != 0) ++chunks;
  for (int i = chunks - 1; i >= 0; --i) {
    uint8_t b = static_cast<uint8_t>((v >> (6 * i)) & 63);
    if (i > 0) b |= 64;
    if (first && i == chunks - 1) b |= 128;
    out.push_back(static_cast<char>(b));
  }
}

}  // namespace dynamo::core::bytecode::detail
