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

#include "int8_gemv.h"

#include <ATen/ops/empty.h>

#include "int8_tiles.h"

#include <vector>

using namespace turbotts_int8;

namespace {

void check_layout(const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kChar && w.is_contiguous() && w.device().is_cpu(),
              "int8_gemv: weights must be a contiguous (N, K) int8 CPU tensor");
  TORCH_CHECK(w.size(0) % TILE_N == 0 && w.size(1) % CHUNK_K == 0,
              "int8_gemv: N must be a multiple of 4 and K of 32, got ", w.sizes());
}

}  // namespace

// (N, K) row-major int8 -> the same bytes in tile order (see the header).
at::Tensor pack(const at::Tensor& w) {
  check_layout(w);
  const int64_t N = w.size(0), K = w.size(1);
  return w.view({N / TILE_N, TILE_N, K / CHUNK_K, CHUNK_K}).permute({0, 2, 1, 3}).contiguous().view({N, K});
}

// x (M, K) float32, M <= 4; packed from pack(); scale (N,) float32 -> (M, N) float32.
at::Tensor gemv(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scale) {
  check_layout(packed);
  const int64_t N = packed.size(0), K = packed.size(1);
  TORCH_CHECK(x.dim() == 2 && x.size(1) == K && x.scalar_type() == at::kFloat && x.device().is_cpu(),
              "int8_gemv: x must be (M, ", K, ") float32 on CPU");
  TORCH_CHECK(x.size(0) >= 1 && x.size(0) <= MAX_ROWS, "int8_gemv: 1 to 4 rows, got ", x.size(0));
  TORCH_CHECK(scale.numel() == N && scale.scalar_type() == at::kFloat && scale.is_contiguous(),
              "int8_gemv: one float32 scale per output row");
  const int64_t M = x.size(0);
  const auto xc = x.contiguous();
  auto x16 = at::empty({M, K}, at::kShort);
  auto out = at::empty({M, N}, at::kFloat);
  matmul_rows(xc.data_ptr<float>(), M, K, packed.data_ptr<int8_t>(), scale.data_ptr<float>(), N,
              out.data_ptr<float>(), x16.data_ptr<int16_t>());
  return out;
}

std::string isa() { return kIsa; }


