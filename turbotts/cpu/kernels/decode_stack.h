// One decode step of the whole Llama layer stack for a few rows, in one call.
//
// Why: with int8 weights streamed by the tile kernel, a batch-1 step spent a
// large share of its time in ~25 small eager ops per layer (norms, rotary, cache
// writes, single-query attention) and their Python dispatch, not in reading the weights.
// Here each of those is a plain loop over a few thousand floats, and the
// weights are read once per step by the same tile kernel. Wider steps (5 to 16
// rows at concurrency 16) keep fbgemm's matmuls, whose VNNI multiply does 4x the
// work per instruction, called from here on the same int8 weights; the rest of
// the step stays fused (at 16 rows eager attention alone was a large part of it).

#pragma once

#include <ATen/native/quantized/PackedParams.h>
#include <ATen/core/Tensor.h>

#include <vector>

class DecodeStack {
 public:
  // Per layer l: norms[2l] input norm, norms[2l + 1] post-attention norm, norms.back() the final norm;
  // tiles/scales[4l ..4l + 3]: q|k|v, o, gate|up and down, each packed by pack() with one scale per row.
  // wide: the same four matmuls per layer as fbgemm packed weights, for steps of more than MAX_ROWS rows
  // (empty: those run on the tiles, once per group of MAX_ROWS rows); reduce_range as fbgemm is called with.
  DecodeStack(std::vector<at::Tensor> norms, std::vector<at::Tensor> tiles, std::vector<at::Tensor> scales,
              std::vector<c10::intrusive_ptr<LinearPackedParamsBase>> wide, bool reduce_range, int64_t num_heads,
              int64_t num_kv_heads, int64_t head_dim, double eps);

  // x (M, hidden) float32; cos/signed_sin (M, head_dim) rotary tables of each row's position;
  // kv the cache (layers, 2, slots, kv_heads, max_len, head_dim) float32 or bfloat16, contiguous; row m's token
  // is written at position lens[m] of slot slots[m] and attends to positions 0..lens[m].
  // Returns the final-norm hidden state (M, hidden).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& signed_sin,
                        const at::Tensor& kv, const std::vector<int64_t>& slots,
                        const std::vector<int64_t>& lens) const;

 private:
  // forward for a cache of float (float32) or raw bf16 bits (uint16_t) at `cache`
  template <typename T>
  at::Tensor run(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& signed_sin,
                    const at::Tensor& kv, T* cache, const std::vector<int64_t>& slots,
                    const std::vector<int64_t>& lens) const;

  std::vector<at::Tensor> norms_, tiles_, scales_;
  std::vector<c10::intrusive_ptr<LinearPackedParamsBase>> wide_;
  bool reduce_range_;
  int64_t num_layers_, num_heads_, num_kv_heads_, head_dim_, hidden_, intermediate_;
  float eps_;
};
