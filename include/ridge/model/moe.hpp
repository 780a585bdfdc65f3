// Mixture-of-Experts routing (issue 40): the router's top-k with its two gates, the load-balancing
// terms, and the permutation of tokens into DeepGEMM's grouped layouts and back. Everything a MoE block
// does besides its GEMMs; the GEMMs are the grouped ones of ridge/gemm_fp8.hpp (and their fp32 and
// bf16 twins), which read the layouts planned here.
//
// Gates (logits l_t = x_t W_router^T, one row of E per token):
//   softmax  (Mixtral):     p = softmax(l_t); the top-k experts by p; weights p_j / sum_{i in top-k} p_i.
//   sigmoid  (DeepSeek-V3): s = sigmoid(l_t); the top-k experts by s; weights s_j / sum_{i in top-k} s_i.
// With the auxiliary-loss-free balance a bias b (one per expert) is added to p or s for the choice only:
// the weights are always the unbiased ones.
// Ties: equal scores are ordered by expert id, lower first, in selection and in the order of a token's
// k choices; the rule holds on every path and at every thread count (a token's choice reads its own
// row only).
//
// Balance, two ways:
//   aux  (Switch/GShard, as Hugging Face's Mixtral computes it): L_aux = coef * E * sum_e (c_e / T) * P_e,
//        c_e the tokens routed to expert e (a token counts once per expert it chose), P_e the mean over
//        the T tokens of the gate's distribution q over all E experts (softmax p, or for sigmoid the
//        normalised s_e / sum_j s_j as DeepSeek-V3's sequence-wise loss). L_aux = coef * k at a
//        perfect balance. Its gradient reaches the logits through P only (c is a count).
//   bias (DeepSeek-V3's auxiliary-loss-free balance): after each step b_e += speed * sign(mean - c_e),
//        mean = T * k / E: an overloaded expert's bias falls, an idle one's rises.
//
// Dropless: every token reaches its k experts; nothing here has a capacity.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "ridge/roofline/model_arch.hpp"

namespace ridge::model::moe {

// The model's shape names them (ModelArch's router and balance).
using Gate = roofline::MoeGate;
// "softmax" or "sigmoid"; anything else is a ridge::Error naming `what` and the accepted names.
Gate parse_gate(const std::string& name, const char* what = "router");
const char* gate_name(Gate g);

using Balance = roofline::MoeBalance;
Balance parse_balance(const std::string& name, const char* what = "balance");
const char* balance_name(Balance b);

// The router's choice for T tokens: expert[t * k + j] is token t's j-th expert (best first) and
// weight[t * k + j] its gate weight; count[e] the tokens routed to expert e. V is the type of the logits
// and weights: float for the model, double for its fp64 reference (the gradient checks).
template <typename V>
struct BasicRouting {
  int64_t tokens = 0, experts = 0, top_k = 0;
  Gate gate = Gate::softmax;
  std::vector<int32_t> expert;
  std::vector<V> weight;
  std::vector<int64_t> count;
  // max count / mean count (1 at a perfect balance; E / k when one expert takes every token).
  double load_imbalance() const;
};
using Routing = BasicRouting<float>;
// The same ratio from counts of `tokens` tokens, top_k choices each, over count.size() experts (counts
// summed over data-parallel workers, say); 1 without tokens.
double load_imbalance(std::span<const int64_t> count, int64_t tokens, int64_t top_k);

// The functions below are defined for V = float and V = double; V is read from the routing argument
// (the spans take a vector of V as they are).
template <typename V>
using Same = std::type_identity_t<V>;

// Routes T tokens from their logits [T, E] (row-major). bias: empty, or E finite values added to the
// scores for the choice only. Throws ridge::Error naming the argument: E >= 1, 1 <= top_k <= E,
// logits.size() == T * E, every logit finite (a NaN or an infinity names its token and expert).
template <typename V>
void route(std::span<const Same<V>> logits, int64_t tokens, int64_t experts, int64_t top_k, Gate gate,
           std::span<const Same<V>> bias, BasicRouting<V>& out);

// d logits [T, E] of the loss through the gate weights, given d weight [T * k] (the loss's gradient with
// respect to each chosen expert's weight: <dy_t, expert_j(x_t)>). Overwrites dlogits.
template <typename V>
void gate_backward(std::span<const Same<V>> logits, const BasicRouting<V>& r,
                   std::span<const Same<V>> dweight, std::span<Same<V>> dlogits);

// The auxiliary loss above, and its gradient added into dlogits [T, E] (scaled by `scale`, the loss's
// upstream gradient).
template <typename V>
double aux_loss(std::span<const Same<V>> logits, const BasicRouting<V>& r, double coef);
template <typename V>
void aux_loss_backward(std::span<const Same<V>> logits, const BasicRouting<V>& r, double coef, double scale,
                       std::span<Same<V>> dlogits);

// The bias update of the auxiliary-loss-free balance (speed > 0: DeepSeek-V3's gamma, 0.001), from the
// routing's counts, or from counts of `tokens` tokens given apart (a data-parallel step's, summed over
// the workers: count [E], mean = tokens * top_k / E).
template <typename V>
void update_bias(const BasicRouting<V>& r, double speed, std::span<Same<V>> bias);
template <typename V>
void update_bias(std::span<const int64_t> count, int64_t tokens, int64_t top_k, double speed,
                 std::span<V> bias);

// DeepGEMM's contiguous layout for T tokens' k choices: expert e's rows are the block
// [offset[e], offset[e] + count[e]) of a buffer of `rows` rows, in token order, then padded with -1
// rows up to a multiple of `alignment` (an expert with no token takes no rows). row[t * k + j] is the
// row of token t's j-th choice; m_indices[r] the expert of row r, -1 for padding.
struct ContiguousLayout {
  int64_t rows = 0, alignment = 1;
  std::vector<int64_t> offset;     // [E + 1]
  std::vector<int32_t> m_indices;  // [rows]
  std::vector<int64_t> row;        // [T * k]
};
template <typename V>
ContiguousLayout contiguous_layout(const BasicRouting<V>& r, int64_t alignment);

// Expert parallelism (ridge/model/expert_exchange.hpp): the layout an owner of `experts` experts runs
// its grouped GEMMs over, for the rows `sources` workers send it. count [sources * experts] holds the rows
// source s sends for each of the owner's experts (count[s * experts + e]); they arrive source by source,
// each source's rows in expert order. Expert e's run gathers every source's rows of e, in source order
// (which is the global batch's token order), padded to a multiple of `alignment`. layout.row[i] is the
// run row of the i-th row received, layout.m_indices the owner's own expert ids (0 .. experts - 1), and
// count[e] the rows of expert e. Throws ridge::Error naming `count` for a negative count or a size
// other than sources * experts.
struct ReceivedLayout {
  ContiguousLayout layout;
  std::vector<int64_t> count;  // [experts]
};
ReceivedLayout received_layout(std::span<const int64_t> count, int64_t sources, int64_t experts,
                               int64_t alignment);

// The row moves of an exchange: scatter dst[row[i], :] = src[i, :], and gather dst[i, :] (+)= src[row[i],
// :], for i < row.size() (rows d wide; lds, ldd apart). accumulate adds in (float and double only).
template <typename X>
void scatter_rows(const X* src, int64_t lds, std::span<const int64_t> row, int64_t d, X* dst, int64_t ldd);
template <typename X>
void gather_rows(const X* src, int64_t lds, std::span<const int64_t> row, int64_t d, X* dst, int64_t ldd,
                 bool accumulate);

// DeepGEMM's masked layout (decode): expert e's tokens are rows [0, masked_m[e]) of its [max_m, d]
// slab, in token order; row[t * k + j] = e * max_m + the row within the slab. max_m >= the largest
// count (a fixed buffer: the caller sizes it once, e.g. T for a batch of T tokens).
struct MaskedLayout {
  int64_t max_m = 0;
  std::vector<int32_t> masked_m;  // [E]
  std::vector<int64_t> row;       // [T * k]
};
template <typename V>
MaskedLayout masked_layout(const BasicRouting<V>& r, int64_t max_m);

// Copies token rows into the grouped buffer: dst[row[t * k + j], :] = x[t, :] (x [T, d] with row stride
// ldx, dst with row stride ldd). Rows no choice lands on (padding) are left as they are. X: float, bf16
// or double (the rows are copied as they are).
template <typename X, typename V>
void permute_rows(const X* x, int64_t ldx, std::span<const int64_t> row, const BasicRouting<V>& r, int64_t d,
                  X* dst, int64_t ldd);
// The combine: y[t, :] (+)= sum_j w_j * src[row[t * k + j], :] with w_j = weight[t * k + j] (an empty
// weight: 1, the backward of permute_rows), summed in slot order j = 0..k-1 in V (the same bits at
// any thread count). accumulate: add into y instead of overwriting it.
template <typename V>
void combine_rows(const V* src, int64_t lds, std::span<const int64_t> row, std::span<const Same<V>> weight,
                  const BasicRouting<V>& r, int64_t d, V* y, int64_t ldy, bool accumulate);
// The combine's backward: dsrc[row[t*k+j], :] = weight[t*k+j] * dy[t, :], and
// dweight[t * k + j] = <dy[t, :], src[row[t * k + j], :]> (in double, rounded once).
template <typename V>
void combine_rows_backward(const V* dy, int64_t lddy, const V* src, int64_t lds, std::span<const int64_t> row,
                           const BasicRouting<V>& r, int64_t d, V* dsrc, int64_t ldds,
                           std::span<Same<V>> dweight);

}  // namespace ridge::model::moe
