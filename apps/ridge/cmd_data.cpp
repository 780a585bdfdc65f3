// `ridge data encode TEXT... -o TOKENS`: text files -> a byte-level token file (uint16, CS336's layout).
// `ridge data info TOKENS`: token count, distinct ids, the largest id and the unigram entropy, the line a
// trained model's loss should fall well below.
#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "cli.hpp"
#include "ridge/core.hpp"
#include "ridge/model/data.hpp"
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

void encode(const std::vector<std::string>& texts, const std::string& out, bool force) {
  check(!out.empty(), "data encode: -o TOKENS is required");
  std::error_code ec;
  const bool exists = fs::exists(fs::symlink_status(out, ec));
  for (const auto& t : texts) {
    std::error_code eq;
    check(!(exists && fs::equivalent(t, out, eq)),
          "data encode: -o '{}' is the input TEXT '{}' itself; choose another path", out, t);
  }
  check(!exists || force, "data encode: -o '{}' exists; pass --force to replace it", out);
  files::check_writable(out, "-o/--output");
  std::string text;
  for (const auto& t : texts) text += read_text(t);
  check(!text.empty(), "data encode: TEXT is empty (no bytes to encode)");
  const auto tokens = model::encode_bytes(text);
  try {
    model::write_tokens(out, tokens);
  } catch (const Error& e) {
    fail("-o/--output: {}", e.what());
  }
  fmt::print("wrote {} tokens ({} bytes of text from {} file{}, byte-level, vocab 256) to {}\n",
             tokens.size(), text.size(), texts.size(), texts.size() == 1 ? "" : "s", out);
}

void info(const std::string& path, bool json) {
  const model::TokenFile f = model::TokenFile::open(path);
  const model::TokenStats s = model::token_stats(f);
  if (json) {
    cli::print_json({{"path", path},
                     {"tokens", s.count},
                     {"bytes", s.count * 2},
                     {"distinct", s.distinct},
                     {"max_token", s.max_token},
                     {"entropy_bits", s.entropy_bits},
                     {"entropy_nats", s.entropy_nats}});
    return;
  }
  fmt::print("file      {} ({})\n", path, units::format_bytes(static_cast<double>(s.count * 2)));
  fmt::print("tokens    {}\n", s.count);
  fmt::print("distinct  {} ids, largest {} (a model needs vocab_size >= {})\n", s.distinct, s.max_token,
             s.max_token + 1);
  fmt::print("unigram   {:.4f} bits/token = {:.4f} nats/token (the loss of the best context-free model)\n",
             s.entropy_bits, s.entropy_nats);
}

void setup(CLI::App& root) {
  static std::vector<std::string> texts;
  static std::string out, info_path;
  static bool force = false, json = false;
  auto* cmd = root.add_subcommand("data", "make and inspect token files (uint16, the layout CS336 uses)");
  cmd->require_subcommand(1);
  auto* e =
      cmd->add_subcommand("encode", "text files -> byte-level tokens (vocab 256), concatenated in order");
  e->add_option("text", texts, "text files")->required();
  e->add_option("-o,--output", out, "token file to write")->required();
  e->add_flag("--force", force, "replace TOKENS if it exists");
  e->callback([] { encode(texts, out, force); });
  auto* i = cmd->add_subcommand("info", "token count, distinct ids, largest id, unigram entropy");
  i->add_option("tokens", info_path, "token file")->required();
  i->add_flag("--json", json, "print one JSON document");
  i->callback([] { info(info_path, json); });
}

}  // namespace

RIDGE_COMMAND(data, setup);
