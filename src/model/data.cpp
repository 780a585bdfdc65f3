#include "ridge/model/data.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <numbers>
#include <utility>

#include "model/atomic_write.hpp"
#include "ridge/core/error.hpp"
#include "core/check.hpp"

namespace ridge::model {

// ---- TokenFile ----

TokenFile::TokenFile(TokenFile&& o) noexcept {
  *this = std::move(o);
}

TokenFile& TokenFile::operator=(TokenFile&& o) noexcept {
  if (this != &o) {
    unmap();
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    max_token_ = o.max_token_;
  }
  return *this;
}

TokenFile::~TokenFile() {
  unmap();
}

void TokenFile::unmap() {
  if (map_) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

TokenFile TokenFile::open(const std::string& path) {
  const auto map = detail::map_regular_file(path, fmt::format("token file '{}'", path), [](size_t bytes) {
    if (bytes == 0) return std::string("empty (no tokens)");
    if (bytes % 2 != 0) return fmt::format("truncated: {} bytes is not a whole number of uint16 tokens", bytes);
    return std::string();
  });
  void* m = map.data;
  const size_t bytes = map.bytes;
  TokenFile f;
  f.path_ = path;
  f.map_ = m;
  f.map_bytes_ = bytes;
  f.data_ = static_cast<const uint16_t*>(m);  // page-aligned, so uint16 access is aligned
  f.size_ = static_cast<int64_t>(bytes / 2);
  f.max_token_ = *std::max_element(f.data_, f.data_ + f.size_);
  return f;
}

// ---- Rng ----

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

}  // namespace

Rng::Rng(uint64_t seed) {
  // splitmix64 never yields four zeros in a row, so the state is always valid.
  for (auto& w : s_) w = splitmix64(seed);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() {
  return static_cast<double>(next() >> 11) * 0x1.0p-53;
}

double Rng::normal() {
  const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

uint64_t Rng::below(uint64_t n) {
  check(n > 0, "Rng::below: n must be > 0");
  // Rejecting the lowest 2^64 mod n values leaves a multiple of n equally likely ones, so x % n is unbiased.
  const uint64_t threshold = (0 - n) % n;
  uint64_t x = next();
  while (x < threshold) x = next();
  return x % n;
}

void Rng::set_state(const State& s) {
  check(s[0] | s[1] | s[2] | s[3], "Rng::set_state: the all-zero state is not a valid xoshiro256** state");
  s_ = s;
}

// ---- batches ----

void sample_batch(const uint16_t* tokens, int64_t n, int64_t batch, int64_t context, Rng& rng,
                  int32_t* inputs, int32_t* targets) {
  check(batch >= 1, "sample_batch: batch is {}; it must be >= 1", batch);
  check(context >= 1, "sample_batch: context is {}; it must be >= 1", context);
  check(n >= 0 && n - 1 >= context, "sample_batch: the data has {} tokens; context {} needs at least {}", n,
        context, context + 1);
  check(tokens != nullptr && inputs != nullptr && targets != nullptr, "sample_batch: a pointer is null");
  const uint64_t starts = static_cast<uint64_t>(n - context);  // s in [0, n - context - 1]
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t s = static_cast<int64_t>(rng.below(starts));
    for (int64_t t = 0; t < context; ++t) {
      inputs[b * context + t] = tokens[s + t];
      targets[b * context + t] = tokens[s + t + 1];
    }
  }
}

// ---- encoding and statistics ----

std::vector<uint16_t> encode_bytes(std::string_view text) {
  std::vector<uint16_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

void write_tokens(const std::string& path, std::span<const uint16_t> tokens) {
  const std::string what = fmt::format("write_tokens '{}'", path);
  check(!tokens.empty(), "{}: tokens is empty (a token file holds at least one token)", what);
  // uint16 in memory is already little-endian on x86-64, the file's byte order.
  const std::span<const std::byte> piece(reinterpret_cast<const std::byte*>(tokens.data()),
                                         tokens.size_bytes());
  detail::write_atomically(path, what, std::span<const std::span<const std::byte>>(&piece, 1));
}

TokenStats token_stats(std::span<const uint16_t> tokens) {
  TokenStats s;
  s.count = static_cast<int64_t>(tokens.size());
  if (tokens.empty()) return s;
  std::vector<int64_t> counts(65536, 0);
  for (uint16_t t : tokens) ++counts[t];
  const double n = static_cast<double>(tokens.size());
  double h = 0;  // nats
  for (size_t id = 0; id < counts.size(); ++id) {
    if (counts[id] == 0) continue;
    ++s.distinct;
    s.max_token = static_cast<uint16_t>(id);
    const double p = static_cast<double>(counts[id]) / n;
    h -= p * std::log(p);
  }
  s.entropy_nats = h;
  s.entropy_bits = h / std::log(2.0);
  return s;
}

double unigram_entropy_bits(std::span<const uint16_t> tokens) {
  return token_stats(tokens).entropy_bits;
}

}  // namespace ridge::model
