// Per-ISA tables of the element-wise kernels (activations.hpp, norm.hpp). The scalar entries are
// the references; the AVX2 / AVX-512 ones (elementwise_body.hpp) use a polynomial e^x (about
// 1 ulp) and sum the norms' statistics in double like the references, in another order.
#pragma once

#include <cstdint>

#include "kernels/isa.hpp"

namespace syslm::kernels {

// A plain aggregate: the ISA files build it and must not emit inline constructors.
struct ElementwiseKernels {
    Isa isa;
    void (*swiglu)(float* gate, const float* up, int64_t n);
    void (*gelu_tanh)(float* x, int64_t n);
    void (*rms_norm)(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
                     float eps);
    void (*layer_norm)(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
                       const float* bias, float eps);
    // One row of the fused softmax cross-entropy (backward.hpp): returns -log softmax(z)[target]
    // and overwrites z with (softmax(z) - onehot(target)) * scale.
    double (*xent_row)(float* z, int64_t n, int32_t target, float scale);
    // Backward of swiglu / gelu_tanh (backward.hpp) over n elements.
    void (*swiglu_backward)(const float* gate, const float* up, const float* dout, float* dgate,
                            float* dup, int64_t n);
    void (*gelu_tanh_backward)(const float* x, const float* dy, float* dx, int64_t n);
    // gelu(x) = x Phi(x) with the exact normal CDF (erf), and its backward.
    void (*gelu_erf)(float* x, int64_t n);
    void (*gelu_erf_backward)(const float* x, const float* dy, float* dx, int64_t n);
    // GeGLU: gate = gelu_tanh(gate) * up (Gemma's FFN), and its backward.
    void (*geglu)(float* gate, const float* up, int64_t n);
    void (*geglu_backward)(const float* gate, const float* up, const float* dout, float* dgate,
                           float* dup, int64_t n);
    // x = cap tanh(x / cap): Gemma 2's soft-capped logits.
    void (*softcap)(float* x, int64_t n, float cap);
    // Swish-beta GLU over n channels of a row: gate = gate sigmoid(beta gate) up with a learned
    // beta per channel; its backward writes dgate and dup and adds into dbeta.
    void (*swish_beta)(float* gate, const float* up, const float* beta, int64_t n);
    void (*swish_beta_backward)(const float* gate, const float* up, const float* beta,
                                const float* dout, float* dgate, float* dup, float* dbeta,
                                int64_t n);
};

// The scalar references of the training entries (backward.cpp): xent_row's exp and sums in
// double.
double xent_row_scalar(float* z, int64_t n, int32_t target, float scale);
void swiglu_backward_scalar(const float* gate, const float* up, const float* dout, float* dgate,
                            float* dup, int64_t n);
void gelu_tanh_backward_scalar(const float* x, const float* dy, float* dx, int64_t n);
void gelu_erf_backward_scalar(const float* x, const float* dy, float* dx, int64_t n);
void geglu_backward_scalar(const float* gate, const float* up, const float* dout, float* dgate,
                           float* dup, int64_t n);
void swish_beta_scalar(float* gate, const float* up, const float* beta, int64_t n);
void swish_beta_backward_scalar(const float* gate, const float* up, const float* beta,
                                const float* dout, float* dgate, float* dup, float* dbeta,
                                int64_t n);

// The table for `isa` (throws Error if this CPU lacks it).
const ElementwiseKernels& elementwise_kernels(Isa isa);

namespace x86 {
ElementwiseKernels elementwise_kernels_avx2();    // elementwise_avx2.cpp
ElementwiseKernels elementwise_kernels_avx512();  // elementwise_avx512.cpp
}  // namespace x86

}  // namespace syslm::kernels
