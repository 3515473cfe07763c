// AdamW (optimizer_update.hpp) on 256-bit vectors: the scalar update's operations in the same
// order, no FMA, so the result is bit-identical. See kernels/isa.hpp for the rules of ISA files.
#include <cmath>

#include "kernels/cpu/optimizer_update.hpp"
#include "kernels/cpu/x86/simd.hpp"

namespace syslm::kernels::x86 {
namespace {

void adamw(float* w, const float* g, float* m, float* v, int64_t n, const AdamWStep& s) {
    const __m256 decay = _mm256_set1_ps(s.decay), a1 = _mm256_set1_ps(1.0f - s.b1);
    const __m256 b2 = _mm256_set1_ps(s.b2), a2 = _mm256_set1_ps(1.0f - s.b2);
    const __m256 bc2 = _mm256_set1_ps(s.bc2_sqrt), eps = _mm256_set1_ps(s.eps);
    const __m256 step = _mm256_set1_ps(-s.step_size);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 gi = _mm256_loadu_ps(g + i);
        const __m256 wi = _mm256_mul_ps(_mm256_loadu_ps(w + i), decay);
        __m256 mi = _mm256_loadu_ps(m + i);
        mi = _mm256_add_ps(mi, _mm256_mul_ps(_mm256_sub_ps(gi, mi), a1));
        const __m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), b2),
                                        _mm256_mul_ps(_mm256_mul_ps(gi, gi), a2));
        const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2), eps);
        _mm256_storeu_ps(w + i, _mm256_add_ps(wi, _mm256_mul_ps(step, _mm256_div_ps(mi, denom))));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
    }
    for (; i < n; ++i) {
        w[i] *= s.decay;
        m[i] += (g[i] - m[i]) * (1.0f - s.b1);
        v[i] = v[i] * s.b2 + g[i] * g[i] * (1.0f - s.b2);
        const float denom = std::sqrt(v[i]) / s.bc2_sqrt + s.eps;
        w[i] += -s.step_size * (m[i] / denom);
    }
}

}  // namespace

AdamWFn adamw_avx2() {
    return adamw;
}

}  // namespace syslm::kernels::x86
