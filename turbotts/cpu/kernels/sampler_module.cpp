// The per-row sampler's Python module (sample_rows.cpp holds the sampler, against ATen alone).

#include <torch/csrc/utils/pybind.h>

#include "sample_rows.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("sample_rows", &sample_rows, py::call_guard<py::gil_scoped_release>(),
        "engine/sampler.py's sample for a few rows on CPU, one call");
}
