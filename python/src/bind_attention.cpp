// ridge.attention: FlashAttention-2 forward and backward on strided [batch, heads, seq, d] views
// (python/ridge/attention.py passes flash-attn's [batch, seq, heads, d] tensors transposed, which
// are views: no copies). fp32 or bf16; lse is fp32 [batch, heads, seq]. Decode attention over a
// paged KV cache and the append into it take flash-attn's layouts as they are.
#include "common.hpp"
#include "ridge/attention.hpp"
#include "core/check.hpp"

namespace ridge::py {
namespace {

// Masks and softcap as flash-attn passes them: window_size = (left, right), -1 = unbounded.
struct Masks {
  int64_t left = -1, right = -1;
  float softcap = 0.0f;
};

attention::Options options(bool causal, float scale, const Masks& m = {}) {
  attention::Options o;
  o.causal = causal;
  o.scale = scale;
  o.window_left = m.left;
  o.window_right = m.right;
  o.softcap = m.softcap;
  return o;
}

template <typename T>
void forward_t(const In& q, const In& k, const In& v, const Out& o, const Out& lse, bool causal, float scale,
               const Masks& m) {
  const auto qv = tensor<const T>(q, "q", 4);
  const auto kv = tensor<const T>(k, "k", 4);
  const auto vv = tensor<const T>(v, "v", 4);
  // The C++ API takes views of one element type for inputs and outputs alike; the inputs are only read.
  auto cast = [](const TensorView<const T>& t) {
    TensorView<T> r;
    r.data = const_cast<T*>(t.data);
    r.rank = t.rank;
    r.shape = t.shape;
    r.stride = t.stride;
    return r;
  };
  const auto ov = tensor<T>(o, "o", 4);
  const auto lv = tensor<float>(lse, "lse", 3);
  nb::gil_scoped_release release;
  attention::flash_attention_forward<T>(cast(qv), cast(kv), cast(vv), ov, lv, options(causal, scale, m));
}

template <typename T>
void backward_t(const In& q, const In& k, const In& v, const In& o, const In& d_o, const In& lse,
                const Out& dq, const Out& dk, const Out& dv, bool causal, float scale, const Masks& m) {
  auto cast = [](const TensorView<const T>& t) {
    TensorView<T> r;
    r.data = const_cast<T*>(t.data);
    r.rank = t.rank;
    r.shape = t.shape;
    r.stride = t.stride;
    return r;
  };
  const auto qv = cast(tensor<const T>(q, "q", 4));
  const auto kv = cast(tensor<const T>(k, "k", 4));
  const auto vv = cast(tensor<const T>(v, "v", 4));
  const auto ov = cast(tensor<const T>(o, "o", 4));
  const auto dov = cast(tensor<const T>(d_o, "do", 4));
  const auto lt = tensor<const float>(lse, "lse", 3);
  TensorView<float> lv;
  lv.data = const_cast<float*>(lt.data);
  lv.rank = lt.rank;
  lv.shape = lt.shape;
  lv.stride = lt.stride;
  const auto dqv = tensor<T>(dq, "dq", 4);
  const auto dkv = tensor<T>(dk, "dk", 4);
  const auto dvv = tensor<T>(dv, "dv", 4);
  nb::gil_scoped_release release;
  attention::flash_attention_backward<T>(qv, kv, vv, ov, dov, lv, dqv, dkv, dvv, options(causal, scale, m));
}

void forward(const In& q, const In& k, const In& v, const Out& o, const Out& lse, bool causal, float scale,
             int64_t window_left, int64_t window_right, float softcap) {
  const DType t = array_dtype(q, "q");
  const Masks m{window_left, window_right, softcap};
  if (t == DType::f32)
    forward_t<float>(q, k, v, o, lse, causal, scale, m);
  else if (t == DType::bf16)
    forward_t<bf16>(q, k, v, o, lse, causal, scale, m);
  else
    throw nb::type_error(
        fmt::format("q: expected a float32 or bfloat16 array, got {}", dtype_name(t)).c_str());
}

void backward(const In& q, const In& k, const In& v, const In& o, const In& d_o, const In& lse, const Out& dq,
              const Out& dk, const Out& dv, bool causal, float scale, int64_t window_left,
              int64_t window_right, float softcap) {
  const DType t = array_dtype(q, "q");
  const Masks m{window_left, window_right, softcap};
  if (t == DType::f32)
    backward_t<float>(q, k, v, o, d_o, lse, dq, dk, dv, causal, scale, m);
  else if (t == DType::bf16)
    backward_t<bf16>(q, k, v, o, d_o, lse, dq, dk, dv, causal, scale, m);
  else
    throw nb::type_error(
        fmt::format("q: expected a float32 or bfloat16 array, got {}", dtype_name(t)).c_str());
}

// Variable-length batches: q, o [total_q, heads, d], k, v [total_k, kv_heads, d], lse [heads, total_q]
// (below, after `writable`).

// A read-only operand as the mutable view the C++ API takes (it only reads it).
template <typename T>
TensorView<T> writable(const TensorView<const T>& t) {
  TensorView<T> r;
  r.data = const_cast<T*>(t.data);
  r.rank = t.rank;
  r.shape = t.shape;
  r.stride = t.stride;
  return r;
}

template <typename T>
void varlen_forward_t(const In& q, const In& k, const In& v, const In& cu_q, const In& cu_k, int64_t max_q,
                      int64_t max_k, const Out& o, const Out& lse, bool causal, float scale, const Masks& m) {
  const auto qv = writable(tensor<const T>(q, "q", 3));
  const auto kv = writable(tensor<const T>(k, "k", 3));
  const auto vv = writable(tensor<const T>(v, "v", 3));
  const auto cq = int32_vector(cu_q, "cu_seqlens_q");
  const auto ck = int32_vector(cu_k, "cu_seqlens_k");
  const auto ov = tensor<T>(o, "o", 3);
  const auto lv = tensor<float>(lse, "lse", 2);
  nb::gil_scoped_release release;
  attention::flash_attention_varlen_forward<T>(qv, kv, vv, cq, ck, max_q, max_k, ov, lv,
                                               options(causal, scale, m));
}

template <typename T>
void varlen_backward_t(const In& q, const In& k, const In& v, const In& o, const In& d_o, const In& lse,
                       const In& cu_q, const In& cu_k, int64_t max_q, int64_t max_k, const Out& dq,
                       const Out& dk, const Out& dv, bool causal, float scale, const Masks& m) {
  const auto qv = writable(tensor<const T>(q, "q", 3));
  const auto kv = writable(tensor<const T>(k, "k", 3));
  const auto vv = writable(tensor<const T>(v, "v", 3));
  const auto ov = writable(tensor<const T>(o, "o", 3));
  const auto dov = writable(tensor<const T>(d_o, "do", 3));
  const auto lv = writable(tensor<const float>(lse, "lse", 2));
  const auto cq = int32_vector(cu_q, "cu_seqlens_q");
  const auto ck = int32_vector(cu_k, "cu_seqlens_k");
  const auto dqv = tensor<T>(dq, "dq", 3);
  const auto dkv = tensor<T>(dk, "dk", 3);
  const auto dvv = tensor<T>(dv, "dv", 3);
  nb::gil_scoped_release release;
  attention::flash_attention_varlen_backward<T>(qv, kv, vv, ov, dov, lv, cq, ck, max_q, max_k, dqv, dkv, dvv,
                                                options(causal, scale, m));
}

void varlen_forward(const In& q, const In& k, const In& v, const In& cu_q, const In& cu_k, int64_t max_q,
                    int64_t max_k, const Out& o, const Out& lse, bool causal, float scale,
                    int64_t window_left, int64_t window_right, float softcap) {
  const DType t = array_dtype(q, "q");
  const Masks m{window_left, window_right, softcap};
  if (t == DType::f32)
    varlen_forward_t<float>(q, k, v, cu_q, cu_k, max_q, max_k, o, lse, causal, scale, m);
  else if (t == DType::bf16)
    varlen_forward_t<bf16>(q, k, v, cu_q, cu_k, max_q, max_k, o, lse, causal, scale, m);
  else
    throw nb::type_error(
        fmt::format("q: expected a float32 or bfloat16 array, got {}", dtype_name(t)).c_str());
}

void varlen_backward(const In& q, const In& k, const In& v, const In& o, const In& d_o, const In& lse,
                     const In& cu_q, const In& cu_k, int64_t max_q, int64_t max_k, const Out& dq,
                     const Out& dk, const Out& dv, bool causal, float scale, int64_t window_left,
                     int64_t window_right, float softcap) {
  const DType t = array_dtype(q, "q");
  const Masks m{window_left, window_right, softcap};
  if (t == DType::f32)
    varlen_backward_t<float>(q, k, v, o, d_o, lse, cu_q, cu_k, max_q, max_k, dq, dk, dv, causal, scale, m);
  else if (t == DType::bf16)
    varlen_backward_t<bf16>(q, k, v, o, d_o, lse, cu_q, cu_k, max_q, max_k, dq, dk, dv, causal, scale, m);
  else
    throw nb::type_error(
        fmt::format("q: expected a float32 or bfloat16 array, got {}", dtype_name(t)).c_str());
}

template <typename T>
void with_kvcache_t(const In& q, const In& k_cache, const In& v_cache, const In& seqlens, const In& table,
                    const Out& o, const std::optional<Out>& lse, float scale, bool causal, int num_splits) {
  const auto qv = writable(tensor<const T>(q, "q", 4));
  const auto kv = writable(tensor<const T>(k_cache, "k_cache", 4));
  const auto vv = writable(tensor<const T>(v_cache, "v_cache", 4));
  const auto lens = int32_vector(seqlens, "cache_seqlens");
  const auto tv = matrix<const int32_t>(table, "block_table");
  const auto ov = tensor<T>(o, "o", 4);
  TensorView<float> lv;
  if (lse) lv = tensor<float>(*lse, "lse", 3);
  attention::KVCacheOptions opt;
  opt.scale = scale;
  opt.causal = causal;
  opt.num_splits = num_splits;
  nb::gil_scoped_release release;
  attention::flash_attn_with_kvcache<T>(qv, kv, vv, lens, tv, ov, lv, opt);
}

template <typename T>
void append_t(const In& k, const In& v, const Out& k_cache, const Out& v_cache, const In& seqlens,
              const In& table) {
  const auto kn = writable(tensor<const T>(k, "k", 4));
  const auto vn = writable(tensor<const T>(v, "v", 4));
  const auto kc = tensor<T>(k_cache, "k_cache", 4);
  const auto vc = tensor<T>(v_cache, "v_cache", 4);
  const auto lens = int32_vector(seqlens, "cache_seqlens");
  const auto tv = matrix<const int32_t>(table, "block_table");
  nb::gil_scoped_release release;
  attention::kvcache_append<T>(kn, vn, kc, vc, lens, tv);
}

void with_kvcache(const In& q, const In& k_cache, const In& v_cache, const In& seqlens, const In& table,
                  const Out& o, const std::optional<Out>& lse, float scale, bool causal, int num_splits) {
  const DType t = array_dtype(q, "q");
  if (t == DType::f32)
    with_kvcache_t<float>(q, k_cache, v_cache, seqlens, table, o, lse, scale, causal, num_splits);
  else if (t == DType::bf16)
    with_kvcache_t<bf16>(q, k_cache, v_cache, seqlens, table, o, lse, scale, causal, num_splits);
  else
    throw nb::type_error(
        fmt::format("q: expected a float32 or bfloat16 array, got {}", dtype_name(t)).c_str());
}

void append(const In& k, const In& v, const Out& k_cache, const Out& v_cache, const In& seqlens,
            const In& table) {
  const DType t = array_dtype(k_cache, "k_cache");
  if (t == DType::f32)
    append_t<float>(k, v, k_cache, v_cache, seqlens, table);
  else if (t == DType::bf16)
    append_t<bf16>(k, v, k_cache, v_cache, seqlens, table);
  else
    throw nb::type_error(
        fmt::format("k_cache: expected a float32 or bfloat16 array, got {}", dtype_name(t)).c_str());
}

}  // namespace

void bind_attention(nb::module_& m) {
  m.def("forward", &forward, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("o"), nb::arg("lse"),
        nb::arg("causal"), nb::arg("scale"), nb::arg("window_left") = -1, nb::arg("window_right") = -1,
        nb::arg("softcap") = 0.0f);
  m.def("backward", &backward, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("o"), nb::arg("do"),
        nb::arg("lse"), nb::arg("dq"), nb::arg("dk"), nb::arg("dv"), nb::arg("causal"), nb::arg("scale"),
        nb::arg("window_left") = -1, nb::arg("window_right") = -1, nb::arg("softcap") = 0.0f);
  m.def("varlen_forward", &varlen_forward, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("cu_seqlens_q"),
        nb::arg("cu_seqlens_k"), nb::arg("max_seqlen_q"), nb::arg("max_seqlen_k"), nb::arg("o"),
        nb::arg("lse"), nb::arg("causal"), nb::arg("scale"), nb::arg("window_left"), nb::arg("window_right"),
        nb::arg("softcap"));
  m.def("varlen_backward", &varlen_backward, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("o"),
        nb::arg("do"), nb::arg("lse"), nb::arg("cu_seqlens_q"), nb::arg("cu_seqlens_k"),
        nb::arg("max_seqlen_q"), nb::arg("max_seqlen_k"), nb::arg("dq"), nb::arg("dk"), nb::arg("dv"),
        nb::arg("causal"), nb::arg("scale"), nb::arg("window_left"), nb::arg("window_right"),
        nb::arg("softcap"));
  m.def(
      "visible_scores",
      [](int64_t n_q, int64_t n_k, bool causal, int64_t window_left, int64_t window_right) {
        attention::Options o;
        o.causal = causal;
        o.window_left = window_left;
        o.window_right = window_right;
        return attention::attention_visible_scores(n_q, n_k, o);
      },
      nb::arg("n_q"), nb::arg("n_k"), nb::arg("causal"), nb::arg("window_left"), nb::arg("window_right"));
  m.def("with_kvcache", &with_kvcache, nb::arg("q"), nb::arg("k_cache"), nb::arg("v_cache"),
        nb::arg("cache_seqlens"), nb::arg("block_table"), nb::arg("o"), nb::arg("lse").none(),
        nb::arg("scale"), nb::arg("causal"), nb::arg("num_splits"));
  m.def("kvcache_append", &append, nb::arg("k"), nb::arg("v"), nb::arg("k_cache"), nb::arg("v_cache"),
        nb::arg("cache_seqlens"), nb::arg("block_table"));
  m.def("kvcache_num_splits", &attention::kvcache_num_splits, nb::arg("seqlen_k"), nb::arg("units"),
        nb::arg("threads"));
  m.def("flops", &attention::attention_flops, nb::arg("batch"), nb::arg("heads"), nb::arg("n_q"),
        nb::arg("n_k"), nb::arg("d"), nb::arg("causal"), nb::arg("backward"));
}

}  // namespace ridge::py
