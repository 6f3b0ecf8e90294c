// The weight-streaming int8 matmul's entry points (int8_gemv.cpp), bound in kernels_module.cpp.

#pragma once

#include <ATen/core/Tensor.h>

#include <string>

// (N, K) row-major int8 -> the same bytes in tile order (see int8_tiles.h).
at::Tensor pack(const at::Tensor& w);
// x (M, K) float32, M <= 4; packed from pack(); scale (N,) float32 -> (M, N) float32.
at::Tensor gemv(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scale);
// the vector ISA this build uses
std::string isa();
