// Training data: token files in the layout CS336 uses (uint16 little-endian, what
// `numpy.memmap(path, dtype=np.uint16)` reads and writes, no header), a seedable RNG whose whole state can
// be saved in a checkpoint, random batches as CS336's get_batch draws them, and a byte-level encoding
// that turns any text into such a file.
#pragma once

#include <array>
#include <functional>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ridge::text {

// A token file, read through its descriptor (pread), never mapped: a file that another program
// truncates while ridge reads it (during training) is a ridge::Error naming the file, not a SIGBUS.
// Errors ("token file 'PATH': ..."): missing, not a regular file, empty, an odd number of bytes, and
// later a file that no longer holds the tokens asked for.
class TokenFile {
 public:
  static TokenFile open(const std::string& path);

  int64_t size() const { return size_; }             // tokens, when opened
  uint16_t max_token() const { return max_token_; }  // the largest id in the file, found once at open()
  uint64_t content_hash() const { return hash_; }    // fnv1a of its bytes, found once at open()
  const std::string& path() const { return path_; }

  // Copies tokens [first, first + count) into `out`.
  void read(int64_t first, int64_t count, uint16_t* out) const;
  // Calls `fn` on consecutive pieces of the whole file, in order.
  void scan(const std::function<void(std::span<const uint16_t>)>& fn) const;

  TokenFile(TokenFile&& o) noexcept;
  TokenFile& operator=(TokenFile&& o) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();

 private:
  TokenFile() = default;
  void close();
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
  uint16_t max_token_ = 0;
  uint64_t hash_ = 0;
};

// xoshiro256** seeded through splitmix64: fast, good enough for sampling and initialisation, and its whole
// state is four words, so a checkpoint can save it and a resumed run draws exactly what it would have.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0);
  uint64_t next();
  double uniform();  // [0, 1), 53 random bits
  // A standard normal by Box-Muller from two uniforms (the second value is not kept, so state() alone
  // determines every later draw).
  double normal();
  uint64_t below(uint64_t n);  // uniform in [0, n), unbiased; n > 0

  using State = std::array<uint64_t, 4>;
  State state() const { return s_; }
  void set_state(const State& s);  // throws ridge::Error for the all-zero state (xoshiro's fixed point)

 private:
  State s_{};
};

// CS336's get_batch: for each of `batch` rows a start s uniform in [0, n - context - 1], inputs =
// x[s, s + context), targets = x[s + 1, s + context + 1]. `inputs` and `targets` hold batch * context
// values, row-major. Throws ridge::Error when n < context + 1 or batch, context < 1.
void sample_batch(const uint16_t* tokens, int64_t n, int64_t batch, int64_t context, Rng& rng,
                  int32_t* inputs, int32_t* targets);
// The same draws from a token file (the same starts for the same generator state).
void sample_batch(const TokenFile& file, int64_t batch, int64_t context, Rng& rng, int32_t* inputs,
                  int32_t* targets);

// Where a training run's batches come from: a token file, tokens held in memory (a text's bytes), or,
// with neither, uniform random ids below `vocab` (a benchmark's input: inputs and targets drawn in
// turn). Every draw uses the caller's generator, so a resumed run continues the same stream.
struct BatchSource {
  const TokenFile* file = nullptr;
  std::span<const uint16_t> tokens;
  int64_t vocab = 0;
  // inputs and targets: batch * context values each; ridge::Error as sample_batch's.
  void draw(int64_t batch, int64_t context, Rng& rng, int32_t* inputs, int32_t* targets) const;
};

// Byte-level tokens: one token per byte of the text, ids 0..255 (vocabulary 256).
std::vector<uint16_t> encode_bytes(std::string_view text);

// Writes tokens as a token file (uint16 little-endian), atomically like SafetensorsWriter::write.
// Throws ridge::Error for an empty `tokens` (a token file is never empty) or an I/O failure.
void write_tokens(const std::string& path, std::span<const uint16_t> tokens);

// The distribution of token ids in a sequence: the unigram entropy is what a model that ignores context
// can reach at best, the line a trained model's loss should fall well below.
struct TokenStats {
  int64_t count = 0;
  int64_t distinct = 0;
  uint16_t max_token = 0;
  double entropy_bits = 0;  // per token
  double entropy_nats = 0;
};
TokenStats token_stats(std::span<const uint16_t> tokens);
TokenStats token_stats(const TokenFile& file);
double unigram_entropy_bits(std::span<const uint16_t> tokens);

}  // namespace ridge::text
