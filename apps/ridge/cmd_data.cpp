// `ridge data train-bpe TEXT... --vocab-size N --special TOKEN... -o TOKENIZER`: a byte-level BPE
// tokenizer (CS336 assignment 1), written as GPT-2's vocab.json + merges.txt + special_tokens.json.
// `ridge data encode TEXT... -o TOKENS [--tokenizer T]`: text files -> a token file (uint16, CS336's
// layout): BPE ids with a tokenizer, else one token per byte (vocab 256).
// `ridge data decode TOKENS --tokenizer T [-o TEXT]`: ids -> text (invalid UTF-8 as U+FFFD).
// `ridge data info TOKENS [--tokenizer T]`: token count, distinct ids, the largest id and the unigram
// entropy, the line a trained model's loss should fall well below; with a tokenizer, the compression.
// A tokenizer T is a folder written by train-bpe, or a vocab.json with --merges MERGES.txt (GPT-2's own
// files) and --special for its special tokens.
#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "cli.hpp"
#include "ridge/core.hpp"
#include "ridge/text/data.hpp"
#include "ridge/text/tokenizer.hpp"
#include "core/check.hpp"

namespace {

using namespace ridge;
namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  // stat first: a FIFO would block the read until a writer appears.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    fail("data encode: TEXT '{}': cannot open it: {}", path, std::strerror(errno));
  check(S_ISREG(st.st_mode), "data encode: TEXT '{}': not a regular file", path);
  std::ifstream in(path, std::ios::binary);
  check(static_cast<bool>(in), "data encode: TEXT '{}': cannot open it", path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  check(!in.bad(), "data encode: TEXT '{}': reading it failed", path);
  return text;
}

// Each TEXT must be a regular file that exists (checked before any work, so a typo costs nothing).
void check_texts(const std::string& cmd, const std::vector<std::string>& texts) {
  for (const auto& t : texts) {
    struct stat st {};
    if (::stat(t.c_str(), &st) != 0) fail("{}: TEXT '{}': cannot open it: {}", cmd, t, std::strerror(errno));
    check(S_ISREG(st.st_mode), "{}: TEXT '{}': not a regular file", cmd, t);
  }
}

// An output file: none of the files the command reads (`inputs`, the one list of them), replaced only
// with --force, in a folder that exists.
void check_output(const std::string& cmd, const std::string& flag, const std::string& out,
                  const files::NamedPaths& inputs, bool force) {
  check(!out.empty(), "{}: {} is required", cmd, flag);
  files::check_distinct({{flag, out}}, inputs);
  std::error_code ec;
  const bool exists = fs::exists(fs::symlink_status(out, ec));
  check(!exists || force, "{}: {} '{}' exists; pass --force to replace it", cmd, flag, out);
  files::check_writable(out, flag);
}

files::NamedPaths named(const std::string& arg, const std::vector<std::string>& paths) {
  files::NamedPaths v;
  for (const auto& p : paths) v.emplace_back(arg, p);
  return v;
}

struct TokenizerFlags {
  std::string path, merges;
  std::vector<std::string> specials;
  bool given() const { return !path.empty(); }
  // Every file the tokenizer is read from: a folder's files, or the vocab.json and --merges.
  files::NamedPaths inputs() const {
    std::error_code ec;
    if (!given()) return {};
    if (fs::is_directory(path, ec)) return named("--tokenizer", text::Tokenizer::dir_files(path));
    return {{"--tokenizer", path}, {"--merges", merges}};
  }
};

void add_tokenizer_flags(CLI::App* c, TokenizerFlags& t, bool required) {
  auto* o = c->add_option("--tokenizer", t.path,
                          "a tokenizer folder (from `ridge data train-bpe`), or a vocab.json with --merges");
  if (required) o->required();
  c->add_option("--merges", t.merges, "merges.txt beside a --tokenizer vocab.json (GPT-2's own files)");
  c->add_option("--special", t.specials, "special tokens of a --tokenizer vocab.json (e.g. '<|endoftext|>')");
}

// The tokenizer named by the flags; its library errors carry the --tokenizer flag.
text::Tokenizer load_tokenizer(const TokenizerFlags& t) {
  std::error_code ec;
  check(fs::exists(t.path, ec),
        "--tokenizer: '{}' does not exist (expected a tokenizer folder, or a vocab.json with "
        "--merges)",
        t.path);
  try {
    if (fs::is_directory(t.path, ec)) {
      check(t.merges.empty(),
            "--merges: --tokenizer '{}' is a folder, which holds its merges.txt; drop --merges", t.path);
      check(t.specials.empty(),
            "--special: --tokenizer '{}' is a folder, which lists its special tokens (special_tokens.json); "
            "drop "
            "--special",
            t.path);
      return text::Tokenizer::load_dir(t.path);
    }
    check(!t.merges.empty(),
          "--tokenizer: '{}' is not a folder; name a tokenizer folder, or a vocab.json with --merges "
          "MERGES.txt",
          t.path);
    return text::Tokenizer::load(t.path, t.merges, t.specials);
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.rfind("--", 0) == 0) throw;
    // "merges file 'PATH': ..." is about --merges; the rest (vocab.json, a folder's files) --tokenizer.
    fail(
        "{}: {}",
        msg.rfind("merges file '" + t.merges + "'", 0) == 0 && !t.merges.empty() ? "--merges" : "--tokenizer",
        msg);
  }
}

std::string hash_hex(uint64_t h) {
  return fmt::format("{:016x}", h);
}

void set_threads(int threads) {
  if (threads != -1) set_num_threads(threads);  // in 1 .. kMaxThreads (its option's transform)
}

// ---- train-bpe ----

struct TrainArgs {
  std::vector<std::string> texts, specials;
  std::string out;
  int64_t vocab_size = 0;
  int threads = -1;
  bool force = false, json = false;
};

void train_bpe(const TrainArgs& a) {
  const std::string cmd = "data train-bpe";
  check_texts(cmd, a.texts);
  check(!a.out.empty(), "{}: -o/--output TOKENIZER is required", cmd);
  std::error_code ec;
  const fs::path dir(a.out);
  if (fs::exists(fs::symlink_status(dir, ec))) {
    check(fs::is_directory(dir, ec), "-o/--output: '{}' exists and is not a folder; a tokenizer is a folder",
          a.out);
    // The folder is replaced as a whole: no TEXT may be in it, under any name.
    for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
      for (const auto& t : a.texts)
        check(!files::same_file(t, it->path().string()),
              "-o/--output: '{}' would replace the input TEXT '{}'; choose another folder", a.out, t);
    for (const auto& name : text::Tokenizer::file_names())
      check(!fs::exists(fs::symlink_status(dir / name, ec)) || a.force,
            "-o/--output: '{}' holds a tokenizer ({}); pass --force to replace it", a.out, name);
  }
  files::check_folder_writable(a.out, text::Tokenizer::file_names(), "-o/--output");
  set_threads(a.threads);
  text::BpeTrainStats st;
  text::Tokenizer tok = [&] {
    try {
      return text::train_bpe_files(a.texts, a.vocab_size, a.specials, 0, &st);
    } catch (const Error& e) {
      if (e.argument() == "vocab_size") throw e.renamed("--vocab-size");
      if (e.argument() == "special_tokens") throw e.renamed("--special");
      if (e.argument() == "texts") throw e.renamed("TEXT");
      throw;
    }
  }();
  try {
    tok.save_dir(a.out);
  } catch (const Error& e) {
    if (e.argument() == "dir") throw e.renamed("-o/--output");
    throw;
  }
  if (a.json) {
    cli::print_json({{"tokenizer", a.out},
                     {"vocab_size", tok.vocab_size()},
                     {"merges", st.merges},
                     {"special_tokens", a.specials},
                     {"input_bytes", st.input_bytes},
                     {"pretokens", st.pretokens},
                     {"distinct_pretokens", st.distinct_pretokens},
                     {"pretokenize_seconds", st.pretokenize_seconds},
                     {"merge_seconds", st.merge_seconds},
                     {"peak_rss_bytes", st.peak_rss_bytes},
                     {"threads", get_num_threads()},
                     {"hash", hash_hex(tok.content_hash())}});
    return;
  }
  fmt::print("trained {} merges on {} of text ({} pre-tokens, {} distinct), {} threads\n", st.merges,
             units::format_bytes(static_cast<double>(st.input_bytes)), st.pretokens, st.distinct_pretokens,
             get_num_threads());
  fmt::print("time      pre-tokenize {:.2f} s, merges {:.2f} s; peak memory {}\n", st.pretokenize_seconds,
             st.merge_seconds, units::format_bytes(static_cast<double>(st.peak_rss_bytes)));
  fmt::print("wrote     {} (vocab.json, merges.txt, special_tokens.json): vocab {}, hash {}\n", a.out,
             tok.vocab_size(), hash_hex(tok.content_hash()));
}

// ---- encode ----

// Byte-level encoding holds the whole text (read into a growing string: up to twice its size) and one
// uint16 per byte: about 4 bytes of memory per byte of TEXT, checked from the files' sizes before any is
// read.
void check_byte_encode_fits(const std::vector<std::string>& texts) {
  double bytes = 0;
  for (const auto& t : texts) {
    struct stat st {};
    if (::stat(t.c_str(), &st) == 0 && S_ISREG(st.st_mode)) bytes += static_cast<double>(st.st_size);
  }
  const double need = 4 * bytes;
  const auto avail = static_cast<double>(memory::available_bytes());
  check(need <= avail,
        "TEXT: encoding {} of text byte by byte needs about {}, more than the {} of memory available; encode "
        "fewer or smaller files at a time",
        units::format_bytes(bytes), units::format_bytes(need), units::format_bytes(avail));
}

void encode_bytes(const std::vector<std::string>& texts, const std::string& out, bool force) {
  check_output("data encode", "-o/--output", out, named("TEXT", texts), force);
  check_byte_encode_fits(texts);
  std::string text;
  for (const auto& t : texts) text += read_text(t);
  check(!text.empty(), "data encode: TEXT is empty (no bytes to encode)");
  const auto tokens = text::encode_bytes(text);
  try {
    text::write_tokens(out, tokens);
  } catch (const Error& e) {
    fail("-o/--output: {}", e.what());
  }
  fmt::print("wrote {} tokens ({} bytes of text from {} file{}, byte-level, vocab 256) to {}\n",
             tokens.size(), text.size(), texts.size(), texts.size() == 1 ? "" : "s", out);
}

void encode_bpe(const std::vector<std::string>& texts, const std::string& out, bool force,
                const TokenizerFlags& tf, int threads) {
  const std::string cmd = "data encode";
  check_texts(cmd, texts);
  files::NamedPaths inputs = named("TEXT", texts);
  for (auto& in : tf.inputs()) inputs.push_back(std::move(in));
  check_output(cmd, "-o/--output", out, inputs, force);
  const text::Tokenizer tok = load_tokenizer(tf);
  check(tok.vocab_size() <= 65536,
        "--tokenizer: a vocabulary of {} tokens does not fit uint16 token files (at most 65536 ids)",
        tok.vocab_size());
  set_threads(threads);
  text::EncodeFileStats st;
  try {
    st = text::encode_file(tok, texts, out);
  } catch (const Error& e) {
    if (e.argument() == "texts") throw e.renamed("TEXT");
    if (e.argument() == "out") throw e.renamed("-o/--output");
    throw;
  }
  fmt::print(
      "wrote {} tokens ({} bytes of text from {} file{}, {:.3f} bytes/token, BPE vocab {}, hash {}) to {}\n",
      st.tokens, st.bytes, texts.size(), texts.size() == 1 ? "" : "s",
      static_cast<double>(st.bytes) / static_cast<double>(st.tokens), tok.vocab_size(),
      hash_hex(tok.content_hash()), out);
}

// ---- decode ----

std::vector<int32_t> read_ids(const text::TokenFile& f, const text::Tokenizer& tok) {
  check(
      f.max_token() < tok.vocab_size(),
      "TOKENS '{}': holds the id {}, outside the tokenizer's vocabulary (0..{}); was it encoded with another "
      "tokenizer?",
      f.path(), f.max_token(), tok.vocab_size() - 1);
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(f.size()));
  f.scan([&](std::span<const uint16_t> piece) { ids.insert(ids.end(), piece.begin(), piece.end()); });
  return ids;
}

void decode(const std::string& tokens, const std::string& out, bool force, const TokenizerFlags& tf) {
  if (!out.empty()) {
    files::NamedPaths inputs = {{"TOKENS", tokens}};
    for (auto& in : tf.inputs()) inputs.push_back(std::move(in));
    check_output("data decode", "-o/--output", out, inputs, force);
  }
  const text::TokenFile f = text::TokenFile::open(tokens);
  const text::Tokenizer tok = load_tokenizer(tf);
  const std::string text = tok.decode(read_ids(f, tok));
  if (out.empty()) {
    cli::write_stdout(text);
    cli::flush_stdout();
    return;
  }
  files::write_text(out, text, "-o/--output");
  fmt::print("wrote {} bytes of text ({} tokens) to {}\n", text.size(), f.size(), out);
}

// ---- info ----

void info(const std::string& path, bool json, const TokenizerFlags& tf) {
  const text::TokenFile f = text::TokenFile::open(path);
  const text::TokenStats s = text::token_stats(f);
  int64_t text_bytes = -1, vocab = -1;
  uint64_t hash = 0;
  if (tf.given()) {
    const text::Tokenizer tok = load_tokenizer(tf);
    text_bytes = static_cast<int64_t>(tok.decode_bytes(read_ids(f, tok)).size());
    vocab = tok.vocab_size();
    hash = tok.content_hash();
  }
  if (json) {
    nlohmann::json j = {{"path", path},
                        {"tokens", s.count},
                        {"bytes", s.count * 2},
                        {"distinct", s.distinct},
                        {"max_token", s.max_token},
                        {"entropy_bits", s.entropy_bits},
                        {"entropy_nats", s.entropy_nats}};
    if (text_bytes >= 0) {
      j["text_bytes"] = text_bytes;
      j["bytes_per_token"] = static_cast<double>(text_bytes) / static_cast<double>(s.count);
      j["tokenizer_vocab"] = vocab;
      j["tokenizer_hash"] = hash_hex(hash);
    }
    cli::print_json(j);
    return;
  }
  fmt::print("file      {} ({})\n", path, units::format_bytes(static_cast<double>(s.count * 2)));
  fmt::print("tokens    {}\n", s.count);
  fmt::print("distinct  {} ids, largest {} (a model needs vocab_size >= {})\n", s.distinct, s.max_token,
             s.max_token + 1);
  fmt::print("unigram   {:.4f} bits/token = {:.4f} nats/token (the loss of the best context-free model)\n",
             s.entropy_bits, s.entropy_nats);
  if (text_bytes >= 0)
    fmt::print("text      {} bytes decoded, {:.3f} bytes/token (tokenizer vocab {}, hash {})\n", text_bytes,
               static_cast<double>(text_bytes) / static_cast<double>(s.count), vocab, hash_hex(hash));
}

void setup(CLI::App& root) {
  static std::vector<std::string> texts;
  static std::string out, info_path, decode_path, decode_out;
  static bool force = false, json = false, decode_force = false;
  static int threads = -1;
  static TokenizerFlags enc_tok, dec_tok, info_tok;
  static TrainArgs train;
  auto* cmd = root.add_subcommand("data",
                                  "make and inspect token files (uint16, the layout CS336 uses) and BPE "
                                  "tokenizers");
  cmd->require_subcommand(1);

  auto* t =
      cmd->add_subcommand("train-bpe", "train a byte-level BPE tokenizer (CS336 assignment 1) on text files");
  t->add_option("text", train.texts, "text files (each on its own: no merge crosses from one into the next)")
      ->required();
  t->add_option("--vocab-size", train.vocab_size,
                "tokens in the vocabulary: 256 bytes + special tokens + merges")
      ->required()
      ->transform(cli::integer_in(1, INT32_MAX));
  t->add_option("--special", train.specials, "a special token (repeat for more), e.g. '<|endoftext|>'");
  t->add_option("-o,--output", train.out,
                "the tokenizer folder to write (vocab.json, merges.txt, special_tokens.json)")
      ->required();
  t->add_option("--threads", train.threads, "threads (default: OMP_NUM_THREADS or all CPUs)")
      ->transform(cli::integer_in(1, env::kMaxThreads));
  t->add_flag("--force", train.force, "replace the tokenizer files in TOKENIZER if they exist");
  t->add_flag("--json", train.json, "print one JSON document");
  t->callback([] { train_bpe(train); });

  auto* e = cmd->add_subcommand("encode",
                                "text files -> tokens, concatenated in order: BPE ids with --tokenizer, "
                                "else one token per byte (vocab 256)");
  e->add_option("text", texts, "text files")->required();
  e->add_option("-o,--output", out, "token file to write")->required();
  e->add_flag("--force", force, "replace TOKENS if it exists");
  add_tokenizer_flags(e, enc_tok, false);
  e->add_option("--threads", threads, "threads (default: OMP_NUM_THREADS or all CPUs)")
      ->transform(cli::integer_in(1, env::kMaxThreads));
  e->callback([] {
    if (enc_tok.given()) {
      encode_bpe(texts, out, force, enc_tok, threads);
    } else {
      check(enc_tok.merges.empty() && enc_tok.specials.empty(),
            "data encode: --merges and --special describe a --tokenizer vocab.json; pass --tokenizer too");
      encode_bytes(texts, out, force);
    }
  });

  auto* d =
      cmd->add_subcommand("decode", "tokens -> text through a tokenizer (invalid UTF-8 becomes U+FFFD)");
  d->add_option("tokens", decode_path, "token file")->required();
  d->add_option("-o,--output", decode_out, "text file to write (default: standard output)");
  d->add_flag("--force", decode_force, "replace TEXT if it exists");
  add_tokenizer_flags(d, dec_tok, true);
  d->callback([] { decode(decode_path, decode_out, decode_force, dec_tok); });

  auto* i = cmd->add_subcommand("info",
                                "token count, distinct ids, largest id, unigram entropy; with --tokenizer "
                                "the compression (bytes of text per token)");
  i->add_option("tokens", info_path, "token file")->required();
  i->add_flag("--json", json, "print one JSON document");
  add_tokenizer_flags(i, info_tok, false);
  i->callback([] {
    check(info_tok.given() || (info_tok.merges.empty() && info_tok.specials.empty()),
          "data info: --merges and --special describe a --tokenizer vocab.json; pass --tokenizer too");
    info(info_path, json, info_tok);
  });
}

}  // namespace

RIDGE_COMMAND(data, setup);
