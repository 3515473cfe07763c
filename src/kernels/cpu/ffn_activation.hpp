// The dense FFN's activation, one kind per architecture (model::ArchSpec::ffn). The inference
// forward and the training forward and backward call these, so a new kind is one enum value, its
// pair of kernels here (checked against PyTorch autograd and finite differences), and the
// architectures that use it (docs/design/training.md, "Adding a layer kind").
#pragma once

#include <cstdint>

#include "core/thread_pool.hpp"

namespace syslm::kernels {

enum class FfnActivation {
    SwiGLU,    // silu(gate) * up (llama family)
    GeluTanh,  // gelu(up), tanh approximation (GPT-2's "gelu_new")
    GeluErf,   // gelu(up), exact (erf): MPT's
    GeGLU,     // gelu_tanh(gate) * up (Gemma's)
};

// Gated kinds combine two projections of the input (ffn_gate and ffn_up), the others one
// (ffn_up).
bool ffn_gated(FfnActivation k);
// Profile label and cost per element (FLOPs, bytes) of the forward.
const char* ffn_activation_name(FfnActivation k);
double ffn_activation_flops(FfnActivation k);
double ffn_activation_bytes(FfnActivation k);

// a = act(a, b) in place: SwiGLU silu(a) * b, GeGLU gelu_tanh(a) * b; GeluTanh gelu_tanh(a),
// GeluErf gelu_erf(a) (b unused, may be null).
void ffn_activation(FfnActivation k, float* a, const float* b, int64_t n, ThreadPool& pool);
// From the forward's inputs a (and b) and the gradient of its output: da, and db for gated
// kinds (both overwritten; db unused otherwise).
void ffn_activation_backward(FfnActivation k, const float* a, const float* b, const float* dout,
                             float* da, float* db, int64_t n, ThreadPool& pool);

// Swish-beta GLU (Ramachandran et al.'s Swish with a learned beta per channel; syslm's
// feed_forward.swish_beta): a = a sigmoid(beta a) b over rows x n_ff, beta (n_ff floats) the
// same for every row. beta = 1 is SwiGLU.
void swish_beta_glu(float* a, const float* b, const float* beta, int64_t rows, int64_t n_ff,
                    ThreadPool& pool);
// From the forward's inputs and dout: da and db (overwritten), and dbeta (added).
void swish_beta_glu_backward(const float* a, const float* b, const float* beta, const float* dout,
                             float* da, float* db, float* dbeta, int64_t rows, int64_t n_ff,
                             ThreadPool& pool);

}  // namespace syslm::kernels
