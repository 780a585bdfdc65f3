// The hashes ridge uses. FNV-1a (64-bit) compares configurations and data (between MPI ranks, a token
// file's content): fast, not cryptographic, equal inputs give equal values on every machine. SHA-256
// (FIPS 180-4) names what must not collide even when someone tries: the JIT cache's keys and the
// checksum of each cached kernel (ridge/jit.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ridge {

constexpr uint64_t kFnv1aBasis = 0xcbf29ce484222325ull;

// Continues the hash `h` over `bytes` bytes at `data` (start with kFnv1aBasis).
inline uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = kFnv1aBasis) {
  const auto* b = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

// SHA-256 over bytes given in any number of pieces: update() as often as needed, then digest() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // The 32-byte digest; the object is spent afterwards (a further update or digest is a logic error).
  std::array<uint8_t, 32> digest();
  // digest() as 64 lowercase hex digits.
  std::string hex_digest();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t used_ = 0;     // bytes waiting in buf_
  uint64_t total_ = 0;  // bytes hashed so far
};

// SHA-256 of `s` as 64 lowercase hex digits.
std::string sha256_hex(std::string_view s);

}  // namespace ridge
