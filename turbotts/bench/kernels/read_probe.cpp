// A plain read loop the bench times (turbotts/bench/roofline.py) to say how fast weight-sized memory
// streams here, caches included. Bench-only: its own extension, so the serving kernels carry none of it.

#include <torch/csrc/utils/pybind.h>

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cstdint>
#include <vector>

// The xor of every 64-bit word of buf, read by all threads, each one contiguous range: the plain
// read loop the bench times to say how fast weight-sized memory streams here (caches included).
int64_t xor_words(const at::Tensor& buf) {
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

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("xor_words", &xor_words, py::call_guard<py::gil_scoped_release>(), "xor of every 64-bit word (a timed read)");
}
