// JSON string arrays for list-valued columns (see string_list.h).
#include "string_list.h"

#include "dynamo/common/json.h"

#include <cstdio>

namespace dynamo::storage {

std::string encodeStringList(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ',';
    appendJsonString(out, items[i]);
  }
  out += ']';
  return out;
}

namespace {

void appendUtf8(std::string& out, unsigned code) {
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (code >> 12));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
}

// Parses one JSON string starting at text[pos] == '"'; leaves pos after the closing quote.
bool parseString(std::string_view text, size_t& pos, std::string& out) {
  ++pos;
  while (pos < text.size()) {
    char c = text[pos++];
    if (c == '"') return true;
    if (c != '\\') {
      out += c;
      continue;
    }
    if (pos >= text.size()) return false;
    char e = text[pos++];
    switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'u': {
        if (pos + 4 > text.size()) return false;
        unsigned code = 0;
        for (int i = 0; i < 4; ++i) {
          char h = text[pos++];
          code <<= 4;
          if (h >= '0' && h <= '9') code |= unsigned(h - '0');
          else if (h >= 'a' && h <= 'f') code |= unsigned(h - 'a' + 10);
          else if (h >= 'A' && h <= 'F') code |= unsigned(h - 'A' + 10);
          else return false;
        }
        appendUtf8(out, code);
        break;
      }
      default: return false;
    }
  }
  return false;
}

void skipSpace(std::string_view text, size_t& pos) {
  while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\n' || text[pos] == '\t' ||
                               text[pos] == '\r'))
    ++pos;
}

}  // namespace

bool decodeStringList(std::string_view text, std::vector<std::string>& out) {
  out.clear();
  size_t pos = 0;
  skipSpace(text, pos);
  if (pos == text.size()) return true;  // NULL / empty column: an empty list
  if (text[pos++] != '[') return false;
  skipSpace(text, pos);
  if (pos < text.size() && text[pos] == ']') return true;
  while (pos < text.size()) {
    skipSpace(text, pos);
    if (pos >= text.size() || text[pos] != '"') return false;
    std::string item;
    if (!parseString(text, pos, item)) return false;
    out.push_back(std::move(item));
    skipSpace(text, pos);
    if (pos >= text.size()) return false;
    char c = text[pos++];
    if (c == ']') return true;
    if (c != ',') return false;
  }
  return false;
}

}  // namespace dynamo::storage
