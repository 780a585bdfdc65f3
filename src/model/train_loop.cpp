// The training loop (train(), ridge/model/train.hpp): what `ridge train` prints and Python's
// TransformerLM.train reports come from here, so the two train alike step for step.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "core/check.hpp"
#include "ridge/core/files.hpp"
#include "ridge/model/train.hpp"

namespace ridge::model {

void StepHooks::save_checkpoint(const Trainer& trainer, const std::string& path) {
  trainer.save(path);
}

void LoopConfig::validate() const {
  check_arg(steps >= 1, "steps", "must be >= 1, got {}", steps);
  check_arg(log_every >= 1, "log_every", "must be >= 1, got {}", log_every);
  check_arg(save_every >= 0, "save_every", "must be >= 0 (0: only at the end), got {}", save_every);
  check_arg(save_every == 0 || !checkpoint.empty(), "save_every", "needs a checkpoint path to write to");
  check_arg(std::isfinite(peak_flops) && peak_flops >= 0, "peak_flops",
            "must be finite and >= 0 (0: no model FLOPs utilisation), got {}", peak_flops);
}

namespace {

// The data against the model, before the first step: every token an id of the vocabulary, and rows
// of seq + 1 tokens to draw.
void check_data(const text::BatchSource& data, const ModelConfig& c, int64_t seq) {
  if (!data.file && data.tokens.empty()) {
    check_arg(data.vocab >= 1 && data.vocab <= c.vocab_size, "data",
              "random tokens below {}: it must be in 1..{} (the model's vocab_size)", data.vocab,
              c.vocab_size);
    return;
  }
  const int64_t n = data.file ? data.file->size() : static_cast<int64_t>(data.tokens.size());
  const int64_t largest = data.file ? data.file->max_token() : *std::ranges::max_element(data.tokens);
  check_arg(largest < c.vocab_size, "data", "holds the token id {}, beyond the model's vocab_size {}",
            largest, c.vocab_size);
  check_arg(n >= seq + 1, "data", "has {} tokens; a row of seq {} needs at least {}", n, seq, seq + 1);
}

}  // namespace

TrainSummary train(Trainer& trainer, const text::BatchSource& data, const LoopConfig& loop) {
  loop.validate();
  const TrainConfig& t = trainer.config();
  const ModelConfig& c = trainer.model().config();
  check_data(data, c, t.seq);
  // Before the first step, not after the last: a run is not lost to a path it could never write.
  if (!loop.checkpoint.empty()) files::check_writable(loop.checkpoint, "checkpoint");
  StepHooks single;  // a lone process: its own rank 0 of 1
  StepHooks& hooks = trainer.hooks() ? *trainer.hooks() : single;
  const int rank = hooks.rank(), world = hooks.world();
  const int64_t first = trainer.steps();
  check_arg(loop.steps > first, "steps",
            "{} in all, but the trainer has taken {} already (the count includes a resumed run's); give more",
            loop.steps, first);

  const int64_t global_batch = t.batch * world;
  // A document-masked step attends to fewer scores than plain causal rows: its FLOPs count only those
  // (the share is the global batch's, which every worker draws alike).
  const double flops_causal = training_flops(c, global_batch, t.seq);
  auto flops_of_step = [&](const int32_t* tokens) {
    if (t.eot_id < 0) return flops_causal;
    return training_flops(c, global_batch, t.seq,
                          document_attention_share(tokens, global_batch, t.seq, t.eot_id));
  };
  const double tokens_step = static_cast<double>(global_batch * t.seq);

  std::vector<int32_t> x(static_cast<size_t>(global_batch * t.seq)), y(x.size());
  const size_t slice = static_cast<size_t>(rank * t.batch * t.seq);
  TrainSummary summary;
  summary.first_step = first;
  auto window_start = std::chrono::steady_clock::now();
  int64_t window_steps = 0;
  double window_flops = 0, window_loss = 0;
  int64_t window_loss_n = 0;
  for (int64_t s = first; s < loop.steps; ++s) {
    try {
      data.draw(global_batch, t.seq, trainer.rng(), x.data(), y.data());
    } catch (const Error& e) {
      throw Error("data", e.what());  // a token file that changed under the run
    }
    StepResult r = trainer.step(x.data() + slice, y.data() + slice);
    r.loss = hooks.mean_loss(r.loss);
    ++summary.steps;
    ++window_steps;
    window_flops += flops_of_step(x.data());
    if (std::isfinite(r.loss)) {
      window_loss += r.loss;
      ++window_loss_n;
    }
    bool last = s + 1 == loop.steps;
    if ((s + 1) % loop.log_every == 0 || last || s == first) {
      const auto now = std::chrono::steady_clock::now();
      const double dt = std::chrono::duration<double>(now - window_start).count();
      const double per_step = dt / static_cast<double>(window_steps);
      StepLog& log = summary.last;
      log.step = s + 1;
      log.result = r;
      log.mean_loss = window_loss_n ? window_loss / static_cast<double>(window_loss_n) : NAN;
      log.tokens_per_s = tokens_step / per_step;
      log.step_ms = per_step * 1e3;
      log.mfu = loop.peak_flops > 0 ? window_flops / dt / loop.peak_flops : NAN;
      log.seconds_left = per_step * static_cast<double>(loop.steps - s - 1);
      if (loop.on_log && loop.on_log(log) && !last) last = summary.stopped = true;
      window_start = std::chrono::steady_clock::now();
      window_steps = 0;
      window_flops = window_loss = 0;
      window_loss_n = 0;
    }
    if (!loop.checkpoint.empty() && ((loop.save_every > 0 && (s + 1) % loop.save_every == 0) || last)) {
      try {
        hooks.save_checkpoint(trainer, loop.checkpoint);
      } catch (const Error& e) {
        throw Error("checkpoint", e.what());
      }
    }
    if (summary.stopped) break;
  }
  return summary;
}

}  // namespace ridge::model
