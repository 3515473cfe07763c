#include "kernels/cpu/hadamard.hpp"

#include <cmath>

namespace syslm::kernels {

void hadamard_heads(float* x, int64_t rows, int64_t stride, int heads, int d) {
    const float norm = 1.0f / std::sqrt(static_cast<float>(d));
    for (int64_t r = 0; r < rows; ++r)
        for (int h = 0; h < heads; ++h) {
            float* v = x + r * stride + int64_t{h} * d;
            for (int len = 1; len < d; len <<= 1)  // butterflies: (a, b) -> (a + b, a - b)
                for (int i = 0; i < d; i += 2 * len)
                    for (int j = i; j < i + len; ++j) {
                        const float a = v[j], b = v[j + len];
                        v[j] = a + b;
                        v[j + len] = a - b;
                    }
            for (int j = 0; j < d; ++j) v[j] *= norm;
        }
}

}  // namespace syslm::kernels
