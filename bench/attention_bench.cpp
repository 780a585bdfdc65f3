// `ridge bench attention`: FlashAttention-2 forward, backward and both, against peers measured in
// the same run: the math path (materialised S and P; OpenBLAS sgemm for its matmuls when the build
// has OpenBLAS, else ridge's own fp32 math path), PyTorch's CPU scaled_dot_product_attention (its
// flash kernel) and PyTorch's math backend (tools/torch_attention_peer.py in a subprocess, when
// torch is installed).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "compare.hpp"
#include "ridge/attention.hpp"
#include "ridge/bench.hpp"
#include "ridge/build_paths.h"  // RIDGE_SOURCE_DIR, RIDGE_BINARY (generated)
#include "ridge/core.hpp"
#include "report/report.hpp"
#include "ridge/roofline.hpp"
#include "core/check.hpp"
#include "bench/registry.hpp"
#include "core/json.hpp"

#ifdef RIDGE_HAVE_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif

namespace ridge {
namespace {

using nlohmann::json;

struct AttnCase {
  int64_t batch = 1, heads = 1, kv_heads = 1, seq = 1024, d = 64;
  bool causal = false;
  DType dtype = DType::f32;
  std::vector<std::string> passes = {"forward", "backward"};
  bool headline = false;
};

std::string g_sweep;      // pytorch_attention | flash_sweep | leaderboard | all
bool g_no_torch = false;  // skip the PyTorch peer
bool g_no_math = false;   // skip the math-path peer
std::string g_python = "python3";

std::string dtype_key(DType t) {
  return t == DType::bf16 ? "bf16" : "fp32";
}

// The sweeps of bench/shapes/attention-shapes.json (a copy of the CS336 assignment's shapes).
json load_shapes() {
  return input::read_json_file(report::shapes_location() + "/attention-shapes.json", "shapes", 16 << 20);
}

std::vector<AttnCase> quick_cases() {
  std::vector<AttnCase> v;
  v.push_back({1, 1, 1, 4096, 64, false, DType::f32});
  v.push_back({1, 1, 1, 4096, 64, true, DType::f32});
  v.push_back({1, 1, 1, 2048, 128, false, DType::f32});
  v.push_back({1, 1, 1, 2048, 128, false, DType::bf16});
  AttnCase lead{1, 16, 16, 16384, 64, true, DType::bf16, {"forward+backward"}, true};
  v.push_back(lead);
  return v;
}

std::vector<AttnCase> sweep_cases(const std::string& which) {
  const json s = load_shapes();
  std::vector<AttnCase> v;
  auto want = [&](const char* name) { return which == "all" || which == name; };
  if (want("pytorch_attention")) {
    const json& p = s.at("pytorch_attention");
    for (int64_t d : p.at("head_dim").get<std::vector<int64_t>>())
      for (int64_t n : p.at("seq").get<std::vector<int64_t>>())
        v.push_back({p.at("batch").get<int64_t>(), p.at("heads").get<int64_t>(), p.at("heads").get<int64_t>(),
                     n, d, p.at("causal").get<bool>(), DType::f32});
  }
  if (want("flash_sweep")) {
    const json& p = s.at("flash_sweep");
    for (const auto& dt : p.at("dtype").get<std::vector<std::string>>())
      for (int64_t d : p.at("head_dim").get<std::vector<int64_t>>())
        for (int64_t n : p.at("seq").get<std::vector<int64_t>>())
          v.push_back({p.at("batch").get<int64_t>(), p.at("heads").get<int64_t>(),
                       p.at("heads").get<int64_t>(), n, d, p.at("causal").get<bool>(), parse_dtype(dt)});
  }
  if (want("leaderboard")) {
    const json& p = s.at("leaderboard");
    AttnCase c{p.at("batch").get<int64_t>(),
               p.at("heads").get<int64_t>(),
               p.at("heads").get<int64_t>(),
               p.at("seq").get<int64_t>(),
               p.at("head_dim").get<int64_t>(),
               p.at("causal").get<bool>(),
               parse_dtype(p.at("dtype").get<std::string>()),
               {p.at("pass").get<std::string>()},
               true};
    v.push_back(c);
  }
  check(!v.empty(),
        "bench attention: --sweep {} (expected pytorch_attention, flash_sweep, leaderboard, masks or all)",
        which);
  return v;
}

// A dtype given as --set dtype=X: the error names the axis the user typed.
DType dtype_axis(const std::string& v) {
  try {
    return parse_dtype(v);
  } catch (const Error& e) {
    throw e.renamed("--set dtype");
  }
}

// Cases from --set axes: batch, heads, kv_heads, seq, head_dim, causal, dtype, pass.
std::vector<AttnCase> grid_cases(const bench::Grid& g) {
  g.check_keys({"batch", "heads", "kv_heads", "seq", "head_dim", "causal", "dtype", "pass"}, "attention");
  std::vector<AttnCase> v;
  std::vector<std::string> passes = g.values("pass", {"forward", "backward"});
  for (const auto& p : passes)
    check(p == "forward" || p == "backward" || p == "forward+backward",
          "bench attention: pass {} (expected forward, backward or forward+backward)", p);
  for (const auto& dt : g.values("dtype", {"fp32"}))
    for (int64_t b : g.counts("batch", {1}))
      for (int64_t h : g.counts("heads", {1}))
        for (int64_t n : g.counts("seq", {4096}))
          for (int64_t d : g.counts("head_dim", {64}))
            for (const auto& cs : g.values("causal", {"false"})) {
              check(cs == "true" || cs == "false" || cs == "1" || cs == "0",
                    "bench attention: causal {} (expected true or false)", cs);
              check(d >= 16 && d <= 256,
                    "--set head_dim: {} is not accepted (FlashAttention takes 16 .. 256)", d);
              const DType t = dtype_axis(dt);
              check(t == DType::f32 || t == DType::bf16, "bench attention: dtype {} (expected fp32 or bf16)",
                    dt);
              for (int64_t kvh : g.counts("kv_heads", {h})) {
                AttnCase c{b, h, kvh, n, d, cs == "true" || cs == "1", t, passes};
                v.push_back(c);
              }
            }
  return v;
}

template <typename T>
void fill_random(Buffer<T>& buf, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& x : buf) {
    if constexpr (std::is_same_v<T, bf16>)
      x = to_bf16(dist(rng));
    else
      x = dist(rng);
  }
}

// ---------------------------------------------------------------- the math path peer
// Materialises S = Q K^T for every (batch, head) at once, the way an unfused framework does
// ([b, h, n_q, n_k] tensors), then softmax, then P V; backward materialises dP too.
struct MathPath {
  int64_t b, h, kvh, nq, nk, d;
  bool causal;
  float scale;
  Buffer<float> P, dP, D;
  MathPath(const AttnCase& c, bool backward)
      : b(c.batch),
        h(c.heads),
        kvh(c.kv_heads),
        nq(c.seq),
        nk(c.seq),
        d(c.d),
        causal(c.causal),
        scale(static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d)))),
        P(static_cast<size_t>(b * h * nq * nk), "math_path.P"),
        dP(backward ? static_cast<size_t>(b * h * nq * nk) : 0, "math_path.dP"),
        D(static_cast<size_t>(b * h * nq), "math_path.D") {}

  static double bytes_needed(const AttnCase& c, bool backward) {
    return (backward ? 2.0 : 1.0) * 4.0 * static_cast<double>(c.batch * c.heads) *
           static_cast<double>(c.seq) * static_cast<double>(c.seq);
  }

  // C (m x n, ldc) = alpha * op(A) op(B) + beta * C, row-major.
  static void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
#ifdef RIDGE_HAVE_OPENBLAS
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, A,
                static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
#else
#pragma omp parallel for num_threads(get_num_threads())
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float s = 0;
        for (int64_t x = 0; x < k; ++x)
          s += (ta ? A[x * lda + i] : A[i * lda + x]) * (tb ? B[j * ldb + x] : B[x * ldb + j]);
        C[i * ldc + j] = alpha * s + beta * C[i * ldc + j];
      }
#endif
  }

  void softmax_rows() {
    const int64_t off = nk - nq;
#pragma omp parallel for num_threads(get_num_threads()) schedule(static)
    for (int64_t r = 0; r < b * h * nq; ++r) {
      const int64_t i = r % nq;
      float* row = P.data() + r * nk;
      const int64_t vis = causal ? std::clamp<int64_t>(i + off + 1, 0, nk) : nk;
      float mx = -INFINITY;
      for (int64_t j = 0; j < vis; ++j) mx = std::max(mx, row[j]);
      float sum = 0;
      for (int64_t j = 0; j < vis; ++j) {
        row[j] = std::exp((row[j] - mx) * scale);
        sum += row[j];
      }
      const float inv = sum > 0 ? 1.0f / sum : 0.0f;
      for (int64_t j = 0; j < vis; ++j) row[j] *= inv;
      for (int64_t j = vis; j < nk; ++j) row[j] = 0;
    }
  }

  // q, o: [b, h, n, d]; k, v: [b, kvh, n, d], dense fp32.
  void forward(const float* q, const float* k, const float* v, float* o) {
    const int64_t g = h / kvh;
    for (int64_t x = 0; x < b * h; ++x) {
      const int64_t kx = (x / h) * kvh + (x % h) / g;
      gemm(false, true, nq, nk, d, 1.0f, q + x * nq * d, d, k + kx * nk * d, d, 0.0f, P.data() + x * nq * nk,
           nk);
    }
    softmax_rows();
    for (int64_t x = 0; x < b * h; ++x) {
      const int64_t kx = (x / h) * kvh + (x % h) / g;
      gemm(false, false, nq, d, nk, 1.0f, P.data() + x * nq * nk, nk, v + kx * nk * d, d, 0.0f,
           o + x * nq * d, d);
    }
  }

  void backward(const float* q, const float* k, const float* v, const float* d_o, float* dq, float* dk,
                float* dv) {
    const int64_t g = h / kvh;
    // Recompute P (what the framework would have kept from forward costs the same matmul).
    for (int64_t x = 0; x < b * h; ++x) {
      const int64_t kx = (x / h) * kvh + (x % h) / g;
      gemm(false, true, nq, nk, d, 1.0f, q + x * nq * d, d, k + kx * nk * d, d, 0.0f, P.data() + x * nq * nk,
           nk);
    }
    softmax_rows();
    for (int64_t x = 0; x < b * kvh * nk * d; ++x) dk[x] = dv[x] = 0.0f;
    for (int64_t x = 0; x < b * h; ++x) {
      const int64_t kx = (x / h) * kvh + (x % h) / g;
      // dV += P^T dO; dP = dO V^T
      gemm(true, false, nk, d, nq, 1.0f, P.data() + x * nq * nk, nk, d_o + x * nq * d, d, 1.0f,
           dv + kx * nk * d, d);
      gemm(false, true, nq, nk, d, 1.0f, d_o + x * nq * d, d, v + kx * nk * d, d, 0.0f,
           dP.data() + x * nq * nk, nk);
    }
#pragma omp parallel for num_threads(get_num_threads()) schedule(static)
    for (int64_t r = 0; r < b * h * nq; ++r) {
      float* pr = P.data() + r * nk;
      float* dr = dP.data() + r * nk;
      float s = 0;
      for (int64_t j = 0; j < nk; ++j) s += pr[j] * dr[j];
      for (int64_t j = 0; j < nk; ++j) dr[j] = pr[j] * (dr[j] - s);
    }
    for (int64_t x = 0; x < b * h; ++x) {
      const int64_t kx = (x / h) * kvh + (x % h) / g;
      gemm(false, false, nq, d, nk, scale, dP.data() + x * nq * nk, nk, k + kx * nk * d, d, 0.0f,
           dq + x * nq * d, d);
      gemm(true, false, nk, d, nq, scale, dP.data() + x * nq * nk, nk, q + x * nq * d, d, 1.0f,
           dk + kx * nk * d, d);
    }
  }
};

// ---------------------------------------------------------------- the PyTorch peer
// {pass: median_ms} from tools/torch_attention_peer.py, or an explanation in `why`.
// backend "flash" is F.scaled_dot_product_attention (PyTorch's CPU flash kernel), "math" its
// materialised math backend.
std::map<std::string, double> torch_peer(const AttnCase& c, int threads, const bench::Options& opt,
                                         std::string& why, const char* backend,
                                         const std::vector<std::string>& extra = {},
                                         bool one_sample = false) {
  std::map<std::string, double> out;
  std::string passes;
  for (const auto& p : c.passes) passes += (passes.empty() ? "" : ",") + p;
  // Started without a shell: --python names a program, never a command line.
  std::vector<std::string> argv = {
      g_python,     std::string(RIDGE_SOURCE_DIR) + "/tools/torch_attention_peer.py",
      "--batch",    std::to_string(c.batch),
      "--heads",    std::to_string(c.heads),
      "--kv-heads", std::to_string(c.kv_heads),
      "--seq",      std::to_string(c.seq),
      "--head-dim", std::to_string(c.d),
      "--dtype",    dtype_key(c.dtype)};
  if (c.causal) argv.push_back("--causal");
  for (const std::string& s : std::vector<std::string>{
           "--passes", passes, "--threads", std::to_string(threads), "--warmup",
           std::to_string(c.headline || one_sample ? 0 : std::max(1, opt.warmup)), "--iters",
           std::to_string(c.headline || one_sample ? 1 : std::max(3, opt.iters)), "--backend",
           std::string(backend)})
    argv.push_back(s);
  argv.insert(argv.end(), extra.begin(), extra.end());
  const auto run = process::run(argv);
  if (!run.started) {
    why = fmt::format("PyTorch peer: cannot run '{}'", g_python);
    return out;
  }
  const std::string& text = run.output;
  const int rc = run.exit_code;
  // The last line is the JSON answer; anything before it is python's chatter.
  const auto pos = text.find_last_of('{');
  json j;
  try {
    j = input::parse_json(
        text.substr(text.rfind('\n', pos) == std::string::npos ? 0 : text.rfind('\n', pos) + 1),
        "peer output");
  } catch (const std::exception&) {
    why = fmt::format("PyTorch peer failed (exit {}): {}", rc, text.substr(0, 200));
    return out;
  }
  if (j.contains("error")) {
    why = j["error"].get<std::string>();
    return out;
  }
  for (auto& [k, v] : j["median_ms"].items()) out[k] = v.get<double>();
  if (j.contains("torch")) why = "torch " + j["torch"].get<std::string>();
  return out;
}

// ---------------------------------------------------------------- one case
template <typename T>
void run_case(const AttnCase& c, bench::Context& ctx, double peak_of_dtype) {
  const int64_t B = c.batch, H = c.heads, KH = c.kv_heads, N = c.seq, Dh = c.d;
  check(H % KH == 0, "bench attention: heads {} must be a multiple of kv_heads {}", H, KH);
  // Each size passes its own limit, but their product can wrap 64 bits: checked, then held against
  // the memory this machine has before anything is allocated.
  const char* what = "--set batch*heads*seq*head_dim";
  const auto nq = static_cast<size_t>(checked_product({B, H, N, Dh}, what));
  const auto nk = static_cast<size_t>(checked_product({B, KH, N, Dh}, what));
  memory::check_fits((5.0 * static_cast<double>(nq) + 3.0 * static_cast<double>(nk)) * sizeof(T), what);
  Buffer<T> q(nq, "bench.q"), k(nk, "bench.k"), v(nk, "bench.v"), o(nq, "bench.o"), d_o(nq, "bench.do"),
      dq(nq, "bench.dq"), dk(nk, "bench.dk"), dv(nk, "bench.dv");
  Buffer<float> lse(static_cast<size_t>(B * H * N), "bench.lse");
  fill_random(q, 1);
  fill_random(k, 2);
  fill_random(v, 3);
  fill_random(d_o, 4);
  auto Q = TensorView<T>::contiguous(q.data(), {B, H, N, Dh});
  auto K = TensorView<T>::contiguous(k.data(), {B, KH, N, Dh});
  auto Vv = TensorView<T>::contiguous(v.data(), {B, KH, N, Dh});
  auto O = TensorView<T>::contiguous(o.data(), {B, H, N, Dh});
  auto dO = TensorView<T>::contiguous(d_o.data(), {B, H, N, Dh});
  auto dQ = TensorView<T>::contiguous(dq.data(), {B, H, N, Dh});
  auto dK = TensorView<T>::contiguous(dk.data(), {B, KH, N, Dh});
  auto dV = TensorView<T>::contiguous(dv.data(), {B, KH, N, Dh});
  auto L = TensorView<float>::contiguous(lse.data(), {B, H, N});
  const attention::Options aopt{c.causal, 0.0f};
  auto fwd = [&] { attention::flash_attention_forward(Q, K, Vv, O, L, aopt); };
  auto bwd = [&] { attention::flash_attention_backward(Q, K, Vv, O, dO, L, dQ, dK, dV, aopt); };
  fwd();

  bench::Options opt = ctx.options;
  if (c.headline) {
    opt.warmup = 0;
    opt.iters = 1;
  }

  std::string torch_why;
  std::map<std::string, double> torch_ms;
  std::map<std::string, double> torch_math_ms;
  if (!g_no_torch) {
    torch_ms = torch_peer(c, ctx.threads, opt, torch_why, "flash");
    // PyTorch's own math backend, where its materialised S fits the same 8 GiB limit as ours.
    std::string why_math;
    if (!g_no_math && !torch_ms.empty() && MathPath::bytes_needed(c, true) <= 8.0 * (1ull << 30))
      torch_math_ms = torch_peer(c, ctx.threads, opt, why_math, "math");
  } else
    torch_why = "PyTorch peer skipped (--no-torch)";

  const double math_bytes_fwd = MathPath::bytes_needed(c, false),
               math_bytes_bwd = MathPath::bytes_needed(c, true);
  const double limit = 8.0 * 1024 * 1024 * 1024;
  // fp32 copies of the inputs for the math path (conversion not timed).
  Buffer<float> fq, fk, fv, fdo, fo, fdq, fdk, fdv;
  const bool need_math = !g_no_math && math_bytes_fwd <= limit;
  if (need_math) {
    fq = Buffer<float>(nq, "math_path.q");
    fk = Buffer<float>(nk, "math_path.k");
    fv = Buffer<float>(nk, "math_path.v");
    fdo = Buffer<float>(nq, "math_path.do");
    fo = Buffer<float>(nq, "math_path.o");
    fdq = Buffer<float>(nq, "math_path.dq");
    fdk = Buffer<float>(nk, "math_path.dk");
    fdv = Buffer<float>(nk, "math_path.dv");
    auto cvt = [](const Buffer<T>& s, Buffer<float>& dst) {
      for (size_t i = 0; i < s.size(); ++i) {
        if constexpr (std::is_same_v<T, bf16>)
          dst[i] = to_float(s[i]);
        else
          dst[i] = s[i];
      }
    };
    cvt(q, fq);
    cvt(k, fk);
    cvt(v, fv);
    cvt(d_o, fdo);
  }
#ifdef RIDGE_HAVE_OPENBLAS
  openblas_set_num_threads(ctx.threads);
  const char* math_name = "math path (OpenBLAS)";
#else
  const char* math_name = "math path (ridge fp32)";
#endif

  for (const std::string& pass : c.passes) {
    const bool has_f = pass != "backward", has_b = pass != "forward";
    std::function<void()> ours;
    if (pass == "forward")
      ours = fwd;
    else if (pass == "backward")
      ours = bwd;
    else
      ours = [&] {
        fwd();
        bwd();
      };
    // Extra memory: the high-water mark above what is live before the call.
    memory::reset_peak();
    const int64_t base = memory::current_bytes();
    ours();
    const int64_t extra = memory::peak_bytes() - base;

    // The math path peer, timed interleaved with ridge round by round so a transient slowdown of
    // the machine hits both alike.
    const double need = has_b ? math_bytes_bwd : math_bytes_fwd;
    std::optional<MathPath> mp;
    std::function<void()> peer;
    std::string math_note;
    if (g_no_math) {
      math_note = "; math path skipped (--no-math)";
    } else if (need > limit) {
      math_note = fmt::format("; math path skipped: needs {} > 8 GiB",
                              units::format_bytes(static_cast<int64_t>(need)));
    } else {
      mp.emplace(c, has_b);
      if (pass == "forward")
        peer = [&] { mp->forward(fq.data(), fk.data(), fv.data(), fo.data()); };
      else if (pass == "backward")
        peer = [&] {
          mp->backward(fq.data(), fk.data(), fv.data(), fdo.data(), fdq.data(), fdk.data(), fdv.data());
        };
      else
        peer = [&] {
          mp->forward(fq.data(), fk.data(), fv.data(), fo.data());
          mp->backward(fq.data(), fk.data(), fv.data(), fdo.data(), fdq.data(), fdk.data(), fdv.data());
        };
    }
    bench::Options popt = opt;
    popt.iters = std::max(1, std::min(opt.iters, 5));
    std::vector<std::function<void()>> fns = {ours};
    if (peer) fns.push_back(peer);
    // A headline case takes one sample: one round.
    std::vector<bench::Options> fopts = {opt};
    if (peer) fopts.push_back(popt);
    const auto ms = bench::measure_interleaved(fns, fopts, c.headline ? 1 : 3);
    const bench::Measurement& m = ms[0];

    bench::Row row;
    row.benchmark = "attention";
    row.case_ = {{"batch", B},     {"heads", H},         {"kv_heads", KH}, {"seq", N},
                 {"head_dim", Dh}, {"causal", c.causal}, {"pass", pass}};
    row.dtype = dtype_key(c.dtype);
    row.threads = ctx.threads;
    // The same q, k, v every call: a layer's attention reads them right after the projections
    // wrote them, and re-reads them many times within the call, so warm is what a model sees.
    row.cache = "warm";
    row.flops = (has_f ? attention::attention_flops(B, H, N, N, Dh, c.causal, false) : 0.0) +
                (has_b ? attention::attention_flops(B, H, N, N, Dh, c.causal, true) : 0.0);
    const double esz = c.dtype == DType::bf16 ? 2.0 : 4.0;
    // Compulsory traffic: forward reads q, k, v and writes o; backward reads q, k, v, o, do and
    // writes dq, dk, dv.
    row.bytes = esz * static_cast<double>((has_f ? 2 * nq + 2 * nk : 0) + (has_b ? 4 * nq + 4 * nk : 0));
    row.set_time(m);
    row.extra["peak_extra_bytes"] = extra;
    if (peak_of_dtype > 0) row.extra["pct_of_peak"] = 100.0 * row.gflops() * 1e9 / peak_of_dtype;
    std::string note = "extra " + units::format_bytes(extra) + math_note;
    if (peer) {
      row.add_peer(math_name, ms[1]);
      // The row's result held against the math path's, from one more call of each on the same
      // inputs: the output O where the pass runs forward, dQ where it runs backward (largest
      // difference over the reference's largest magnitude).
      ours();
      peer();
      if (has_f) row.extra["max_rel_diff_vs_math"] = bench_compare::max_rel_diff(o.data(), fo.data(), nq);
      if (has_b)
        row.extra["max_rel_diff_vs_math_dq"] = bench_compare::max_rel_diff(dq.data(), fdq.data(), nq);
    }
    if (auto it = torch_ms.find(pass); it != torch_ms.end()) {
      row.add_peer("pytorch sdpa", it->second);
      if (auto im = torch_math_ms.find(pass); im != torch_math_ms.end())
        row.add_peer("pytorch math", im->second);
      note += "; " + torch_why + " (PyTorch timed in its own process before ridge, not interleaved)";
    } else if (g_no_torch) {
      note += "; " + torch_why;
    } else {
      note += "; PyTorch peer: " + (torch_why.empty() ? std::string("no result") : torch_why);
    }
    if (c.headline) note += "; headline shape (1 sample)";
    row.note = note;
    ctx.emit(row);
    ctx.progress.tick(
        fmt::format("attention {} n={} d={}{} {}", row.dtype, N, Dh, c.causal ? " causal" : "", pass));
  }
}

// ---------------------------------------------------------------- masked rows
// flash-attn's additions, each held against its roofline (FLOPs of the visible scores only) and
// against what a PyTorch user without flash-attn runs: sdpa with the equivalent explicit mask
// (varlen padded to the longest sequence), the math backend where the softcap needs it, and
// flex_attention (forward only: torch has no flex backward on the CPU). Each row also carries a
// ridge companion timed interleaved with it, whose ratio is the target: the window against full
// attention over the same query tokens with as many keys each (8 sequences of the window's length),
// the softcap against the same row without it.
struct MaskCase {
  std::string kind;  // varlen | window | softcap
  int64_t heads = 4, kv_heads = 4, d = 64;
  DType dtype = DType::bf16;
  bool causal = true;
  std::vector<int64_t> lens;  // the sequences (one for window and softcap)
  int64_t left = -1, right = -1;
  float softcap = 0.0f;
  int64_t full_batch = 0, full_seq = 0;  // window: the full-attention companion's shape
};

std::vector<MaskCase> mask_cases(bool quick) {
  // 16 sequences of mixed lengths, 64 .. 4096 tokens (quick: a quarter of each).
  std::vector<int64_t> lens = {64, 4096, 128, 2048, 256,  1024, 512, 3072,
                               96, 1536, 768, 192,  4000, 384,  80,  2560};
  const int64_t div = quick ? 4 : 1;
  for (auto& n : lens) n /= div;
  std::vector<MaskCase> v;
  v.push_back({"varlen", 4, 4, 64, DType::bf16, true, lens});
  const int64_t w = 4096 / div, n = 8 * w;
  v.push_back({"window", 2, 2, 64, DType::bf16, true, {n}, w, 0, 0.0f, 8, w});
  v.push_back({"softcap",
               quick ? 4 : 8,
               quick ? 4 : 8,
               64,
               DType::bf16,
               true,
               {4096 / (quick ? 2 : 1)},
               -1,
               -1,
               30.0f});
  return v;
}

template <typename T>
void run_mask_case(const MaskCase& c, bench::Context& ctx, double peak_of_dtype) {
  const int64_t H = c.heads, KH = c.kv_heads, Dh = c.d;
  check(H % KH == 0, "bench attention: heads {} must be a multiple of kv_heads {}", H, KH);
  int64_t total = 0, longest = 0;
  std::vector<int32_t> cu = {0};
  for (int64_t n : c.lens) {
    total += n;
    longest = std::max(longest, n);
    cu.push_back(static_cast<int32_t>(total));
  }
  attention::Options opt;
  opt.causal = c.causal;
  opt.window_left = c.left;
  opt.window_right = c.right;
  opt.softcap = c.softcap;
  const bool varlen = c.kind == "varlen";
  const char* what = "masked row: tokens*heads*head_dim";
  const auto nq = static_cast<size_t>(checked_product({total, H, Dh}, what));
  const auto nk = static_cast<size_t>(checked_product({total, KH, Dh}, what));
  memory::check_fits((5.0 * static_cast<double>(nq) + 3.0 * static_cast<double>(nk)) * sizeof(T), what);
  Buffer<T> q(nq, "bench.q"), k(nk, "bench.k"), v(nk, "bench.v"), o(nq, "bench.o"), d_o(nq, "bench.do"),
      dq(nq, "bench.dq"), dk(nk, "bench.dk"), dv(nk, "bench.dv");
  Buffer<float> lse(static_cast<size_t>(total * H), "bench.lse");
  fill_random(q, 1);
  fill_random(k, 2);
  fill_random(v, 3);
  fill_random(d_o, 4);
  // Packed [total, heads, d] for varlen; one [1, heads, n, d] sequence otherwise (the dense API, as
  // flash_attn_func's callers use it).
  auto p3 = [&](Buffer<T>& b, int64_t hh) { return TensorView<T>::contiguous(b.data(), {total, hh, Dh}); };
  auto p4 = [&](Buffer<T>& b, int64_t bb, int64_t hh, int64_t n) {
    return TensorView<T>::contiguous(b.data(), {bb, hh, n, Dh});
  };
  auto run = [&](bool fwd, bool bwd, const attention::Options& o_, int64_t bb, int64_t n) {
    if (varlen) {
      const auto L = TensorView<float>::contiguous(lse.data(), {H, total});
      if (fwd)
        attention::flash_attention_varlen_forward<T>(p3(q, H), p3(k, KH), p3(v, KH), cu, cu, longest, longest,
                                                     p3(o, H), L, o_);
      if (bwd)
        attention::flash_attention_varlen_backward<T>(p3(q, H), p3(k, KH), p3(v, KH), p3(o, H), p3(d_o, H), L,
                                                      cu, cu, longest, longest, p3(dq, H), p3(dk, KH),
                                                      p3(dv, KH), o_);
    } else {
      const auto L = TensorView<float>::contiguous(lse.data(), {bb, H, n});
      if (fwd)
        attention::flash_attention_forward(p4(q, bb, H, n), p4(k, bb, KH, n), p4(v, bb, KH, n),
                                           p4(o, bb, H, n), L, o_);
      if (bwd)
        attention::flash_attention_backward(p4(q, bb, H, n), p4(k, bb, KH, n), p4(v, bb, KH, n),
                                            p4(o, bb, H, n), p4(d_o, bb, H, n), L, p4(dq, bb, H, n),
                                            p4(dk, bb, KH, n), p4(dv, bb, KH, n), o_);
    }
  };
  // The companion: full attention over the same tokens (window), or the row without its softcap.
  attention::Options copt = opt;
  int64_t cb = 1, cn = total;
  std::string companion;
  if (c.kind == "window") {
    copt = {};
    cb = c.full_batch;
    cn = c.full_seq;
    check(cb * cn == total, "bench attention: the window's companion must cover its {} tokens", total);
    companion = fmt::format("ridge full attention {}x{}", cb, cn);
  } else if (c.kind == "softcap") {
    copt.softcap = 0.0f;
    companion = "ridge without softcap";
  }
  run(true, false, opt, 1, total);

  double visible = 0;
  for (int64_t n : c.lens) visible += attention::attention_visible_scores(n, n, opt);
  visible *= static_cast<double>(H);

  // PyTorch's peers, one subprocess each (sdpa with the explicit mask, the materialised math for the
  // softcap, flex_attention's forward), before ridge's own timing.
  AttnCase tc{1, H, KH, longest, Dh, c.causal, c.dtype, {"forward", "backward"}};
  std::vector<std::string> extra;
  if (varlen) {
    std::string l;
    for (int64_t n : c.lens) l += (l.empty() ? "" : ",") + std::to_string(n);
    extra = {"--seqlens", l};
  }
  if (c.left >= 0) extra.insert(extra.end(), {"--window-left", std::to_string(c.left)});
  if (c.right >= 0) extra.insert(extra.end(), {"--window-right", std::to_string(c.right)});
  if (c.softcap > 0) extra.insert(extra.end(), {"--softcap", fmt::format("{}", c.softcap)});
  // Padded/explicit-mask work in score entries: a peer that computes every one of them over many
  // seconds takes one sample.
  const double padded =
      static_cast<double>(c.lens.size()) * static_cast<double>(longest * longest) * static_cast<double>(H);
  const bool one_sample = padded * 4.0 * static_cast<double>(Dh) > 200e9;
  const double limit = 8.0 * 1024 * 1024 * 1024;
  struct TorchPeer {
    std::string name;
    std::map<std::string, double> ms;
    std::string why;
  };
  std::vector<TorchPeer> tpeers;
  auto ask = [&](const std::string& name, const char* backend) {
    TorchPeer tp{name, {}, {}};
    // flex_attention compiles on its first call: it always gets its warm-up.
    const bool flex = std::string(backend) == "flex";
    tp.ms = torch_peer(tc, ctx.threads, ctx.options, tp.why, backend, extra, one_sample && !flex);
    tpeers.push_back(std::move(tp));
  };
  if (!g_no_torch) {
    // The explicit mask (bool, padded) and, for the math backend, three padded score tensors.
    if (c.softcap == 0.0f && padded / static_cast<double>(H) <= limit)
      ask(varlen ? "pytorch sdpa (padded, mask)" : "pytorch sdpa (mask)", "flash");
    if (c.softcap > 0.0f && 12.0 * padded <= limit) ask("pytorch math (softcap)", "math");
    ask(varlen ? "pytorch flex (packed)" : "pytorch flex", "flex");
  }

  for (const std::string pass : {"forward", "backward"}) {
    const bool has_b = pass == "backward";
    std::vector<std::function<void()>> fns = {[&] { run(!has_b, has_b, opt, 1, total); }};
    if (!companion.empty()) fns.push_back([&] { run(!has_b, has_b, copt, cb, cn); });
    memory::reset_peak();
    const int64_t base = memory::current_bytes();
    fns[0]();
    const int64_t extra_bytes = memory::peak_bytes() - base;
    const auto ms = bench::measure_interleaved(fns, {ctx.options}, 3);

    bench::Row row;
    row.benchmark = "attention";
    std::string window = c.left >= 0 || c.right >= 0 ? fmt::format("({}, {})", c.left, c.right) : "";
    row.case_ = {{"batch", static_cast<int64_t>(c.lens.size())},
                 {"heads", H},
                 {"kv_heads", KH},
                 {"seq", longest},
                 {"head_dim", Dh},
                 {"causal", c.causal},
                 {"pass", pass},
                 {"mask", c.kind},
                 {"tokens", total}};
    if (!window.empty()) row.case_["window"] = window;
    if (c.softcap > 0) row.case_["softcap"] = c.softcap;
    row.dtype = dtype_key(c.dtype);
    row.threads = ctx.threads;
    row.cache = "warm";
    row.flops = 4.0 * static_cast<double>(Dh) * visible * (has_b ? 2.5 : 1.0);
    const double esz = c.dtype == DType::bf16 ? 2.0 : 4.0;
    row.bytes = esz * static_cast<double>(has_b ? 4 * nq + 4 * nk : 2 * nq + 2 * nk);
    row.set_time(ms[0]);
    row.extra["peak_extra_bytes"] = extra_bytes;
    row.extra["visible_scores"] = visible;
    if (peak_of_dtype > 0) row.extra["pct_of_peak"] = 100.0 * row.gflops() * 1e9 / peak_of_dtype;
    std::string note = "extra " + units::format_bytes(extra_bytes);
    if (!companion.empty()) {
      row.add_peer(companion, ms[1]);
      // The target's ratio (time of this row over its companion's), spelled out.
      row.extra["time_over_companion"] = ms[0].median_ms() / ms[1].median_ms();
      note += fmt::format("; {:.2f}x the time of {}", ms[0].median_ms() / ms[1].median_ms(), companion);
    }
    for (const auto& tp : tpeers) {
      if (auto it = tp.ms.find(pass); it != tp.ms.end())
        row.add_peer(tp.name, it->second);
      else if (!tp.why.empty() && tp.why.rfind("torch ", 0) != 0)
        note += "; " + tp.name + ": " + tp.why;
    }
    if (g_no_torch) note += "; PyTorch peers skipped (--no-torch)";
    if (!tpeers.empty())
      note += one_sample ? "; PyTorch timed in its own processes before ridge, sdpa/math 1 sample (explicit "
                           "mask over every padded score)"
                         : "; PyTorch timed in its own processes before ridge";
    row.note = note;
    ctx.emit(row);
    ctx.progress.tick(fmt::format("attention {} {} {}", c.kind, row.dtype, pass));
  }
}

void run_attention(bench::Context& ctx) {
  std::vector<AttnCase> cases;
  std::vector<MaskCase> masks;
  if (g_sweep == "masks" || g_sweep == "all" || (g_sweep.empty() && ctx.grid.empty()))
    masks = mask_cases(ctx.quick);
  if (g_sweep == "masks")
    ;  // the masked rows alone
  else if (!g_sweep.empty())
    cases = sweep_cases(g_sweep);
  else if (!ctx.grid.empty())
    cases = grid_cases(ctx.grid);
  else if (ctx.quick)
    cases = quick_cases();
  else
    cases = sweep_cases("all");
  size_t total = 0;
  for (const auto& c : cases) total += c.passes.size();
  total += 2 * masks.size();
  ctx.progress.start(total);
  double peak32 = 0, peak16 = 0;
  if (const roofline::Chip* chip = ctx.chip()) {
    try {
      peak32 = chip->peak(DType::f32);
      peak16 = chip->peak(DType::bf16);
    } catch (const Error&) {
    }
  }
  for (const auto& c : cases) {
    if (c.dtype == DType::bf16)
      run_case<bf16>(c, ctx, peak16);
    else
      run_case<float>(c, ctx, peak32);
  }
  for (const auto& c : masks) run_mask_case<bf16>(c, ctx, peak16);
}

void attention_options(CLI::App& app) {
  app.add_option("--sweep", g_sweep,
                 "a sweep of bench/shapes/attention-shapes.json: pytorch_attention, flash_sweep, "
                 "leaderboard, masks (varlen, sliding window, softcap rows) or all (default without "
                 "--quick/--set: all; --quick runs the masked rows at a quarter of their size)");
  app.add_flag("--no-torch", g_no_torch, "skip the PyTorch scaled_dot_product_attention peer");
  app.add_flag("--no-math", g_no_math, "skip the math-path peer");
  app.add_option("--python", g_python, "python interpreter for the PyTorch peer (default python3)");
}

}  // namespace
}  // namespace ridge

RIDGE_BENCHMARK(
    attention, "attention",
    "FlashAttention-2 forward/backward vs the math path and PyTorch's CPU scaled_dot_product_attention",
    ridge::run_attention, ridge::attention_options);
