// Element-wise activations used by the supported feed-forward blocks. The plain overloads use
// the kernels of active_isa() (elementwise_kernels.hpp); the Isa overloads pick a variant
// (tests, benchmarks); the ThreadPool overloads also split the work across the pool's threads.
#pragma once

#include <cstdint>

#include "core/thread_pool.hpp"
#include "kernels/isa.hpp"

namespace syslm::kernels {

// gate[i] = silu(gate[i]) * up[i]  (SwiGLU, llama-family FFN)
void swiglu(float* gate, const float* up, int64_t n);
void swiglu(float* gate, const float* up, int64_t n, Isa isa);
void swiglu(float* gate, const float* up, int64_t n, ThreadPool& pool);
// x[i] = gelu(x[i]) with the tanh approximation (GPT-2's "gelu_new")
void gelu_tanh(float* x, int64_t n);
void gelu_tanh(float* x, int64_t n, Isa isa);
void gelu_tanh(float* x, int64_t n, ThreadPool& pool);
// x[i] = x Phi(x), the exact GELU (erf): MPT's, PyTorch's nn.GELU() default.
void gelu_erf(float* x, int64_t n, Isa isa);
void gelu_erf(float* x, int64_t n, ThreadPool& pool);
// gate[i] = gelu_tanh(gate[i]) * up[i]  (GeGLU, Gemma's FFN)
void geglu(float* gate, const float* up, int64_t n, Isa isa);
void geglu(float* gate, const float* up, int64_t n, ThreadPool& pool);
// x[i] = cap tanh(x[i] / cap): soft-capping (Gemma 2's logits); the vector kernels' tanh is a
// rational approximation (vec_tanh.hpp), within a few ulps.
void softcap(float* x, int64_t n, float cap, Isa isa);
void softcap(float* x, int64_t n, float cap, ThreadPool& pool);
// x[i] = 1 / (1 + exp(-x[i]))
float sigmoid(float x);

}  // namespace syslm::kernels
