// JSON text helpers shared by every component that writes JSON (trace-store columns, serialized
// graphs, report formats): one escaping rule everywhere.
#pragma once

#include <string>
#include <string_view>

namespace dynamo {

/// Appends `text` to `out` as a quoted JSON string: quotes, backslashes and control characters
/// escaped, UTF-8 passed through unchanged.
void appendJsonString(std::string& out, std::string_view text);

/// `text` as a quoted JSON string (see appendJsonString).
std::string jsonQuote(std::string_view text);

}  // namespace dynamo
