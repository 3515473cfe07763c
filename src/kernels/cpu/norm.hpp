// Normalisations over the last dimension of n rows of `dim` floats (in place allowed).
#pragma once

#include <cstdint>

namespace syslm::kernels {

// out = x / sqrt(mean(x^2) + eps) * weight
void rms_norm(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
              float eps);
// out = (x - mean) / sqrt(var + eps) * weight + bias (bias may be null)
void layer_norm(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
                const float* bias, float eps);

}  // namespace syslm::kernels
