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

#include <torch/extension.h>

#include "decode_stack.h"
#include "int8_tiles.h"
#include "sample_rows.h"

#include <vector>

using namespace turbotts_int8;

namespace {

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
  auto out = torch::empty({M, N}, torch::kFloat32);
  matmul_rows(xc.data_ptr<float>(), M, K, packed.data_ptr<int8_t>(), scale.data_ptr<float>(), N,
              out.data_ptr<float>(), x16.data_ptr<int16_t>());
  return out;
}

std::string isa() { return kIsa; }

// The xor of every 64-bit word of buf, read by all threads, each one contiguous range: the plain
// read loop the bench times to say how fast weight-sized memory streams here (caches included).
int64_t xor_words(const torch::Tensor& buf) {
  TORCH_CHECK(buf.device().is_cpu() && buf.is_contiguous() && buf.nbytes() % 8 == 0,
              "xor_words: a contiguous CPU tensor of whole 64-bit words");
  const uint64_t* words = static_cast<const uint64_t*>(buf.data_ptr());
  const int64_t n = static_cast<int64_t>(buf.nbytes() / 8);
  std::vector<uint64_t> partial(at::get_num_threads(), 0);
  constexpr int64_t kStep = 16;  // words per iteration: two cache lines, four independent 256-bit lanes
  at::parallel_for(0, n / kStep, 256, [&](int64_t begin, int64_t end) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = begin * kStep; i < end * kStep; i += kStep) {
      const auto* v = reinterpret_cast<const __m256i*>(words + i);
      a0 = _mm256_xor_si256(a0, _mm256_loadu_si256(v));
      a1 = _mm256_xor_si256(a1, _mm256_loadu_si256(v + 1));
      a2 = _mm256_xor_si256(a2, _mm256_loadu_si256(v + 2));
      a3 = _mm256_xor_si256(a3, _mm256_loadu_si256(v + 3));
    }
    alignas(32) uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3)));
    partial[at::get_thread_num()] ^= lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3];
  });
  for (int64_t i = n / kStep * kStep; i < n; ++i) partial[0] ^= words[i];  // the tail
  uint64_t total = 0;
  for (uint64_t v : partial) total ^= v;
  return static_cast<int64_t>(total);
}

// torch.ScriptObject of fbgemm's packed weight (torch.ops.quantized.linear_prepack) -> the C++ object
c10::intrusive_ptr<LinearPackedParamsBase> packed_params(const py::handle& handle) {
  const auto script = handle.cast<torch::jit::Object>();
  return c10::IValue(script._ivalue()).toCustomClass<LinearPackedParamsBase>();
}

DecodeStack make_stack(std::vector<torch::Tensor> norms, std::vector<torch::Tensor> tiles,
                       std::vector<torch::Tensor> scales, const std::vector<py::object>& wide, bool reduce_range,
                       int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, double eps) {
  std::vector<c10::intrusive_ptr<LinearPackedParamsBase>> packed;
  for (const auto& handle : wide) packed.push_back(packed_params(handle));
  return DecodeStack(std::move(norms), std::move(tiles), std::move(scales), std::move(packed), reduce_range, num_heads,
                     num_kv_heads, head_dim, eps);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pack", &pack, "int8 (N, K) weights into tile order");
  m.def("gemv", &gemv, py::call_guard<py::gil_scoped_release>(), "(M, K) float32 x packed int8 weights -> (M, N) float32, M <= 4");
  m.def("sample_rows", &sample_rows, py::call_guard<py::gil_scoped_release>(),
        "engine/sampler.py's sample for a few rows on CPU, one call");
  m.def("xor_words", &xor_words, py::call_guard<py::gil_scoped_release>(), "xor of every 64-bit word (a timed read)");
  m.def("isa", &isa, "the vector ISA this build uses");
  // module_local: the native and the portable build may both be loaded (tests do), each with its own class
  py::class_<DecodeStack>(m, "DecodeStack", py::module_local())
      .def(py::init(&make_stack), py::arg("norms"), py::arg("tiles"), py::arg("scales"), py::arg("wide"),
           py::arg("reduce_range"), py::arg("num_heads"), py::arg("num_kv_heads"), py::arg("head_dim"), py::arg("eps"))
      .def("forward", &DecodeStack::forward, py::call_guard<py::gil_scoped_release>(),
           "one decode step of the whole layer stack");
}
