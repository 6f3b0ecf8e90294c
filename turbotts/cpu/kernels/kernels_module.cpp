// The matmul kernels' Python module: one per ISA variant (turbotts/cpu/variants.py), each built from
// the same sources with its own -march. Only this file includes the Python bindings, which cost most of
// a build's time, so the kernel sources compile against ATen alone.

#include <torch/csrc/jit/api/object.h>
#include <torch/csrc/utils/pybind.h>

#include "decode_stack.h"
#include "int8_gemv.h"

#include <vector>

// torch.ScriptObject of fbgemm's packed weight (torch.ops.quantized.linear_prepack) -> the C++ object
c10::intrusive_ptr<LinearPackedParamsBase> packed_params(const py::handle& handle) {
  const auto script = handle.cast<torch::jit::Object>();
  return c10::IValue(script._ivalue()).toCustomClass<LinearPackedParamsBase>();
}

DecodeStack make_stack(std::vector<at::Tensor> norms, std::vector<at::Tensor> tiles,
                       std::vector<at::Tensor> scales, const std::vector<py::object>& wide, bool reduce_range,
                       int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, double eps) {
  std::vector<c10::intrusive_ptr<LinearPackedParamsBase>> packed;
  for (const auto& handle : wide) packed.push_back(packed_params(handle));
  return DecodeStack(std::move(norms), std::move(tiles), std::move(scales), std::move(packed), reduce_range, num_heads,
                     num_kv_heads, head_dim, eps);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pack", &pack, "int8 (N, K) weights into tile order");
  m.def("gemv", &gemv, py::call_guard<py::gil_scoped_release>(), "(M, K) float32 x packed int8 weights -> (M, N) float32, M <= 4");
  m.def("isa", &isa, "the vector ISA this build uses");
  // module_local: two variants may both be loaded (tests do), each with its own class
  py::class_<DecodeStack>(m, "DecodeStack", py::module_local())
      .def(py::init(&make_stack), py::arg("norms"), py::arg("tiles"), py::arg("scales"), py::arg("wide"),
           py::arg("reduce_range"), py::arg("num_heads"), py::arg("num_kv_heads"), py::arg("head_dim"), py::arg("eps"))
      .def("forward", &DecodeStack::forward, py::call_guard<py::gil_scoped_release>(),
           "one decode step of the whole layer stack");
}
