// The trace ranges the model and its trainer record, named once. The model opens them (RIDGE_RANGE), and
// whoever attributes a trace's time to kinds of work (`ridge bench model`'s summary, the step prediction)
// reads the kind from this table: renaming a range renames it for both, and removing one is a compile
// error where it was used, never a silent move of its time into "other".
#pragma once

#include <string_view>

namespace ridge::model::ranges {

enum class Kind {
  phase,          // forward, backward, optimizer: together the timed step
  block,          // a grouping (a layer, an attention or FFN block) whose time its leaves already hold
  gemm,           // a linear layer's GEMMs
  attention,      // the attention kernel, forward or backward
  elementwise,    // norms, RoPE, SwiGLU, the loss, the embedding, the weights' cast
  optimizer,      // AdamW and what the optimizer step holds
  communication,  // data-parallel gradient reduction and parameter gathering
};

struct Name {
  const char* text;
  Kind kind;
};

// The trainer's phases (src/model/train.cpp).
inline constexpr Name forward{"forward", Kind::phase};
inline constexpr Name backward{"backward", Kind::phase};
inline constexpr Name optimizer{"optimizer", Kind::phase};
inline constexpr Name reduce_gradients{"reduce gradients", Kind::communication};
inline constexpr Name gather_parameters{"gather parameters", Kind::communication};

// The forward pass (src/model/model.cpp), in the order it runs.
inline constexpr Name cast_weights{"cast weights", Kind::elementwise};
inline constexpr Name layer{"layer", Kind::block};
inline constexpr Name embedding{"embedding", Kind::elementwise};
inline constexpr Name attention_block{"attention block", Kind::block};
inline constexpr Name norm{"norm", Kind::elementwise};
inline constexpr Name gemm_qkv{"gemm qkv", Kind::gemm};
inline constexpr Name rope{"rope", Kind::elementwise};
inline constexpr Name attention{"attention", Kind::attention};
inline constexpr Name gemm_out{"gemm out", Kind::gemm};
inline constexpr Name ffn_block{"ffn block", Kind::block};
inline constexpr Name gemm_w1_w3{"gemm w1 w3", Kind::gemm};
inline constexpr Name swiglu{"swiglu", Kind::elementwise};
inline constexpr Name gemm_w2{"gemm w2", Kind::gemm};
// An MoE layer's feed-forward (in the ffn block, after its norm): the router's GEMM and the choice, the
// tokens' rows permuted into the experts' layout, the experts (their grouped GEMMs and SwiGLU), the
// shared experts (the dense feed-forward's ranges inside), and the combine with the gate weights.
inline constexpr Name gemm_router{"gemm router", Kind::gemm};
inline constexpr Name route{"route", Kind::elementwise};
inline constexpr Name permute{"permute", Kind::elementwise};
inline constexpr Name experts{"experts", Kind::block};
inline constexpr Name gemm_experts_w1_w3{"gemm experts w1 w3", Kind::gemm};
inline constexpr Name gemm_experts_w2{"gemm experts w2", Kind::gemm};
inline constexpr Name shared_experts{"shared experts", Kind::block};
inline constexpr Name unpermute{"unpermute", Kind::elementwise};
// Expert parallelism (ridge/model/expert_exchange.hpp): the counts and the tokens' rows to the experts'
// owners, and the experts' outputs back; in the backward pass the outputs' gradients to the owners
// (dispatch backward: the combine's gradient) and the inputs' gradients back (combine backward). A
// dispatch overlapped with the shared experts shows as two ranges around them: the start, and the wait.
inline constexpr Name dispatch{"dispatch", Kind::communication};
inline constexpr Name combine{"combine", Kind::communication};
inline constexpr Name final_norm{"final norm", Kind::elementwise};
inline constexpr Name gemm_lm_head{"gemm lm_head", Kind::gemm};
inline constexpr Name loss{"loss", Kind::elementwise};

// The backward pass, in the order it runs.
inline constexpr Name loss_backward{"loss backward", Kind::elementwise};
inline constexpr Name gemm_lm_head_backward{"gemm lm_head backward", Kind::gemm};
inline constexpr Name final_norm_backward{"final norm backward", Kind::elementwise};
inline constexpr Name layer_backward{"layer backward", Kind::block};
inline constexpr Name ffn_block_backward{"ffn block backward", Kind::block};
inline constexpr Name gemm_w2_backward{"gemm w2 backward", Kind::gemm};
inline constexpr Name swiglu_backward{"swiglu backward", Kind::elementwise};
inline constexpr Name gemm_w1_w3_backward{"gemm w1 w3 backward", Kind::gemm};
// An MoE layer's, in the order they run: the shared experts first (they read the gradient the norm left
// rounded), then the combine's, the experts', the permutation's, the routing's and the router GEMM's.
inline constexpr Name shared_experts_backward{"shared experts backward", Kind::block};
inline constexpr Name unpermute_backward{"unpermute backward", Kind::elementwise};
inline constexpr Name experts_backward{"experts backward", Kind::block};
inline constexpr Name gemm_experts_w2_backward{"gemm experts w2 backward", Kind::gemm};
inline constexpr Name gemm_experts_w1_w3_backward{"gemm experts w1 w3 backward", Kind::gemm};
inline constexpr Name dispatch_backward{"dispatch backward", Kind::communication};
inline constexpr Name combine_backward{"combine backward", Kind::communication};
inline constexpr Name permute_backward{"permute backward", Kind::elementwise};
inline constexpr Name route_backward{"route backward", Kind::elementwise};
inline constexpr Name gemm_router_backward{"gemm router backward", Kind::gemm};
inline constexpr Name norm_backward{"norm backward", Kind::elementwise};
inline constexpr Name attention_block_backward{"attention block backward", Kind::block};
inline constexpr Name gemm_out_backward{"gemm out backward", Kind::gemm};
inline constexpr Name attention_backward{"attention backward", Kind::attention};
inline constexpr Name gemm_qkv_backward{"gemm qkv backward", Kind::gemm};
inline constexpr Name embedding_backward{"embedding backward", Kind::elementwise};

inline constexpr Name all[] = {
    forward,
    backward,
    optimizer,
    reduce_gradients,
    gather_parameters,
    cast_weights,
    layer,
    embedding,
    attention_block,
    norm,
    gemm_qkv,
    rope,
    attention,
    gemm_out,
    ffn_block,
    gemm_w1_w3,
    swiglu,
    gemm_w2,
    gemm_router,
    route,
    permute,
    experts,
    gemm_experts_w1_w3,
    gemm_experts_w2,
    shared_experts,
    unpermute,
    dispatch,
    combine,
    final_norm,
    gemm_lm_head,
    loss,
    loss_backward,
    gemm_lm_head_backward,
    final_norm_backward,
    layer_backward,
    ffn_block_backward,
    gemm_w2_backward,
    swiglu_backward,
    gemm_w1_w3_backward,
    shared_experts_backward,
    unpermute_backward,
    experts_backward,
    gemm_experts_w2_backward,
    gemm_experts_w1_w3_backward,
    dispatch_backward,
    combine_backward,
    permute_backward,
    route_backward,
    gemm_router_backward,
    norm_backward,
    attention_block_backward,
    gemm_out_backward,
    attention_backward,
    gemm_qkv_backward,
    embedding_backward,
};

// The range named `text`, or nullptr when the model records no range of that name.
constexpr const Name* find(std::string_view text) {
  for (const Name& n : all)
    if (text == n.text) return &n;
  return nullptr;
}

}  // namespace ridge::model::ranges
