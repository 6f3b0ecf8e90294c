// The int8 tile kernel shared by the matmul entry point (int8_gemv.cpp) and the
// fused decode stack (decode_stack.cpp): layout and numerics are described in
// int8_gemv.cpp's header.

#pragma once

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

// Everything here has internal linkage (the unnamed namespace): the native and the
// portable build can live in one process, and inline or template symbols with
// external linkage would be bound to whichever library loaded first.
namespace turbotts_int8 {
namespace {

constexpr int64_t TILE_N = 4;       // output rows per tile
constexpr int64_t CHUNK_K = 32;     // inputs per row per chunk
constexpr int64_t BLOCK_K = 4096;   // inputs summed in int32 before the float32 add
#ifndef TURBOTTS_PREFETCH_BYTES
#define TURBOTTS_PREFETCH_BYTES 8192
#endif
constexpr int64_t PREFETCH = TURBOTTS_PREFETCH_BYTES;  // bytes ahead in the tile stream (hides DRAM latency)

// Prefetch into L2, not L1: a core has far fewer L1 miss buffers than L2 ones, so L1 prefetches
// this far ahead stall the stream. T1 is faster than T0 at one and two rows, where the step is bound
// by the stream, and no slower at more, over a wide range of distances. Where the multiply-adds are as
// slow as memory (AVX2 without VNNI), neither the hint nor the distance changes the step. -D overrides
// the hint and the distance for A/B builds.
#ifndef TURBOTTS_PREFETCH_HINT
#define TURBOTTS_PREFETCH_HINT _MM_HINT_T1
#endif
constexpr int64_t MAX_ROWS = 4;

#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
constexpr const char* kIsa = "avx512bw+vnni";
#elif defined(__AVX512BW__)
constexpr const char* kIsa = "avx512bw";
#elif defined(__AVX2__) && defined(__AVXVNNI__)
constexpr const char* kIsa = "avx2+avxvnni";
#elif defined(__AVX2__)
constexpr const char* kIsa = "avx2";
#else
#error "int8_gemv needs AVX2 or AVX-512 (the loader does not build it for other CPUs)"
#endif

// acc + the pairwise int16 products of w and x summed into int32 lanes: one VNNI
// instruction where the CPU has it (exact either way: no saturation)
#if defined(__AVX512BW__)
inline __m512i dot_add(__m512i acc, __m512i w, __m512i x) {
#if defined(__AVX512VNNI__)
  return _mm512_dpwssd_epi32(acc, w, x);
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(w, x));
#endif
}
#elif defined(__AVX2__)
inline __m256i dot_add(__m256i acc, __m256i w, __m256i x) {
#if defined(__AVXVNNI__)
  return _mm256_dpwssd_avx_epi32(acc, w, x);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(w, x));
#endif
}
#endif

template <int M>
inline void tile_rows(const int8_t* tile, const int16_t* x16, int64_t K, float* acc_out /* [TILE_N][M] */) {
#if defined(__AVX512BW__)
  __m512 total[TILE_N][M];
  for (int r = 0; r < TILE_N; ++r)
    for (int m = 0; m < M; ++m) total[r][m] = _mm512_setzero_ps();
  for (int64_t kb = 0; kb < K; kb += BLOCK_K) {
    const int64_t ke = std::min(K, kb + BLOCK_K);
    __m512i acc[TILE_N][M];
    for (int r = 0; r < TILE_N; ++r)
      for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_si512();
    for (int64_t k = kb; k < ke; k += CHUNK_K) {
      __m512i xv[M];
      for (int m = 0; m < M; ++m) xv[m] = _mm512_loadu_si512(static_cast<const void*>(x16 + m * K + k));
      const int8_t* chunk = tile + (k / CHUNK_K) * (TILE_N * CHUNK_K);
      _mm_prefetch(reinterpret_cast<const char*>(chunk + PREFETCH), TURBOTTS_PREFETCH_HINT);
      _mm_prefetch(reinterpret_cast<const char*>(chunk + PREFETCH + 64), TURBOTTS_PREFETCH_HINT);
      for (int r = 0; r < TILE_N; ++r) {
        const __m512i wv = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + r * CHUNK_K)));
        for (int m = 0; m < M; ++m) acc[r][m] = dot_add(acc[r][m], wv, xv[m]);
      }
    }
    for (int r = 0; r < TILE_N; ++r)
      for (int m = 0; m < M; ++m) total[r][m] = _mm512_add_ps(total[r][m], _mm512_cvtepi32_ps(acc[r][m]));
  }
  for (int r = 0; r < TILE_N; ++r)
    for (int m = 0; m < M; ++m) acc_out[r * M + m] = _mm512_reduce_add_ps(total[r][m]);
#elif defined(__AVX2__)
  __m256 total[TILE_N][M];
  for (int r = 0; r < TILE_N; ++r)
    for (int m = 0; m < M; ++m) total[r][m] = _mm256_setzero_ps();
  for (int64_t kb = 0; kb < K; kb += BLOCK_K) {
    const int64_t ke = std::min(K, kb + BLOCK_K);
    __m256i acc[TILE_N][M];
    for (int r = 0; r < TILE_N; ++r)
      for (int m = 0; m < M; ++m) acc[r][m] = _mm256_setzero_si256();
    for (int64_t k = kb; k < ke; k += CHUNK_K) {
      const int8_t* chunk = tile + (k / CHUNK_K) * (TILE_N * CHUNK_K);
      _mm_prefetch(reinterpret_cast<const char*>(chunk + PREFETCH), TURBOTTS_PREFETCH_HINT);
      _mm_prefetch(reinterpret_cast<const char*>(chunk + PREFETCH + 64), TURBOTTS_PREFETCH_HINT);
      for (int half = 0; half < 2; ++half) {
        __m256i xv[M];
        for (int m = 0; m < M; ++m)
          xv[m] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x16 + m * K + k + 16 * half));
        for (int r = 0; r < TILE_N; ++r) {
          const __m256i wv = _mm256_cvtepi8_epi16(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(chunk + r * CHUNK_K + 16 * half)));
          for (int m = 0; m < M; ++m) acc[r][m] = dot_add(acc[r][m], wv, xv[m]);
        }
      }
    }
    for (int r = 0; r < TILE_N; ++r)
      for (int m = 0; m < M; ++m) total[r][m] = _mm256_add_ps(total[r][m], _mm256_cvtepi32_ps(acc[r][m]));
  }
  for (int r = 0; r < TILE_N; ++r)
    for (int m = 0; m < M; ++m) {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, total[r][m]);
      float sum = 0.f;
      for (float lane : lanes) sum += lane;
      acc_out[r * M + m] = sum;
    }
#endif
}

template <int M>
inline void run_tiles(const int8_t* packed, const int16_t* x16, const float* x_scale, const float* w_scale, int64_t N,
               int64_t K, float* out) {
  at::parallel_for(0, N / TILE_N, 16, [&](int64_t t0, int64_t t1) {
    float acc[TILE_N * M];
    for (int64_t t = t0; t < t1; ++t) {
      tile_rows<M>(packed + t * TILE_N * K, x16, K, acc);
      for (int r = 0; r < TILE_N; ++r) {
        const int64_t n = t * TILE_N + r;
        for (int m = 0; m < M; ++m) out[m * N + n] = acc[r * M + m] * x_scale[m] * w_scale[n];
      }
    }
  });
}

// Quantize M rows of x (M, K) to int16, one symmetric scale per row.
inline void quantize_rows(const float* x, int64_t M, int64_t K, int16_t* q, float* scales) {
  for (int64_t m = 0; m < M; ++m) {
    const float* row = x + m * K;
    float amax = 0.f;
#pragma omp simd reduction(max : amax)
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(row[k]));
    const float s = amax > 0.f ? amax / 32767.f : 1.f;
    const float inv = 1.f / s;
    for (int64_t k = 0; k < K; ++k) q[m * K + k] = static_cast<int16_t>(std::nearbyint(row[k] * inv));
    scales[m] = s;
  }
}

// out (M, N) = x (M, K) times the tile-ordered int8 weights (N, K) scaled per output row;
// scratch holds M * K int16 values.
inline void matmul_rows(const float* x, int64_t M, int64_t K, const int8_t* tiles, const float* w_scale, int64_t N,
                        float* out, int16_t* scratch) {
  float x_scale[MAX_ROWS];
  quantize_rows(x, M, K, scratch, x_scale);
  switch (M) {
    case 1: run_tiles<1>(tiles, scratch, x_scale, w_scale, N, K, out); break;
    case 2: run_tiles<2>(tiles, scratch, x_scale, w_scale, N, K, out); break;
    case 3: run_tiles<3>(tiles, scratch, x_scale, w_scale, N, K, out); break;
    default: run_tiles<4>(tiles, scratch, x_scale, w_scale, N, K, out); break;
  }
}

}  // namespace
}  // namespace turbotts_int8
