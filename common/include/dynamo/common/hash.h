// Content hashes: SHA-256 through OpenSSL's libcrypto (Debian's libssl-dev). Used for the kernel
// cache's keys, the checksums of cache entries and the inspector's graph names.
#pragma once

#include <string>
#include <string_view>

namespace dynamo {

/// Hex SHA-256 of `data` (64 lowercase hex digits).
std::string sha256Hex(std::string_view data);

}  // namespace dynamo
