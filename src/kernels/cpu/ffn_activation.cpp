#include "kernels/cpu/ffn_activation.hpp"

#include "kernels/cpu/activations.hpp"
#include "kernels/cpu/backward.hpp"

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

}  // namespace syslm::kernels
