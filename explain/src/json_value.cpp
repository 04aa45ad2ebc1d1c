// The small strict JSON reader of json_value.h.
#include "json_value.h"

#include <cctype>
#include <cstdlib>

namespace dynamo::explain::detail {

const JsonValue* JsonValue::get(const std::string& key) const {
  if (type != Type::kObject) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &it->second;
}

std::string JsonValue::str(const std::string& key) const {
  const JsonValue* v = get(key);
  return v != nullptr && v->type == Type::kString ? v->string : std::string();
}

namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  bool parseDocument(JsonValue& out) {
    if (!value(out, 0)) return false;
    skipSpace();
    return pos_ == text_.size();
  }

 private:
  static constexpr int kMaxDepth = 256;

  void skipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r' || text_[pos_] == '\t'))
      ++pos_;
  }
  bool eat(char c) {
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  bool value(JsonValue& out, int depth) {
    if (depth > kMaxDepth) return false;
    skipSpace();
    if (pos_ >= text_.size()) return false;
    char c = text_[pos_];
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') {
      out.type = JsonValue::Type::kString;
      return string(out.string);
    }
    if (literal("true")) return out.type = JsonValue::Type::kBool, out.boolean = true, true;
    if (literal("false")) return out.type = JsonValue::Type::kBool, out.boolean = false, true;
    if (literal("null")) return out.type = JsonValue::Type::kNull, true;
    // Python's json also writes NaN / Infinity; take them as numbers.
    if (literal("NaN") || literal("Infinity") || literal("-Infinity"))
      return out.type = JsonValue::Type::kNumber, true;
    return number(out);
  }

  bool number(JsonValue& out) {
    size_t start = pos_;
    while (pos_ < text_.size() && (std::isdigit(static_cast<unsigned char>(text_[pos_])) ||
                                   text_[pos_] == '-' || text_[pos_] == '+' ||
                                   text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E'))
      ++pos_;
    if (pos_ == start) return false;
    std::string digits(text_.substr(start, pos_ - start));
    char* end = nullptr;
    out.type = JsonValue::Type::kNumber;
    out.number = std::strtod(digits.c_str(), &end);
    return end != nullptr && *end == '\0';
  }

  static void appendUtf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  bool hex4(unsigned& cp) {
    if (pos_ + 4 > text_.size()) return false;
    cp = 0;
    for (int i = 0; i < 4; ++i) {
      char h = text_[pos_++];
      cp <<= 4;
      if (h >= '0' && h <= '9') cp |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f') cp |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') cp |= static_cast<unsigned>(h - 'A' + 10);
      else return false;
    }
    return true;
  }

  bool string(std::string& out) {
    ++pos_;  // the opening quote
    while (pos_ < text_.size()) {
      char c = text_[pos_++];
      if (c == '"') return true;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) return false;
      char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00 && text_.substr(pos_, 2) == "\\u") {
            pos_ += 2;
            unsigned low = 0;
            if (!hex4(low)) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          appendUtf8(out, cp);
          break;
        }
        default: return false;
      }
    }
    return false;
  }

  bool array(JsonValue& out, int depth) {
    ++pos_;
    out.type = JsonValue::Type::kArray;
    if (eat(']')) return true;
    do {
      out.array.emplace_back();
      if (!value(out.array.back(), depth + 1)) return false;
    } while (eat(','));
    return eat(']');
  }

  bool object(JsonValue& out, int depth) {
    ++pos_;
    out.type = JsonValue::Type::kObject;
    if (eat('}')) return true;
    do {
      skipSpace();
      std::string key;
      if (pos_ >= text_.size() || text_[pos_] != '"' || !string(key)) return false;
      if (!eat(':')) return false;
      if (!value(out.object[key], depth + 1)) return false;
    } while (eat(','));
    return eat('}');
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

bool parseJson(std::string_view text, JsonValue& out) {
  out = JsonValue{};
  return Parser(text).parseDocument(out);
}

}  // namespace dynamo::explain::detail
