// `--tokenizer DIR` of `ridge train` and `ridge generate`: a tokenizer directory (`ridge data train-bpe -o
// DIR`: vocab.json, merges.txt, special_tokens.json), and its agreement with the one a checkpoint records.
//
// The rule (docs/text.md): a checkpoint trained through a tokenizer records its path and content hash. A
// run given a different tokenizer (another hash) is refused, exit 2: the model's ids would mean other
// tokens, and text in or out would be silently wrong. Equal contents at another path are the same
// tokenizer. `ridge generate` without --tokenizer uses the recorded one when it is still there, unchanged.
#pragma once

#include <fmt/format.h>

#include <filesystem>
#include <optional>
#include <string>

#include "ridge/core/error.hpp"
#include "ridge/text/tokenizer.hpp"
#include "ridge/model/train.hpp"
#include "core/check.hpp"

namespace ridge::cli {

struct LoadedTokenizer {
  text::Tokenizer tokenizer;
  model::TokenizerRecord record;
};

// The tokenizer directory `dir`, errors naming `flag`.
inline LoadedTokenizer load_tokenizer(const std::string& dir, const std::string& flag) {
  std::error_code ec;
  check(std::filesystem::is_directory(dir, ec),
        "{}: '{}' is not a tokenizer directory (`ridge data train-bpe -o DIR` writes one: vocab.json, "
        "merges.txt, special_tokens.json)",
        flag, dir);
  try {
    text::Tokenizer t = text::Tokenizer::load_dir(dir);
    model::TokenizerRecord r;
    r.path = std::filesystem::absolute(dir, ec).lexically_normal().string();
    if (ec) r.path = dir;
    r.hash = t.content_hash();
    r.vocab_size = t.vocab_size();
    return {std::move(t), std::move(r)};
  } catch (const Error& e) {
    fail("{}: {}", flag, e.what());
  }
}

// The tokenizer checkpoint `path` records (none when `path` is empty or it records none), errors naming
// `flag` (the checkpoint's option: --resume of train, --checkpoint of generate).
inline std::optional<model::TokenizerRecord> recorded_tokenizer(const std::string& path,
                                                                const std::string& flag) {
  if (path.empty()) return std::nullopt;
  try {
    return model::checkpoint_tokenizer(path);
  } catch (const Error& e) {
    fail("{}: {}", flag, e.what());
  }
}

inline std::string describe(const model::TokenizerRecord& r) {
  return fmt::format("'{}' (hash {:016x}, {} tokens)", r.path, r.hash, r.vocab_size);
}

// Refuses a tokenizer that is not the one checkpoint `path` records (nothing to compare when it records
// none).
inline void check_same_tokenizer(const model::TokenizerRecord& given,
                                 const std::optional<model::TokenizerRecord>& recorded,
                                 const std::string& flag, const std::string& path) {
  if (!recorded || recorded->hash == given.hash) return;
  fail(
      "{}: {} is not the tokenizer checkpoint '{}' was trained with, {}; its ids would mean other tokens. "
      "Give that one",
      flag, describe(given), path, describe(*recorded));
}

}  // namespace ridge::cli
