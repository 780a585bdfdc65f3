// ridge roofline: chips (loaded from JSON), operation cost models, bounds, collectives and
// critical batch sizes. Everything here is arithmetic on published or measured figures; nothing
// runs a kernel or reads a file other than the chip files it is asked for. Errors name the
// function's argument (ridge::Error::argument: "chips", "name_or_path", ...). The schema of a chip
// file is described in hardware/README.md.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ridge/core/tensor.hpp"
#include "ridge/roofline/model_arch.hpp"

namespace ridge::roofline {

// A figure and where it comes from (a vendor page, a paper, or "measured by ridge probe").
struct Sourced {
  double value = 0;
  std::string source;
};

struct MemoryLevel {
  std::string level;                // "hbm", "dram", "l3", "l2", "l1"
  std::string name;                 // "HBM3", "DDR5", ...
  Sourced bandwidth;                // bytes/s, read
  std::optional<Sourced> capacity;  // bytes
};

struct Link {
  std::string name;                 // "NVLink 4", "ICI", ...
  Sourced bandwidth_per_direction;  // bytes/s, one way
};

struct Chip {
  std::string id, name, kind;                 // kind: "gpu", "tpu" or "cpu"
  std::map<std::string, Sourced> peak_flops;  // keys: fp64, fp32, tf32, bf16, fp16, fp8, int8
  std::vector<MemoryLevel> memory;            // outermost (HBM or DRAM) first
  std::optional<Link> intra_node, inter_node;
  std::string notes;
  std::string measured;  // probe details as JSON text; empty for published chips
  std::string origin;    // the file (or "embedded:<id>") it was loaded from

  // Dense FLOP/s (OP/s for int8) for a dtype; ridge::Error naming the chip and the dtypes it has
  // when it lacks this one. fp8_e4m3 and fp8_e5m2 both map to "fp8", int8 to "int8".
  double peak(DType t) const;
  double peak(const std::string& dtype) const;
  bool has_peak(const std::string& dtype) const;
  // Bytes/s of a memory level ("hbm", "dram", "l3", ...); the outermost level when empty.
  double bandwidth(const std::string& level = "") const;
  const MemoryLevel& memory_level(const std::string& level = "") const;
  // Bytes/s one way of "intra_node" or "inter_node"; ridge::Error if the chip has no such link.
  double link_bandwidth(const std::string& which = "intra_node") const;
};

// The chip-file key for a dtype: "fp64", "fp32", "bf16", "fp16", "fp8", "int8" (int32 -> error).
std::string peak_key(DType t);

// "h100", "tpu-v5e", ... (from the hardware database), a path to a JSON chip file, or "this"
// (the probe's result at probe_result_path(); ridge::Error telling to run 'ridge probe' if absent).
// An unknown or empty name is an error about the argument "name_or_path".
Chip load_chip(const std::string& name_or_path);
// Parses and validates the text of a chip file; errors name `origin` and the offending field.
Chip parse_chip_text(const std::string& text, const std::string& origin);
// The chip-file document of `chip` as JSON text (indented by `indent` spaces, one line when
// negative); it round-trips through parse_chip_text.
std::string chip_json_text(const Chip& chip, int indent = 2);
// Reads and validates a chip file; errors name the file and the field.
Chip load_chip_file(const std::string& path);

// $RIDGE_HOME/this.json, default ~/.cache/ridge/this.json.
std::string probe_result_path();
bool has_probe_result();

// Ids of the chips in the database, sorted ("a100", "b200", ..., "v100").
std::vector<std::string> chip_ids();
// Where the database was found: $RIDGE_HW_DIR, the source tree's hardware/, or "(embedded)".
std::string hardware_location();

// ---------------------------------------------------------------------------------------------
// Cost models. Counts are long double so a large shape cannot overflow on the way; every shape
// argument must be in [1, 2^40] and every tensor at most 2^60 elements (ridge::Error otherwise).

// One tensor's traffic to or from a memory level, or over a link.
struct Traffic {
  std::string name;   // "X", "W", "scores (write)", "scale A", ...
  std::string dtype;  // "bf16", "fp32", ...
  long double elements = 0;
  long double bytes = 0;
  bool write = false;
};

struct Cost {
  std::string op;       // "matmul", "attention-flash", "all-reduce", ...
  std::string shape;    // "B=4096 D=8192 F=8192", for tables
  std::string compute;  // the peak_flops key the FLOPs run at ("bf16", "int8", "tf32", ...)
  long double flops = 0;
  std::vector<Traffic> memory;  // through the chip's memory level (HBM or DRAM by default)
  std::vector<Traffic> link;    // over one chip-to-chip link, per chip

  long double memory_bytes() const;
  long double link_bytes() const;
  // FLOPs per memory byte; NaN when the op moves no memory bytes (a pure collective).
  double intensity() const;
};

struct BoundOptions {
  std::string level;                // memory level; empty = outermost (HBM/DRAM)
  std::string link = "intra_node";  // which link carries Cost::link bytes
};

// The roofline bound of a cost on a chip. T_comm = max(T_memory, T_link) since the two move over
// different hardware and overlap; T_lower = max(T_math, T_comm), T_upper = T_math + T_comm.
struct Bound {
  std::string chip, level, link;
  double peak = 0;            // FLOP/s of Cost::compute
  double bandwidth = 0;       // bytes/s of the memory level
  double link_bandwidth = 0;  // bytes/s one way; 0 when the op uses no link
  double flops = 0, memory_bytes = 0, link_bytes = 0;
  double intensity = 0;        // FLOPs / memory byte (NaN if none)
  double ridge_intensity = 0;  // peak / bandwidth: the intensity at which the roofs meet
  double t_math = 0, t_memory = 0, t_link = 0, t_comm = 0, t_lower = 0, t_upper = 0;
  std::string binding;          // "compute", "memory", "link"
  double attainable_flops = 0;  // flops / t_lower
  double fraction_of_peak = 0;  // t_math / t_lower: the share of peak FLOP/s attainable
};

Bound bound(const Cost& cost, const Chip& chip, const BoundOptions& opt = {});

// The dtypes of a matmul X[B,D] @ W[D,F] -> Y[B,F]. compute empty = the wider of x and w
// (bf16 activations x int8 weights run bf16 FLOPs); "tf32" selects the TF32 tensor-core peak.
struct MatmulDtypes {
  DType x = DType::bf16, w = DType::bf16, out = DType::bf16;
  std::string compute;
  std::string compute_key() const;
};

// x . y of two length-n vectors: 2n-1 FLOPs, reads 2n elements, writes one.
Cost dot(int64_t n, DType t);
// An n-element elementwise op reading `inputs` tensors and writing one.
Cost elementwise(int64_t n, DType t, int inputs = 2, double flops_per_element = 1);
Cost matmul(int64_t b, int64_t d, int64_t f, const MatmulDtypes& dt = {});
// `count` independent matmuls [M,K] x [K,N] (a batched matmul with shared shapes).
Cost batched_matmul(int64_t count, int64_t m, int64_t k, int64_t n, const MatmulDtypes& dt = {});
// X[B,D] x W[B,D,F] -> Y[B,F]: a weight per example, so intensity stays about 2 whatever B is.
Cost matmul_per_example(int64_t b, int64_t d, int64_t f, const MatmulDtypes& dt = {});
// Row softmax over [rows, cols]: max, subtract, exp, sum, divide = 5 FLOPs per element.
Cost softmax(int64_t rows, int64_t cols, DType t);

struct AttentionShape {
  int64_t batch = 1, heads = 1, seq_q = 1, seq_kv = 1, head_dim = 64;
  // Key/value heads (grouped-query attention: each shared by heads / kv_heads query heads, so K and V
  // are that much smaller); 0 = heads. The FLOPs are the query heads'.
  int64_t kv_heads = 0;
  DType dtype = DType::bf16;
  bool causal = false;
  bool backward = false;  // forward + backward (backward = 2.5x the forward's matmul FLOPs)
};
// Materialises the scores: writes S and P [seq_q, seq_kv] and reads them back.
Cost attention_naive(const AttentionShape& s);
// Tiles the scores on chip: reads Q, K, V and writes O plus the fp32 log-sum-exp only.
Cost attention_flash(const AttentionShape& s);

// D[m,n] = A[m,k] B[n,k]^T with fp8 inputs, fp32 scales per 1x128 block of A and per 128x128
// block of B (DeepGEMM's fine-grained scaling), output `out`.
Cost fp8_gemm(int64_t m, int64_t n, int64_t k, DType in = DType::fp8_e4m3, DType out = DType::bf16);
// M-grouped GEMM for MoE: each group g multiplies its rows of A by its own B[g] [n,k].
// Contiguous: groups' rows are packed back to back (m_per_group[g] rows each).
Cost grouped_gemm_contiguous(const std::vector<int64_t>& m_per_group, int64_t n, int64_t k,
                             DType in = DType::fp8_e4m3, DType out = DType::bf16);
// K-grouped, the routed experts' weight gradient (DeepGEMM's k_grouped tn): for each group g with rows[g]
// rows, D[g] [n,k] (+)= A_g^T B_g, A_g [rows[g], n] and B_g [rows[g], k] its rows, accumulated into D [G, n,
// k] in `acc` (read and written). a, b, out name the operands in the cost's traffic.
Cost grouped_gemm_dw(const std::vector<int64_t>& rows, int64_t n, int64_t k, DType in, DType acc,
                     const char* a = "A", const char* b = "B", const char* out = "D[G,n,k]");
// Masked: A is [groups, max_m, k] but only valid_m[g] rows of group g are real; only those are
// counted (FLOPs, A reads, D writes). A group with no valid row does not read its B.
Cost grouped_gemm_masked(int64_t max_m, const std::vector<int64_t>& valid_m, int64_t n, int64_t k,
                         DType in = DType::fp8_e4m3, DType out = DType::bf16);

// Collectives over `chips` chips in a ring, `bytes` = the full buffer S. Link bytes per chip:
// send S; all-reduce 2(n-1)/n S; all-gather and reduce-scatter (n-1)/n S.
Cost send(int64_t bytes, DType t = DType::bf16);
Cost all_reduce(int64_t bytes, int64_t chips, DType t = DType::bf16);
Cost all_gather(int64_t bytes, int64_t chips, DType t = DType::bf16);
Cost reduce_scatter(int64_t bytes, int64_t chips, DType t = DType::bf16);
// Matmul with D split over `chips`: each computes X[:,Dc] W[Dc,:] and the partial sums [B,F] are
// all-reduced (for 2 chips: each sends its partial sum to the other). Link traffic only.
Cost matmul_split_d(int64_t b, int64_t d, int64_t f, int64_t chips, const MatmulDtypes& dt = {});

// The smallest token batch B at which X[B,D] @ W[D,F] is compute-bound (T_math >= T_memory),
// solved from the exact byte counts; `asymptotic` is the B << D, F limit peak/bw * size(w)/2.
struct CriticalBatch {
  std::string chip, compute, level;
  double peak = 0, bandwidth = 0;
  int64_t d = 0, f = 0;
  double asymptotic = 0;
  std::optional<int64_t> exact;  // none: never compute-bound at these D, F
};
CriticalBatch critical_batch(const Chip& chip, int64_t d, int64_t f, const MatmulDtypes& dt = {},
                             const std::string& level = "");

// For matmul_split_d: the smallest D at which T_math >= T_link, for any B (B cancels):
// D >= (n-1) size(out) peak / link_bw.
struct CriticalSplit {
  std::string chip, compute, link;
  double peak = 0, link_bandwidth = 0;
  int64_t chips = 2;
  double threshold = 0;  // compute-bound when D >= threshold
  int64_t exact = 0;     // smallest whole D that is
};
CriticalSplit critical_split_d(const Chip& chip, int64_t chips, const MatmulDtypes& dt = {},
                               const std::string& link = "intra_node");

// ---------------------------------------------------------------------------------------------
// A Transformer LM's training step as a list of operations (the CS336 model: pre-norm blocks,
// RMSNorm, RoPE, causal attention, SwiGLU, untied lm_head, AdamW). Pure arithmetic on sizes, so the
// analyzer answers for any chip and any size, including ones that do not fit on the machine at hand.

// The architecture (ModelArch: ModelConfig's numbers) and one training step's settings.
struct ModelShape : ModelArch {
  int64_t batch = 4, seq = 256;
  // Operand dtype of the GEMMs and attention: f32, bf16 or fp16 (master weights, gradients,
  // optimizer state, the residual stream, norms and the loss stay fp32, as mixed precision keeps them).
  DType operand = DType::f32;
  // How the operands sit in memory, which sets the bytes every op moves for them; unset = the
  // operand dtype itself. An implementation that emulates the operand dtype stores something wider:
  // ridge's model on a chip without fp16 arithmetic (a CPU) rounds each operand through fp16 but
  // stores and moves it as fp32, so its fp16 run moves 4 bytes per operand element, not 2 (see
  // ridge::model::operand_storage, which step_roofline applies when this is unset).
  std::optional<DType> storage;
  bool flash = true;  // FlashAttention (causal tiles skipped) or the math path (S and P in memory)
};

struct ModelOp {
  std::string pass;   // "forward", "backward", "optimizer"
  std::string kind;   // "gemm", "attention", "elementwise", "optimizer"
  std::string name;   // "gemm qkv", "norm", "attention backward", ...
  int64_t count = 1;  // times it runs per step (num_layers for an op inside a block)
  Cost cost;          // one run
  // An op of the feed-forward of some layers only (an MoE model): true for the MoE layers' (count = their
  // number), false for the dense layers' (count = the rest) and for every other op.
  bool moe = false;
};

// Every operation of forward, backward and the optimizer step (zero_grad, gradient norm, AdamW), in
// execution order, with ops inside a block listed once with count = layers. ridge::Error naming the
// field for a non-positive size, d_model not a multiple of heads, num_kv_heads negative or not dividing
// heads, or an operand dtype other than f32, bf16, fp16.
//
// An MoE model's MoE layers (count = num_moe_layers(); the dense layers' feed-forward ops count the rest)
// run, in place of the dense feed-forward: the router GEMM [N,D] x [D,E], the top-k, the permute of the
// N k chosen rows into expert order, the experts' w1|w3 and w2 as M-grouped contiguous GEMMs
// (grouped_gemm_contiguous) over those N k rows split evenly over the E experts (uniform routing: each
// expert reads its weights once per step, all E of them once N k >= E), SwiGLU on them, the weighted
// combine, and the shared experts as dense GEMMs of width num_shared_experts x d_expert; backward, the same
// in reverse with the experts' weight gradients as K-grouped GEMMs (per expert x_e^T dy_e, accumulated into
// [E, ...]). The GEMM FLOPs are the active ones (N k rows), so model_matmul_flops is what MFU counts.
std::vector<ModelOp> model_step_ops(const ModelShape& m);
// FLOPs of the GEMMs and attention only (what MFU counts): forward, backward.
double model_matmul_flops(const ModelShape& m, const std::string& pass);
// Parameter count of the architecture (V*D embedding + L*(2*D*D + 2*D*Dkv + 3*D*F + 2*D) + D + V*D
// lm_head, Dkv = kv heads * d_head, = D without grouped-query attention), summed over the tensors
// ridge/roofline/model_buffers.hpp lists, in long double: no size overflows it.
long double model_param_count(const ModelArch& m);
// The parameters one token passes through: model_param_count less, in each MoE layer, the routed experts it
// does not use (top_k of the num_experts are active; the router and the shared experts always are). The
// whole count for a dense model. MFU's FLOPs are this count's (2 per multiply-add), not the total's.
long double model_active_param_count(const ModelArch& m);

// ---------------------------------------------------------------------------------------------
// Bounds as text for the CLI.

// A multi-line human-readable account of one cost on one chip (FLOPs, bytes by operand,
// intensity, the times, the binding roof, the attainable fraction of peak).
std::string describe(const Cost& cost, const Bound& b, const Chip& chip);
// One chip's figures with sources, as `ridge hw show` prints them.
std::string describe(const Chip& chip);

// The standard benchmark shapes, measured points held against a chip, and the plot are
// ridge::report's (ridge/report.hpp): roofline is arithmetic on the figures it is given.

}  // namespace ridge::roofline
