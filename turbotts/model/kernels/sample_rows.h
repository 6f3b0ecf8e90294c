// The per-row sampler (sample_rows.cpp), bound in int8_gemv.cpp's module.

#pragma once

#include <torch/extension.h>

// logits (R, V) float32; temperature, penalty, top_p (R, 1) float32; top_k, seeds, steps (R,) int64;
// history (R, W) int64 (V is padding); ban_eos, is_greedy (R,) bool. Returns (R,) int64 ids. Where
// probs_out is (R, V) float32 (not empty), each sampled row's final probabilities are written to it
// (greedy rows: zeros), for tests.
torch::Tensor sample_rows(const torch::Tensor& logits, const torch::Tensor& temperature, const torch::Tensor& penalty,
                          const torch::Tensor& top_p, const torch::Tensor& top_k, const torch::Tensor& history,
                          const torch::Tensor& ban_eos, const torch::Tensor& is_greedy, const torch::Tensor& seeds,
                          const torch::Tensor& steps, int64_t eos_id, const torch::Tensor& probs_out);
