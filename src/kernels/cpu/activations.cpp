#include "kernels/cpu/activations.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "kernels/cpu/elementwise_kernels.hpp"
#include "kernels/cpu/norm.hpp"

namespace syslm::kernels {
namespace {

void swiglu_scalar(float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void gelu_tanh_scalar(float* x, int64_t n) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    for (int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        x[i] = 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
    }
}

void geglu_scalar(float* gate, const float* up, int64_t n) {
    gelu_tanh_scalar(gate, n);
    for (int64_t i = 0; i < n; ++i) gate[i] *= up[i];
}

void softcap_scalar(float* x, int64_t n, float cap) {
    for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

}  // namespace

void swish_beta_scalar(float* gate, const float* up, const float* beta, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        gate[i] = gate[i] * up[i] / (1.0f + std::exp(-beta[i] * gate[i]));
}

namespace {

void gelu_erf_scalar(float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678f));
}

// Chunks of whole cache lines for the pool: small arrays stay on the calling thread.
constexpr int64_t kChunk = 16384;

template <class Fn>
void split(int64_t n, ThreadPool& pool, Fn fn) {
    if (n <= kChunk || pool.size() == 1) return fn(0, n);
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    pool.parallel_for(chunks,
                      [&](int64_t b, int64_t e, int) { fn(b * kChunk, std::min(n, e * kChunk)); });
}

}  // namespace

const ElementwiseKernels& elementwise_kernels(Isa isa) {
    static const ElementwiseKernels tables[3] = {
        ElementwiseKernels{Isa::Scalar, swiglu_scalar, gelu_tanh_scalar, rms_norm_scalar,
                           layer_norm_scalar, xent_row_scalar, swiglu_backward_scalar,
                           gelu_tanh_backward_scalar, gelu_erf_scalar, gelu_erf_backward_scalar,
                           geglu_scalar, geglu_backward_scalar, softcap_scalar, swish_beta_scalar,
                           swish_beta_backward_scalar},
        isa_supported(Isa::Avx2) ? x86::elementwise_kernels_avx2() : ElementwiseKernels{},
        isa_supported(Isa::Avx512) ? x86::elementwise_kernels_avx512() : ElementwiseKernels{},
    };
    if (!isa_supported(isa))
        fail("element-wise kernels: this CPU does not support ", isa_name(isa));
    return tables[static_cast<int>(isa)];
}

void swiglu(float* gate, const float* up, int64_t n, Isa isa) {
    elementwise_kernels(isa).swiglu(gate, up, n);
}

void swiglu(float* gate, const float* up, int64_t n) {
    swiglu(gate, up, n, active_isa());
}

void swiglu(float* gate, const float* up, int64_t n, ThreadPool& pool) {
    const auto fn = elementwise_kernels(active_isa()).swiglu;
    split(n, pool, [&](int64_t b, int64_t e) { fn(gate + b, up + b, e - b); });
}

void gelu_tanh(float* x, int64_t n, Isa isa) {
    elementwise_kernels(isa).gelu_tanh(x, n);
}

void gelu_tanh(float* x, int64_t n) {
    gelu_tanh(x, n, active_isa());
}

void gelu_tanh(float* x, int64_t n, ThreadPool& pool) {
    const auto fn = elementwise_kernels(active_isa()).gelu_tanh;
    split(n, pool, [&](int64_t b, int64_t e) { fn(x + b, e - b); });
}

void gelu_erf(float* x, int64_t n, Isa isa) {
    elementwise_kernels(isa).gelu_erf(x, n);
}

void gelu_erf(float* x, int64_t n, ThreadPool& pool) {
    const auto fn = elementwise_kernels(active_isa()).gelu_erf;
    split(n, pool, [&](int64_t b, int64_t e) { fn(x + b, e - b); });
}

void geglu(float* gate, const float* up, int64_t n, Isa isa) {
    elementwise_kernels(isa).geglu(gate, up, n);
}

void geglu(float* gate, const float* up, int64_t n, ThreadPool& pool) {
    const auto fn = elementwise_kernels(active_isa()).geglu;
    split(n, pool, [&](int64_t b, int64_t e) { fn(gate + b, up + b, e - b); });
}

void softcap(float* x, int64_t n, float cap, Isa isa) {
    elementwise_kernels(isa).softcap(x, n, cap);
}

void softcap(float* x, int64_t n, float cap, ThreadPool& pool) {
    const auto fn = elementwise_kernels(active_isa()).softcap;
    split(n, pool, [&](int64_t b, int64_t e) { fn(x + b, e - b, cap); });
}

float sigmoid(float x) {
    return 1.0f / (1.0f + std::exp(-x));
}

}  // namespace syslm::kernels
