// `ridge bench decode`: generation speed of the Transformer LM (ridge/generate/generate.hpp) with fp32, bf16
// and FP8 weights: prefill tokens/s of one prompt and decode tokens/s of a batch of sequences at a context,
// each row held against its roofline bound (roofline::inference_bound at the memory level the bytes come
// from: the weights of the default size are larger than a CPU's last-level cache, so DRAM) and against
// llama.cpp (tools/llama_decode_peer.py on the same weights written as GGUF: bf16 and q8_0) and PyTorch eager
// with a KV cache (tools/torch_decode_peer.py), run in the same rounds, interleaved: ridge, then each peer,
// round after round, and the medians compared. A peer that is not installed says so in the row's note.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include "bench/registry.hpp"
#include "cli.hpp"
#include "peer_python.hpp"
#include "ridge/build_paths.h"
#include "ridge/core.hpp"
#include "ridge/core/process.hpp"
#include "ridge/generate/generate.hpp"
#include "ridge/model/safetensors.hpp"
#include "ridge/model/train.hpp"
#include "ridge/roofline/decode.hpp"
#include "core/check.hpp"
#include "core/json.hpp"

namespace ridge {
namespace {

using json = nlohmann::json;

std::string g_size = "small";
std::string g_python;  // default: the checkout's .venv (where scripts/setup-peers installs), else python3
bool g_no_llama = false, g_no_torch = false;
int64_t g_steps = 16;  // decode steps per timed sample

std::string python() {
  return bench_peers::python(g_python);
}

struct Case {
  std::string phase;  // "prefill" or "decode"
  std::string weights;
  int64_t batch = 1, context = 0, prompt = 0;
};

std::vector<Case> default_cases(bool quick, const std::vector<std::string>& weights) {
  std::vector<Case> out;
  const std::vector<int64_t> prompts =
      quick ? std::vector<int64_t>{128} : std::vector<int64_t>{128, 512, 2048};
  // Batch x context pairs: every batch at short context, and the long contexts where the KV cache of the
  // batch stays within a few GB.
  // Batch x context pairs: every batch at a short context (the batch axis of the roofline), and the long
  // contexts (to 4096) at batch 1 and 4, where the KV cache read grows to rival the weights.
  const std::vector<std::pair<int64_t, int64_t>> steps =
      quick ? std::vector<std::pair<int64_t, int64_t>>{{1, 128}, {4, 512}}
            : std::vector<std::pair<int64_t, int64_t>>{{1, 128},  {1, 1024}, {1, 4096}, {4, 128},
                                                       {4, 1024}, {16, 128}, {64, 128}};
  for (const auto& w : weights) {
    for (int64_t p : prompts) out.push_back({"prefill", w, 1, 0, p});
    for (auto [b, c] : steps) out.push_back({"decode", w, b, c, 0});
  }
  return out;
}

// ---------------------------------------------------------------- peers
// A peer's answer for one case: tokens/s, or why there is none.
struct PeerResult {
  std::optional<double> tokens_per_s;
  std::string why;
};

// Runs a tools/ peer script on a file of cases; its last line is JSON: {"results": [{"tokens_per_s": x} |
// {"error": "..."}, ...]} in the cases' order, or {"error": "..."} for the whole run (not installed).
std::vector<PeerResult> run_peer(const std::string& script, const std::vector<std::string>& args,
                                 const std::vector<Case>& cases) {
  std::vector<PeerResult> out(cases.size());
  std::vector<std::string> argv = {python(), std::string(RIDGE_SOURCE_DIR) + "/tools/" + script};
  argv.insert(argv.end(), args.begin(), args.end());
  json cs = json::array();
  for (const auto& c : cases)
    cs.push_back({{"phase", c.phase}, {"batch", c.batch}, {"context", c.context}, {"prompt", c.prompt}});
  argv.push_back("--cases");
  argv.push_back(cs.dump());
  json j;
  std::string why;
  if (!bench_peers::run_json(argv, j, why)) {
    for (auto& r : out) r.why = why;
    return out;
  }
  const auto& rs = j.at("results");
  for (size_t i = 0; i < out.size() && i < rs.size(); ++i) {
    if (rs[i].contains("tokens_per_s"))
      out[i].tokens_per_s = rs[i]["tokens_per_s"].get<double>();
    else
      out[i].why = rs[i].value("error", std::string("no result"));
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---------------------------------------------------------------- ridge's side
// Seconds of one sample of a case: a prefill of the prompt, or g_steps decode steps of the batch from the
// context on (the cache filled synthetically first, not timed).
double ridge_sample(const generate::InferenceModel& im, const Case& c, uint64_t seed) {
  using clock = std::chrono::steady_clock;
  const int64_t V = im.config().vocab_size;
  text::Rng rng(seed);
  if (c.phase == "prefill") {
    std::vector<int32_t> prompt(static_cast<size_t>(c.prompt));
    for (auto& t : prompt) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
    generate::Session s(im, 1, c.prompt);
    const auto t0 = clock::now();
    s.prefill({prompt});
    return std::chrono::duration<double>(clock::now() - t0).count();
  }
  generate::Session s(im, c.batch, c.batch * (c.context + g_steps));
  const std::vector<int64_t> lengths(static_cast<size_t>(c.batch), c.context - 1);
  const auto ids = s.prefill_synthetic(lengths, seed);
  std::vector<int32_t> tokens(static_cast<size_t>(c.batch));
  const auto t0 = clock::now();
  for (int64_t step = 0; step < g_steps; ++step) {
    for (auto& t : tokens) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
    s.decode(ids, tokens);
  }
  return std::chrono::duration<double>(clock::now() - t0).count();
}

void run_decode(bench::Context& ctx) {
  ctx.grid.check_keys({"phase", "weights", "batch", "context", "prompt"}, "decode");
  std::vector<std::string> weights = ctx.grid.values("weights", {"fp32", "bf16", "fp8"});
  for (const auto& w : weights) generate::parse_weight_format(w, "grid weights");
  std::vector<Case> cases;
  if (ctx.grid.has("batch") || ctx.grid.has("context") || ctx.grid.has("prompt") || ctx.grid.has("phase")) {
    const auto phases = ctx.grid.values("phase", {"prefill", "decode"});
    for (const auto& w : weights)
      for (const auto& ph : phases) {
        check_arg(ph == "prefill" || ph == "decode", "grid phase", "'{}' is not prefill or decode", ph);
        if (ph == "prefill")
          for (int64_t p : ctx.grid.counts("prompt", {128, 512, 2048})) cases.push_back({ph, w, 1, 0, p});
        else
          for (int64_t b : ctx.grid.counts("batch", {1, 4, 16, 64}))
            for (int64_t c : ctx.grid.counts("context", {128, 1024, 4096})) cases.push_back({ph, w, b, c, 0});
      }
  } else {
    cases = default_cases(ctx.quick, weights);
  }
  int64_t longest = 0;
  for (const auto& c : cases) {
    check_arg(c.batch >= 1 && c.batch <= 1024, "grid batch", "{} is outside 1..1024", c.batch);
    check_arg(c.phase == "prefill" || (c.context >= 2 && c.context <= (1 << 20)), "grid context",
              "{} is outside 2..2^20", c.context);
    check_arg(c.phase == "decode" || (c.prompt >= 1 && c.prompt <= (1 << 20)), "grid prompt",
              "{} is outside 1..2^20", c.prompt);
    longest = std::max(longest, std::max(c.prompt, c.context + g_steps));
  }
  // One model for every case: its context covers the longest; random weights (speed does not depend on them).
  model::ModelConfig cfg;
  try {
    cfg = model::preset(g_size, 10000, std::max<int64_t>(longest, 256));
  } catch (const Error& e) {
    const std::string m = e.what();
    throw Error(m.rfind("preset: ", 0) == 0 ? "--size: " + m.substr(8) : m);
  }
  model::TransformerLM<float> trained(cfg);
  trained.init(0);
  const roofline::Chip* chip = ctx.chip();

  // The weights as files the peers load (written once per run, in a temporary folder).
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    fmt::format("ridge-bench-decode-{}", static_cast<long>(::getpid()));
  std::filesystem::create_directories(dir);
  struct Cleanup {
    std::filesystem::path d;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } cleanup{dir};
  const std::string weights_file = (dir / "model.safetensors").string();
  {
    // A weights-only file (the state_dict by name, the config in the metadata), as the peers read it.
    model::SafetensorsWriter out;
    for (const auto& t : trained.tensors())
      out.add(t.name, DType::f32, t.shape, trained.params().data() + t.offset);
    out.set_metadata("config", model::to_json_text(cfg));
    out.write(weights_file);
  }

  ctx.progress.start(cases.size());
  // Rounds of ridge then each peer: in each round ridge times 2 runs of a case, each peer 2 runs after a
  // warm-up (ridge's warm-up is the first round's extra run).
  const int rounds = 2;
  for (const auto& w : weights) {
    generate::InferenceOptions io;
    io.weights = generate::parse_weight_format(w, "grid weights");
    const generate::InferenceModel im(trained, io);
    std::vector<Case> mine;
    for (const auto& c : cases)
      if (c.weights == w) mine.push_back(c);
    if (mine.empty()) continue;
    // Peers: llama.cpp reads a GGUF of the same weights (bf16 for bf16 weights, q8_0 for FP8; not run for
    // fp32), PyTorch the safetensors file in fp32 or bf16 (it has no FP8 GEMM on CPUs).
    const bool fp8 = w == "fp8" || w == "fp8-ue8m0";
    const std::string gguf_type = w == "bf16" ? "bf16" : (fp8 ? "q8_0" : "");
    const std::string torch_dtype = w == "fp32" ? "fp32" : "bf16";
    const std::string threads = std::to_string(ctx.threads), steps = std::to_string(g_steps);
    std::string gguf, llama_skip = g_no_llama ? "skipped (--no-llama)" : "";
    if (llama_skip.empty() && gguf_type.empty()) llama_skip = "not run for fp32 weights (bf16 and q8_0 only)";
    if (llama_skip.empty()) {
      gguf = (dir / ("model-" + gguf_type + ".gguf")).string();
      if (!std::filesystem::exists(gguf)) {
        const auto conv = process::run({python(), std::string(RIDGE_SOURCE_DIR) + "/tools/ridge_to_gguf.py",
                                        weights_file, "-o", gguf, "--type", gguf_type});
        if (!conv.started || conv.exit_code != 0)
          llama_skip =
              fmt::format("GGUF not written (exit {}): {}", conv.exit_code, conv.output.substr(0, 160));
      }
    }
    std::vector<std::vector<double>> ours(mine.size()), llama(mine.size()), torch(mine.size());
    std::vector<std::string> llama_why(mine.size()), torch_why(mine.size());
    for (int r = 0; r < rounds; ++r) {
      for (size_t i = 0; i < mine.size(); ++i) {
        if (r == 0) ridge_sample(im, mine[i], 99);  // warm-up: page faults, packing, the OpenMP pool
        for (int k = 0; k < 2; ++k)
          ours[i].push_back(ridge_sample(im, mine[i], static_cast<uint64_t>(2 * r + k)));
      }
      if (llama_skip.empty()) {
        const auto res = run_peer("llama_decode_peer.py",
                                  {"--gguf", gguf, "--threads", threads, "--tokens", steps, "--warmup", "1",
                                   "--iters", "2", "--json"},
                                  mine);
        for (size_t i = 0; i < mine.size(); ++i) {
          if (res[i].tokens_per_s) llama[i].push_back(*res[i].tokens_per_s);
          llama_why[i] = res[i].why;
        }
      }
      if (!g_no_torch) {
        const auto res =
            run_peer("torch_decode_peer.py",
                     {"--checkpoint", weights_file, "--weights", torch_dtype, "--threads", threads,
                      "--tokens", steps, "--fill", "random", "--warmup", "1", "--iters", "2", "--json"},
                     mine);
        for (size_t i = 0; i < mine.size(); ++i) {
          if (res[i].tokens_per_s) torch[i].push_back(*res[i].tokens_per_s);
          torch_why[i] = res[i].why;
        }
      }
    }
    for (size_t i = 0; i < mine.size(); ++i) {
      const Case& c = mine[i];
      const auto dt = im.roofline_dtypes();
      const roofline::InferenceCost cost = c.phase == "prefill"
                                               ? roofline::prefill_cost(cfg, dt, 1, c.prompt)
                                               : roofline::decode_cost(cfg, dt, c.batch, c.context);
      const double tokens =
          c.phase == "prefill" ? static_cast<double>(c.prompt) : static_cast<double>(c.batch * g_steps);
      const double calls = c.phase == "prefill" ? 1.0 : static_cast<double>(g_steps);
      bench::Measurement m;
      m.samples = ours[i];
      for (auto& s : m.samples) s /= calls;  // one row = one step (decode) or the whole prefill
      m.stats = bench::compute_stats(m.samples);
      bench::Row row;
      row.benchmark = "decode";
      row.case_ = {{"phase", c.phase}, {"weights", w}, {"batch", c.batch}};
      if (c.phase == "prefill")
        row.case_["prompt"] = c.prompt;
      else
        row.case_["context"] = c.context;
      row.dtype = w == "fp32" ? "fp32" : (w == "bf16" ? "bf16" : "fp8_e4m3");
      row.threads = ctx.threads;
      row.cache = "cold";
      row.flops = static_cast<double>(cost.total_flops());
      row.bytes = static_cast<double>(cost.memory_bytes());
      row.set_time(m);
      const double tps = tokens / calls / (row.median_ms * 1e-3);
      auto one_decimal = [](double v) { return std::round(v * 10) / 10; };
      row.extra["tokens_per_s"] = one_decimal(tps);
      std::string note;
      if (chip) {
        try {
          const auto b = roofline::inference_bound(cost, *chip, "auto");
          row.bound_level = b.level;
          row.bound_gflops = b.t_lower > 0 ? row.flops / b.t_lower / 1e9 : 0;
          row.extra["bound_tokens_per_s"] = one_decimal(b.tokens_per_s);
          row.extra["binding"] = b.binding;
          note = fmt::format("bound {:.1f} tokens/s ({}-bound, {})", b.tokens_per_s, b.binding, b.level);
        } catch (const Error& e) {
          note = fmt::format("no bound: {}", e.what());
        }
      } else {
        note = "no bound: run 'ridge probe' for this machine's roofline";
      }
      // Peers as times per row (ms), so the row's speedup column reads ridge's time against theirs.
      auto add = [&](const char* name, const std::vector<double>& v, const std::string& why) {
        if (!v.empty()) {
          row.add_peer(name, tokens / calls / median(v) * 1e3);
          row.extra[std::string(name) + " tokens_per_s"] = one_decimal(median(v));
        } else {
          note += fmt::format("; {}: {}", name, why.empty() ? "no result" : why);
        }
      };
      if (!llama_skip.empty())
        note += "; llama.cpp " + llama_skip;
      else
        add(fp8 ? "llama.cpp q8_0" : "llama.cpp bf16", llama[i], llama_why[i]);
      if (g_no_torch)
        note += "; PyTorch skipped (--no-torch)";
      else
        add(w == "fp32" ? "pytorch eager fp32" : "pytorch eager bf16", torch[i], torch_why[i]);
      note += fmt::format("; {} rounds interleaved (ridge, then each peer)", rounds);
      row.note = note;
      ctx.emit(row);
      ctx.progress.tick(fmt::format("decode {} {} b={} {}", w, c.phase, c.batch,
                                    c.phase == "prefill" ? c.prompt : c.context));
    }
  }
}

void decode_options(CLI::App& app) {
  app.add_option("--size", g_size, "model preset (random weights): tiny, small, medium, ...")
      ->capture_default_str();
  app.add_option("--steps", g_steps, "decode steps per timed sample (1 .. 4096)")
      ->capture_default_str()
      ->transform(cli::integer_in(1, 4096));
  app.add_flag("--no-llama", g_no_llama, "skip the llama.cpp peer");
  app.add_flag("--no-torch", g_no_torch, "skip the PyTorch peer");
  app.add_option("--python", g_python,
                 "python interpreter for the peers (default: .venv/bin/python, else python3)");
}

}  // namespace
}  // namespace ridge

RIDGE_BENCHMARK(
    decode, "decode",
    "generation: prefill and decode tokens/s with fp32/bf16/fp8 weights vs the roofline, llama.cpp and "
    "PyTorch",
    ridge::run_decode, ridge::decode_options);
