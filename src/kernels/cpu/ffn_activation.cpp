#include "kernels/cpu/ffn_activation.hpp"

#include <algorithm>

#include "kernels/cpu/activations.hpp"
#include "kernels/cpu/backward.hpp"
#include "kernels/cpu/elementwise_kernels.hpp"
#include "kernels/isa.hpp"

namespace syslm::kernels {

bool ffn_gated(FfnActivation k) {
    return k == FfnActivation::SwiGLU || k == FfnActivation::GeGLU;
}

const char* ffn_activation_name(FfnActivation k) {
    switch (k) {
        case FfnActivation::SwiGLU:
            return "swiglu";
        case FfnActivation::GeluTanh:
            return "gelu";
        case FfnActivation::GeluErf:
            return "gelu_erf";
        case FfnActivation::GeGLU:
            return "geglu";
    }
    return "?";
}

double ffn_activation_flops(FfnActivation k) {
    switch (k) {
        case FfnActivation::SwiGLU:
            return 5;
        case FfnActivation::GeluTanh:
            return 10;
        case FfnActivation::GeluErf:
            return 20;
        case FfnActivation::GeGLU:
            return 11;
    }
    return 0;
}

double ffn_activation_bytes(FfnActivation k) {
    return ffn_gated(k) ? 12 : 8;
}

void ffn_activation(FfnActivation k, float* a, const float* b, int64_t n, ThreadPool& pool) {
    switch (k) {
        case FfnActivation::SwiGLU:
            return swiglu(a, b, n, pool);
        case FfnActivation::GeluTanh:
            return gelu_tanh(a, n, pool);
        case FfnActivation::GeluErf:
            return gelu_erf(a, n, pool);
        case FfnActivation::GeGLU:
            return geglu(a, b, n, pool);
    }
}

void ffn_activation_backward(FfnActivation k, const float* a, const float* b, const float* dout,
                             float* da, float* db, int64_t n, ThreadPool& pool) {
    switch (k) {
        case FfnActivation::SwiGLU:
            return swiglu_backward(a, b, dout, da, db, n, pool);
        case FfnActivation::GeluTanh:
            return gelu_tanh_backward(a, dout, da, n, pool);
        case FfnActivation::GeluErf:
            return gelu_erf_backward(a, dout, da, n, pool);
        case FfnActivation::GeGLU:
            return geglu_backward(a, b, dout, da, db, n, pool);
    }
}

void swish_beta_glu(float* a, const float* b, const float* beta, int64_t rows, int64_t n_ff,
                    ThreadPool& pool) {
    const auto fn = elementwise_kernels(active_isa()).swish_beta;
    pool.parallel_for(rows, [&](int64_t r0, int64_t r1, int) {
        for (int64_t r = r0; r < r1; ++r) fn(a + r * n_ff, b + r * n_ff, beta, n_ff);
    });
}

void swish_beta_glu_backward(const float* a, const float* b, const float* beta, const float* dout,
                             float* da, float* db, float* dbeta, int64_t rows, int64_t n_ff,
                             ThreadPool& pool) {
    // Threads own channel ranges (whole cache lines), so each dbeta element has one writer.
    constexpr int64_t kChunk = 16;
    const auto fn = elementwise_kernels(active_isa()).swish_beta_backward;
    pool.parallel_for((n_ff + kChunk - 1) / kChunk, [&](int64_t c0, int64_t c1, int) {
        const int64_t lo = c0 * kChunk, n = std::min(n_ff, c1 * kChunk) - lo;
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t o = r * n_ff + lo;
            fn(a + o, b + o, beta + lo, dout + o, da + o, db + o, dbeta + lo, n);
        }
    });
}

}  // namespace syslm::kernels
