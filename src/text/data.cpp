#include "ridge/text/data.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <numbers>
#include <utility>

#include "ridge/core/error.hpp"
#include "ridge/core/files.hpp"
#include "ridge/core/hash.hpp"
#include "core/check.hpp"

namespace ridge::text {

// ---- TokenFile ----

TokenFile::TokenFile(TokenFile&& o) noexcept {
  *this = std::move(o);
}

TokenFile& TokenFile::operator=(TokenFile&& o) noexcept {
  if (this != &o) {
    close();
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
    size_ = std::exchange(o.size_, 0);
    max_token_ = o.max_token_;
    hash_ = o.hash_;
  }
  return *this;
}

TokenFile::~TokenFile() {
  close();
}

void TokenFile::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

TokenFile TokenFile::open(const std::string& path) {
  const std::string what = fmt::format("token file '{}'", path);
  // stat before open: opening a FIFO would block until a writer appears (O_NONBLOCK in case it was
  // swapped for one in between).
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("{}: cannot open it: {}", what, std::strerror(errno));
  check(S_ISREG(st.st_mode), "{}: not a regular file", what);
  TokenFile f;
  f.path_ = path;
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (f.fd_ < 0) fail("{}: cannot open it: {}", what, std::strerror(errno));
  struct stat fst {};
  check(::fstat(f.fd_, &fst) == 0 && S_ISREG(fst.st_mode), "{}: not a regular file", what);
  const auto bytes = static_cast<int64_t>(fst.st_size);
  check(bytes > 0, "{}: empty (no tokens)", what);
  check(bytes % 2 == 0, "{}: truncated: {} bytes is not a whole number of uint16 tokens", what, bytes);
  f.size_ = bytes / 2;
  uint16_t mx = 0;
  uint64_t h = kFnv1aBasis;
  f.scan([&](std::span<const uint16_t> piece) {
    for (uint16_t t : piece) mx = t > mx ? t : mx;
    h = fnv1a(piece.data(), piece.size_bytes(), h);
  });
  f.max_token_ = mx;
  f.hash_ = h;
  return f;
}

void TokenFile::read(int64_t first, int64_t count, uint16_t* out) const {
  check(first >= 0 && count >= 0 && first + count <= size_,
        "token file '{}': tokens [{}, {}) are outside its {}", path_, first, first + count, size_);
  auto* p = reinterpret_cast<char*>(out);
  size_t left = static_cast<size_t>(count) * 2;
  auto at = static_cast<off_t>(first * 2);
  while (left > 0) {
    const ssize_t n = ::pread(fd_, p, left, at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("token file '{}': reading it failed: {}", path_, std::strerror(errno));
    // A short read: the file shrank after it was opened (another program truncated or rewrote it).
    check(
        n > 0,
        "token file '{}': it now ends before token {} although it held {} tokens when opened; it was changed "
        "while ridge read it (leave a token file unchanged while a run uses it)",
        path_, first + count, size_);
    p += n;
    at += n;
    left -= static_cast<size_t>(n);
  }
}

void TokenFile::scan(const std::function<void(std::span<const uint16_t>)>& fn) const {
  constexpr int64_t kPiece = int64_t{1} << 19;  // tokens: 1 MiB
  std::vector<uint16_t> buf(static_cast<size_t>(std::min(kPiece, size_)));
  for (int64_t first = 0; first < size_; first += kPiece) {
    const int64_t n = std::min(kPiece, size_ - first);
    read(first, n, buf.data());
    fn(std::span<const uint16_t>(buf.data(), static_cast<size_t>(n)));
  }
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

void sample_batch(const TokenFile& file, int64_t batch, int64_t context, Rng& rng, int32_t* inputs,
                  int32_t* targets) {
  const int64_t n = file.size();
  check(batch >= 1, "sample_batch: batch is {}; it must be >= 1", batch);
  check(context >= 1, "sample_batch: context is {}; it must be >= 1", context);
  check(n - 1 >= context, "sample_batch: the data has {} tokens; context {} needs at least {}", n, context,
        context + 1);
  check(inputs != nullptr && targets != nullptr, "sample_batch: a pointer is null");
  const uint64_t starts = static_cast<uint64_t>(n - context);  // s in [0, n - context - 1], as above
  std::vector<uint16_t> row(static_cast<size_t>(context + 1));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t s = static_cast<int64_t>(rng.below(starts));
    file.read(s, context + 1, row.data());
    for (int64_t t = 0; t < context; ++t) {
      inputs[b * context + t] = row[static_cast<size_t>(t)];
      targets[b * context + t] = row[static_cast<size_t>(t + 1)];
    }
  }
}

// ---- encoding and statistics ----

void BatchSource::draw(int64_t batch, int64_t context, Rng& rng, int32_t* inputs, int32_t* targets) const {
  if (file) return sample_batch(*file, batch, context, rng, inputs, targets);
  if (!tokens.empty())
    return sample_batch(tokens.data(), static_cast<int64_t>(tokens.size()), batch, context, rng, inputs,
                        targets);
  check(vocab > 0 && batch >= 1 && context >= 1,
        "batch source: random tokens need vocab, batch and context >= 1");
  for (int64_t i = 0; i < batch * context; ++i) {
    inputs[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
    targets[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
  }
}

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
  files::write_bytes(path, std::span<const std::span<const std::byte>>(&piece, 1), what);
}

namespace {
// The statistics of a sequence from its id counts.
TokenStats stats_of_counts(const std::vector<int64_t>& counts, int64_t total) {
  TokenStats s;
  s.count = total;
  if (total == 0) return s;
  const double n = static_cast<double>(total);
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
}  // namespace

TokenStats token_stats(std::span<const uint16_t> tokens) {
  std::vector<int64_t> counts(65536, 0);
  for (uint16_t t : tokens) ++counts[t];
  return stats_of_counts(counts, static_cast<int64_t>(tokens.size()));
}

TokenStats token_stats(const TokenFile& file) {
  std::vector<int64_t> counts(65536, 0);
  file.scan([&](std::span<const uint16_t> piece) {
    for (uint16_t t : piece) ++counts[t];
  });
  return stats_of_counts(counts, file.size());
}

double unigram_entropy_bits(std::span<const uint16_t> tokens) {
  return token_stats(tokens).entropy_bits;
}

}  // namespace ridge::text
