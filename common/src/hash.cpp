// SHA-256 through OpenSSL (hash.h).
#include "dynamo/common/hash.h"

#include <openssl/evp.h>

#include <cstdio>

#include "dynamo/common/error.h"

namespace dynamo {

std::string sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  const int ok = EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  DYNAMO_INTERNAL_ASSERT(ok == 1 && len == 32, "OpenSSL's SHA-256 failed");
  static const char kHex[] = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    out[2 * i] = kHex[md[i] >> 4];
    out[2 * i + 1] = kHex[md[i] & 0xf];
  }
  return out;
}

}  // namespace dynamo
