// The training step of the CS336 Transformer LM as a list of roofline costs. Byte counts follow
// what a mixed-precision implementation moves: GEMM and attention operands in the operand dtype,
// GEMM outputs, the residual stream, norms, the loss, gradients and AdamW state in fp32. Weight
// gradients are accumulated (read and written). Elementwise FLOPs are small next to the GEMMs and
// counted roughly (a handful per element); what matters for their bound is their bytes.
#include <fmt/format.h>

#include "ridge/core/error.hpp"
#include "ridge/roofline.hpp"
#include "ridge/roofline/model_buffers.hpp"
#include "core/check.hpp"

namespace ridge::roofline {
namespace {

Traffic tr(const std::string& name, DType t, long double elements, bool write = false) {
  return {name, dtype_name(t), elements, elements * static_cast<long double>(dtype_size(t)), write};
}

// C[m,n] = A[m,k] B[k,n] in whichever layout; `acc` adds the read of C (a gradient accumulated).
Cost gemm(int64_t m, int64_t k, int64_t n, DType ab, DType c, bool acc, const char* a, const char* b,
          const char* out) {
  const long double M = static_cast<long double>(m), K = static_cast<long double>(k),
                    N = static_cast<long double>(n);
  Cost r;
  r.op = "matmul";
  r.shape = fmt::format("M={} K={} N={} {}->{}", m, k, n, dtype_name(ab), dtype_name(c));
  r.compute = peak_key(ab);
  r.flops = 2 * M * K * N;
  r.memory = {tr(a, ab, M * K), tr(b, ab, K * N)};
  if (acc) r.memory.push_back(tr(std::string(out) + " (accumulate)", c, M * N));
  r.memory.push_back(tr(out, c, M * N, true));
  return r;
}

// The rows of N k routed choices spread evenly over E experts (uniform routing), one group per expert with
// rows: when N k < E, N k experts of one row each (the others read nothing).
std::vector<int64_t> expert_rows(int64_t choices, int64_t experts) {
  if (choices < experts) return std::vector<int64_t>(static_cast<size_t>(choices), 1);
  std::vector<int64_t> rows(static_cast<size_t>(experts), choices / experts);
  for (int64_t e = 0; e < choices % experts; ++e) ++rows[static_cast<size_t>(e)];
  return rows;
}

Cost ew(const std::string& shape, long double flops, std::vector<Traffic> t) {
  Cost r;
  r.op = "elementwise";
  r.shape = shape;
  r.compute = "fp32";
  r.flops = flops;
  r.memory = std::move(t);
  return r;
}

// Backward of flash attention alone: reads Q, K, V, O, dO and the log-sum-exp, writes dQ, dK, dV
// (K, V, dK and dV of the kv heads only: grouped-query attention sums dK, dV over each kv head's
// query heads on chip); 5 matmuls (S and P recomputed, dV, dP, dQ, dK) = 2.5x the forward's 2.
Cost flash_backward(const AttentionShape& s) {
  AttentionShape f = s;
  f.backward = false;
  Cost c = attention_flash(f);
  c.op = "attention-flash-backward";
  c.flops *= 2.5L;
  const long double q = static_cast<long double>(s.batch) * s.heads * s.seq_q * s.head_dim;
  const long double kv =
      static_cast<long double>(s.batch) * (s.kv_heads > 0 ? s.kv_heads : s.heads) * s.seq_kv * s.head_dim;
  const long double rows = static_cast<long double>(s.batch) * s.heads * s.seq_q;
  c.memory = {tr("Q,K,V", s.dtype, q + 2 * kv), tr("O", s.dtype, q), tr("dO", s.dtype, q),
              tr("logsumexp", DType::f32, rows), tr("dQ,dK,dV", s.dtype, q + 2 * kv, true)};
  return c;
}

// Backward of the math path alone: the naive fwd+bwd cost less its forward.
Cost naive_backward(const AttentionShape& s) {
  AttentionShape f = s;
  f.backward = false;
  AttentionShape fb = s;
  fb.backward = true;
  const Cost cf = attention_naive(f);
  Cost c = attention_naive(fb);
  c.op = "attention-naive-backward";
  c.flops -= cf.flops;
  // What the backward moves: the entries the forward does not have (the forward's Q, K, V, O, S and
  // P traffic is already counted in the forward op).
  std::vector<Traffic> rest;
  for (const auto& t : c.memory) {
    bool in_fwd = false;
    for (const auto& u : cf.memory) in_fwd = in_fwd || t.name == u.name;
    if (!in_fwd) rest.push_back(t);
  }
  c.memory = std::move(rest);
  return c;
}

void check_shape(const ModelShape& m) {
  auto pos = [](int64_t v, const char* what) {
    check(v >= 1 && v <= (int64_t{1} << 40), "model shape: {} = {} is not a positive size (1 to 2^40)", what,
          v);
  };
  pos(m.vocab_size, "vocab");
  pos(m.d_model, "d_model");
  pos(m.num_layers, "layers");
  pos(m.num_heads, "heads");
  pos(m.d_ff, "d_ff");
  pos(m.batch, "batch");
  pos(m.seq, "seq");
  check(m.d_model % m.num_heads == 0, "model shape: d_model {} is not a multiple of heads {}", m.d_model,
        m.num_heads);
  check(m.num_kv_heads >= 0 && m.num_heads % m.kv_heads() == 0,
        "model shape: kv_heads = {} must be >= 0 (0: equal to heads) and divide heads {}", m.num_kv_heads,
        m.num_heads);
  if (m.is_moe()) {
    // grouped_gemm_contiguous takes up to 4096 groups.
    check(m.num_experts <= 4096, "model shape: experts = {} is past the 4096 groups of the grouped GEMMs",
          m.num_experts);
    check(m.top_k >= 1 && m.top_k <= m.num_experts, "model shape: top_k = {} is not in 1 .. experts = {}",
          m.top_k, m.num_experts);
    check(m.d_expert >= 0 && m.d_expert <= (int64_t{1} << 40),
          "model shape: d_expert = {} is not a size (0 means d_ff; at most 2^40)", m.d_expert);
    check(m.num_shared_experts >= 0 && m.shared_width() <= (int64_t{1} << 40),
          "model shape: shared_experts = {} of width {} is not accepted (>= 0, at most 2^40 wide)",
          m.num_shared_experts, m.expert_width());
    for (size_t i = 0; i < m.moe_layers.size(); ++i)
      check(m.moe_layers[i] >= 0 && m.moe_layers[i] < m.num_layers &&
                (i == 0 || m.moe_layers[i] > m.moe_layers[i - 1]),
            "model shape: moe_layers must be ascending layer indices in [0, layers = {}), got {} at position "
            "{}",
            m.num_layers, m.moe_layers[i], i);
  }
  check(m.operand == DType::f32 || m.operand == DType::bf16 || m.operand == DType::fp16,
        "model shape: operand dtype {} is not accepted (f32, bf16, f16)", dtype_name(m.operand));
  if (m.storage)
    check(dtype_size(*m.storage) >= dtype_size(m.operand) &&
              (*m.storage == DType::f32 || *m.storage == DType::bf16 || *m.storage == DType::fp16),
          "model shape: operands of dtype {} cannot be stored as {} (a storage dtype is f32, bf16 or f16 and "
          "at least as wide as the operand)",
          dtype_name(m.operand), dtype_name(*m.storage));
}

// Operands stored wider than their dtype (an emulated fp16): every traffic entry of the operand
// dtype moves the storage dtype's bytes instead; the FLOPs and the compute roof are unchanged.
void restore(std::vector<ModelOp>& ops, DType operand, DType storage) {
  if (storage == operand) return;
  const std::string from = dtype_name(operand), to = dtype_name(storage);
  for (auto& op : ops)
    for (auto& t : op.cost.memory)
      if (t.dtype == from) {
        t.dtype = to;
        t.bytes = t.elements * static_cast<long double>(dtype_size(storage));
      }
}

}  // namespace

// The routed experts' weight gradient as a K-grouped GEMM: for each expert e, out[e] (+)= a_e^T b_e with a_e
// [m_e, n] and b_e [m_e, k] its rows (the gradient of its outputs and its inputs), accumulated in fp32 into
// [E, n, k] (read and written). Every expert with rows reads and writes its gradient once.
Cost grouped_gemm_dw(const std::vector<int64_t>& rows, int64_t n, int64_t k, DType ab, DType c, const char* a,
                     const char* b, const char* out) {
  long double M = 0;
  for (int64_t r : rows) M += static_cast<long double>(r);
  const long double G = static_cast<long double>(rows.size()), N = static_cast<long double>(n),
                    K = static_cast<long double>(k);
  Cost r;
  r.op = "grouped-gemm-dw";
  r.shape = fmt::format("groups={} M={} N={} K={} {}->{}", rows.size(), static_cast<double>(M), n, k,
                        dtype_name(ab), dtype_name(c));
  r.compute = peak_key(ab);
  r.flops = 2 * M * N * K;
  r.memory = {tr(a, ab, M * N), tr(b, ab, M * K), tr(std::string(out) + " (accumulate)", c, G * N * K),
              tr(out, c, G * N * K, true)};
  return r;
}

std::vector<ModelOp> model_step_ops(const ModelShape& m) {
  check_shape(m);
  const DType O = m.operand, S = DType::f32;
  // Casts exist whenever the operands are rounded (an emulated fp16 rounds fp32 into fp32 storage).
  const bool mixed = O != S;
  const int64_t N = m.batch * m.seq, D = m.d_model, F = m.d_ff, V = m.vocab_size, L = m.num_layers;
  // The q|k|v row: D + 2 Dkv, Dkv = kv heads * d_head (= D, a 3D row, without grouped-query attention).
  const int64_t QKV = qkv_width(m);
  const long double n = static_cast<long double>(N), d = static_cast<long double>(D),
                    f = static_cast<long double>(F), v = static_cast<long double>(V),
                    dkv = static_cast<long double>(kv_width(m)), qkv = static_cast<long double>(QKV);
  const bool gqa = m.kv_heads() != m.num_heads;
  // The fused weight and row in the ops' labels: 3D as always, or D+2Dkv for grouped-query attention.
  const char* w3 = gqa ? "D+2Dkv" : "3D";
  const long double P = model_param_count(m);
  // Element counts of the saved activations, from the buffers the model allocates.
  auto elems = [&](Buf b) { return static_cast<long double>(buffer_elements(b, m)); };
  const std::string nd = fmt::format("N={} D={}", N, D);
  AttentionShape as;
  as.batch = m.batch;
  as.heads = m.num_heads;
  as.kv_heads = m.kv_heads();
  as.seq_q = as.seq_kv = m.seq;
  as.head_dim = m.d_head();
  as.dtype = O;
  as.causal = true;

  std::vector<ModelOp> ops;
  auto add = [&](const char* pass, const char* kind, const std::string& name, int64_t count, Cost c,
                 bool moe = false) {
    ops.push_back({pass, kind, name, count, std::move(c), moe});
  };
  // The feed-forward of the dense layers (all of them for a dense model) and of the MoE layers.
  const int64_t Lm = m.num_moe_layers(), Ld = L - Lm;
  const int64_t E = m.num_experts, K = m.top_k, De = m.expert_width(), Sw = m.shared_width();
  const long double e = static_cast<long double>(E), k = static_cast<long double>(K),
                    de = static_cast<long double>(De), sw = static_cast<long double>(Sw), nk = n * k;
  const std::vector<int64_t> rows = Lm > 0 ? expert_rows(N * K, E) : std::vector<int64_t>{};
  auto moe = [&](const char* pass, const char* kind, const std::string& name, Cost c) {
    add(pass, kind, name, Lm, std::move(c), true);
  };
  const std::string nkd = fmt::format("N={} k={} D={}", N, K, D),
                    nkf = fmt::format("N={} k={} De={}", N, K, De);
  auto norm = [&](const char* pass, const std::string& name, int64_t count) {
    add(pass, "elementwise", name, count,
        ew(nd, 4 * n * d,
           {tr("x", S, elems(Buf::x)), tr("w", S, d), tr("rstd", S, elems(Buf::rstd1), true),
            tr("h", O, elems(Buf::h1), true)}));
  };
  auto norm_bwd = [&](const std::string& name, int64_t count) {
    add("backward", "elementwise", name, count,
        ew(nd, 8 * n * d,
           {tr("dh", S, n * d), tr("x", S, n * d), tr("w", S, d), tr("dx (accumulate)", S, n * d),
            tr("dx", S, n * d, true), tr("dw (accumulate)", S, d), tr("dw", S, d, true)}));
  };
  auto residual = [&](const std::string& name) {
    add("forward", "elementwise", name, L,
        ew(nd, n * d, {tr("x", S, n * d), tr("y", S, n * d), tr("x+y", S, n * d, true)}));
  };
  auto cast = [&](const char* pass, const std::string& name, long double elements, int64_t count) {
    if (mixed)
      add(pass, "elementwise", name, count,
          ew(fmt::format("N={}", static_cast<double>(elements)), 0,
             {tr("in", S, elements), tr("out", O, elements, true)}));
  };

  // ---- forward
  cast("forward", "cast weights", P, 1);
  add("forward", "elementwise", "embedding", 1, ew(nd, 0, {tr("rows", S, n * d), tr("x", S, n * d, true)}));
  norm("forward", "norm (ln1)", L);
  add("forward", "gemm", "gemm qkv", L,
      gemm(N, D, QKV, O, S, false, "h1[N,D]", fmt::format("Wqkv[D,{}]", w3).c_str(),
           fmt::format("qkv[N,{}]", w3).c_str()));
  // RoPE rotates q and k (3 FLOPs per element), copies v.
  add("forward", "elementwise", "rope", L,
      ew(nd, 3 * n * (d + dkv), {tr("qkv", S, n * qkv), tr("qkv (rotated)", O, elems(Buf::qkv), true)}));
  add("forward", "attention", "attention", L, m.flash ? attention_flash(as) : attention_naive(as));
  add("forward", "gemm", "gemm out", L, gemm(N, D, D, O, S, false, "o[N,D]", "Wo[D,D]", "y[N,D]"));
  residual("residual (attn)");
  norm("forward", "norm (ln2)", L);
  if (Ld > 0) {
    add("forward", "gemm", "gemm w1 w3", Ld,
        gemm(N, D, 2 * F, O, S, false, "h2[N,D]", "W13[D,2F]", "ab[N,2F]"));
    add("forward", "elementwise", "swiglu", Ld,
        ew(fmt::format("N={} F={}", N, F), 6 * n * f,
           {tr("ab", S, 2 * n * f), tr("ab (saved)", O, elems(Buf::ab), true),
            tr("g", O, elems(Buf::g), true)}));
    add("forward", "gemm", "gemm w2", Ld, gemm(N, F, D, O, S, false, "g[N,F]", "W2[F,D]", "y[N,D]"));
  }
  if (Lm > 0) {
    moe("forward", "gemm", "gemm router", gemm(N, D, E, O, S, false, "h2[N,D]", "Wr[D,E]", "logits[N,E]"));
    // Softmax or sigmoid, the top-k and its normalisation: a few FLOPs per logit.
    moe("forward", "elementwise", "route (top-k)",
        ew(fmt::format("N={} E={} k={}", N, E, K), 5 * n * e,
           {tr("logits", S, n * e), tr("gate weights", S, nk, true),
            tr("expert ids", DType::i32, nk, true)}));
    moe("forward", "elementwise", "permute",
        ew(nkd, 0, {tr("h2", O, n * d), tr("xs[Nk,D]", O, nk * d, true)}));
    moe("forward", "gemm", "gemm experts w1 w3", grouped_gemm_contiguous(rows, 2 * De, D, O, S));
    moe("forward", "elementwise", "swiglu (experts)",
        ew(nkf, 6 * nk * de,
           {tr("ab", S, 2 * nk * de), tr("ab (saved)", O, 2 * nk * de, true), tr("g", O, nk * de, true)}));
    moe("forward", "gemm", "gemm experts w2", grouped_gemm_contiguous(rows, D, De, O, S));
    if (Sw > 0) {
      moe("forward", "gemm", "gemm shared w1 w3",
          gemm(N, D, 2 * Sw, O, S, false, "h2[N,D]", "W13s[D,2S]", "ab[N,2S]"));
      moe("forward", "elementwise", "swiglu (shared)",
          ew(fmt::format("N={} S={}", N, Sw), 6 * n * sw,
             {tr("ab", S, 2 * n * sw), tr("ab (saved)", O, 2 * n * sw, true), tr("g", O, n * sw, true)}));
      moe("forward", "gemm", "gemm shared w2", gemm(N, Sw, D, O, S, false, "g[N,S]", "W2s[S,D]", "y[N,D]"));
    }
    // The k rows of each token, weighted, summed (into the shared experts' output where there is one).
    std::vector<Traffic> t = {tr("ys[Nk,D]", S, nk * d), tr("gate weights", S, nk)};
    if (Sw > 0) t.push_back(tr("y (shared)", S, n * d));
    t.push_back(tr("y[N,D]", S, n * d, true));
    moe("forward", "elementwise", "combine", ew(nkd, 2 * nk * d, std::move(t)));
  }
  residual("residual (ffn)");
  norm("forward", "final norm", 1);
  add("forward", "gemm", "gemm lm_head", 1, gemm(N, D, V, O, S, false, "h[N,D]", "Wlm[D,V]", "logits[N,V]"));
  add("forward", "elementwise", "loss", 1,
      ew(fmt::format("N={} V={}", N, V), 4 * n * v,
         {tr("logits", S, elems(Buf::logits)), tr("logsumexp", S, elems(Buf::final_lse), true)}));

  // ---- backward (layers in reverse; a block's ops listed once)
  add("backward", "elementwise", "loss backward", 1,
      ew(fmt::format("N={} V={}", N, V), 3 * n * v,
         {tr("logits", S, elems(Buf::logits)), tr("logsumexp", S, elems(Buf::final_lse)),
          tr("dlogits", S, elems(Buf::logits), true)}));
  cast("backward", "cast dlogits", n * v, 1);
  add("backward", "gemm", "gemm lm_head dW", 1,
      gemm(V, N, D, O, S, true, "dlogits^T[V,N]", "h[N,D]", "dWlm[V,D]"));
  add("backward", "gemm", "gemm lm_head dX", 1,
      gemm(N, V, D, O, S, false, "dlogits[N,V]", "Wlm[V,D]", "dh[N,D]"));
  norm_bwd("final norm backward", 1);
  cast("backward", "cast dy (ffn)", n * d, L);
  if (Ld > 0) {
    add("backward", "gemm", "gemm w2 dW", Ld, gemm(D, N, F, O, S, true, "dy^T[D,N]", "g[N,F]", "dW2[D,F]"));
    add("backward", "gemm", "gemm w2 dX", Ld, gemm(N, D, F, O, S, false, "dy[N,D]", "W2[D,F]", "dg[N,F]"));
    add("backward", "elementwise", "swiglu backward", Ld,
        ew(fmt::format("N={} F={}", N, F), 10 * n * f,
           {tr("dg", S, n * f), tr("ab", O, elems(Buf::ab)), tr("dab", O, 2 * n * f, true)}));
    add("backward", "gemm", "gemm w1 w3 dW", Ld,
        gemm(2 * F, N, D, O, S, true, "dab^T[2F,N]", "h2[N,D]", "dW13[2F,D]"));
    add("backward", "gemm", "gemm w1 w3 dX", Ld,
        gemm(N, 2 * F, D, O, S, false, "dab[N,2F]", "W13[2F,D]", "dh2[N,D]"));
  }
  if (Lm > 0) {
    if (Sw > 0) {
      moe("backward", "gemm", "gemm shared w2 dW",
          gemm(D, N, Sw, O, S, true, "dy^T[D,N]", "g[N,S]", "dW2s[D,S]"));
      moe("backward", "gemm", "gemm shared w2 dX",
          gemm(N, D, Sw, O, S, false, "dy[N,D]", "W2s[D,S]", "dg[N,S]"));
      moe("backward", "elementwise", "swiglu backward (shared)",
          ew(fmt::format("N={} S={}", N, Sw), 10 * n * sw,
             {tr("dg", S, n * sw), tr("ab", O, 2 * n * sw), tr("dab", O, 2 * n * sw, true)}));
      moe("backward", "gemm", "gemm shared w1 w3 dW",
          gemm(2 * Sw, N, D, O, S, true, "dab^T[2S,N]", "h2[N,D]", "dW13s[2S,D]"));
      moe("backward", "gemm", "gemm shared w1 w3 dX",
          gemm(N, 2 * Sw, D, O, S, false, "dab[N,2S]", "W13s[2S,D]", "dh2[N,D]"));
    }
    // dy to each chosen expert's rows, weighted, and the gate weights' gradient <dy, ys> per choice.
    moe("backward", "elementwise", "combine backward",
        ew(nkd, 2 * nk * d,
           {tr("dy", O, n * d), tr("ys", S, nk * d), tr("gate weights", S, nk),
            tr("dys[Nk,D]", O, nk * d, true), tr("d gate weights", S, nk, true)}));
    moe("backward", "gemm", "gemm experts w2 dW",
        grouped_gemm_dw(rows, D, De, O, S, "dys", "g", "dW2[E,D,De]"));
    moe("backward", "gemm", "gemm experts w2 dX", grouped_gemm_contiguous(rows, De, D, O, S));
    moe("backward", "elementwise", "swiglu backward (experts)",
        ew(nkf, 10 * nk * de,
           {tr("dg", S, nk * de), tr("ab", O, 2 * nk * de), tr("dab", O, 2 * nk * de, true)}));
    moe("backward", "gemm", "gemm experts w1 w3 dW",
        grouped_gemm_dw(rows, 2 * De, D, O, S, "dab", "xs", "dW13[E,2De,D]"));
    moe("backward", "gemm", "gemm experts w1 w3 dX", grouped_gemm_contiguous(rows, D, 2 * De, O, S));
    // Each token's k rows of dX summed back into its row (onto the shared experts' where there is one).
    std::vector<Traffic> t = {tr("dxs[Nk,D]", S, nk * d)};
    if (Sw > 0) t.push_back(tr("dh2 (accumulate)", S, n * d));
    t.push_back(tr("dh2", S, n * d, true));
    moe("backward", "elementwise", "unpermute (dX)", ew(nkd, nk * d, std::move(t)));
    // The gate's backward (and the balance loss's) into the logits.
    moe("backward", "elementwise", "router backward",
        ew(fmt::format("N={} E={} k={}", N, E, K), 8 * n * e,
           {tr("logits", S, n * e), tr("d gate weights", S, nk), tr("dlogits", O, n * e, true)}));
    moe("backward", "gemm", "gemm router dW",
        gemm(E, N, D, O, S, true, "dlogits^T[E,N]", "h2[N,D]", "dWr[E,D]"));
    moe("backward", "gemm", "gemm router dX",
        gemm(N, E, D, O, S, true, "dlogits[N,E]", "Wr[E,D]", "dh2[N,D]"));
  }
  norm_bwd("norm backward (ln2)", L);
  cast("backward", "cast dy (attn)", n * d, L);
  add("backward", "gemm", "gemm out dW", L, gemm(D, N, D, O, S, true, "dy^T[D,N]", "o[N,D]", "dWo[D,D]"));
  add("backward", "gemm", "gemm out dX", L, gemm(N, D, D, O, S, false, "dy[N,D]", "Wo[D,D]", "do[N,D]"));
  cast("backward", "cast do", n * d, L);
  add("backward", "attention", "attention backward", L, m.flash ? flash_backward(as) : naive_backward(as));
  add("backward", "elementwise", "rope backward", L,
      ew(nd, 3 * n * (d + dkv), {tr("dqkv", O, n * qkv), tr("dqkv (rotated)", O, n * qkv, true)}));
  add("backward", "gemm", "gemm qkv dW", L,
      gemm(QKV, N, D, O, S, true, fmt::format("dqkv^T[{},N]", w3).c_str(), "h1[N,D]",
           fmt::format("dWqkv[{},D]", w3).c_str()));
  add("backward", "gemm", "gemm qkv dX", L,
      gemm(N, QKV, D, O, S, false, fmt::format("dqkv[N,{}]", w3).c_str(),
           fmt::format("Wqkv[{},D]", w3).c_str(), "dh1[N,D]"));
  norm_bwd("norm backward (ln1)", L);
  add("backward", "elementwise", "embedding backward", 1,
      ew(nd, n * d,
         {tr("dx", S, n * d), tr("dE rows (accumulate)", S, n * d), tr("dE rows", S, n * d, true)}));

  // ---- optimizer: zero_grad, the global gradient norm (clipping), AdamW over the flat buffers
  const std::string ps = fmt::format("P={:.0f}", static_cast<double>(P));
  add("optimizer", "optimizer", "zero grad", 1, ew(ps, 0, {tr("grads", S, P, true)}));
  add("optimizer", "optimizer", "grad norm", 1, ew(ps, 2 * P, {tr("grads", S, P)}));
  add("optimizer", "optimizer", "adamw", 1,
      ew(ps, 16 * P,
         {tr("params", S, P), tr("grads", S, P), tr("m", S, P), tr("v", S, P), tr("params", S, P, true),
          tr("m", S, P, true), tr("v", S, P, true)}));
  if (m.storage) restore(ops, O, *m.storage);
  return ops;
}

double model_matmul_flops(const ModelShape& m, const std::string& pass) {
  check(pass == "forward" || pass == "backward",
        "model_matmul_flops: pass '{}' (accepted: forward, backward)", pass);
  ModelShape s = m;
  s.flash = true;  // model FLOPs do not depend on the implementation: the causal half is what counts
  long double sum = 0;
  for (const auto& op : model_step_ops(s))
    if (op.pass == pass && (op.kind == "gemm" || op.kind == "attention"))
      sum += op.cost.flops * static_cast<long double>(op.count);
  return static_cast<double>(sum);
}

}  // namespace ridge::roofline
