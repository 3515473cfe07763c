// Element-wise activations used by the supported feed-forward blocks.
#pragma once

#include <cstdint>

namespace syslm::kernels {

// gate[i] = silu(gate[i]) * up[i]  (SwiGLU, llama-family FFN)
void swiglu(float* gate, const float* up, int64_t n);
// x[i] = gelu(x[i]) with the tanh approximation (GPT-2's "gelu_new")
void gelu_tanh(float* x, int64_t n);
// x[i] = 1 / (1 + exp(-x[i]))
float sigmoid(float x);

}  // namespace syslm::kernels
