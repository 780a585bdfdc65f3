// The shapes fit() times, named once: the fit measures them and the miss explanations (explain.cpp)
// compare a case's shapes against them. None of them is a model preset's, so a prediction is made on
// shapes the model never ran.
#pragma once

#include <cstdint>

namespace ridge::predict::fit_shapes {

// GEMMs in the model's aspect: 1536 tokens (batch 4 x context 384; the presets' contexts are powers
// of two), a d_model-like side of 640, a d_ff-like side of 2816 and an lm_head-like 12000.
inline constexpr int64_t kTokens = 1536, kDModel = 640, kDff = 2816, kVocab = 12000;
// The MoE experts' grouped GEMMs: 12 experts of width 320 over d_model 640, 128 rows each (1536 tokens,
// top-1; the contiguous layout's 64-row alignment holds without padding). No preset has 12 experts or
// width 320.
inline constexpr int64_t kExperts = 12, kExpertWidth = 320, kExpertRows = 128;
// Causal flash attention, forward + backward: no preset has 6 heads or context 384.
inline constexpr int64_t kHeads = 6, kSeq = 384, kHeadDim = 64;
// A residual add over 6M floats (72 MB moved, out of every cache).
inline constexpr int64_t kStream = 6'000'000;
// SwiGLU forward + backward over 1536 x 1792 (no preset's d_ff).
inline constexpr int64_t kSwigluRows = 1536, kSwigluCols = 1792;
// AdamW over 7M parameters (no preset has that many).
inline constexpr int64_t kParams = 7'000'000;

}  // namespace ridge::predict::fit_shapes
