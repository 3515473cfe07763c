// tanh(x) on any of the kernels' vector types V (V512, V256, the scalar VScalar), for the
// soft-capping of scores and logits (Gemma 2: c tanh(s / c)). Internal linkage only.
//
// The rational approximation Eigen and XLA use for float: x p(x^2) / q(x^2) with an odd
// degree-13 numerator and an even degree-6 denominator, on x clamped to +-7.9988 (where tanh is
// 1 in float). Checked against std::tanh in tests/kernels (a few ulps). No exp, so no overflow,
// and no cancellation near 0 (1 - 2 / (1 + e^2x) loses digits there).
#pragma once

namespace syslm::kernels {
namespace {

template <class V>
typename V::T tanh_v(typename V::T x) {
    const typename V::T lim = V::set1(7.99881172180175781f), zero = V::zero();
    x = V::max(V::sub(zero, V::max(V::sub(zero, x), V::sub(zero, lim))), V::sub(zero, lim));
    const typename V::T x2 = V::mul(x, x);
    typename V::T p = V::set1(-2.76076847742355e-16f);
    for (const float c : {2.00018790482477e-13f, -8.60467152213735e-11f, 5.12229709037114e-08f,
                          1.48572235717979e-05f, 6.37261928875436e-04f, 4.89352455891786e-03f})
        p = V::fmadd(x2, p, V::set1(c));
    typename V::T q = V::set1(1.19825839466702e-06f);
    for (const float c : {1.18534705686654e-04f, 2.26843463243900e-03f, 4.89352518554385e-03f})
        q = V::fmadd(x2, q, V::set1(c));
    return V::div(V::mul(x, p), q);
}

// c tanh(x / c): scores or logits soft-capped at +-c.
template <class V>
typename V::T softcap_v(typename V::T x, typename V::T c, typename V::T inv_c) {
    return V::mul(c, tanh_v<V>(V::mul(x, inv_c)));
}

}  // namespace
}  // namespace syslm::kernels
