// Weight-streaming int8 matmul for decode-size batches (1 to 4 rows).
//
// Why: a batch-1 decode step is a chain of matrix-vector products, so its speed
// is how fast the weights stream from DRAM. fbgemm's dynamic int8 linear reads
// them at well under the machine's bandwidth at one row; this kernel reads each
// weight byte once, in one sequential stream per thread.
//
// Layout (see pack): the (N, K) int8 matrix is cut into tiles of 4 output rows;
// a tile is stored as K/32 chunks, each chunk the 32 bytes of row 0, then of
// rows 1, 2 and 3. A thread walks its tiles front to back.
//
// Numerics: activations are quantized per row to int16 (symmetric, 15 bits),
// products are summed exactly in int32 over blocks of BLOCK_K inputs (127 *
// 32767 * 2 * BLOCK_K / 32 stays below 2^31), and each block's sums are added
// in float32. The result is scaled by the row's activation scale and the
// output channel's weight scale.

#include <ATen/Parallel.h>
#include <torch/extension.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>

namespace {

constexpr int64_t TILE_N = 4;       // output rows per tile
constexpr int64_t CHUNK_K = 32;     // inputs per row per chunk
constexpr int64_t BLOCK_K = 4096;   // inputs summed in int32 before the float32 add
constexpr int64_t PREFETCH = 8192;  // bytes ahead in the tile stream (measured best on Zen 4)
constexpr int64_t MAX_ROWS = 4;

#if defined(__AVX512BW__)
const char* kIsa = "avx512bw";
#elif defined(__AVX2__)
const char* kIsa = "avx2";
#else
#error "int8_gemv needs AVX2 or AVX-512 (the loader does not build it for other CPUs)"
#endif

template <int M>
void tile_rows(const int8_t* tile, const int16_t* x16, int64_t K, float* acc_out /* [TILE_N][M] */) {
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
      _mm_prefetch(reinterpret_cast<const char*>(chunk + PREFETCH), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(chunk + PREFETCH + 64), _MM_HINT_T0);
      for (int r = 0; r < TILE_N; ++r) {
        const __m512i wv = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + r * CHUNK_K)));
        for (int m = 0; m < M; ++m) acc[r][m] = _mm512_add_epi32(acc[r][m], _mm512_madd_epi16(wv, xv[m]));
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
      _mm_prefetch(reinterpret_cast<const char*>(chunk + PREFETCH), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(chunk + PREFETCH + 64), _MM_HINT_T0);
      for (int half = 0; half < 2; ++half) {
        __m256i xv[M];
        for (int m = 0; m < M; ++m)
          xv[m] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x16 + m * K + k + 16 * half));
        for (int r = 0; r < TILE_N; ++r) {
          const __m256i wv = _mm256_cvtepi8_epi16(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(chunk + r * CHUNK_K + 16 * half)));
          for (int m = 0; m < M; ++m) acc[r][m] = _mm256_add_epi32(acc[r][m], _mm256_madd_epi16(wv, xv[m]));
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
void run_tiles(const int8_t* packed, const int16_t* x16, const float* x_scale, const float* w_scale, int64_t N,
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

void check_layout(const torch::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == torch::kInt8 && w.is_contiguous() && w.device().is_cpu(),
              "int8_gemv: weights must be a contiguous (N, K) int8 CPU tensor");
  TORCH_CHECK(w.size(0) % TILE_N == 0 && w.size(1) % CHUNK_K == 0,
              "int8_gemv: N must be a multiple of 4 and K of 32, got ", w.sizes());
}

}  // namespace

// (N, K) row-major int8 -> the same bytes in tile order (see the header).
torch::Tensor pack(const torch::Tensor& w) {
  check_layout(w);
  const int64_t N = w.size(0), K = w.size(1);
  return w.view({N / TILE_N, TILE_N, K / CHUNK_K, CHUNK_K}).permute({0, 2, 1, 3}).contiguous().view({N, K});
}

// x (M, K) float32, M <= 4; packed from pack(); scale (N,) float32 -> (M, N) float32.
torch::Tensor gemv(const torch::Tensor& x, const torch::Tensor& packed, const torch::Tensor& scale) {
  check_layout(packed);
  const int64_t N = packed.size(0), K = packed.size(1);
  TORCH_CHECK(x.dim() == 2 && x.size(1) == K && x.scalar_type() == torch::kFloat32 && x.device().is_cpu(),
              "int8_gemv: x must be (M, ", K, ") float32 on CPU");
  TORCH_CHECK(x.size(0) >= 1 && x.size(0) <= MAX_ROWS, "int8_gemv: 1 to 4 rows, got ", x.size(0));
  TORCH_CHECK(scale.numel() == N && scale.scalar_type() == torch::kFloat32 && scale.is_contiguous(),
              "int8_gemv: one float32 scale per output row");
  const int64_t M = x.size(0);
  const auto xc = x.contiguous();
  auto x16 = torch::empty({M, K}, torch::kInt16);
  float x_scale[MAX_ROWS];
  const float* xp = xc.data_ptr<float>();
  int16_t* qp = x16.data_ptr<int16_t>();
  for (int64_t m = 0; m < M; ++m) {
    const float* row = xp + m * K;
    float amax = 0.f;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(row[k]));
    const float s = amax > 0.f ? amax / 32767.f : 1.f;
    const float inv = 1.f / s;
    for (int64_t k = 0; k < K; ++k) qp[m * K + k] = static_cast<int16_t>(std::nearbyint(row[k] * inv));
    x_scale[m] = s;
  }
  auto out = torch::empty({M, N}, torch::kFloat32);
  const int8_t* wp = packed.data_ptr<int8_t>();
  const float* sp = scale.data_ptr<float>();
  float* op = out.data_ptr<float>();
  switch (M) {
    case 1: run_tiles<1>(wp, qp, x_scale, sp, N, K, op); break;
    case 2: run_tiles<2>(wp, qp, x_scale, sp, N, K, op); break;
    case 3: run_tiles<3>(wp, qp, x_scale, sp, N, K, op); break;
    default: run_tiles<4>(wp, qp, x_scale, sp, N, K, op); break;
  }
  return out;
}

std::string isa() { return kIsa; }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pack", &pack, "int8 (N, K) weights into tile order");
  m.def("gemv", &gemv, "(M, K) float32 x packed int8 weights -> (M, N) float32, M <= 4");
  m.def("isa", &isa, "the vector ISA this build uses");
}
