// `ridge train`: trains the CS336 Transformer LM on a token file, on text encoded on the fly (bytes, or
// BPE through --tokenizer, which checkpoints then record), or on random tokens (CS336's benchmarking
// setting), printing step, loss, lr, tokens/s, model FLOPs utilisation against the probed peak and the time
// left; `--json` prints one object per logged step.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <tuple>

#include "cli.hpp"
#include "model_flags.hpp"
#include "tokenizer_flag.hpp"
#include "ridge/core.hpp"
#include "ridge/core/input.hpp"
#include "ridge/text/data.hpp"
#include "ridge/bench/memory.hpp"
#include "ridge/bench/trace.hpp"
#include "ridge/core/files.hpp"
#include "ridge/model/moe.hpp"
#include "ridge/model/roofline.hpp"
#include "ridge/model/train.hpp"
#include "ridge/roofline.hpp"
#ifdef RIDGE_HAVE_DISTRIBUTED
#include "ridge/distributed.hpp"
#include "core/check.hpp"
#include "core/json.hpp"
#include "model/json.hpp"
#endif

namespace {

using namespace ridge;
namespace fs = std::filesystem;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Args {
  std::string size = "tiny";
  int64_t d_model = 0, d_ff = 0, layers = -1, heads = 0, kv_heads = 0, vocab = 0;
  int64_t context = 256, batch = 4, steps = 100, log_every = 10, save_every = 0;
  std::string data, text, tokenizer, precision = "fp32", attention = "flash", checkpoint, resume, trace;
  double lr = 1e-3, lr_min = -1, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, clip = 1.0;
  int64_t warmup = -1;
  uint64_t seed = 0;
  int threads = -1;
  bool json = false;
  bool doc_mask = false;
  int64_t eot_id = -1;     // -1: not given (0 with --doc-mask)
  std::string memory;      // memory snapshot file (per rank under mpirun: NAME.rankR.json)
  std::string ddp, shard;  // data parallelism under mpirun (empty: one process)
  double bucket_mb = 25;
  bool expert_parallel = false;  // the MoE experts sharded over the ranks
  cli::MoeFlags moe;             // --experts, --top-k, ..., --aux-loss-coef, --bias-speed
};

// Under data parallelism each rank writes its own memory snapshot: NAME.rankR.json beside NAME.json.
std::string per_rank_path(const std::string& path, int rank, int world) {
  if (world <= 1) return path;
  const auto slash = path.rfind('/');
  const auto dot = path.rfind('.');
  const bool ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
  return (ext ? path.substr(0, dot) : path) + fmt::format(".rank{}", rank) + (ext ? path.substr(dot) : "");
}

// The text's bytes, read after checking it is a regular file (a FIFO would block the read).
std::string read_text(const std::string& path) {
  // The shared reader refuses FIFOs, devices and directories before opening; a text has no size cap
  // here beyond memory (the token buffer is checked against it below).
  std::string s = input::read_input_file(path, "--text", int64_t{1} << 40);
  check(!s.empty(), "--text: '{}' is empty", path);
  return s;
}

// The model, from the sizes prepare() checked. FlashAttention's head-dimension limit is the model's
// check; the user chose the head dimension through --d-model and --heads.
std::string trainer_error(const Error& e, const model::ModelConfig& c) {
  // The model's own refusals name its fields ("ModelConfig: num_experts is 8; ..."): the flags set them.
  if (e.argument() != "attention") return cli::flag_words(e).value_or(e.what());
  return fmt::format("{} (from --d-model {} / --heads {}; or pass --attention math)",
                     e.renamed("--attention").what(), c.d_model, c.num_heads);
}

model::Trainer make_trainer(const model::ModelConfig& c, const model::TrainConfig& t) {
  try {
    return model::Trainer(c, t);
  } catch (const Error& e) {
    fail("{}", trainer_error(e, c));
  }
}

std::string duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 60) return fmt::format("{:.0f}s", s);
  if (s < 3600) return fmt::format("{:.0f}m{:02.0f}s", std::floor(s / 60), std::fmod(s, 60));
  return fmt::format("{:.0f}h{:02.0f}m", std::floor(s / 3600), std::fmod(s / 60, 60));
}

// A logged step as --json prints it (mfu null without a probed peak).
nlohmann::json json_line(const model::StepLog& l, bool has_peak) {
  const model::StepResult& r = l.result;
  nlohmann::json j = {
      {"step", l.step},           {"loss", r.loss},
      {"mean_loss", l.mean_loss}, {"lr", r.lr},
      {"grad_norm", r.grad_norm}, {"tokens_per_s", l.tokens_per_s},
      {"step_ms", l.step_ms},     {"mfu", has_peak ? nlohmann::json(l.mfu) : nlohmann::json(nullptr)},
      {"skipped", r.skipped},     {"loss_scale", r.loss_scale},
  };
  // Mixture of Experts: each MoE layer's load, max / mean tokens per expert (1 at a perfect balance), and
  // the auxiliary loss inside `loss`. A dense model's line is what it always was.
  if (!r.expert_load.empty()) {
    j["expert_load"] = r.expert_load;
    j["aux_loss"] = r.aux_loss;
  }
  return j;
}

// The worst MoE layer's load (max / mean tokens per expert), as the table prints it.
std::string load_text(const model::StepResult& r) {
  if (r.expert_load.empty()) return "";
  return fmt::format("  {:>6.2f}", *std::max_element(r.expert_load.begin(), r.expert_load.end()));
}

// A logged step as the table's row; a skipped step says the loss scale it left behind.
std::string table_row(const model::StepLog& l, bool has_peak, double loss_scale_now) {
  const model::StepResult& r = l.result;
  return fmt::format(
      "{:>7}  {:>8.4f}  {:>9.2e}  {:>9.3f}  {:>9.0f}  {:>6}  {:>8}{}{}\n", l.step, r.loss, r.lr, r.grad_norm,
      l.tokens_per_s, has_peak ? fmt::format("{:.1f}%", 100 * l.mfu) : std::string("n/a"),
      duration(l.seconds_left), load_text(r),
      r.skipped ? fmt::format("  (skipped: non-finite gradient; loss scale now {})", loss_scale_now)
                : std::string());
}

// Everything a run needs before its trainer exists; `world` ranks share the global batch.
struct Prepared {
  model::ModelConfig c;
  model::TrainConfig t;  // t.batch: this rank's share
  std::optional<text::TokenFile> file;
  std::vector<uint16_t> text_tokens;
  std::string source;
  // The tokenizer the data came through (--tokenizer, or the --resume checkpoint's): what checkpoints record.
  std::optional<model::TokenizerRecord> tokenizer;
};

// Every file the run reads: the data, the checkpoint it resumes, and the files of the tokenizer it
// reads text through or that checkpoint records (whose files the new checkpoints record in turn).
files::NamedPaths inputs_of(const Args& a, const std::optional<model::TokenizerRecord>& recorded) {
  files::NamedPaths in = {{"--text", a.text}, {"--data", a.data}, {"--resume", a.resume}};
  if (!a.tokenizer.empty())
    for (const auto& f : text::Tokenizer::dir_files(a.tokenizer)) in.emplace_back("--tokenizer", f);
  if (recorded)
    for (const auto& f : text::Tokenizer::dir_files(recorded->path))
      in.emplace_back("the tokenizer --resume records", f);
  return in;
}

Prepared prepare(const Args& a, int world) {
  Prepared p;
  if (a.threads != -1) set_num_threads(a.threads);  // in 1 .. kMaxThreads (its option's transform)
  check(a.data.empty() || a.text.empty(), "--data and --text: give one of them, not both");
  check(a.save_every == 0 || !a.checkpoint.empty(), "--save-every: needs --checkpoint PATH to write to");
  check(a.lr_min < 0 || a.lr_min <= a.lr,
        "--lr-min: {} is above --lr {} (the schedule decays from --lr to --lr-min)", a.lr_min, a.lr);

  // The tokenizer the --resume checkpoint records, if any: one of the run's inputs.
  const std::optional<model::TokenizerRecord> recorded = cli::recorded_tokenizer(a.resume, "--resume");

  // Outputs before any work: each writable, none of them an input of the run or another output (a
  // checkpoint may be the --resume file: resuming and saving in place is the usual way to continue).
  files::NamedPaths outputs = {{"--checkpoint", a.checkpoint}, {"--trace", a.trace}};
  if (!a.memory.empty())
    for (int r = 0; r < world; ++r) outputs.emplace_back("--memory", per_rank_path(a.memory, r, world));
  for (const auto& [flag, path] : outputs)
    if (!path.empty()) files::check_writable(path, flag);
  files::check_distinct(outputs, inputs_of(a, recorded), {{"--checkpoint", "--resume"}});

  // The tokenizer: the one given, which must be the --resume checkpoint's if that records one.
  std::optional<cli::LoadedTokenizer> tok;
  if (!a.tokenizer.empty()) tok = cli::load_tokenizer(a.tokenizer, "--tokenizer");
  if (tok) cli::check_same_tokenizer(tok->record, recorded, "--tokenizer", a.resume);
  check(!recorded || tok || a.text.empty(),
        "--tokenizer: checkpoint '{}' was trained on text read through the tokenizer {}; give --tokenizer "
        "to read --text through it too",
        a.resume, recorded ? cli::describe(*recorded) : "");
  p.tokenizer = tok ? std::optional(tok->record) : recorded;

  // Data first: its vocabulary sets the default vocab_size.
  auto& file = p.file;
  auto& text_tokens = p.text_tokens;
  std::string& source = p.source;
  source = "random tokens";
  int64_t data_vocab = 0;
  if (!a.data.empty()) {
    try {
      file = text::TokenFile::open(a.data);
    } catch (const Error& e) {
      fail("--data: {}", e.what());
    }
    data_vocab = file->max_token() + 1;
    source = fmt::format("{} ({} tokens)", a.data, file->size());
    if (tok) {
      check(data_vocab <= tok->tokenizer.vocab_size(),
            "--data: holds the token id {}, beyond the {} tokens of --tokenizer '{}': it was not made with "
            "that "
            "tokenizer",
            data_vocab - 1, tok->tokenizer.vocab_size(), a.tokenizer);
      data_vocab = tok->tokenizer.vocab_size();
      source += fmt::format(", made with the tokenizer {}", a.tokenizer);
    }
  } else if (!a.text.empty() && tok) {
    const int64_t n = tok->tokenizer.vocab_size();
    check(n <= 65536, "--tokenizer: '{}' has {} tokens; --text is held as uint16 tokens (at most 65536)",
          a.tokenizer, n);
    const std::string text = read_text(a.text);
    const std::vector<int32_t> ids = tok->tokenizer.encode(text);
    text_tokens.assign(ids.begin(), ids.end());
    data_vocab = n;
    source = fmt::format("{} ({} bytes, {} tokens through the tokenizer {})", a.text, text.size(),
                         text_tokens.size(), a.tokenizer);
  } else if (!a.text.empty()) {
    text_tokens = text::encode_bytes(read_text(a.text));
    data_vocab = 256;
    source = fmt::format("{} ({} bytes, byte-level tokens)", a.text, text_tokens.size());
  } else if (tok) {
    data_vocab = tok->tokenizer.vocab_size();
  }

  const int64_t vocab =
      a.vocab > 0 ? a.vocab : (tok ? data_vocab : (data_vocab > 0 ? (a.text.empty() ? 10000 : 256) : 10000));
  check(!tok || vocab >= data_vocab, "--vocab: {} is smaller than the {} tokens of --tokenizer '{}'", vocab,
        data_vocab, a.tokenizer);
  check(vocab >= data_vocab, "--vocab: {} is smaller than the data's largest token id + 1 ({})", vocab,
        data_vocab);
  model::ModelConfig& c = p.c;
  c = cli::in_flag_words([&] { return model::preset(a.size, vocab, a.context); });
  if (a.d_model > 0) c.d_model = a.d_model;
  if (a.d_ff > 0) c.d_ff = a.d_ff;
  if (a.layers > 0) c.num_layers = a.layers;
  if (a.heads > 0) c.num_heads = a.heads;
  if (a.kv_heads > 0) {
    c.num_kv_heads = a.kv_heads;
    cli::check_kv_heads(c.num_kv_heads, c.num_heads);
  }
  a.moe.apply(c);
  cli::in_flag_words([&] { c.validate(); });
  if (a.expert_parallel) {
    check(c.is_moe(),
          "--expert-parallel: the model is dense; expert parallelism shards an MoE model's experts (give "
          "--experts, or an MoE --size such as moe-tiny)");
    check(a.shard.empty(),
          "--expert-parallel: does not combine with --shard-optimizer {} (each rank already steps only its "
          "own experts; run without --shard-optimizer)",
          a.shard);
    check(c.num_experts % world == 0,
          "--expert-parallel: {} experts do not share out evenly over {} ranks (give --experts a multiple of "
          "{}, or a number of ranks that divides {})",
          c.num_experts, world, world, c.num_experts);
  }

  model::TrainConfig& t = p.t;
  check(a.batch % world == 0,
        "--batch: the global batch {} does not divide among {} ranks (give a multiple of {})", a.batch, world,
        world);
  t.batch = a.batch / world;
  t.seq = a.context;
  t.precision = cli::in_flag_words([&] { return model::parse_precision(a.precision); });
  t.attention = cli::in_flag_words([&] { return model::parse_attention_path(a.attention); });
  t.lr_max = a.lr;
  t.lr_min = a.lr_min >= 0 ? a.lr_min : a.lr / 10;
  t.warmup_steps = a.warmup >= 0 ? a.warmup : std::min<int64_t>(a.steps / 10, 1000);
  t.cosine_steps = a.steps;
  t.adamw.beta1 = a.beta1;
  t.adamw.beta2 = a.beta2;
  t.adamw.eps = a.eps;
  t.adamw.weight_decay = a.weight_decay;
  t.max_grad_norm = a.clip;
  t.seed = a.seed;
  check(a.doc_mask || a.eot_id < 0, "--eot-id: only means something with --doc-mask");
  if (a.doc_mask) {
    const int64_t eot = a.eot_id >= 0 ? a.eot_id : 0;
    check(eot < c.vocab_size, "--eot-id: {} is not a token of the vocabulary (0..{})", eot, c.vocab_size - 1);
    t.eot_id = static_cast<int32_t>(eot);
  }
  t.validate();

  const int64_t n_data = file ? file->size() : static_cast<int64_t>(text_tokens.size());
  if (file || !text_tokens.empty())
    check(n_data >= a.context + 1, "--context: {} needs at least {} tokens of data; {} has {}", a.context,
          a.context + 1, file ? "--data" : "--text", n_data);

  // Under expert parallelism a rank holds its block of the experts and the exchange's buffers.
  const double need =
                   model::step_memory(c, t.batch, t.seq, t.precision, a.expert_parallel ? world : 1).total(),
               avail = static_cast<double>(memory::available_bytes());
  if (!(avail <= 0 || need < 0.9 * avail)) {
    std::string flags = "--size";  // the flags that sized this run, as the user gave them
    for (const auto& [given, flag] : {std::pair{a.d_model > 0, "--d-model"},
                                      {a.d_ff > 0, "--d-ff"},
                                      {a.layers > 0, "--layers"},
                                      {a.heads > 0, "--heads"},
                                      {a.kv_heads > 0, "--kv-heads"},
                                      {a.vocab > 0, "--vocab"}})
      if (given) flags += std::string("/") + flag;
    for (const auto& given : a.moe.given()) flags += "/" + given.first;
    fail(
        "{}/--batch/--context: this run needs about {} but {} is available; try a smaller model, batch or "
        "context",
        flags, units::format_bytes(need), units::format_bytes(avail));
  }

  return p;
}

void load_resume(model::Trainer& trainer, const Args& a) {
  if (a.resume.empty()) return;
  try {
    // A model field or the precision that differs from the checkpoint's names the flag that sets it;
    // rope_theta has none, so it keeps the checkpoint's field name after --resume.
    cli::FlagNames names = cli::kModelFields;
    names.emplace_back("precision", "--precision");
    cli::with_flags(names, [&] { trainer.load(a.resume); });
  } catch (const Error& e) {
    if (e.argument().rfind("--", 0) == 0) throw;
    fail("--resume: {}", e.what());
  }
  // A checkpoint at or past the last step would train nothing and still report success.
  check(trainer.steps() < a.steps,
        "--steps: {} steps in all, but checkpoint '{}' is at step {} already; give more --steps to train on",
        a.steps, a.resume, trainer.steps());
}

#ifdef RIDGE_HAVE_DISTRIBUTED
using DataParallelPtr = distributed::DataParallel*;
#else
using DataParallelPtr = void*;
#endif

// One run: the header, the library's training loop (model::train) with a log line per logged step,
// then the trace, the memory snapshot and the summary. Under data parallelism every rank trains on
// its slice of the same global batch (the loop takes rank and world from the DataParallel hooks set
// on the trainer); rank 0 prints and saves.
void train_loop(const Args& a, const Prepared& p, model::Trainer& trainer, DataParallelPtr dp, int rank,
                int world) {
  const auto& c = p.c;
  const auto& t = p.t;
  const auto& file = p.file;
  const bool print = rank == 0;
  (void)dp;  // used only when built with MPI
  if (!a.trace.empty()) {
    trace::set_thread_name(fmt::format("rank {}", rank));
    trace::start_recording();
  }

  // The peak model FLOPs utilisation is held against: the probed peak of the dtype the GEMMs run in.
  double peak = 0;
  std::string peak_key;
  if (roofline::has_probe_result()) {
    try {
      const auto chip = roofline::load_chip("this");
      peak = model::mfu_peak(chip, t.precision);
      peak_key = model::mfu_peak_key(chip, t.precision);
    } catch (const Error&) {
      peak = 0;
    }
  }
  const int64_t global_batch = t.batch * world;
  if (!a.json && print) {
    fmt::print("model     {}: d_model {}, {} layers, {}, d_ff {}, vocab {}, {:.2f}M parameters\n", a.size,
               c.d_model, c.num_layers, cli::heads_text(c.num_heads, c.kv_heads()), c.d_ff, c.vocab_size,
               static_cast<double>(c.param_count()) / 1e6);
    if (c.is_moe())
      fmt::print(
          "moe       {} experts of d_expert {}, top-{} ({} gate, {} balance){}, in layers {}; {:.2f}M "
          "parameters active per token; mfu counts the active FLOPs; load = max / mean tokens per expert "
          "over the MoE layers\n",
          c.num_experts, c.expert_width(), c.top_k, model::moe::gate_name(c.router),
          model::moe::balance_name(c.balance),
          c.num_shared_experts ? fmt::format(", {} shared", c.num_shared_experts) : std::string(),
          model::moe_layers_text(c), static_cast<double>(roofline::model_active_param_count(c)) / 1e6);
    fmt::print(
        "training  {} steps of {} x {} tokens, {} precision, {} attention, {} threads, lr {:.3g} -> {:.3g} "
        "(warm-up "
        "{}), AdamW wd {:.3g}, clip {:.3g}\n",
        a.steps, global_batch, t.seq, model::precision_name(t.precision),
        model::attention_path_name(t.attention), get_num_threads(), t.lr_max, t.lr_min, t.warmup_steps,
        t.adamw.weight_decay, t.max_grad_norm);
    fmt::print("data      {}\n", p.source);
    if (t.eot_id >= 0) fmt::print("doc mask  attention does not cross token {} (end of text)\n", t.eot_id);
#ifdef RIDGE_HAVE_DISTRIBUTED
    if (dp)
      fmt::print(
          "parallel  {} ranks, {} slice each, --ddp {}{} ({} reductions of gradients per step), optimizer "
          "sharding "
          "{}{}\n",
          world, t.batch, distributed::ddp_mode_name(dp->config().mode),
          dp->config().mode == distributed::DdpMode::bucketed ? fmt::format(" --bucket-mb {}", a.bucket_mb)
                                                              : "",
          dp->buckets().size(), distributed::sharding_name(dp->config().sharding),
          dp->config().expert_parallel
              ? fmt::format("; expert parallel: {} of the {} experts of each MoE layer on each rank (their "
                            "gradients not reduced)",
                            c.num_experts / world, c.num_experts)
              : std::string());
#endif
    fmt::print("mfu       against {}\n",
               peak > 0 ? fmt::format("the probed {} peak, {:.1f} GFLOP/s{}", peak_key, peak / 1e9,
                                      t.eot_id >= 0 ? " (FLOPs of the scores each document attends to)" : "")
                        : std::string("nothing: run `ridge probe` once to measure the peak"));
    if (!a.resume.empty()) fmt::print("resumed   {} at step {}\n", a.resume, trainer.steps());
    fmt::print("{:>7}  {:>8}  {:>9}  {:>9}  {:>9}  {:>6}  {:>8}{}\n", "step", "loss", "lr", "grad norm",
               "tokens/s", "mfu", "left", c.is_moe() ? fmt::format("  {:>6}", "load") : std::string());
  }

  // Rank 0 prints a line per logged step: a JSON object with --json, else the table's row.
  const model::LoopConfig loop{.steps = a.steps,
                               .log_every = a.log_every,
                               .checkpoint = a.checkpoint,
                               .save_every = a.save_every,
                               .peak_flops = peak,
                               .on_log = [&](const model::StepLog& l) {
                                 if (!print) return false;
                                 if (a.json)
                                   cli::write_stdout(json_line(l, peak > 0).dump() + "\n");
                                 else
                                   fmt::print("{}", table_row(l, peak > 0, trainer.scaler().scale()));
                                 cli::flush_stdout();
                                 return false;
                               }};
  const text::BatchSource source{file ? &*file : nullptr, p.text_tokens, c.vocab_size};
  const auto start = std::chrono::steady_clock::now();
  const model::TrainSummary run = cli::with_flags({{"data", "--data"}, {"checkpoint", "--checkpoint"}},
                                                  [&] { return model::train(trainer, source, loop); });
  if (!a.trace.empty()) {
    // Under data parallelism rank 0 writes one trace with a process row per rank.
    std::string what = a.trace;
    cli::with_flags({{"trace", "--trace"}}, [&] {
#ifdef RIDGE_HAVE_DISTRIBUTED
      if (dp && world > 1) {
        distributed::write_merged_trace(a.trace);
        what = fmt::format("{} ({} ranks, one process row each)", a.trace, world);
      } else
#endif
        trace::write(a.trace);
    });
    trace::stop_recording();
    if (!a.json && print)
      fmt::print("trace     {} events{} -> {} (open in https://ui.perfetto.dev)\n", trace::event_count(),
                 world > 1 ? " on rank 0" : "", what);
  }
  if (!a.memory.empty()) {
    const std::string path = per_rank_path(a.memory, rank, world);
    cli::with_flags({{"memory snapshot", "--memory"}}, [&] { memory::dump_snapshot(path); });
    memory::stop_recording();
    if (!a.json && print)
      fmt::print("memory    {} (see `ridge memory show`){}\n", path,
                 world > 1 ? fmt::format("; every rank writes its own, .rank0 .. .rank{}", world - 1) : "");
  }
  if (!a.json && print) {
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("done      {} steps in {}{}\n", run.steps, duration(total),
               a.checkpoint.empty() ? std::string() : fmt::format("; checkpoint {}", a.checkpoint));
  }
}

#ifdef RIDGE_HAVE_DISTRIBUTED
// What every rank must be given alike besides its command line: the contents of what it reads (the
// command line compares the paths; this, what a path holds on each rank's machine).
void add_contents(distributed::Fingerprint& fp, const Args& a, const Prepared& p) {
  if (p.file)
    fp.emplace_back("--data (contents)",
                    fmt::format("{} tokens, fnv1a {:016x}", p.file->size(), p.file->content_hash()));
  if (!p.text_tokens.empty())
    fp.emplace_back("--text (contents)", fmt::format("{} bytes, fnv1a {:016x}", p.text_tokens.size(),
                                                     fnv1a(p.text_tokens.data(), p.text_tokens.size() * 2)));
  if (!a.resume.empty())
    if (std::string id = files::contents_id(a.resume); !id.empty())
      fp.emplace_back("--resume (contents)", id);
  if (p.tokenizer) fp.emplace_back("--tokenizer (contents)", fmt::format("hash {:016x}", p.tokenizer->hash));
}

// One rank of `mpirun -np N ridge train --ddp MODE`. An error before MPI starts goes to main(), which
// takes part in the ranks' agreement with it. The first collective is distributed::agree_to_start: a setup
// error on any rank, or a command line or data that differs from rank 0's, is one line for the job and
// exit status 2 on every rank, before any rank runs a collective that depends on them (the trace merge,
// the checkpoint gathers, the per-step reductions). Later setup errors are agreed on the same way; an
// error during training prints its line and ends every rank (MPI_Abort).
void run_rank(const Args& a) {
  distributed::DdpConfig cfg;
  try {
    cfg.mode = a.ddp.empty() ? distributed::DdpMode::flat : distributed::parse_ddp_mode(a.ddp);
  } catch (const Error& e) {
    fail("--ddp: {}", e.what());
  }
  try {
    cfg.sharding = a.shard.empty() ? distributed::Sharding::none : distributed::parse_sharding(a.shard);
  } catch (const Error& e) {
    fail("--shard-optimizer: {}", e.what());
  }
  cfg.bucket_mb = a.bucket_mb;  // finite and > 0 (its option's transform)
  cfg.expert_parallel = a.expert_parallel;
  bool peer_failed = false;
  {
    distributed::Session session;
    try {
      std::optional<Prepared> p;
      std::optional<model::Trainer> trainer;
      // Every option as typed (a rank may use its own --threads), and the contents read.
      distributed::Fingerprint fingerprint = cli::command_line_fingerprint({"--threads"});
      std::string err;
      try {
        p = prepare(a, session.size());
        add_contents(fingerprint, a, *p);
      } catch (const Error& e) {
        err = e.what();
      }
      distributed::agree_to_start(err, fingerprint);
      try {
        // Recording starts before the trainer allocates, so the snapshot holds parameters,
        // gradients and optimizer state.
        if (!a.memory.empty()) memory::record_history();
        // A sharded run never allocates the whole AdamW state: zero1's trainer holds its shard from
        // the start, cs336's none until DataParallel allocates its shard.
        std::tie(p->t.optimizer_begin, p->t.optimizer_end) = distributed::initial_optimizer_range(
            cfg.sharding, p->c.param_count(), session.size(), session.rank());
        // Expert parallelism: this rank's model holds its block of the experts only.
        if (a.expert_parallel) p->t.experts = {session.rank(), session.size()};
        trainer.emplace(p->c, p->t);
      } catch (const Error& e) {
        err = trainer_error(e, p->c);
      }
      distributed::agree(err);
      // The constructor's checks (RIDGE_TEST_DIE_RANK against the world size) precede its collectives.
      std::optional<distributed::DataParallel> dpo;
      try {
        dpo.emplace(*trainer, cfg);
      } catch (const Error& e) {
        err = e.what();
      }
      distributed::agree(err);
      distributed::DataParallel& dp = *dpo;
      try {
        load_resume(*trainer, a);
        trainer->set_tokenizer(p->tokenizer);
      } catch (const Error& e) {
        err = e.what();
      }
      distributed::agree(err);
      try {
        train_loop(a, *p, *trainer, &dp, session.rank(), session.size());
      } catch (const std::exception& e) {
        distributed::abort_all(e.what());
      }
    } catch (const distributed::PeerFailed&) {
      peer_failed = true;
    } catch (const Error& e) {
      // The rank that reports (agree() throws on rank 0) prints its line before the Session ends:
      // MPI_Finalize lets the other ranks exit, and mpirun ends a run whose rank exited non-zero, which
      // could otherwise kill this rank between its finalize and main() printing the message.
      std::string line = e.what();
      for (char& ch : line)
        if (ch == '\n' || ch == '\r') ch = ' ';
      std::fprintf(stderr, "ridge: %s\n", line.c_str());
      std::fflush(stderr);
      peer_failed = true;
    }
  }
  if (peer_failed) std::exit(2);
}
#endif

void run(const Args& a) {
  // Under mpirun with several ranks `ridge train` is one rank of a data-parallel run.
  if (!a.ddp.empty() || !a.shard.empty() || a.expert_parallel || env::launcher().several_ranks()) {
#ifdef RIDGE_HAVE_DISTRIBUTED
    run_rank(a);
    return;
#else
    fail("{}: this ridge was built without MPI (scripts/setup installs OpenMPI; then rebuild)",
         a.ddp.empty() && a.expert_parallel ? "--expert-parallel" : "--ddp");
#endif
  }
  Prepared p = prepare(a, 1);
  if (!a.memory.empty()) memory::record_history();
  model::Trainer trainer = make_trainer(p.c, p.t);
  load_resume(trainer, a);
  trainer.set_tokenizer(p.tokenizer);
  train_loop(a, p, trainer, nullptr, 0, 1);
}

void setup(CLI::App& root) {
  static Args a;
  auto* cmd =
      root.add_subcommand("train", "train the CS336 Transformer LM (AdamW, mixed precision, checkpoints)");
  // Every number is a plain decimal in range (cli::integer_in, cli::number_in), or refused naming the flag.
  cmd->add_option("--size", a.size, "size preset: " + cli::preset_list())->capture_default_str();
  cmd->add_option("--d-model", a.d_model, "override the preset's d_model")->transform(cli::integer_in(1));
  cmd->add_option("--d-ff", a.d_ff, "override the preset's d_ff")->transform(cli::integer_in(1));
  cmd->add_option("--layers", a.layers, "override the preset's number of layers")
      ->transform(cli::integer_in(1));
  cmd->add_option("--heads", a.heads, "override the preset's number of heads")->transform(cli::integer_in(1));
  cmd->add_option(
         "--kv-heads", a.kv_heads,
         "key/value heads, a divisor of the heads (grouped-query attention; default: as many as heads)")
      ->transform(cli::integer_in(1));
  a.moe.add_to(cmd, "--top-k", true);
  cmd->add_option("--vocab", a.vocab,
                  "vocabulary size (default: the --tokenizer's, 256 with --text alone, else 10000)")
      ->transform(cli::integer_in(1));
  cmd->add_option("--context", a.context, "tokens per sequence")
      ->capture_default_str()
      ->transform(cli::integer_in(1));
  cmd->add_option("--batch", a.batch, "sequences per step")
      ->capture_default_str()
      ->transform(cli::integer_in(1, 1 << 20));
  cmd->add_option("--steps", a.steps, "optimizer steps")
      ->capture_default_str()
      ->transform(cli::integer_in(1));
  cmd->add_option("--data", a.data, "token file (uint16, numpy.memmap's layout; see `ridge data encode`)");
  cmd->add_option("--text", a.text, "a text file, encoded on the fly (bytes, or through --tokenizer)");
  cmd->add_option(
      "--tokenizer", a.tokenizer,
      "a BPE tokenizer directory (`ridge data train-bpe -o DIR`): --text is read through it, --data "
      "was made with it; checkpoints record it (default vocab: its size)");
  cmd->add_option("--precision", a.precision, "fp32, bf16 or fp16 (fp16 with dynamic loss scaling)")
      ->capture_default_str();
  cmd->add_option("--attention", a.attention, "flash or math")->capture_default_str();
  cmd->add_option("--lr", a.lr, "peak learning rate")
      ->capture_default_str()
      ->transform(cli::number_in(0, kInf));
  cmd->add_option("--lr-min", a.lr_min, "final learning rate of the cosine schedule (default lr / 10)")
      ->transform(cli::number_in(0, kInf));
  cmd->add_option("--warmup", a.warmup, "linear warm-up steps (default steps / 10, at most 1000)")
      ->transform(cli::integer_in(0));
  cmd->add_option("--weight-decay", a.weight_decay, "AdamW's decoupled weight decay")
      ->capture_default_str()
      ->transform(cli::number_in(0, kInf));
  cmd->add_option("--beta1", a.beta1, "AdamW beta1, in [0, 1)")
      ->capture_default_str()
      ->transform(cli::number_in(0, 1, false, true));
  cmd->add_option("--beta2", a.beta2, "AdamW beta2, in [0, 1)")
      ->capture_default_str()
      ->transform(cli::number_in(0, 1, false, true));
  cmd->add_option("--eps", a.eps, "AdamW eps")
      ->capture_default_str()
      ->transform(cli::number_in(0, kInf, true));
  cmd->add_option("--clip", a.clip, "global gradient-norm clipping (0: off)")
      ->capture_default_str()
      ->transform(cli::number_in(0, kInf));
  cmd->add_option("--seed", a.seed, "seed of the initialisation and the batch sampling")
      ->capture_default_str()
      ->transform(cli::integer_in(0));
  cmd->add_option("--checkpoint", a.checkpoint, "write a checkpoint (safetensors) here at the end");
  cmd->add_option("--save-every", a.save_every, "also write it every N steps")->transform(cli::integer_in(1));
  cmd->add_option("--resume", a.resume, "resume from a checkpoint (or start from safetensors weights)");
  cmd->add_option("--log-every", a.log_every, "print every N steps")
      ->capture_default_str()
      ->transform(cli::integer_in(1));
  cmd->add_option("--threads", a.threads, "threads (default: OMP_NUM_THREADS or all CPUs)")
      ->transform(cli::integer_in(1, env::kMaxThreads));
  cmd->add_option("--trace", a.trace,
                  "write a Chrome trace of the run (ranges per step, layer and operation)");
  cmd->add_option(
      "--memory", a.memory,
      "write a memory snapshot (see `ridge memory show`); under mpirun one per rank, NAME.rankR.json");
  cmd->add_flag("--json", a.json, "one JSON object per logged step");
  cmd->add_flag("--doc-mask", a.doc_mask,
                "document masking for packed data: attention does not cross an end-of-text token (--eot-id)");
  cmd->add_option("--eot-id", a.eot_id,
                  "the end-of-text token of --doc-mask (default 0: the NUL byte of byte-level data, and "
                  "<|endoftext|> of a BPE vocabulary that numbers its special tokens first, as HF's "
                  "BpeTrainer does; GPT-2's is 50256)")
      // A token id is an int32: 2147483648 under a larger --vocab was narrowed to -2147483648 and then
      // refused as the trainer's eot_id.
      ->transform(cli::integer_in(0, std::numeric_limits<int32_t>::max()));
  cmd->add_option("--ddp", a.ddp,
                  "data parallelism under mpirun: naive, flat, overlap or bucketed (--batch is global)");
  cmd->add_option("--bucket-mb", a.bucket_mb, "bucketed: bucket size in MB")
      ->capture_default_str()
      ->transform(cli::number_in(0, 1e6, true));
  cmd->add_option("--shard-optimizer", a.shard, "optimizer-state sharding across ranks: cs336 or zero1");
  cmd->add_flag("--expert-parallel", a.expert_parallel,
                "MoE under mpirun: shard each MoE layer's experts over the ranks (rank r owns a block of "
                "experts / ranks) and send the tokens to them by all-to-all; dense parameters stay "
                "data-parallel (--ddp)");
  cmd->callback([] { run(a); });
}

}  // namespace

RIDGE_COMMAND(train, setup);
