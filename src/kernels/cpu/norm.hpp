// Normalisations over the last dimension of n rows of `dim` floats (in place allowed). The plain
// overloads use the kernels of active_isa() (elementwise_kernels.hpp); the Isa overloads pick a
// variant; the ThreadPool overloads also split the rows across the pool's threads.
#pragma once

#include <cstdint>

#include "core/thread_pool.hpp"
#include "kernels/isa.hpp"

namespace syslm::kernels {

// The normalisations an architecture may use (model::ArchSpec::norm); LayerNorm has a bias.
// RMSNorm (weight) | LayerNorm (weight + bias) | LayerNorm with a weight only (MPT)
enum class NormKind { Rms, Layer, LayerNoBias };
inline bool norm_has_bias(NormKind k) { return k == NormKind::Layer; }
// FLOPs per element of the forward (profiles): RMSNorm squares, sums and scales twice;
// LayerNorm also subtracts the mean, and adds the bias.
inline int norm_flops(NormKind k) { return k == NormKind::Rms ? 4 : 8; }

// out = x / sqrt(mean(x^2) + eps) * weight
void rms_norm(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
              float eps);
void rms_norm(const float* x, float* out, int64_t rows, int64_t dim, const float* weight, float eps,
              Isa isa);
void rms_norm(const float* x, float* out, int64_t rows, int64_t dim, const float* weight, float eps,
              ThreadPool& pool);
// out = (x - mean) / sqrt(var + eps) * weight + bias (bias may be null)
void layer_norm(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
                const float* bias, float eps);
void layer_norm(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
                const float* bias, float eps, Isa isa);
void layer_norm(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
                const float* bias, float eps, ThreadPool& pool);

// The scalar references (the Isa::Scalar entries).
void rms_norm_scalar(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
                     float eps);
void layer_norm_scalar(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
                       const float* bias, float eps);

}  // namespace syslm::kernels
