// `ridge bench tokenizer`: byte-level BPE training and encoding (ridge/text/tokenizer.hpp) on English text,
// against HF `tokenizers` (Rust; tools/hf_bpe_peer.py: BpeTrainer and encode_batch, GPT-2's byte-level
// pre-tokenizer) and the straightforward Python implementation of CS336's algorithm (tools/bpe_reference.py:
// every pair recounted at every step, merges applied by rank), in the same run, interleaved: each round runs
// ridge, then HF, then Python, on the same file, and the medians are compared.
//
// What is timed.
//  - train: ridge is `ridge data train-bpe` run as a child process (this very binary), timed from start to
//    exit (reading the file and writing the tokenizer included); HF times Tokenizer.train on the file; the
//    Python peer its train() with the file read. The vocabulary: 10,000 with <|endoftext|> special.
//  - encode: the text ridge trained on (held in memory) encoded with that tokenizer: ridge's
//    Tokenizer::encode in this process; HF's encode_batch of the same text in pieces of ~64 KiB cut where
//    GPT-2's pre-tokenizer always cuts (the ids equal the whole text's: the token counts are compared); the
//    Python peer's encode of the whole text. Reading the file is not timed.
//  - Threads: ridge's thread count (--threads) for ridge (OMP_NUM_THREADS in the child) and for HF
//    (RAYON_NUM_THREADS); the Python peer is single-threaded, as a student's is.
//  - Peak memory: each program's peak resident set from its rusage (wait4) for the training rows (ridge's
//    child included), and for encoding ridge's `ridge data encode` of the same text, run once, untimed.
//  - The Python peer takes hours at these sizes, so it runs on slices, in rows of their own where ridge and
//    HF run on the same slice: training on the first 100 KB (vocabulary 1,000), encoding the first 1 MB with
//    the 10,000-token vocabulary. --python-time-limit stops it (its row then says so).
//
// The text (unless --text FILE): the files of Debian's `fortunes` (each fortune's "%" line replaced by
// <|endoftext|>) followed by the GNU Collaborative International Dictionary of English (`dict-gcide`,
// /usr/share/dictd/gcide.dict.dz, decompressed; its few bytes that are not UTF-8 replaced by U+FFFD so that
// every program reads the same valid text), about 42 MB; a text of S MB is its first S MB, cut at a line end,
// the whole repeated as many times as needed (100 MB: 2.4 times: the repeats add no new words, so the merge
// loop's work is that of the 42 MB). The texts are written once into the cache folder (--cache-dir).
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "bench/registry.hpp"
#include "cli.hpp"
#include "ridge/build_paths.h"
#include "ridge/core.hpp"
#include "ridge/core/files.hpp"
#include "ridge/core/process.hpp"
#include "ridge/text/tokenizer.hpp"
#include "core/check.hpp"
#include "core/json.hpp"

namespace ridge {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string g_text, g_cache_dir, g_python;
bool g_no_hf = false, g_no_python_ref = false;
int g_rounds = 1;
double g_python_limit = 600;
const std::string kEot = "<|endoftext|>";

std::string python() {
  if (!g_python.empty()) return g_python;
  const std::string venv = std::string(RIDGE_SOURCE_DIR) + "/.venv/bin/python";
  return ::access(venv.c_str(), X_OK) == 0 ? venv : "python3";
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  check(static_cast<bool>(in), "bench tokenizer: cannot read '{}'", p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The length of the well-formed UTF-8 sequence at s[i] (Unicode's Table 3-7), 0 when it is not one.
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
  const unsigned c = b(i);
  const auto cont = [&](size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) {
    return b(k) >= lo && b(k) <= hi;
  };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(i + 1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return cont(i + 1, lo, hi) && cont(i + 2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return cont(i + 1, lo, hi) && cont(i + 2) && cont(i + 3) ? 4 : 0;
  }
  return 0;
}

std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_length(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

// The English text the benchmark's inputs are cut from (see the top of this file).
std::string english_corpus() {
  std::string text;
  const fs::path fortunes = "/usr/share/games/fortunes";
  std::error_code ec;
  if (fs::is_directory(fortunes, ec)) {
    std::vector<fs::path> names;
    for (const auto& e : fs::directory_iterator(fortunes, ec))
      if (e.is_regular_file() && !e.is_symlink() && e.path().extension().empty()) names.push_back(e.path());
    std::sort(names.begin(), names.end());
    for (const auto& p : names) {
      std::istringstream in(read_file(p));
      for (std::string line; std::getline(in, line);) text += (line == "%" ? kEot : line) + "\n";
      text += kEot + "\n";
    }
  }
  const fs::path gcide = "/usr/share/dictd/gcide.dict.dz";
  if (fs::exists(gcide, ec)) {
    const auto r = process::run({"gzip", "-dc", gcide.string()});
    check(r.started && r.exit_code == 0, "bench tokenizer: 'gzip -dc {}' failed (exit {})", gcide.string(),
          r.exit_code);
    text += valid_utf8(r.output);
  }
  check(!text.empty(),
        "bench tokenizer: no English text found: install Debian's fortunes and dict-gcide (scripts/setup) or "
        "give --text FILE");
  return text;
}

// The first `bytes` of `base` repeated as needed, cut at the last line end (so it stays whole UTF-8).
std::string cut(const std::string& base, int64_t bytes) {
  std::string out;
  out.reserve(static_cast<size_t>(bytes));
  while (static_cast<int64_t>(out.size()) < bytes)
    out.append(base, 0, std::min(base.size(), static_cast<size_t>(bytes) - out.size()));
  const size_t nl = out.rfind('\n');
  if (nl != std::string::npos && nl > out.size() / 2) out.resize(nl + 1);
  return out;
}

std::string size_name(int64_t bytes) {
  return bytes >= (1 << 20) ? fmt::format("{} MB", bytes >> 20) : fmt::format("{} KB", bytes >> 10);
}

fs::path default_cache() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return fs::path(x) / "ridge" / "tokenizer-bench";
  if (const char* h = std::getenv("HOME"); h && *h)
    return fs::path(h) / ".cache" / "ridge" / "tokenizer-bench";
  return fs::temp_directory_path() / "ridge-tokenizer-bench";
}

// ---------------------------------------------------------------- peers
struct Timed {
  std::optional<double> seconds;
  int64_t max_rss = 0;
  int64_t tokens = -1;
  std::string why;
};

Timed run_python(const std::string& script, std::vector<std::string> args) {
  std::vector<std::string> argv = {python(), std::string(RIDGE_SOURCE_DIR) + "/tools/" + script};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto r = process::run(argv);
  Timed t;
  t.max_rss = r.max_rss_bytes;
  if (!r.started) {
    t.why = fmt::format("cannot run '{}'", python());
    return t;
  }
  const auto brace = r.output.rfind("\n{");
  try {
    const json j =
        input::parse_json(r.output.substr(brace == std::string::npos ? 0 : brace + 1), "peer output");
    if (j.contains("error")) {
      t.why = j["error"].get<std::string>();
    } else {
      t.seconds = j.at("seconds").get<double>();
      t.tokens = j.value("tokens", int64_t{-1});
    }
  } catch (const std::exception&) {
    t.why = fmt::format("failed (exit {}): {}", r.exit_code, process::last_line(r.output).substr(0, 160));
  }
  return t;
}

// This binary (`ridge`), for its `data` subcommands.
std::string self() {
  std::error_code ec;
  const auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("ridge") : p.string();
}

Timed ridge_train(const fs::path& text, int64_t vocab, const fs::path& out) {
  const auto r = process::run({self(), "data", "train-bpe", text.string(), "--vocab-size",
                               std::to_string(vocab), "--special", kEot, "-o", out.string(), "--force"});
  Timed t;
  t.max_rss = r.max_rss_bytes;
  if (r.started && r.exit_code == 0)
    t.seconds = r.seconds;
  else
    t.why =
        fmt::format("ridge data train-bpe failed (exit {}): {}", r.exit_code, process::last_line(r.output));
  return t;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string mib(int64_t bytes) {
  return fmt::format("{:.0f} MiB", static_cast<double>(bytes) / (1 << 20));
}

// One row: ridge's samples against each peer's, MB/s and peak memory of each.
struct Side {
  explicit Side(std::string n) : name(std::move(n)) {}
  std::string name;
  std::vector<double> seconds;
  int64_t max_rss = 0, tokens = -1;
  std::string why;
  void add(const Timed& t) {
    if (t.seconds) seconds.push_back(*t.seconds);
    max_rss = std::max(max_rss, t.max_rss);
    if (t.tokens >= 0) tokens = t.tokens;
    if (!t.seconds) why = t.why;
  }
};

void emit(bench::Context& ctx, const std::string& phase, int64_t bytes, int64_t vocab,
          const std::string& what, const Side& ridge, const std::vector<Side>& peers, std::string note) {
  bench::Row row;
  row.benchmark = "tokenizer";
  row.case_ = {{"phase", phase}, {"text", what}, {"vocab", vocab}};
  row.dtype = "bytes";
  row.threads = ctx.threads;
  const double mb = static_cast<double>(bytes) / 1e6;
  auto one_decimal = [](double v) { return std::round(v * 100) / 100; };
  if (ridge.seconds.empty()) {
    row.note = "ridge: " + ridge.why;
    ctx.emit(row);
    return;
  }
  bench::Measurement m;
  m.samples = ridge.seconds;
  m.stats = bench::compute_stats(m.samples);
  row.set_time(m);
  row.extra["MB/s"] = one_decimal(mb / median(ridge.seconds));
  if (ridge.max_rss) row.extra["peak"] = mib(ridge.max_rss);
  for (const auto& p : peers) {
    if (p.seconds.empty()) {
      note += fmt::format("; {}: {}", p.name, p.why.empty() ? "no result" : p.why);
      continue;
    }
    row.add_peer(p.name, median(p.seconds) * 1e3);
    row.extra[p.name + " MB/s"] = one_decimal(mb / median(p.seconds));
    if (p.max_rss) row.extra[p.name + " peak"] = mib(p.max_rss);
    if (p.tokens >= 0 && ridge.tokens >= 0 && p.tokens != ridge.tokens)
      note += fmt::format("; token counts differ: ridge {}, {} {}", ridge.tokens, p.name, p.tokens);
  }
  note += fmt::format("; {} round{} interleaved", ridge.seconds.size(), ridge.seconds.size() == 1 ? "" : "s");
  row.note = note;
  ctx.emit(row);
}

void run_tokenizer(bench::Context& ctx) {
  ctx.grid.check_keys({"mb", "vocab"}, "tokenizer");
  const auto sizes =
      ctx.grid.counts("mb", ctx.quick ? std::vector<int64_t>{1} : std::vector<int64_t>{10, 100});
  const auto vocabs = ctx.grid.counts("vocab", {ctx.quick ? 1000 : 10000});
  for (int64_t s : sizes) check_arg(s >= 1 && s <= 4096, "grid mb", "{} is outside 1..4096 (MB of text)", s);
  for (int64_t v : vocabs) check_arg(v >= 300 && v <= 65536, "grid vocab", "{} is outside 300..65536", v);
  check(g_rounds >= 1 && g_rounds <= 100, "--rounds: {} is outside 1..100", g_rounds);
  check(g_python_limit > 0 && g_python_limit <= 86400,
        "--python-time-limit: {} is outside (0, 86400] seconds", g_python_limit);

  // Threads: the same count for every program that has threads.
  const std::string threads = std::to_string(ctx.threads);
  ::setenv("OMP_NUM_THREADS", threads.c_str(), 1);
  ::setenv("RAYON_NUM_THREADS", threads.c_str(), 1);
  ::setenv("TOKENIZERS_PARALLELISM", "true", 1);

  const fs::path tmp =
      fs::temp_directory_path() / fmt::format("ridge-bench-tokenizer-{}", static_cast<long>(::getpid()));
  fs::create_directories(tmp);
  struct Cleanup {
    fs::path d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{tmp};

  // The inputs: cut from the English corpus into the cache (once), or from --text into the temporary folder.
  check(g_text.empty() || g_cache_dir.empty(),
        "--cache-dir: '{}' is not used with --text (the text's inputs are cut into a temporary folder); pass "
        "one or the other",
        g_cache_dir);
  if (!g_cache_dir.empty()) {
    std::error_code ec;
    check(!fs::exists(g_cache_dir, ec) || fs::is_directory(g_cache_dir, ec),
          "--cache-dir: '{}' exists and is not a folder", g_cache_dir);
  }
  if (!g_text.empty()) {
    // A regular file that opens (a FIFO would block the read: the harness's sweep hung on one).
    std::error_code ec;
    check(fs::is_regular_file(g_text, ec) && std::ifstream(g_text, std::ios::binary).good(),
          "--text: '{}' is not a readable file (expected a text file to train and encode)", g_text);
  }
  std::string base;
  const fs::path dir = g_text.empty() ? (g_cache_dir.empty() ? default_cache() : fs::path(g_cache_dir)) : tmp;
  fs::create_directories(dir);
  auto input = [&](int64_t bytes) {
    const fs::path p = dir / fmt::format("{}-{}.txt", g_text.empty() ? "english" : "text", bytes);
    std::error_code ec;
    if (!fs::exists(p, ec)) {
      if (base.empty()) base = g_text.empty() ? english_corpus() : read_file(g_text);
      check(!base.empty(), "--text: '{}' is empty", g_text);
      files::write_text(p.string(), cut(base, bytes), "bench tokenizer input");
    }
    return p;
  };

  const int64_t py_train_bytes = ctx.quick ? 20 << 10 : 100 << 10,
                py_encode_bytes = ctx.quick ? 100 << 10 : 1 << 20;
  const int64_t py_vocab = ctx.quick ? 300 : 1000;
  ctx.progress.start(sizes.size() * vocabs.size() * 2 + (g_no_python_ref ? 0 : 2));
  std::optional<fs::path> first_tokenizer;
  for (int64_t v : vocabs) {
    for (int64_t mb : sizes) {
      const int64_t bytes = mb << 20;
      const fs::path text = input(bytes);
      const fs::path out = tmp / fmt::format("tok-{}-{}", mb, v);
      // Training.
      Side ridge{"ridge"}, hf{"HF tokenizers"};
      for (int r = 0; r < g_rounds; ++r) {
        ridge.add(ridge_train(text, v, out));
        if (!g_no_hf)
          hf.add(run_python("hf_bpe_peer.py", {"train", "--text", text.string(), "--vocab-size",
                                               std::to_string(v), "--special", kEot}));
      }
      std::vector<Side> peers;
      if (!g_no_hf) peers.push_back(hf);
      emit(ctx, "train", bytes, v, size_name(bytes), ridge, peers,
           fmt::format(
               "ridge: `ridge data train-bpe` as a child, start to exit; HF: Tokenizer.train (file read "
               "included); {} threads each",
               ctx.threads));
      ctx.progress.tick(fmt::format("train {} vocab {}", size_name(bytes), v));
      if (ridge.seconds.empty()) continue;
      if (!first_tokenizer) first_tokenizer = out;

      // Encoding, with the tokenizer ridge just trained.
      const auto tok = text::Tokenizer::load_dir(out.string());
      const std::string data = read_file(text);
      Side ridge_enc{"ridge"}, hf_enc{"HF tokenizers"};
      {
        const auto peak = process::run({self(), "data", "encode", "--tokenizer", out.string(), text.string(),
                                        "-o", (tmp / "tokens.bin").string(), "--force"});
        if (peak.started && peak.exit_code == 0) ridge_enc.max_rss = peak.max_rss_bytes;
      }
      tok.encode(std::string_view(data).substr(0, std::min<size_t>(data.size(), 1 << 20)));  // warm-up
      for (int r = 0; r < g_rounds; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        const auto ids = tok.encode(data, ctx.threads);
        ridge_enc.seconds.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        ridge_enc.tokens = static_cast<int64_t>(ids.size());
        if (!g_no_hf)
          hf_enc.add(run_python("hf_bpe_peer.py",
                                {"encode", "--text", text.string(), "--vocab", (out / "vocab.json").string(),
                                 "--merges", (out / "merges.txt").string(), "--special", kEot}));
      }
      peers.clear();
      if (!g_no_hf) peers.push_back(hf_enc);
      emit(ctx, "encode", bytes, v, size_name(bytes), ridge_enc, peers,
           fmt::format("ridge: Tokenizer::encode of the text in memory, peak of `ridge data encode`; HF: "
                       "encode_batch of ~64 KiB pieces; {} threads each; {} tokens",
                       ctx.threads, ridge_enc.tokens));
      ctx.progress.tick(fmt::format("encode {} vocab {}", size_name(bytes), v));
    }
  }

  if (g_no_python_ref) return;
  // The Python peer's rows: slices small enough for it, with ridge and HF on the same slice.
  const fs::path train_slice = input(py_train_bytes), encode_slice = input(py_encode_bytes);
  {
    const fs::path out = tmp / "tok-slice";
    Side ridge{"ridge"}, hf{"HF tokenizers"}, py{"Python (CS336, simple)"};
    for (int r = 0; r < g_rounds; ++r) {
      ridge.add(ridge_train(train_slice, py_vocab, out));
      if (!g_no_hf)
        hf.add(run_python("hf_bpe_peer.py", {"train", "--text", train_slice.string(), "--vocab-size",
                                             std::to_string(py_vocab), "--special", kEot}));
      py.add(run_python("bpe_reference.py", {"bench", "train", "--text", train_slice.string(), "--vocab-size",
                                             std::to_string(py_vocab), "--special", kEot, "--time-limit",
                                             fmt::format("{}", g_python_limit)}));
    }
    std::vector<Side> peers;
    if (!g_no_hf) peers.push_back(hf);
    peers.push_back(py);
    emit(ctx, "train", py_train_bytes, py_vocab, size_name(py_train_bytes) + " slice", ridge, peers,
         "the Python peer's training row: a slice it can finish (it recounts every pair at every step)");
    ctx.progress.tick("train slice");
  }
  if (first_tokenizer) {
    const fs::path out = *first_tokenizer;
    const auto tok = text::Tokenizer::load_dir(out.string());
    const std::string data = read_file(encode_slice);
    Side ridge{"ridge"}, hf{"HF tokenizers"}, py{"Python (CS336, simple)"};
    for (int r = 0; r < g_rounds; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto ids = tok.encode(data, ctx.threads);
      ridge.seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      ridge.tokens = static_cast<int64_t>(ids.size());
      const std::vector<std::string> files = {
          "--text",   encode_slice.string(),         "--vocab",   (out / "vocab.json").string(),
          "--merges", (out / "merges.txt").string(), "--special", kEot};
      std::vector<std::string> a = {"encode"};
      a.insert(a.end(), files.begin(), files.end());
      if (!g_no_hf) hf.add(run_python("hf_bpe_peer.py", a));
      std::vector<std::string> b = {"bench", "encode"};
      b.insert(b.end(), files.begin(), files.end());
      py.add(run_python("bpe_reference.py", b));
    }
    std::vector<Side> peers;
    if (!g_no_hf) peers.push_back(hf);
    peers.push_back(py);
    emit(ctx, "encode", py_encode_bytes, tok.vocab_size(), size_name(py_encode_bytes) + " slice", ridge,
         peers, "the Python peer's encoding row, with the tokenizer ridge trained on the first text");
    ctx.progress.tick("encode slice");
  }
}

void tokenizer_options(CLI::App& app) {
  app.add_option("--text", g_text,
                 "train and encode this text file (repeated up to each size) instead of the "
                 "English corpus (fortunes + GCIDE)");
  app.add_option("--cache-dir", g_cache_dir,
                 "where the English inputs are written once (default $XDG_CACHE_HOME/ridge/tokenizer-bench)");
  // Through the CLI's number options, as every other count and time: CLI11 alone took "0x10" (the harness).
  app.add_option("--rounds", g_rounds, "rounds of ridge, HF, Python (the medians are compared; default 1)")
      ->transform(ridge::cli::integer_in(1, 100));
  app.add_option("--python-time-limit", g_python_limit, "seconds before the Python peer's training gives up")
      ->capture_default_str()
      ->transform(ridge::cli::number_in(0, 86400, true));
  app.add_flag("--no-hf", g_no_hf, "skip the HF tokenizers peer");
  app.add_flag("--no-python-ref", g_no_python_ref, "skip the Python peer (tools/bpe_reference.py)");
  app.add_option("--python", g_python,
                 "python interpreter for the peers (default: .venv/bin/python, else python3)");
}

}  // namespace
}  // namespace ridge

RIDGE_BENCHMARK(tokenizer, "tokenizer",
                "byte-level BPE: training (vocab 10,000 on 10 and 100 MB of English) and encoding MB/s vs HF "
                "tokenizers and a simple Python BPE",
                ridge::run_tokenizer, ridge::tokenizer_options);
