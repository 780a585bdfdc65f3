// SHA-256 against the FIPS 180-4 / NIST example vectors, whole and fed in awkward pieces.
#include <gtest/gtest.h>

#include <string>

#include "ridge/core/hash.hpp"

namespace {

using ridge::Sha256;
using ridge::sha256_hex;

const std::string k448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
const std::string k896 =
    "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrst"
    "nopqrstu";

TEST(Sha256, FipsVectors) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex(k448), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(k896), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(Sha256, AMillionAs) {
  const std::string a(1000000, 'a');
  EXPECT_EQ(sha256_hex(a), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // The same million fed 1, 63, 64, 65, ... bytes at a time: the block buffer's every edge.
  Sha256 h;
  size_t at = 0;
  for (size_t step = 1; at < a.size(); step = step % 130 + 1) {
    const size_t n = std::min(step, a.size() - at);
    h.update(a.data() + at, n);
    at += n;
  }
  EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Lengths around the padding's edges (55, 56, 63, 64 bytes) hash the same whole and in two pieces.
TEST(Sha256, PiecesEqualWhole) {
  for (size_t len : {0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 128, 1000}) {
    std::string s(len, '\0');
    for (size_t i = 0; i < len; ++i) s[i] = static_cast<char>(i * 7 + 3);
    for (size_t cut = 0; cut <= len; cut += len / 4 + 1) {
      Sha256 h;
      h.update(s.substr(0, cut));
      h.update(s.substr(cut));
      EXPECT_EQ(h.hex_digest(), sha256_hex(s)) << len << " cut at " << cut;
    }
  }
  EXPECT_NE(sha256_hex("abc"), sha256_hex("abd"));
}

}  // namespace
