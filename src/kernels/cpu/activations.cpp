#include "kernels/cpu/activations.hpp"

#include <cmath>

namespace syslm::kernels {

void swiglu(float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void gelu_tanh(float* x, int64_t n) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    for (int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        x[i] = 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
    }
}

float sigmoid(float x) {
    return 1.0f / (1.0f + std::exp(-x));
}

}  // namespace syslm::kernels
