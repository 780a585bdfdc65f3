// `ridge train`: trains the CS336 Transformer LM on a token file, on text encoded on the fly (bytes), or
// on random tokens (CS336's benchmarking setting), printing step, loss, lr, tokens/s, model FLOPs
// utilisation against the probed peak and the time left; `--json` prints one object per logged step.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <tuple>

#include "cli.hpp"
#include "ridge/core.hpp"
#include "ridge/core/input.hpp"
#include "ridge/model/data.hpp"
#include "ridge/bench/memory.hpp"
#include "ridge/bench/trace.hpp"
#include "ridge/core/files.hpp"
#include "ridge/model/train.hpp"
#include "ridge/roofline.hpp"
#ifdef RIDGE_HAVE_DIST
#include "ridge/dist.hpp"
#include "core/check.hpp"
#include "core/json.hpp"
#include "model/json.hpp"
#endif

namespace {

using namespace ridge;
namespace fs = std::filesystem;

struct Args {
  std::string size = "tiny";
  int64_t d_model = 0, d_ff = 0, layers = -1, heads = 0, vocab = 0;
  int64_t context = 256, batch = 4, steps = 100, log_every = 10, save_every = 0;
  std::string data, text, precision = "fp32", attention = "flash", checkpoint, resume, trace;
  double lr = 1e-3, lr_min = -1, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, clip = 1.0;
  int64_t warmup = -1;
  uint64_t seed = 0;
  int threads = -1;
  bool json = false;
  std::string memory;  // memory snapshot file (per rank under mpirun: NAME.rankR.json)
  std::string ddp, shard;  // data parallelism under mpirun (empty: one process)
  double bucket_mb = 25;
};

uint64_t fnv_hash(const void* data, size_t bytes, uint64_t h = 0xcbf29ce484222325ull) {
  const auto* b = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

// Started by mpirun with more than one rank: then `ridge train` is one rank of a data-parallel run.
bool dist_launched() {
  const auto l = env::launcher();
  return l.launched && l.size > 1;
}

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

// Bytes the run will hold at its peak: parameters, gradients and AdamW state (4 x 4 bytes per
// parameter, plus a 2- or 4-byte operand copy under bf16/fp16) and the saved activations and workspace
// of one step, counted from the same buffers the model allocates.
double estimate_bytes(const model::ModelConfig& c, const model::TrainConfig& t) {
  const double P = static_cast<double>(c.param_count());
  const double N = static_cast<double>(t.batch * t.seq), D = static_cast<double>(c.d_model),
               F = static_cast<double>(c.d_ff), V = static_cast<double>(c.vocab_size),
               L = static_cast<double>(c.num_layers);
  const double op = t.precision == model::Precision::bf16 ? 2 : 4;
  const double per_layer = N * D * 4 * 2 + N * D * op * 6 + N * F * op * 3;
  const double final_ = N * D * (4 + op) + N * V * 4;
  const double work = N * std::max({3 * D, 2 * F}) * 4 * 3 + N * std::max({V, 3 * D, 2 * F}) * op + N * D * op * 4;
  return P * 16 + (t.precision == model::Precision::fp32 ? 0 : P * op) + L * per_layer + final_ + work;
}

std::string duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 60) return fmt::format("{:.0f}s", s);
  if (s < 3600) return fmt::format("{:.0f}m{:02.0f}s", std::floor(s / 60), std::fmod(s, 60));
  return fmt::format("{:.0f}h{:02.0f}m", std::floor(s / 3600), std::fmod(s / 60, 60));
}

// Everything a run needs before its trainer exists; `world` ranks share the global batch.
struct Prepared {
  model::ModelConfig c;
  model::TrainConfig t;  // t.batch: this rank's share
  std::optional<model::TokenFile> file;
  std::vector<uint16_t> text_tokens;
  std::string source;
  uint64_t hash = 0;  // of the configuration and the data, for the ranks to compare
};

Prepared prepare(const Args& a, int world) {
  Prepared p;
  if (a.threads != -1) {
    check(a.threads >= 1, "--threads: {} is not a thread count (expected an integer >= 1)", a.threads);
    set_num_threads(a.threads);
  }
  check(a.data.empty() || a.text.empty(), "--data and --text: give one of them, not both");
  check(a.steps >= 1, "--steps: must be >= 1, got {}", a.steps);
  check(a.log_every >= 1, "--log-every: must be >= 1, got {}", a.log_every);
  check(a.save_every >= 0, "--save-every: must be >= 0, got {}", a.save_every);
  check(a.save_every == 0 || !a.checkpoint.empty(), "--save-every: needs --checkpoint PATH to write to");
  check(a.context >= 1, "--context: must be >= 1, got {}", a.context);
  check(a.batch >= 1, "--batch: must be >= 1, got {}", a.batch);

  // Data first: its vocabulary sets the default vocab_size.
  auto& file = p.file;
  auto& text_tokens = p.text_tokens;
  std::string& source = p.source;
  source = "random tokens";
  int64_t data_vocab = 0;
  if (!a.data.empty()) {
    try {
      file = model::TokenFile::open(a.data);
    } catch (const Error& e) {
      fail("--data: {}", e.what());
    }
    data_vocab = file->max_token() + 1;
    source = fmt::format("{} ({} tokens)", a.data, file->size());
  } else if (!a.text.empty()) {
    text_tokens = model::encode_bytes(read_text(a.text));
    data_vocab = 256;
    source = fmt::format("{} ({} bytes, byte-level tokens)", a.text, text_tokens.size());
  }

  const int64_t vocab = a.vocab > 0 ? a.vocab : (data_vocab > 0 ? (a.text.empty() ? 10000 : 256) : 10000);
  check(a.vocab >= 0, "--vocab: must be > 0, got {}", a.vocab);
  check(vocab >= data_vocab, "--vocab: {} is smaller than the data's largest token id + 1 ({})", vocab, data_vocab);
  model::ModelConfig& c = p.c;
  try {
    c = model::preset(a.size, vocab, a.context);
  } catch (const Error& e) {
    fail("--size: {}", e.what());
  }
  if (a.d_model > 0) c.d_model = a.d_model;
  if (a.d_ff > 0) c.d_ff = a.d_ff;
  if (a.layers >= 0) c.num_layers = a.layers;
  if (a.heads > 0) c.num_heads = a.heads;
  try {
    c.validate();
  } catch (const Error& e) {
    fail("model: {} (from --size and --d-model/--d-ff/--layers/--heads)", e.what());
  }

  model::TrainConfig& t = p.t;
  check(a.batch % world == 0, "--batch: the global batch {} does not divide among {} ranks (give a multiple of {})",
        a.batch, world, world);
  t.batch = a.batch / world;
  t.seq = a.context;
  t.precision = model::parse_precision(a.precision);
  t.attention = model::parse_attention_path(a.attention);
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
  t.validate();

  const int64_t n_data = file ? file->size() : static_cast<int64_t>(text_tokens.size());
  if (file || !text_tokens.empty())
    check(n_data >= a.context + 1, "--context: {} needs at least {} tokens of data; {} has {}", a.context,
          a.context + 1, file ? "--data" : "--text", n_data);

  const double need = estimate_bytes(c, t), avail = static_cast<double>(memory::available_bytes());
  check(avail <= 0 || need < 0.9 * avail,
        "--size/--batch/--context: this run needs about {} but {} is available; try a smaller size, batch or "
        "context", units::format_bytes(need), units::format_bytes(avail));

  // Output files are checked before the run, so a bad path fails in a second, not after training.
  if (!a.trace.empty()) files::check_writable(a.trace, "--trace");
  if (!a.memory.empty()) {
    files::check_writable(a.memory, "--memory");
    check(a.trace.empty() || !files::same_file(a.trace, a.memory),
          "--trace and --memory: both name '{}'; give each its own file", a.memory);
    check(a.memory != a.checkpoint && a.memory != a.resume && a.memory != a.data && a.memory != a.text,
          "--memory: '{}' is also an input or the checkpoint; choose another path", a.memory);
  }
  if (!a.checkpoint.empty()) {
    const fs::path cp(a.checkpoint);
    const fs::path dir = cp.has_parent_path() ? cp.parent_path() : fs::path(".");
    std::error_code ec;
    check(fs::is_directory(dir, ec), "--checkpoint: the folder '{}' does not exist", dir.string());
    check(!fs::is_directory(cp, ec), "--checkpoint: '{}' is a folder; give a file path", a.checkpoint);
  }

  const std::string cfg = nlohmann::json(c).dump() +
                          fmt::format("|{} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}|{}", a.batch, t.seq,
                                      a.precision, a.attention, a.lr, t.lr_min, t.warmup_steps, a.steps, a.beta1,
                                      a.beta2, a.eps, a.weight_decay, a.clip, a.seed, a.ddp, a.shard, a.bucket_mb,
                                      a.resume, world);
  p.hash = fnv_hash(cfg.data(), cfg.size());
  if (file) p.hash = fnv_hash(file->data(), static_cast<size_t>(file->size()) * 2, p.hash);
  if (!text_tokens.empty()) p.hash = fnv_hash(text_tokens.data(), text_tokens.size() * 2, p.hash);
  return p;
}

void load_resume(model::Trainer& trainer, const Args& a) {
  if (a.resume.empty()) return;
  try {
    // A model field or the precision that differs from the checkpoint's names the flag that sets it;
    // rope_theta has none, so it keeps the checkpoint's field name after --resume.
    cli::with_flags({{"vocab_size", "--vocab"}, {"context_length", "--context"}, {"d_model", "--d-model"},
                     {"num_layers", "--layers"}, {"num_heads", "--heads"}, {"d_ff", "--d-ff"},
                     {"precision", "--precision"}},
                    [&] { trainer.load(a.resume); });
  } catch (const Error& e) {
    if (e.argument().rfind("--", 0) == 0) throw;
    fail("--resume: {}", e.what());
  }
}

#ifdef RIDGE_HAVE_DIST
using DataParallelPtr = dist::DataParallel*;
#else
using DataParallelPtr = void*;
#endif

// The training loop. Under data parallelism every rank draws the same global batch from the same
// generator (so the data equal a single process's) and trains on its slice; rank 0 prints and saves.
void train_loop(const Args& a, const Prepared& p, model::Trainer& trainer, DataParallelPtr dp, int rank, int world) {
  const auto& c = p.c;
  const auto& t = p.t;
  const auto& file = p.file;
  const auto& text_tokens = p.text_tokens;
  const bool print = rank == 0;
  (void)dp;  // used only when built with MPI
  if (!a.trace.empty()) {
    check(a.trace != a.checkpoint && a.trace != a.resume && a.trace != a.data && a.trace != a.text,
          "--trace: '{}' is also an input or the checkpoint; choose another path", a.trace);
    trace::set_thread_name(fmt::format("rank {}", rank));
    trace::start_recording();
  }

  // The peak model FLOPs utilisation is held against: the probed peak of the dtype the GEMMs run in.
  double peak = 0;
  if (roofline::has_probe_result()) {
    try {
      peak = roofline::load_chip("this").peak(t.precision == model::Precision::bf16 ? DType::bf16 : DType::f32);
    } catch (const Error&) {
      peak = 0;
    }
  }
  const int64_t global_batch = t.batch * world;
  const double flops_step = model::training_flops(c, global_batch, t.seq);
  const double tokens_step = static_cast<double>(global_batch * t.seq);
  if (!a.json && print) {
    fmt::print("model     {}: d_model {}, {} layers, {} heads, d_ff {}, vocab {}, {:.2f}M parameters\n", a.size,
               c.d_model, c.num_layers, c.num_heads, c.d_ff, c.vocab_size, static_cast<double>(c.param_count()) / 1e6);
    fmt::print("training  {} steps of {} x {} tokens, {} precision, {} attention, {} threads, lr {:.3g} -> {:.3g} (warm-up "
               "{}), AdamW wd {:.3g}, clip {:.3g}\n",
               a.steps, global_batch, t.seq, model::precision_name(t.precision), model::attention_path_name(t.attention),
               get_num_threads(), t.lr_max, t.lr_min, t.warmup_steps, t.adamw.weight_decay, t.max_grad_norm);
    fmt::print("data      {}\n", p.source);
#ifdef RIDGE_HAVE_DIST
    if (dp)
      fmt::print("parallel  {} ranks, {} slice each, --ddp {}{} ({} reductions of gradients per step), optimizer sharding "
                 "{}\n",
                 world, t.batch, dist::ddp_mode_name(dp->config().mode),
                 dp->config().mode == dist::DdpMode::bucketed ? fmt::format(" --bucket-mb {}", a.bucket_mb) : "",
                 dp->buckets().size(),
                 dist::sharding_name(dp->config().sharding));
#endif
    fmt::print("mfu       against {}\n", peak > 0 ? fmt::format("the probed {} peak, {:.1f} GFLOP/s",
                                                               t.precision == model::Precision::bf16 ? "bf16" : "fp32",
                                                               peak / 1e9)
                                                    : std::string("nothing: run `ridge probe` once to measure the peak"));
    if (!a.resume.empty()) fmt::print("resumed   {} at step {}\n", a.resume, trainer.steps());
    fmt::print("{:>7}  {:>8}  {:>9}  {:>9}  {:>9}  {:>6}  {:>8}\n", "step", "loss", "lr", "grad norm", "tokens/s",
               "mfu", "left");
  }

  model::Rng& rng = trainer.rng();
  std::vector<int32_t> x(static_cast<size_t>(global_batch * t.seq)), y(x.size());
  const size_t slice = static_cast<size_t>(rank * t.batch * t.seq);
  std::vector<uint16_t> random_stream;
  const auto start = std::chrono::steady_clock::now();
  auto window_start = start;
  int64_t window_steps = 0;
  double window_loss = 0;
  int64_t window_loss_n = 0;
  const int64_t first = trainer.steps();
  for (int64_t s = first; s < a.steps; ++s) {
    if (file) {
      check(file->max_token() < c.vocab_size, "--data: holds token id {}, beyond vocab {}", file->max_token(),
            c.vocab_size);
      model::sample_batch(file->data(), file->size(), global_batch, t.seq, rng, x.data(), y.data());
    } else if (!text_tokens.empty()) {
      model::sample_batch(text_tokens.data(), static_cast<int64_t>(text_tokens.size()), global_batch, t.seq, rng,
                          x.data(), y.data());
    } else {
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.vocab_size)));
        y[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.vocab_size)));
      }
    }
    model::StepResult r = trainer.step(x.data() + slice, y.data() + slice);
#ifdef RIDGE_HAVE_DIST
    if (dp) r.loss = dist::mean(r.loss);  // each rank's mean over an equal share of the tokens
#endif
    ++window_steps;
    if (std::isfinite(r.loss)) {
      window_loss += r.loss;
      ++window_loss_n;
    }
    const bool last = s + 1 == a.steps;
    if (print && ((s + 1) % a.log_every == 0 || last || s == first)) {
      const auto now = std::chrono::steady_clock::now();
      const double dt = std::chrono::duration<double>(now - window_start).count();
      const double per_step = dt / static_cast<double>(window_steps);
      const double tok_s = tokens_step / per_step;
      const double mfu = peak > 0 ? flops_step / per_step / peak : NAN;
      const double left = per_step * static_cast<double>(a.steps - s - 1);
      const double mean_loss = window_loss_n ? window_loss / static_cast<double>(window_loss_n) : NAN;
      if (a.json) {
        nlohmann::json j = {{"step", s + 1},          {"loss", r.loss},   {"mean_loss", mean_loss},
                            {"lr", r.lr},             {"grad_norm", r.grad_norm},
                            {"tokens_per_s", tok_s},  {"step_ms", per_step * 1e3},
                            {"mfu", peak > 0 ? nlohmann::json(mfu) : nlohmann::json(nullptr)},
                            {"skipped", r.skipped},   {"loss_scale", r.loss_scale}};
        std::cout << j.dump() << "\n" << std::flush;
      } else {
        fmt::print("{:>7}  {:>8.4f}  {:>9.2e}  {:>9.3f}  {:>9.0f}  {:>6}  {:>8}{}\n", s + 1, r.loss, r.lr, r.grad_norm,
                   tok_s, peak > 0 ? fmt::format("{:.1f}%", 100 * mfu) : std::string("n/a"), duration(left),
                   r.skipped ? fmt::format("  (skipped: non-finite gradient; loss scale now {})", trainer.scaler().scale())
                             : std::string());
        std::fflush(stdout);
      }
      window_start = std::chrono::steady_clock::now();
      window_steps = 0;
      window_loss = 0;
      window_loss_n = 0;
    }
    if (!a.checkpoint.empty() && ((a.save_every > 0 && (s + 1) % a.save_every == 0) || last)) {
#ifdef RIDGE_HAVE_DIST
      if (dp)
        dp->save(a.checkpoint);
      else
#endif
        trainer.save(a.checkpoint);
    }
  }
  if (!a.trace.empty()) {
    // Under data parallelism rank 0 writes one trace with a process row per rank.
    std::string what = a.trace;
#ifdef RIDGE_HAVE_DIST
    if (dp && world > 1) {
      dist::write_merged_trace(a.trace);
      what = fmt::format("{} ({} ranks, one process row each)", a.trace, world);
    } else
#endif
      trace::write(a.trace);
    trace::stop_recording();
    if (!a.json && print)
      fmt::print("trace     {} events{} -> {} (open in https://ui.perfetto.dev)\n", trace::event_count(),
                 world > 1 ? " on rank 0" : "", what);
  }
  if (!a.memory.empty()) {
    const std::string path = per_rank_path(a.memory, rank, world);
    memory::dump_snapshot(path);
    memory::stop_recording();
    if (!a.json && print)
      fmt::print("memory    {} (see `ridge memory show`){}\n", path,
                 world > 1 ? fmt::format("; every rank writes its own, .rank0 .. .rank{}", world - 1) : "");
  }
  if (!a.json && print) {
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("done      {} steps in {}{}\n", a.steps - first, duration(total),
               a.checkpoint.empty() ? std::string() : fmt::format("; checkpoint {}", a.checkpoint));
  }
}

#ifdef RIDGE_HAVE_DIST
// One rank of `mpirun -np N ridge train --ddp MODE`. Setup errors are agreed on (the failing rank's line
// is printed by rank 0, every rank exits 2); the configuration and data are compared across ranks; an
// error during training prints its line and ends every rank (MPI_Abort).
void run_rank(const Args& a) {
  dist::DdpConfig cfg;
  try {
    cfg.mode = a.ddp.empty() ? dist::DdpMode::flat : dist::parse_ddp_mode(a.ddp);
  } catch (const Error& e) {
    fail("--ddp: {}", e.what());
  }
  try {
    cfg.sharding = a.shard.empty() ? dist::Sharding::none : dist::parse_sharding(a.shard);
  } catch (const Error& e) {
    fail("--shard-optimizer: {}", e.what());
  }
  cfg.bucket_mb = a.bucket_mb;
  check(std::isfinite(a.bucket_mb) && a.bucket_mb > 0, "--bucket-mb: must be > 0, got {}", a.bucket_mb);
  bool peer_failed = false;
  {
    dist::Session session;
    try {
      std::optional<Prepared> p;
      std::optional<model::Trainer> trainer;
      std::string err;
      try {
        p = prepare(a, session.size());
        // Recording starts before the trainer allocates, so the snapshot holds parameters,
        // gradients and optimizer state.
        if (!a.memory.empty()) memory::record_history();
        // A sharded run never allocates the whole AdamW state: zero1's trainer holds its shard from
        // the start, cs336's none until DataParallel allocates its shard.
        std::tie(p->t.optimizer_begin, p->t.optimizer_end) =
            dist::initial_optimizer_range(cfg.sharding, p->c.param_count(), session.size(), session.rank());
        trainer.emplace(p->c, p->t);
      } catch (const Error& e) {
        err = e.what();
      }
      dist::agree(err);
      dist::check_same(p->hash, "configuration (arguments, model size, data)");
      // The constructor's checks (RIDGE_TEST_DIE_RANK against the world size) precede its collectives.
      std::optional<dist::DataParallel> dpo;
      try {
        dpo.emplace(*trainer, cfg);
      } catch (const Error& e) {
        err = e.what();
      }
      dist::agree(err);
      dist::DataParallel& dp = *dpo;
      try {
        load_resume(*trainer, a);
      } catch (const Error& e) {
        err = e.what();
      }
      dist::agree(err);
      try {
        train_loop(a, *p, *trainer, &dp, session.rank(), session.size());
      } catch (const std::exception& e) {
        dist::abort_all(e.what());
      }
    } catch (const dist::PeerFailed&) {
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
  if (!a.ddp.empty() || !a.shard.empty() || dist_launched()) {
#ifdef RIDGE_HAVE_DIST
    run_rank(a);
    return;
#else
    fail("--ddp: this ridge was built without MPI (scripts/setup installs OpenMPI; then rebuild)");
#endif
  }
  Prepared p = prepare(a, 1);
  if (!a.memory.empty()) memory::record_history();
  model::Trainer trainer(p.c, p.t);
  load_resume(trainer, a);
  train_loop(a, p, trainer, nullptr, 0, 1);
}

void setup(CLI::App& root) {
  static Args a;
  auto* cmd = root.add_subcommand("train", "train the CS336 Transformer LM (AdamW, mixed precision, checkpoints)");
  cmd->add_option("--size", a.size, "size preset: tiny, small, medium, large, xl, 2.7B")->capture_default_str();
  cmd->add_option("--d-model", a.d_model, "override the preset's d_model");
  cmd->add_option("--d-ff", a.d_ff, "override the preset's d_ff");
  cmd->add_option("--layers", a.layers, "override the preset's number of layers");
  cmd->add_option("--heads", a.heads, "override the preset's number of heads");
  cmd->add_option("--vocab", a.vocab, "vocabulary size (default: 256 with --text, else 10000)");
  cmd->add_option("--context", a.context, "tokens per sequence")->capture_default_str();
  cmd->add_option("--batch", a.batch, "sequences per step")->capture_default_str();
  cmd->add_option("--steps", a.steps, "optimizer steps")->capture_default_str();
  cmd->add_option("--data", a.data, "token file (uint16, numpy.memmap's layout; see `ridge data encode`)");
  cmd->add_option("--text", a.text, "a text file, encoded byte by byte on the fly");
  cmd->add_option("--precision", a.precision, "fp32, bf16 or fp16 (fp16 with dynamic loss scaling)")
      ->capture_default_str();
  cmd->add_option("--attention", a.attention, "flash or math")->capture_default_str();
  cmd->add_option("--lr", a.lr, "peak learning rate")->capture_default_str();
  cmd->add_option("--lr-min", a.lr_min, "final learning rate of the cosine schedule (default lr / 10)");
  cmd->add_option("--warmup", a.warmup, "linear warm-up steps (default steps / 10)");
  cmd->add_option("--weight-decay", a.weight_decay, "AdamW's decoupled weight decay")->capture_default_str();
  cmd->add_option("--beta1", a.beta1, "AdamW beta1")->capture_default_str();
  cmd->add_option("--beta2", a.beta2, "AdamW beta2")->capture_default_str();
  cmd->add_option("--eps", a.eps, "AdamW eps")->capture_default_str();
  cmd->add_option("--clip", a.clip, "global gradient-norm clipping (0: off)")->capture_default_str();
  cmd->add_option("--seed", a.seed, "seed of the initialisation and the batch sampling")->capture_default_str();
  cmd->add_option("--checkpoint", a.checkpoint, "write a checkpoint (safetensors) here at the end");
  cmd->add_option("--save-every", a.save_every, "also write it every N steps");
  cmd->add_option("--resume", a.resume, "resume from a checkpoint (or start from safetensors weights)");
  cmd->add_option("--log-every", a.log_every, "print every N steps")->capture_default_str();
  cmd->add_option("--threads", a.threads, "threads (default: OMP_NUM_THREADS or all CPUs)");
  cmd->add_option("--trace", a.trace, "write a Chrome trace of the run (ranges per step, layer and operation)");
  cmd->add_option("--memory", a.memory,
                  "write a memory snapshot (see `ridge memory show`); under mpirun one per rank, NAME.rankR.json");
  cmd->add_flag("--json", a.json, "one JSON object per logged step");
  cmd->add_option("--ddp", a.ddp, "data parallelism under mpirun: naive, flat, overlap or bucketed (--batch is global)");
  cmd->add_option("--bucket-mb", a.bucket_mb, "bucketed: bucket size in MB")->capture_default_str();
  cmd->add_option("--shard-optimizer", a.shard, "optimizer-state sharding across ranks: cs336 or zero1");
  cmd->callback([] { run(a); });
}

}  // namespace

RIDGE_COMMAND(train, setup);
