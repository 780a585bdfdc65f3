// The one hash ridge uses to compare configurations and data (between MPI ranks, a token file's
// content): 64-bit FNV-1a. Not cryptographic; equal inputs give equal values on every machine.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ridge {

constexpr uint64_t kFnv1aBasis = 0xcbf29ce484222325ull;

// Continues the hash `h` over `bytes` bytes at `data` (start with kFnv1aBasis).
inline uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = kFnv1aBasis) {
  const auto* b = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace ridge
