// The per-row sampler (sample_rows.cpp): an extension of its own (turbotts/cpu/extensions.py).

#pragma once

#include <ATen/core/Tensor.h>

// logits (R, V) float32; temperature, penalty, top_p (R, 1) float32; top_k, seeds, steps (R,) int64;
// history (R, W) int64 (V is padding); ban_eos, is_greedy (R,) bool. Returns (R,) int64 ids. Where
// probs_out is (R, V) float32 (not empty), each sampled row's final probabilities are written to it
// (greedy rows: zeros), for tests.
at::Tensor sample_rows(const at::Tensor& logits, const at::Tensor& temperature, const at::Tensor& penalty,
                          const at::Tensor& top_p, const at::Tensor& top_k, const at::Tensor& history,
                          const at::Tensor& ban_eos, const at::Tensor& is_greedy, const at::Tensor& seeds,
                          const at::Tensor& steps, int64_t eos_id, const at::Tensor& probs_out);
