// `ridge generate`: text from a trained model (a checkpoint) or from random weights of a preset size (for
// timing): prompts in, sampled tokens streamed to stdout as they come, and a last line on stderr with the
// prefill and decode speeds against the bandwidth roof of this machine's probed chip. Text goes in and out
// through a BPE tokenizer (--tokenizer, or the one the checkpoint records; tokenizer_flag.hpp), else bytes.
#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli.hpp"
#include "model_flags.hpp"
#include "tokenizer_flag.hpp"
#include "ridge/attention.hpp"
#include "ridge/core.hpp"
#include "ridge/generate/generate.hpp"
#include "ridge/model/train.hpp"
#include "ridge/roofline.hpp"
#include "ridge/roofline/decode.hpp"
#include "core/check.hpp"

namespace {

using namespace ridge;

struct Args {
  std::string checkpoint, size, weights = "bf16", head, tokenizer;
  int64_t vocab = 10000, context = 1024, kv_heads = 0;
  std::vector<std::string> prompts, prompt_files;
  int64_t max_tokens = 64, top_k = 0, eos = -1, block_size = 16;
  double temperature = 1.0, top_p = 1.0;
  uint64_t seed = 0;
  int threads = -1, splits = 0;
  bool json = false;
  bool eos_given = false;
  cli::MoeFlags moe;  // --experts, --expert-top-k (--top-k is sampling's), ...
  // The shape flags that only mean something with --size (a checkpoint that records its config decides).
  std::vector<std::pair<std::string, const CLI::Option*>> shape_flags;
};

// The tokenizer text goes through: --tokenizer, else the one the checkpoint records (if it is still where it
// was, unchanged), else none (bytes).
std::optional<text::Tokenizer> g_tokenizer;

// A token's bytes. Byte-level without a tokenizer: ids below 256 are bytes; a larger id (a vocabulary
// trained beyond bytes, with no tokenizer named) is shown as <id>.
std::string token_text(int32_t t) {
  if (g_tokenizer) return g_tokenizer->decode_bytes(std::span<const int32_t>(&t, 1));
  return t < 256 ? std::string(1, static_cast<char>(t)) : fmt::format("<{}>", t);
}

// A sequence's text: through the tokenizer, ill-formed UTF-8 replaced by U+FFFD (Python's errors="replace").
std::string ids_text(const std::vector<int32_t>& a, const std::vector<int32_t>& b = {}) {
  std::vector<int32_t> ids = a;
  ids.insert(ids.end(), b.begin(), b.end());
  if (g_tokenizer) return g_tokenizer->decode(ids);
  std::string text;
  for (int32_t t : ids) text += token_text(t);
  return text;
}

void resolve_tokenizer(const Args& a, int64_t vocab) {
  const std::optional<model::TokenizerRecord> recorded =
      cli::recorded_tokenizer(a.checkpoint, "--checkpoint");
  std::optional<cli::LoadedTokenizer> tok;
  if (!a.tokenizer.empty()) {
    tok = cli::load_tokenizer(a.tokenizer, "--tokenizer");
    cli::check_same_tokenizer(tok->record, recorded, "--tokenizer", a.checkpoint);
  } else if (recorded) {
    std::error_code ec;
    check(std::filesystem::is_directory(recorded->path, ec),
          "--tokenizer: checkpoint '{}' was trained through the tokenizer {}, which is not there any more; "
          "give "
          "--tokenizer DIR (a copy of it)",
          a.checkpoint, cli::describe(*recorded));
    tok = cli::load_tokenizer(recorded->path, "--tokenizer");
    check(tok->record.hash == recorded->hash,
          "--tokenizer: the tokenizer at '{}' has changed since checkpoint '{}' was trained (hash {:016x}, "
          "then "
          "{:016x}); give --tokenizer DIR with the original",
          recorded->path, a.checkpoint, tok->record.hash, recorded->hash);
  }
  if (!tok) return;
  check(tok->tokenizer.vocab_size() <= vocab,
        "--tokenizer: '{}' has {} tokens, more than the model's vocabulary of {}{}", tok->record.path,
        tok->tokenizer.vocab_size(), vocab,
        a.checkpoint.empty() ? " (set by --vocab)" : " (the checkpoint's)");
  g_tokenizer = std::move(tok->tokenizer);
}

// The model --size, --vocab, --context and --kv-heads describe, its errors in the flags' words (the library
// names ModelConfig's fields: "ModelConfig: context_length ... overflow int64" was printed as it was).
model::ModelConfig preset_config(const Args& a) {
  try {
    model::ModelConfig cfg = model::preset(a.size, a.vocab, a.context);
    cfg.num_kv_heads = a.kv_heads;
    a.moe.apply(cfg);
    cfg.validate();
    return cfg;
  } catch (const Error& e) {
    std::string m = e.what();
    static const std::pair<const char*, const char*> kWords[] = {
        {"preset: ", "--size: "},
        {"ModelConfig: num_kv_heads", "--kv-heads:"},
        {"ModelConfig: context_length", "--context"},
        {"ModelConfig: vocab_size", "--vocab"},
        {"ModelConfig: the parameter count", "--size/--vocab: the parameter count"}};
    for (const auto& [from, to] : kWords)
      if (m.rfind(from, 0) == 0) throw Error(to + m.substr(std::string(from).size()));
    if (auto w = cli::flag_words(e, cli::model_fields(a.moe))) throw Error(*w);
    throw;
  }
}

// A checkpoint that records its config decides the model; MoE flags given beside it must describe the same
// model (or be dropped), as a size flag would have to.
void check_moe_flags_agree(const Args& a, const model::ModelConfig& recorded) {
  const auto given = a.moe.given();
  if (given.empty()) return;
  std::string flags;
  for (const auto& g : given) flags += (flags.empty() ? "" : "/") + g.first;
  const std::string has = recorded.is_moe() ? "an MoE model, " + cli::moe_text(recorded) : "a dense model";
  model::ModelConfig want = recorded;
  try {
    a.moe.apply(want);
    want.validate();
  } catch (const Error& e) {
    fail("{}: checkpoint '{}' records {}; the MoE flags must agree with it or be dropped ({})", flags,
         a.checkpoint, has, e.what());
  }
  check(want == recorded, "{}: checkpoint '{}' records {}; the MoE flags must agree with it or be dropped",
        flags, a.checkpoint, has);
}

// The fp32 model of `cfg`. The library refuses what it cannot build naming its fields: the checkpoint's,
// or the flags'.
model::TransformerLM<float> build_model(const Args& a, const model::ModelConfig& cfg, bool recorded) {
  try {
    return model::TransformerLM<float>(cfg);
  } catch (const Error& e) {
    const std::string m = e.what(), prefix = "ModelConfig: ";
    if (recorded && m.rfind(prefix, 0) == 0)
      fail("--checkpoint: '{}' records a model the library refuses: {}", a.checkpoint,
           m.substr(prefix.size()));
    if (auto w = cli::flag_words(e, cli::model_fields(a.moe))) fail("{}", *w);
    throw;
  }
}

// The fp32 model a run builds first (parameters and gradients, 8 bytes a parameter), held against the memory
// available before anything is allocated: a size that cannot fit is the flags' or the checkpoint's fault,
// named as such ("parameters: 3.64 PiB asked for" named neither, and a checkpoint recording a million
// layers took 21 s to lay them out before the allocation failed).
void check_model_fits(const Args& a, const model::ModelConfig& cfg) {
  const double params = static_cast<double>(cfg.param_count()), need = 8 * params,
               avail = static_cast<double>(memory::available_bytes());
  if (need <= avail) return;
  const std::string fits = fmt::format(
      "{} parameters (fp32, with gradients: {}), more than the {} of memory this machine has available",
      units::format_count(params), units::format_bytes(need), units::format_bytes(avail));
  if (!a.checkpoint.empty() && a.size.empty())
    fail("--checkpoint: '{}' records a model (vocab_size {}, num_layers {}, d_model {}, d_ff {}) of {}",
         a.checkpoint, cfg.vocab_size, cfg.num_layers, cfg.d_model, cfg.d_ff, fits);
  fail("--size/--vocab: a {} model with a vocabulary of {} has {}", a.size, cfg.vocab_size, fits);
}

model::TransformerLM<float> load_model(const Args& a) {
  if (!a.checkpoint.empty()) {
    std::optional<model::ModelConfig> c;
    try {
      c = model::checkpoint_config(a.checkpoint);
    } catch (const Error& e) {
      fail("--checkpoint: {}", e.what());
    }
    model::ModelConfig cfg;
    if (c) {
      cfg = *c;
      check(a.size.empty(), "--size: the checkpoint '{}' records its model's shape; drop --size",
            a.checkpoint);
      for (const auto& [flag, opt] : a.shape_flags)
        check(opt->count() == 0,
              "{}: the checkpoint '{}' records its model's shape; drop {} (it sizes --size's model)", flag,
              a.checkpoint, flag);
      check_moe_flags_agree(a, cfg);
    } else {
      check(!a.size.empty(),
            "--checkpoint: '{}' records no model config (a PyTorch state_dict?); give its shape with --size, "
            "--vocab, --context and --kv-heads",
            a.checkpoint);
      cfg = preset_config(a);
    }
    check_model_fits(a, cfg);
    model::TransformerLM<float> m = build_model(a, cfg, c.has_value());
    try {
      model::load_weights(m, a.checkpoint);
    } catch (const Error& e) {
      fail("--checkpoint: {}", e.what());
    }
    return m;
  }
  check(!a.size.empty(), "generate: give --checkpoint FILE, or --size NAME for random weights (timing only)");
  const model::ModelConfig cfg = preset_config(a);
  check_model_fits(a, cfg);
  model::TransformerLM<float> m = build_model(a, cfg, false);
  m.init(a.seed);
  return m;
}

// Where the model's sizes came from, for messages about them: the checkpoint, or --vocab / --context.
std::string source(const Args& a, const char* flag) {
  return a.checkpoint.empty() ? fmt::format(" (set by {})", flag) : " (the checkpoint's)";
}

// Prompt i (0-based) as the user gave it: "--prompt: prompt 2", or "--prompt-file: 'p.txt' (prompt 3)" (the
// --prompt texts come first, then the files). A file's problems were reported as --prompt's.
std::string prompt_name(const Args& a, size_t i) {
  if (i < a.prompts.size()) return fmt::format("--prompt: prompt {}", i + 1);
  return fmt::format("--prompt-file: '{}' (prompt {})", a.prompt_files[i - a.prompts.size()], i + 1);
}

std::vector<std::vector<int32_t>> read_prompts(const Args& a, int64_t vocab) {
  std::vector<std::string> texts = a.prompts;
  for (const auto& f : a.prompt_files) texts.push_back(input::read_input_file(f, "--prompt-file"));
  check(!texts.empty(), "generate: give at least one --prompt TEXT or --prompt-file FILE");
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < texts.size(); ++i) {
    check(!texts[i].empty(), "{} is empty; a prompt needs at least one byte", prompt_name(a, i));
    if (g_tokenizer) {
      // The tokenizer's memory check (a pre-token too long to encode) is about the prompt.
      out.push_back(cli::with_flags({{"text", "--prompt"}}, [&] { return g_tokenizer->encode(texts[i]); }));
      continue;
    }
    std::vector<int32_t> ids;
    for (unsigned char b : texts[i]) {
      check(b < vocab, "{} holds the byte {}, outside this model's vocabulary [0, {}){}", prompt_name(a, i),
            b, vocab, source(a, "--vocab"));
      ids.push_back(b);
    }
    out.push_back(std::move(ids));
  }
  return out;
}

// The memory the run will take, before any of it is allocated: the weights and RoPE's tables for the
// whole context (the inference model), and the KV cache for every prompt's whole generation, in blocks
// as generate() sizes it. Refused naming the flag behind the larger part.
void check_memory(const Args& a, const model::ModelConfig& cfg, const generate::InferenceOptions& io,
                  const std::vector<std::vector<int32_t>>& prompts) {
  int64_t tokens = 0;
  for (const auto& p : prompts)
    tokens +=
        (static_cast<int64_t>(p.size()) + a.max_tokens + a.block_size - 1) / a.block_size * a.block_size;
  const generate::InferenceMemory need = generate::inference_memory(cfg, io, tokens);
  const auto avail = static_cast<double>(memory::available_bytes());
  if (need.total() <= avail) return;
  const bool model_alone = need.weights + need.rope > avail;
  const char* flag = model_alone ? (a.checkpoint.empty() ? "--context" : "--checkpoint") : "--max-tokens";
  fail(
      "{}: this run needs {}, more than the {} of memory available: RoPE's tables {} for a context of {} "
      "tokens{}, the weights {}, the KV cache {} for {} prompt{} + --max-tokens {}; use a smaller {}",
      flag, units::format_bytes(need.total()), units::format_bytes(avail), units::format_bytes(need.rope),
      cfg.context_length, source(a, "--context"), units::format_bytes(need.weights),
      units::format_bytes(need.kv_cache), prompts.size(), prompts.size() == 1 ? "" : "s", a.max_tokens,
      model_alone ? (a.checkpoint.empty() ? "--context" : "model") : "--max-tokens or fewer prompts");
}

void run(const Args& a) {
  if (a.threads != -1) set_num_threads(a.threads);
  generate::InferenceOptions io;
  io.weights = generate::parse_weight_format(a.weights, "--weights");
  if (!a.head.empty()) io.head = generate::parse_weight_format(a.head, "--head");
  io.block_size = a.block_size;
  generate::GenerateOptions go;
  go.sampling.temperature = a.temperature;
  go.sampling.top_p = a.top_p;
  go.sampling.top_k = a.top_k;
  go.max_tokens = a.max_tokens;
  go.seed = a.seed;
  go.eos = a.eos;
  go.num_splits = a.splits;

  // Everything the flags alone decide is checked before the weights are read.
  std::optional<model::TransformerLM<float>> trained(load_model(a));
  const model::ModelConfig cfg = trained->config();
  resolve_tokenizer(a, cfg.vocab_size);
  // A tokenizer with <|endoftext|> ends a sequence there unless --eos says otherwise.
  if (g_tokenizer && !a.eos_given)
    if (const int32_t id = g_tokenizer->special_id("<|endoftext|>"); id >= 0) go.eos = id;
  const auto prompts = read_prompts(a, cfg.vocab_size);
  check(a.eos < cfg.vocab_size, "--eos: {} is outside this model's vocabulary [0, {}){}", a.eos,
        cfg.vocab_size, source(a, "--vocab"));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto len = static_cast<int64_t>(prompts[i].size());
    check(len <= cfg.context_length, "{} has {} tokens; the model's context_length is {}{}",
          prompt_name(a, i), len, cfg.context_length, source(a, "--context"));
    // Subtracted, not added: --max-tokens 9223372036854775807 wrapped the sum and passed.
    check(a.max_tokens <= cfg.context_length - len,
          "--max-tokens: prompt {}'s {} tokens + {} new tokens exceed the model's context_length {}{}; at "
          "most {} "
          "here",
          i + 1, len, a.max_tokens, cfg.context_length, source(a, "--context"), cfg.context_length - len);
  }
  check_memory(a, cfg, io, prompts);
  const generate::InferenceModel im = cli::with_flags({{"block_size", "--block-size"}},
                                                      [&] { return generate::InferenceModel(*trained, io); });
  trained.reset();  // the fp32 master copy is not needed any more
  // One prompt streams as it comes; several are printed whole at the end, each after its prompt.
  const bool stream = prompts.size() == 1 && !a.json;
  if (stream) {
    // Raw bytes, token by token (a character split across two tokens is whole once both are out).
    const auto put = [](int32_t t) { cli::write_stdout(token_text(t)); };
    for (int32_t t : prompts[0]) put(t);
    cli::flush_stdout();
    go.on_token = [put](size_t, int32_t t) {
      put(t);
      cli::flush_stdout();
    };
  }
  generate::GenerateStats st;
  const auto out = cli::with_flags({{"max_tokens", "--max-tokens"},
                                    {"temperature", "--temperature"},
                                    {"top_p", "--top-p"},
                                    {"top_k", "--top-k"},
                                    {"num_splits", "--splits"}},
                                   [&] { return generate::generate(im, prompts, go, &st); });

  double roof = 0;
  std::string roof_name;
  if (roofline::has_probe_result()) {
    try {
      // The roof of the level the step's bytes come from (the weights and the cache of a small model sit
      // in L3): the roofline's decode step at the run's batch and mean context, at level "auto".
      const auto chip = roofline::load_chip("this");
      const int64_t batch = std::max<int64_t>(1, static_cast<int64_t>(prompts.size()));
      int64_t keys = 0;
      for (size_t i = 0; i < prompts.size(); ++i)
        keys += static_cast<int64_t>(prompts[i].size() + out[i].size() / 2);
      const auto b = roofline::inference_bound(
          roofline::decode_cost(cfg, im.roofline_dtypes(), batch, std::max<int64_t>(1, keys / batch)), chip,
          "auto");
      roof = b.bandwidth;
      roof_name = chip.memory_level(b.level).name;
    } catch (const Error&) {
      roof = 0;
    }
  }
  const double prefill_tps =
      st.prefill_seconds > 0 ? static_cast<double>(st.prefill_tokens) / st.prefill_seconds : 0;
  const double decode_tps =
      st.decode_seconds > 0 ? static_cast<double>(st.decode_tokens) / st.decode_seconds : 0;
  const double bw = st.decode_seconds > 0 ? st.decode_bytes / st.decode_seconds : 0;

  if (a.json) {
    nlohmann::json seqs = nlohmann::json::array();
    for (size_t i = 0; i < out.size(); ++i) {
      seqs.push_back({{"prompt_tokens", prompts[i].size()}, {"tokens", out[i]}, {"text", ids_text(out[i])}});
    }
    nlohmann::json j = {{"weights", generate::weight_format_name(io.weights)},
                        {"head", generate::weight_format_name(im.head_format())},
                        {"kv_dtype", dtype_name(im.kv_dtype())},
                        {"threads", get_num_threads()},
                        {"sequences", seqs},
                        {"prefill_tokens", st.prefill_tokens},
                        {"prefill_seconds", st.prefill_seconds},
                        {"prefill_tokens_per_s", prefill_tps},
                        {"decode_tokens", st.decode_tokens},
                        {"decode_steps", st.decode_steps},
                        {"decode_seconds", st.decode_seconds},
                        {"decode_tokens_per_s", decode_tps},
                        {"decode_bytes", st.decode_bytes},
                        {"decode_bytes_per_s", bw}};
    // An MoE model's added key (a dense model's document is what it was).
    if (im.config().is_moe()) j["decode_experts_read"] = st.decode_experts_read;
    if (roof > 0) {
      j["bandwidth_roof"] = roof;
      j["bandwidth_level"] = roof_name;
      j["roof_fraction"] = bw / roof;
    }
    cli::write_stdout(j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    return;
  }
  if (stream) {
    cli::write_stdout("\n");
  } else {
    for (size_t i = 0; i < out.size(); ++i) {
      fmt::print("--- {} ---\n{}\n", i + 1, ids_text(prompts[i], out[i]));
    }
  }
  cli::flush_stdout();
  std::string line = fmt::format(
      "prefill {} tokens in {:.3g} s ({:.0f} tokens/s); decode {} tokens in {} steps, {:.3g} s ({:.1f} "
      "tokens/s, "
      "{:.1f} GB/s",
      st.prefill_tokens, st.prefill_seconds, prefill_tps, st.decode_tokens, st.decode_steps,
      st.decode_seconds, decode_tps, bw / 1e9);
  if (roof > 0)
    line += fmt::format(" = {:.0f}% of the {} roof, {:.1f} GB/s)", 100 * bw / roof, roof_name, roof / 1e9);
  else
    line += "; run 'ridge probe' for this machine's bandwidth roof)";
  line +=
      fmt::format(", {} weights, {} threads", generate::weight_format_name(io.weights), get_num_threads());
  if (im.config().is_moe())
    line += fmt::format(", {:.2f} of {} experts read per MoE layer and step", st.decode_experts_read,
                        im.config().num_experts);
  cli::say("ridge generate: ", line);
}

void setup(CLI::App& root) {
  static Args a;
  auto* cmd =
      root.add_subcommand("generate", "sample text from a trained model (KV cache, paged, split-KV decode)");
  cmd->add_option("--checkpoint", a.checkpoint, "a checkpoint of `ridge train` or a safetensors state_dict");
  cmd->add_option("--size", a.size, "random weights of a preset size instead (timing): tiny, small, ...");
  a.shape_flags = {{"--vocab", cmd->add_option("--vocab", a.vocab, "with --size: vocabulary size")
                                   ->capture_default_str()
                                   ->transform(cli::integer_in(1))},
                   {"--context", cmd->add_option("--context", a.context, "with --size: context length")
                                     ->capture_default_str()
                                     ->transform(cli::integer_in(2))},
                   {"--kv-heads", cmd->add_option("--kv-heads", a.kv_heads,
                                                  "with --size: key/value heads (0: as many as heads)")
                                      ->transform(cli::integer_in(0))}};
  a.moe.add_to(cmd, "--expert-top-k");
  cmd->add_option("--prompt", a.prompts, "a prompt (repeatable: one sequence each)");
  cmd->add_option(
      "--tokenizer", a.tokenizer,
      "the BPE tokenizer directory prompts and output go through (default: the one the checkpoint "
      "records; a different one is refused)");
  cmd->add_option("--prompt-file", a.prompt_files, "a file whose bytes are a prompt (repeatable)");
  cmd->add_option("--max-tokens", a.max_tokens, "new tokens per prompt")
      ->capture_default_str()
      ->transform(cli::integer_in(1));
  cmd->add_option("--temperature", a.temperature, "0: greedy")
      ->capture_default_str()
      ->transform(cli::number_in(0, 1e9));
  cmd->add_option("--top-p", a.top_p, "nucleus sampling, in (0, 1]")
      ->capture_default_str()
      ->transform(cli::number_in(0, 1, true));
  cmd->add_option("--top-k", a.top_k, "keep the k most likely tokens (0: off)")
      ->capture_default_str()
      ->transform(cli::integer_in(0));
  cmd->add_option("--seed", a.seed, "sampling seed (and --size's weights)")
      ->capture_default_str()
      ->transform(cli::integer_in(0));
  cmd->add_option("--eos", a.eos, "a token id that ends a sequence (-1: none; default: <|endoftext|>'s id)")
      ->capture_default_str()
      ->transform(cli::integer_in(-1))
      ->each([](const std::string&) { a.eos_given = true; });
  cmd->add_option("--weights", a.weights, "fp32, bf16, fp8 or fp8-ue8m0")->capture_default_str();
  cmd->add_option("--head", a.head, "the lm_head's format (default: as --weights; bf16 with fp8)");
  cmd->add_option("--block-size", a.block_size, "tokens per KV-cache block")
      ->capture_default_str()
      ->transform(cli::integer_in(1, 1024));
  cmd->add_option("--splits", a.splits, "decode attention's KV splits (0: heuristic)")
      ->capture_default_str()
      ->transform(cli::integer_in(0, attention::kMaxKVCacheSplits));
  cmd->add_option("--threads", a.threads, "threads (default: OMP_NUM_THREADS or all CPUs)")
      ->transform(cli::integer_in(1, env::kMaxThreads));
  cmd->add_flag("--json", a.json, "one JSON document: tokens, text and speeds");
  cmd->callback([] { run(a); });
}

}  // namespace

RIDGE_COMMAND(generate, setup);
