// The AdamW update (optimizer_update.hpp) written once against a vector type V (V256, V512) and
// instantiated in the ISA files, which are compiled with -ffp-contract=off (src/kernels/
// CMakeLists.txt): the scalar update's operations in the same order, no FMA, so every variant is
// bit-identical to the scalar one. Internal linkage only.
#pragma once

#include <cstdint>

#include "kernels/cpu/optimizer_update.hpp"

namespace syslm::kernels {
namespace {

template <class V>
void adamw_v(float* w, const float* g, float* m, float* v, int64_t n, const AdamWStep& s) {
    constexpr int W = V::W;
    const typename V::T decay = V::set1(s.decay), a1 = V::set1(1.0f - s.b1);
    const typename V::T b2 = V::set1(s.b2), a2 = V::set1(1.0f - s.b2);
    const typename V::T bc2 = V::set1(s.bc2_sqrt), eps = V::set1(s.eps);
    const typename V::T step = V::set1(-s.step_size), scale = V::set1(s.grad_scale);
    int64_t i = 0;
    for (; i + W <= n; i += W) {
        const typename V::T gi = V::mul(V::load(g + i), scale);
        const typename V::T wi = V::mul(V::load(w + i), decay);
        typename V::T mi = V::load(m + i);
        mi = V::add(mi, V::mul(V::sub(gi, mi), a1));
        const typename V::T vi = V::add(V::mul(V::load(v + i), b2), V::mul(V::mul(gi, gi), a2));
        const typename V::T denom = V::add(V::div(V::sqrt(vi), bc2), eps);
        V::store(w + i, V::add(wi, V::mul(step, V::div(mi, denom))));
        V::store(m + i, mi);
        V::store(v + i, vi);
    }
    if (i < n) adamw_update_scalar(w + i, g + i, m + i, v + i, n - i, s);
}

}  // namespace
}  // namespace syslm::kernels
