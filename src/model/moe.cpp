// Mixture-of-Experts routing and the grouped layouts (include/ridge/model/moe.hpp). A token's choice,
// its gate weights and their gradients read that token's row alone, so every result is the same at any
// thread count; the counts and layouts are built in token order on one thread.
#include "ridge/model/moe.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <utility>

#include "ridge/core/error.hpp"
#include "ridge/core/format.hpp"
#include "ridge/core/threads.hpp"
#include "core/check.hpp"

namespace ridge::model::moe {
namespace {

// Parallel over tokens only when there is enough work to pay for the team.
int threads_for(int64_t tokens, int64_t per_token) {
  return tokens * per_token >= (int64_t{1} << 15) ? get_num_threads() : 1;
}

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// The gate's distribution over all E experts for one token, in double: softmax p, or sigmoid s (its
// own scores; `normalised` divides them by their sum, the aux loss's q).
template <typename V>
void gate_scores(const V* l, int64_t e, Gate gate, bool normalised, double* q) {
  if (gate == Gate::softmax) {
    const double m = *std::max_element(l, l + e);
    double sum = 0;
    for (int64_t i = 0; i < e; ++i) sum += (q[i] = std::exp(static_cast<double>(l[i]) - m));
    for (int64_t i = 0; i < e; ++i) q[i] /= sum;
    return;
  }
  double sum = 0;
  for (int64_t i = 0; i < e; ++i) sum += (q[i] = sigmoid(l[i]));
  if (normalised)
    for (int64_t i = 0; i < e; ++i) q[i] /= sum;
}

template <typename V>
void check_routing(const BasicRouting<V>& r, std::span<const V> logits) {
  check_arg(static_cast<int64_t>(logits.size()) == r.tokens * r.experts, "logits",
            "{} values for {} tokens x {} experts", logits.size(), r.tokens, r.experts);
  check(static_cast<int64_t>(r.expert.size()) == r.tokens * r.top_k &&
            static_cast<int64_t>(r.weight.size()) == r.tokens * r.top_k,
        "routing: {} choices and {} weights for {} tokens x top-k {}", r.expert.size(), r.weight.size(),
        r.tokens, r.top_k);
}

// One of two names, or a ridge::Error naming `what` and both accepted names.
template <class T>
T parse_name(const std::string& name, const char* what, const char* kind,
             const std::pair<const char*, T> (&names)[2]) {
  for (const auto& [text, value] : names)
    if (name == text) return value;
  fail_arg(what, "'{}' is not a {} (accepted: {}, {})", name, kind, names[0].first, names[1].first);
}

}  // namespace

Gate parse_gate(const std::string& name, const char* what) {
  return parse_name<Gate>(name, what, "gate", {{"softmax", Gate::softmax}, {"sigmoid", Gate::sigmoid}});
}

const char* gate_name(Gate g) {
  return g == Gate::softmax ? "softmax" : "sigmoid";
}

Balance parse_balance(const std::string& name, const char* what) {
  return parse_name<Balance>(name, what, "balance", {{"aux", Balance::aux}, {"bias", Balance::bias}});
}

const char* balance_name(Balance b) {
  return b == Balance::aux ? "aux" : "bias";
}

double load_imbalance(std::span<const int64_t> count, int64_t tokens, int64_t top_k) {
  if (tokens == 0 || count.empty()) return 1.0;
  const double mean = static_cast<double>(tokens * top_k) / static_cast<double>(count.size());
  return static_cast<double>(*std::max_element(count.begin(), count.end())) / mean;
}

template <typename V>
double BasicRouting<V>::load_imbalance() const {
  return moe::load_imbalance(count, tokens, top_k);
}

template <typename V>
void route(std::span<const Same<V>> logits, int64_t tokens, int64_t experts, int64_t top_k, Gate gate,
           std::span<const Same<V>> bias, BasicRouting<V>& out) {
  check_arg(experts >= 1, "experts", "{} is not accepted (expected 1 or more)", experts);
  check_arg(top_k >= 1 && top_k <= experts, "top_k", "{} is not accepted (expected 1 .. experts = {})", top_k,
            experts);
  check_arg(tokens >= 0, "tokens", "{} is negative", tokens);
  check_arg(static_cast<int64_t>(logits.size()) == tokens * experts, "logits",
            "{} values for {} tokens x {} experts", logits.size(), tokens, experts);
  check_arg(bias.empty() || static_cast<int64_t>(bias.size()) == experts, "bias", "{} values for {} experts",
            bias.size(), experts);
  for (size_t i = 0; i < bias.size(); ++i)
    check_arg(std::isfinite(bias[i]), "bias", "expert {} has {}, not a finite number", i, bias[i]);
  for (int64_t i = 0; i < tokens * experts; ++i)
    check_arg(std::isfinite(logits[static_cast<size_t>(i)]), "logits",
              "token {} expert {} is {}, not a finite number", i / experts, i % experts,
              logits[static_cast<size_t>(i)]);
  out.tokens = tokens;
  out.experts = experts;
  out.top_k = top_k;
  out.gate = gate;
  out.expert.assign(static_cast<size_t>(tokens * top_k), 0);
  out.weight.assign(static_cast<size_t>(tokens * top_k), V(0));
  out.count.assign(static_cast<size_t>(experts), 0);

#pragma omp parallel num_threads(threads_for(tokens, experts))
  {
    std::vector<double> q(static_cast<size_t>(experts)), key(static_cast<size_t>(experts));
    std::vector<int32_t> order(static_cast<size_t>(experts));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
      gate_scores(logits.data() + t * experts, experts, gate, false, q.data());
      for (int64_t i = 0; i < experts; ++i)
        key[static_cast<size_t>(i)] =
            q[static_cast<size_t>(i)] + (bias.empty() ? 0.0 : bias[static_cast<size_t>(i)]);
      std::iota(order.begin(), order.end(), 0);
      // Best first; equal keys by expert id, lower first.
      std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
        const double ka = key[static_cast<size_t>(a)], kb = key[static_cast<size_t>(b)];
        return ka > kb || (ka == kb && a < b);
      });
      double sum = 0;
      for (int64_t j = 0; j < top_k; ++j) sum += q[static_cast<size_t>(order[static_cast<size_t>(j)])];
      for (int64_t j = 0; j < top_k; ++j) {
        const int32_t e = order[static_cast<size_t>(j)];
        out.expert[static_cast<size_t>(t * top_k + j)] = e;
        out.weight[static_cast<size_t>(t * top_k + j)] = static_cast<V>(q[static_cast<size_t>(e)] / sum);
      }
    }
  }
  for (const int32_t e : out.expert) ++out.count[static_cast<size_t>(e)];
}

template <typename V>
void gate_backward(std::span<const Same<V>> logits, const BasicRouting<V>& r,
                   std::span<const Same<V>> dweight, std::span<Same<V>> dlogits) {
  check_routing(r, logits);
  const int64_t t_n = r.tokens, e_n = r.experts, k = r.top_k;
  check_arg(static_cast<int64_t>(dweight.size()) == t_n * k, "dweight", "{} values for {} tokens x top-k {}",
            dweight.size(), t_n, k);
  check_arg(static_cast<int64_t>(dlogits.size()) == t_n * e_n, "dlogits",
            "{} values for {} tokens x {} experts", dlogits.size(), t_n, e_n);
  std::fill(dlogits.begin(), dlogits.end(), V(0));
#pragma omp parallel num_threads(threads_for(t_n, e_n))
  {
    std::vector<double> u(static_cast<size_t>(k));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < t_n; ++t) {
      const V* l = logits.data() + t * e_n;
      const int32_t* ex = r.expert.data() + t * k;
      const V* dw = dweight.data() + t * k;
      // The weights again in double, from the logits: g_j = u_j / sum_i u_i over the chosen experts, with
      // u = exp(l - max) (softmax: the normalised top-k of a softmax is a softmax over the top-k) or
      // u = sigmoid(l).
      double* uj = u.data();
      double m = -INFINITY;
      for (int64_t j = 0; j < k; ++j) m = std::max(m, static_cast<double>(l[ex[j]]));
      double sum = 0;
      for (int64_t j = 0; j < k; ++j)
        sum += (uj[j] = r.gate == Gate::softmax ? std::exp(static_cast<double>(l[ex[j]]) - m)
                                                : sigmoid(l[ex[j]]));
      double gdg = 0;
      for (int64_t j = 0; j < k; ++j) gdg += uj[j] / sum * dw[j];
      for (int64_t j = 0; j < k; ++j) {
        const double g = uj[j] / sum;
        double d = dw[j] - gdg;  // dL/du_j * sum
        if (r.gate == Gate::softmax) {
          d *= g;  // dL/dl_j = g_j (dg_j - sum_i g_i dg_i)
        } else {
          d = d / sum * uj[j] * (1.0 - uj[j]);  // dL/ds_j = (dg_j - sum_i g_i dg_i) / S, ds/dl = s (1 - s)
        }
        dlogits[static_cast<size_t>(t * e_n + ex[j])] = static_cast<V>(d);
      }
    }
  }
}

template <typename V>
double aux_loss(std::span<const Same<V>> logits, const BasicRouting<V>& r, double coef) {
  check_routing(r, logits);
  const int64_t t_n = r.tokens, e_n = r.experts;
  if (t_n == 0) return 0.0;
  std::vector<double> p(static_cast<size_t>(e_n), 0.0), q(static_cast<size_t>(e_n));
  for (int64_t t = 0; t < t_n; ++t) {
    gate_scores(logits.data() + t * e_n, e_n, r.gate, true, q.data());
    for (int64_t e = 0; e < e_n; ++e) p[static_cast<size_t>(e)] += q[static_cast<size_t>(e)];
  }
  double s = 0;
  for (int64_t e = 0; e < e_n; ++e)
    s += static_cast<double>(r.count[static_cast<size_t>(e)]) / static_cast<double>(t_n) *
         (p[static_cast<size_t>(e)] / static_cast<double>(t_n));
  return coef * static_cast<double>(e_n) * s;
}

template <typename V>
void aux_loss_backward(std::span<const Same<V>> logits, const BasicRouting<V>& r, double coef, double scale,
                       std::span<Same<V>> dlogits) {
  check_routing(r, logits);
  const int64_t t_n = r.tokens, e_n = r.experts;
  check_arg(static_cast<int64_t>(dlogits.size()) == t_n * e_n, "dlogits",
            "{} values for {} tokens x {} experts", dlogits.size(), t_n, e_n);
  if (t_n == 0) return;
  // dL/dq_{t,e} = a_e = scale * coef * E * c_e / T^2, the same for every token.
  std::vector<double> a(static_cast<size_t>(e_n));
  const double tt = static_cast<double>(t_n);
  for (int64_t e = 0; e < e_n; ++e)
    a[static_cast<size_t>(e)] = scale * coef * static_cast<double>(e_n) *
                                static_cast<double>(r.count[static_cast<size_t>(e)]) / (tt * tt);
#pragma omp parallel num_threads(threads_for(t_n, e_n))
  {
    std::vector<double> s(static_cast<size_t>(e_n));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < t_n; ++t) {
      const V* l = logits.data() + t * e_n;
      V* dl = dlogits.data() + t * e_n;
      gate_scores(l, e_n, r.gate, false, s.data());  // softmax p, or raw sigmoid s
      double sum = 0;
      if (r.gate == Gate::sigmoid)
        for (int64_t e = 0; e < e_n; ++e) sum += s[static_cast<size_t>(e)];
      double qa = 0;
      for (int64_t e = 0; e < e_n; ++e) {
        const double q =
            r.gate == Gate::softmax ? s[static_cast<size_t>(e)] : s[static_cast<size_t>(e)] / sum;
        qa += q * a[static_cast<size_t>(e)];
      }
      for (int64_t e = 0; e < e_n; ++e) {
        const double se = s[static_cast<size_t>(e)], d = a[static_cast<size_t>(e)] - qa;
        const double g = r.gate == Gate::softmax ? se * d : d / sum * se * (1.0 - se);
        dl[e] = static_cast<V>(static_cast<double>(dl[e]) + g);
      }
    }
  }
}

template <typename V>
void update_bias(std::span<const int64_t> count, int64_t tokens, int64_t top_k, double speed,
                 std::span<V> bias) {
  check_arg(std::isfinite(speed) && speed > 0, "speed", "{} is not accepted (expected a finite number > 0)",
            speed);
  check_arg(bias.size() == count.size(), "bias", "{} values for {} experts", bias.size(), count.size());
  const double mean = static_cast<double>(tokens * top_k) / static_cast<double>(count.size());
  for (size_t e = 0; e < count.size(); ++e) {
    const double c = static_cast<double>(count[e]);
    const double sign = c < mean ? 1.0 : c > mean ? -1.0 : 0.0;
    bias[e] = static_cast<V>(bias[e] + speed * sign);
  }
}

template <typename V>
void update_bias(const BasicRouting<V>& r, double speed, std::span<Same<V>> bias) {
  check_arg(static_cast<int64_t>(bias.size()) == r.experts, "bias", "{} values for {} experts", bias.size(),
            r.experts);
  update_bias<V>(r.count, r.tokens, r.top_k, speed, bias);
}

template <typename V>
ContiguousLayout contiguous_layout(const BasicRouting<V>& r, int64_t alignment) {
  check_arg(alignment >= 1, "alignment", "{} is not accepted (expected 1 or more)", alignment);
  ContiguousLayout c;
  c.alignment = alignment;
  c.offset.assign(static_cast<size_t>(r.experts + 1), 0);
  for (int64_t e = 0; e < r.experts; ++e) {
    const int64_t n = r.count[static_cast<size_t>(e)];
    c.offset[static_cast<size_t>(e + 1)] =
        c.offset[static_cast<size_t>(e)] + (n + alignment - 1) / alignment * alignment;
  }
  c.rows = c.offset.back();
  c.m_indices.assign(static_cast<size_t>(c.rows), -1);
  for (int64_t e = 0; e < r.experts; ++e)
    std::fill_n(c.m_indices.begin() + c.offset[static_cast<size_t>(e)], r.count[static_cast<size_t>(e)],
                static_cast<int32_t>(e));
  std::vector<int64_t> next(c.offset.begin(), c.offset.end() - 1);
  c.row.resize(r.expert.size());
  for (size_t i = 0; i < r.expert.size(); ++i) c.row[i] = next[static_cast<size_t>(r.expert[i])]++;
  return c;
}

ReceivedLayout received_layout(std::span<const int64_t> count, int64_t sources, int64_t experts,
                               int64_t alignment) {
  check_arg(alignment >= 1, "alignment", "{} is not accepted (expected 1 or more)", alignment);
  check_arg(sources >= 1 && experts >= 1 && static_cast<int64_t>(count.size()) == sources * experts, "count",
            "{} values for {} sources x {} experts", count.size(), sources, experts);
  ReceivedLayout r;
  ContiguousLayout& c = r.layout;
  c.alignment = alignment;
  r.count.assign(static_cast<size_t>(experts), 0);
  for (size_t i = 0; i < count.size(); ++i) {
    check_arg(count[i] >= 0, "count", "source {} expert {} has {} rows", i / static_cast<size_t>(experts),
              i % static_cast<size_t>(experts), count[i]);
    r.count[i % static_cast<size_t>(experts)] += count[i];
  }
  c.offset.assign(static_cast<size_t>(experts + 1), 0);
  for (size_t e = 0; e < r.count.size(); ++e)
    c.offset[e + 1] = c.offset[e] + (r.count[e] + alignment - 1) / alignment * alignment;
  c.rows = c.offset.back();
  c.m_indices.assign(static_cast<size_t>(c.rows), -1);
  for (size_t e = 0; e < r.count.size(); ++e)
    std::fill_n(c.m_indices.begin() + c.offset[e], r.count[e], static_cast<int32_t>(e));
  std::vector<int64_t> next(c.offset.begin(), c.offset.end() - 1);
  for (size_t i = 0; i < count.size(); ++i)
    for (int64_t n = 0; n < count[i]; ++n) c.row.push_back(next[i % static_cast<size_t>(experts)]++);
  return r;
}

template <typename X>
void scatter_rows(const X* src, int64_t lds, std::span<const int64_t> row, int64_t d, X* dst, int64_t ldd) {
  const auto n = static_cast<int64_t>(row.size());
#pragma omp parallel for num_threads(threads_for(n, d)) schedule(static)
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(dst + row[static_cast<size_t>(i)] * ldd, src + i * lds, static_cast<size_t>(d) * sizeof(X));
}

template <typename X>
void gather_rows(const X* src, int64_t lds, std::span<const int64_t> row, int64_t d, X* dst, int64_t ldd,
                 bool accumulate) {
  const auto n = static_cast<int64_t>(row.size());
  if constexpr (!std::is_arithmetic_v<X>)
    check(!accumulate, "gather_rows: accumulate needs float or double rows");
#pragma omp parallel for num_threads(threads_for(n, d)) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const X* s = src + row[static_cast<size_t>(i)] * lds;
    X* o = dst + i * ldd;
    if constexpr (std::is_arithmetic_v<X>) {
      if (accumulate) {
        for (int64_t c = 0; c < d; ++c) o[c] += s[c];
        continue;
      }
    }
    std::memcpy(o, s, static_cast<size_t>(d) * sizeof(X));
  }
}

template void scatter_rows<float>(const float*, int64_t, std::span<const int64_t>, int64_t, float*, int64_t);
template void scatter_rows<double>(const double*, int64_t, std::span<const int64_t>, int64_t, double*,
                                   int64_t);
template void scatter_rows<bf16>(const bf16*, int64_t, std::span<const int64_t>, int64_t, bf16*, int64_t);
template void gather_rows<float>(const float*, int64_t, std::span<const int64_t>, int64_t, float*, int64_t,
                                 bool);
template void gather_rows<double>(const double*, int64_t, std::span<const int64_t>, int64_t, double*, int64_t,
                                  bool);
template void gather_rows<bf16>(const bf16*, int64_t, std::span<const int64_t>, int64_t, bf16*, int64_t,
                                bool);

template <typename V>
MaskedLayout masked_layout(const BasicRouting<V>& r, int64_t max_m) {
  const int64_t most = r.count.empty() ? 0 : *std::max_element(r.count.begin(), r.count.end());
  check_arg(max_m >= most, "max_m", "{} is below the {} tokens routed to one expert", max_m, most);
  MaskedLayout m;
  m.max_m = max_m;
  m.masked_m.resize(static_cast<size_t>(r.experts));
  for (int64_t e = 0; e < r.experts; ++e)
    m.masked_m[static_cast<size_t>(e)] = static_cast<int32_t>(r.count[static_cast<size_t>(e)]);
  std::vector<int64_t> next(static_cast<size_t>(r.experts), 0);
  m.row.resize(r.expert.size());
  for (size_t i = 0; i < r.expert.size(); ++i) {
    const int64_t e = r.expert[i];
    m.row[i] = e * max_m + next[static_cast<size_t>(e)]++;
  }
  return m;
}

template <typename X, typename V>
void permute_rows(const X* x, int64_t ldx, std::span<const int64_t> row, const BasicRouting<V>& r, int64_t d,
                  X* dst, int64_t ldd) {
  check(static_cast<int64_t>(row.size()) == r.tokens * r.top_k, "permute_rows: {} rows for {} choices",
        row.size(), r.tokens * r.top_k);
  const int64_t k = r.top_k;
#pragma omp parallel for num_threads(threads_for(r.tokens, d* k)) schedule(static)
  for (int64_t t = 0; t < r.tokens; ++t)
    for (int64_t j = 0; j < k; ++j)
      std::memcpy(dst + row[static_cast<size_t>(t * k + j)] * ldd, x + t * ldx,
                  static_cast<size_t>(d) * sizeof(X));
}

template <typename V>
void combine_rows(const V* src, int64_t lds, std::span<const int64_t> row, std::span<const Same<V>> weight,
                  const BasicRouting<V>& r, int64_t d, V* y, int64_t ldy, bool accumulate) {
  const int64_t k = r.top_k;
  check(static_cast<int64_t>(row.size()) == r.tokens * k, "combine_rows: {} rows for {} choices", row.size(),
        r.tokens * k);
  check(weight.empty() || static_cast<int64_t>(weight.size()) == r.tokens * k,
        "combine_rows: {} weights for {} choices", weight.size(), r.tokens * k);
#pragma omp parallel for num_threads(threads_for(r.tokens, d* k)) schedule(static)
  for (int64_t t = 0; t < r.tokens; ++t) {
    V* yt = y + t * ldy;
    if (!accumulate) std::fill_n(yt, d, V(0));
    for (int64_t j = 0; j < k; ++j) {
      const V w = weight.empty() ? V(1) : weight[static_cast<size_t>(t * k + j)];
      const V* s = src + row[static_cast<size_t>(t * k + j)] * lds;
      for (int64_t i = 0; i < d; ++i) yt[i] += w * s[i];
    }
  }
}

template <typename V>
void combine_rows_backward(const V* dy, int64_t lddy, const V* src, int64_t lds, std::span<const int64_t> row,
                           const BasicRouting<V>& r, int64_t d, V* dsrc, int64_t ldds,
                           std::span<Same<V>> dweight) {
  const int64_t k = r.top_k;
  check(static_cast<int64_t>(row.size()) == r.tokens * k &&
            static_cast<int64_t>(dweight.size()) == r.tokens * k,
        "combine_rows_backward: {} rows and {} weight gradients for {} choices", row.size(), dweight.size(),
        r.tokens * k);
#pragma omp parallel for num_threads(threads_for(r.tokens, d* k)) schedule(static)
  for (int64_t t = 0; t < r.tokens; ++t) {
    const V* g = dy + t * lddy;
    for (int64_t j = 0; j < k; ++j) {
      const size_t c = static_cast<size_t>(t * k + j);
      const V w = r.weight[c];
      const V* s = src + row[c] * lds;
      V* ds = dsrc + row[c] * ldds;
      double dot = 0;
      for (int64_t i = 0; i < d; ++i) {
        ds[i] = w * g[i];
        dot += static_cast<double>(g[i]) * s[i];
      }
      dweight[c] = static_cast<V>(dot);
    }
  }
}

// The two value types: float (the model) and double (its fp64 reference).
#define RIDGE_MOE_INSTANCES(V)                                                                           \
  template struct BasicRouting<V>;                                                                       \
  template void route<V>(std::span<const V>, int64_t, int64_t, int64_t, Gate, std::span<const V>,        \
                         BasicRouting<V>&);                                                              \
  template void gate_backward<V>(std::span<const V>, const BasicRouting<V>&, std::span<const V>,         \
                                 std::span<V>);                                                          \
  template double aux_loss<V>(std::span<const V>, const BasicRouting<V>&, double);                       \
  template void aux_loss_backward<V>(std::span<const V>, const BasicRouting<V>&, double, double,         \
                                     std::span<V>);                                                      \
  template void update_bias<V>(const BasicRouting<V>&, double, std::span<V>);                            \
  template void update_bias<V>(std::span<const int64_t>, int64_t, int64_t, double, std::span<V>);        \
  template ContiguousLayout contiguous_layout<V>(const BasicRouting<V>&, int64_t);                       \
  template MaskedLayout masked_layout<V>(const BasicRouting<V>&, int64_t);                               \
  template void permute_rows<V, V>(const V*, int64_t, std::span<const int64_t>, const BasicRouting<V>&,  \
                                   int64_t, V*, int64_t);                                                \
  template void combine_rows<V>(const V*, int64_t, std::span<const int64_t>, std::span<const V>,         \
                                const BasicRouting<V>&, int64_t, V*, int64_t, bool);                     \
  template void combine_rows_backward<V>(const V*, int64_t, const V*, int64_t, std::span<const int64_t>, \
                                         const BasicRouting<V>&, int64_t, V*, int64_t, std::span<V>);
RIDGE_MOE_INSTANCES(float)
RIDGE_MOE_INSTANCES(double)
#undef RIDGE_MOE_INSTANCES
// bf16 operands are permuted as they are, routed by fp32 logits.
template void permute_rows<bf16, float>(const bf16*, int64_t, std::span<const int64_t>, const Routing&,
                                        int64_t, bf16*, int64_t);

}  // namespace ridge::model::moe
