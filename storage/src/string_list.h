// Lists of strings (argv, hints, user stacks, graph inputs) are stored as JSON arrays of
// strings, so that other tools (and SQLite's json_each) can read them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dynamo::storage {

/// ["a","b\n"] for {"a", "b\n"}; bytes >= 0x80 are copied as is (UTF-8 in, UTF-8 out).
std::string encodeStringList(const std::vector<std::string>& items);
/// Inverse of encodeStringList. Returns false (leaving out partly filled) on malformed text.
bool decodeStringList(std::string_view text, std::vector<std::string>& out);

}  // namespace dynamo::storage
