// The fused decode step (see decode_stack.h). Reductions carry `omp simd` so
// they vectorize (a float sum does not, unasked, at -O3: it reorders the adds). Numerics follow the eager path:
// float32 RMS norm, HF rotate-half rotary from the caller's tables, softmax
// attention over the slot's cache in place, SiLU-gated MLP, int8 matmuls on the
// tile kernel (int16 activations, exact int32 sums) up to MAX_ROWS rows, fbgemm's beyond.
// exp is a polynomial (within 2e-7 relative of expf) run eight lanes at a time, for the
// softmax and SiLU, whose scalar expf calls grew with the batch.

#include "decode_stack.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "int8_tiles.h"

using namespace turbotts_int8;

namespace {

void rms_norm(const float* x, const float* weight, int64_t H, float eps, float* out) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t k = 0; k < H; ++k) sum += x[k] * x[k];
  const float inv = 1.f / std::sqrt(sum / static_cast<float>(H) + eps);
  for (int64_t k = 0; k < H; ++k) out[k] = weight[k] * (x[k] * inv);
}

// v (d) <- v * cos + roll(v, d / 2) * signed_sin, in place; two halves, no index modulo, so both
// loops vectorize (a `%` per element keeps them scalar, in a loop run for every head of every layer)
void rotate(float* v, const float* cos, const float* signed_sin, int64_t d, float* tmp) {
  const int64_t half = d / 2;
  for (int64_t i = 0; i < half; ++i) tmp[i] = v[i] * cos[i] + v[i + half] * signed_sin[i];
  for (int64_t i = half; i < d; ++i) tmp[i] = v[i] * cos[i] + v[i - half] * signed_sin[i];
  std::copy(tmp, tmp + d, v);
}

// Eight float lanes as a GCC vector: the same arithmetic as a float, in one register (two halves
// on CPUs that split 256-bit ops), on any AVX2 or AVX-512 build.
using F32x8 = float __attribute__((vector_size(32)));
using I32x8 = int32_t __attribute__((vector_size(32)));

inline float clamp_to(float x, float lo, float hi) { return std::min(std::max(x, lo), hi); }
inline F32x8 clamp_to(F32x8 x, float lo, float hi) {
  x = x < lo ? F32x8{} + lo : x;
  return x > hi ? F32x8{} + hi : x;
}

// 2^n for integral n in float's normal exponent range, built in the exponent bits
inline float pow2_of(float n) { return __builtin_bit_cast(float, (static_cast<int32_t>(n) + 127) << 23); }
inline F32x8 pow2_of(F32x8 n) { return reinterpret_cast<F32x8>((__builtin_convertvector(n, I32x8) + 127) << 23); }

// e^x in float32: Cody-Waite reduction to r in [-ln2/2, ln2/2], the degree-6
// minimax polynomial of Cephes' expf for e^r, and 2^n built in the exponent bits.
// Branch-free (x is clamped to the normal range). For a float or eight of them: GCC does not
// vectorize a float loop over it on AVX2 (without AVX-512's masked compares it will not
// if-convert a compare that may trap), so the loops below take eight lanes explicitly.
template <typename F>
inline F exp_poly(F x) {
  x = clamp_to(x, -87.3f, 88.3f);
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: adding and subtracting it rounds to the nearest integer
  const F n = (x * 1.44269504088896341f + kRound) - kRound;
  const F r = x - n * 0.693359375f + n * 2.12194440e-4f;
  F p = F{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  return p * pow2_of(n);
}

inline F32x8 load8(const float* p) {
  F32x8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, F32x8 v) { std::memcpy(p, &v, sizeof v); }

// a (I) <- silu(gate) * up, where g holds gate (I) then up (I)
void silu_gate(const float* g, float* a, int64_t I) {
  int64_t k = 0;
  for (; k + 8 <= I; k += 8) {
    const F32x8 gate = load8(g + k);
    store8(a + k, gate / (1.f + exp_poly(-gate)) * load8(g + I + k));
  }
  for (; k < I; ++k) a[k] = g[k] / (1.f + exp_poly(-g[k])) * g[I + k];
}

// scores (n) <- e^(scores - shift); returns their sum
float exp_shifted_sum(float* scores, int64_t n, float shift) {
  F32x8 lanes{};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const F32x8 e = exp_poly(load8(scores + j) - shift);
    store8(scores + j, e);
    lanes += e;
  }
  float total = 0.f;
  for (int i = 0; i < 8; ++i) total += lanes[i];
  for (; j < n; ++j) {
    scores[j] = exp_poly(scores[j] - shift);
    total += scores[j];
  }
  return total;
}

// The cache holds float32 or bf16. bf16 halves the bytes that attention reads, which at 16 rows and
// 150 cached tokens are more than the int8 weights (300 vs 190 MB a step). It is kept as its raw 16
// bits: widening by a shift and a bit cast (not a struct and memcpy) lets the `omp simd` dot below
// vectorize, which the struct and memcpy kept it from doing.
using Bf16 = uint16_t;

inline float to_float(float v) { return v; }
inline float to_float(Bf16 v) { return __builtin_bit_cast(float, static_cast<uint32_t>(v) << 16); }

template <typename T>
T from_float(float f);
template <>
inline float from_float<float>(float f) {
  return f;
}
// round to nearest even, as torch's float -> bfloat16 (and NaN stays NaN)
template <>
inline Bf16 from_float<Bf16>(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (std::isnan(f)) return Bf16{0x7fc0};
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<Bf16>(u >> 16);
}

template <typename T>
float dot_cached(const float* q, const T* key, int64_t d) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < d; ++i) sum += q[i] * to_float(key[i]);
  return sum;
}

void check_weight(const at::Tensor& t, at::ScalarType type, int64_t rows, int64_t cols, const char* what) {
  TORCH_CHECK(t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == type, "DecodeStack: ", what,
              " must be a contiguous CPU tensor of ", c10::toString(type));
  TORCH_CHECK(t.size(0) == rows && (cols < 0 || (t.dim() == 2 && t.size(1) == cols)), "DecodeStack: ", what,
              " has shape ", t.sizes(), ", expected (", rows, cols < 0 ? "" : ", ", cols < 0 ? "" : std::to_string(cols),
              ")");
}

}  // namespace

DecodeStack::DecodeStack(std::vector<at::Tensor> norms, std::vector<at::Tensor> tiles,
                         std::vector<at::Tensor> scales, std::vector<c10::intrusive_ptr<LinearPackedParamsBase>> wide,
                         bool reduce_range, int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, double eps)
    : norms_(std::move(norms)),
      tiles_(std::move(tiles)),
      scales_(std::move(scales)),
      wide_(std::move(wide)),
      reduce_range_(reduce_range),
      num_heads_(num_heads),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      eps_(static_cast<float>(eps)) {
  TORCH_CHECK(!tiles_.empty() && tiles_.size() % 4 == 0 && scales_.size() == tiles_.size(),
              "DecodeStack: four int8 matmuls (and scales) per layer");
  num_layers_ = static_cast<int64_t>(tiles_.size()) / 4;
  TORCH_CHECK(wide_.empty() || wide_.size() == tiles_.size(), "DecodeStack: wide matmuls, if any, one per tiled one");
  TORCH_CHECK(static_cast<int64_t>(norms_.size()) == 2 * num_layers_ + 1, "DecodeStack: two norms per layer and a final one");
  TORCH_CHECK(num_heads > 0 && num_kv_heads > 0 && num_heads % num_kv_heads == 0 && head_dim % 2 == 0,
              "DecodeStack: heads must be a multiple of kv heads, head_dim even");
  hidden_ = tiles_[1].size(0);
  intermediate_ = tiles_[3].size(1);
  const int64_t qkv = (num_heads + 2 * num_kv_heads) * head_dim;
  for (int64_t l = 0; l < num_layers_; ++l) {
    check_weight(tiles_[4 * l], at::kChar, qkv, hidden_, "q|k|v weights");
    check_weight(tiles_[4 * l + 1], at::kChar, hidden_, num_heads * head_dim, "o weights");
    check_weight(tiles_[4 * l + 2], at::kChar, 2 * intermediate_, hidden_, "gate|up weights");
    check_weight(tiles_[4 * l + 3], at::kChar, hidden_, intermediate_, "down weights");
    for (int64_t i = 0; i < 4; ++i)
      check_weight(scales_[4 * l + i], at::kFloat, tiles_[4 * l + i].size(0), -1, "scales");
  }
  for (const auto& norm : norms_) check_weight(norm, at::kFloat, hidden_, -1, "norm weights");
}

at::Tensor DecodeStack::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& signed_sin,
                                   const at::Tensor& kv, const std::vector<int64_t>& slots,
                                   const std::vector<int64_t>& lens) const {
  TORCH_CHECK(kv.scalar_type() == at::kFloat || kv.scalar_type() == at::kBFloat16,
              "DecodeStack: kv must be a contiguous float32 or bfloat16 (layers, 2, slots, kv_heads, max_len, head_dim) "
              "cache");
  if (kv.scalar_type() == at::kBFloat16)
    return run<Bf16>(x, cos, signed_sin, kv, reinterpret_cast<Bf16*>(kv.data_ptr<at::BFloat16>()), slots, lens);
  return run<float>(x, cos, signed_sin, kv, kv.data_ptr<float>(), slots, lens);
}

template <typename T>
at::Tensor DecodeStack::run(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& signed_sin,
                               const at::Tensor& kv, T* cache, const std::vector<int64_t>& slots,
                               const std::vector<int64_t>& lens) const {
  const int64_t M = x.size(0), H = hidden_, I = intermediate_, d = head_dim_;
  const int64_t nh = num_heads_, nkv = num_kv_heads_, group = nh / nkv;
  TORCH_CHECK(x.dim() == 2 && x.size(1) == H && x.scalar_type() == at::kFloat && x.device().is_cpu(),
              "DecodeStack: x must be (M, ", H, ") float32 on CPU");
  TORCH_CHECK(M >= 1, "DecodeStack: at least one row");
  TORCH_CHECK(static_cast<int64_t>(slots.size()) == M && static_cast<int64_t>(lens.size()) == M,
              "DecodeStack: one slot and one cache length per row");
  for (const auto* table : {&cos, &signed_sin})
    TORCH_CHECK(table->dim() == 2 && table->size(0) == M && table->size(1) == d && table->is_contiguous() &&
                    table->scalar_type() == at::kFloat,
                "DecodeStack: rotary tables must be contiguous (M, head_dim) float32");
  TORCH_CHECK(kv.dim() == 6 && kv.size(0) == num_layers_ && kv.size(1) == 2 && kv.size(3) == nkv && kv.size(5) == d &&
                  kv.is_contiguous() && kv.device().is_cpu(),
              "DecodeStack: kv must be a contiguous float32 or bfloat16 (layers, 2, slots, kv_heads, max_len, head_dim) "
              "cache");
  const int64_t num_slots = kv.size(2), max_len = kv.size(4);
  for (int64_t m = 0; m < M; ++m)
    TORCH_CHECK(slots[m] >= 0 && slots[m] < num_slots && lens[m] >= 0 && lens[m] < max_len,
                "DecodeStack: slot ", slots[m], " position ", lens[m], " is outside the cache");

  const int64_t qkv_width = (nh + 2 * nkv) * d;
  std::vector<float> h(M * H), normed(M * H), qkv(M * qkv_width), attn(M * nh * d), proj(M * H), gate_up(M * 2 * I),
      act(M * I), tmp(d);
  std::vector<int16_t> scratch(M * std::max({H, I, nh * d}));
  std::copy(x.data_ptr<float>(), x.data_ptr<float>() + M * H, h.begin());
  const float* cos_p = cos.data_ptr<float>();
  const float* sin_p = signed_sin.data_ptr<float>();
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  // element offset of (layer, k|v, slot, head, position, 0)
  auto at = [&](int64_t layer, int64_t which, int64_t slot, int64_t head, int64_t pos) {
    return (((((layer * 2 + which) * num_slots + slot) * nkv + head) * max_len + pos) * d);
  };
  auto matmul = [&](const float* in, int64_t K, int64_t index, float* out) {
    const auto& w = tiles_[index];
    const int64_t N = w.size(0);
    if (M > MAX_ROWS && !wide_.empty()) {
      // fbgemm writes a new tensor; from_blob only borrows `in` for the call
      const auto y = wide_[index]->apply_dynamic(at::from_blob(const_cast<float*>(in), {M, K}), reduce_range_);
      TORCH_CHECK(y.is_contiguous() && y.size(0) == M && y.size(1) == N, "DecodeStack: fbgemm returned ", y.sizes());
      std::copy(y.data_ptr<float>(), y.data_ptr<float>() + M * N, out);
      return;
    }
    // groups of up to MAX_ROWS rows, each streaming the weights once
    for (int64_t m0 = 0; m0 < M; m0 += MAX_ROWS)
      matmul_rows(in + m0 * K, std::min(MAX_ROWS, M - m0), K, w.data_ptr<int8_t>(), scales_[index].data_ptr<float>(),
                  N, out + m0 * N, scratch.data());
  };

  for (int64_t l = 0; l < num_layers_; ++l) {
    // attention block
    for (int64_t m = 0; m < M; ++m) rms_norm(&h[m * H], norms_[2 * l].data_ptr<float>(), H, eps_, &normed[m * H]);
    matmul(normed.data(), H, 4 * l, qkv.data());
    for (int64_t m = 0; m < M; ++m) {
      float* row = &qkv[m * qkv_width];
      for (int64_t head = 0; head < nh + nkv; ++head) rotate(row + head * d, cos_p + m * d, sin_p + m * d, d, tmp.data());
      for (int64_t g = 0; g < nkv; ++g) {
        T* key = cache + at(l, 0, slots[m], g, lens[m]);
        T* value = cache + at(l, 1, slots[m], g, lens[m]);
        for (int64_t i = 0; i < d; ++i) {
          key[i] = from_float<T>(row[(nh + g) * d + i]);
          value[i] = from_float<T>(row[(nh + nkv + g) * d + i]);
        }
      }
    }
    at::parallel_for(0, M * nh, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> scores;
      for (int64_t task = begin; task < end; ++task) {
        const int64_t m = task / nh, head = task % nh, g = head / group, num_keys = lens[m] + 1;
        const float* q = &qkv[m * qkv_width + head * d];
        const T* keys = cache + at(l, 0, slots[m], g, 0);
        const T* values = cache + at(l, 1, slots[m], g, 0);
        scores.resize(num_keys);
        float best = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < num_keys; ++j) {
          scores[j] = dot_cached(q, keys + j * d, d) * scale;
          best = std::max(best, scores[j]);
        }
        const float total = exp_shifted_sum(scores.data(), num_keys, best);
        float* out = &attn[(m * nh + head) * d];
        std::fill(out, out + d, 0.f);
        for (int64_t j = 0; j < num_keys; ++j) {
          const float p = scores[j] / total;
          const T* v = values + j * d;
#pragma omp simd
          for (int64_t i = 0; i < d; ++i) out[i] += p * to_float(v[i]);
        }
      }
    });
    matmul(attn.data(), nh * d, 4 * l + 1, proj.data());
    for (int64_t k = 0; k < M * H; ++k) h[k] += proj[k];
    // MLP block
    for (int64_t m = 0; m < M; ++m) rms_norm(&h[m * H], norms_[2 * l + 1].data_ptr<float>(), H, eps_, &normed[m * H]);
    matmul(normed.data(), H, 4 * l + 2, gate_up.data());
    for (int64_t m = 0; m < M; ++m) {
      const float* g = &gate_up[m * 2 * I];
      float* a = &act[m * I];
      silu_gate(g, a, I);
    }
    matmul(act.data(), I, 4 * l + 3, proj.data());
    for (int64_t k = 0; k < M * H; ++k) h[k] += proj[k];
  }
  auto out = at::empty({M, H}, at::kFloat);
  for (int64_t m = 0; m < M; ++m) rms_norm(&h[m * H], norms_.back().data_ptr<float>(), H, eps_, out.data_ptr<float>() + m * H);
  return out;
}
