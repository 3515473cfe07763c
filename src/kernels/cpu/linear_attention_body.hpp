// Linear attention's d x d sums (linear_attention.cpp), written once against a vector type V
// (V512, V256, VScalar) like attention_body.hpp and instantiated in attention.cpp and the ISA
// files' attention tables. S is row-major, row i for feature i; d need not be a multiple of the
// vector width. Internal linkage only.
#pragma once

#include "kernels/cpu/attention.hpp"

namespace syslm::kernels {
namespace {

// y[0..n) += a x[0..n)
template <class V>
void la_axpy(float* y, float a, const float* x, int n) {
    const typename V::T av = V::set1(a);
    int j = 0;
    for (; j + V::W <= n; j += V::W) V::store(y + j, V::fmadd(av, V::load(x + j), V::load(y + j)));
    if (j < n)
        V::store_n(y + j, V::fmadd(av, V::load_n(x + j, n - j), V::load_n(y + j, n - j)), n - j);
}

template <class V>
float la_dot(const float* a, const float* b, int n) {
    typename V::T acc = V::zero();
    int j = 0;
    for (; j + V::W <= n; j += V::W) acc = V::fmadd(V::load(a + j), V::load(b + j), acc);
    if (j < n) acc = V::fmadd(V::load_n(a + j, n - j), V::load_n(b + j, n - j), acc);
    return V::hsum(acc);
}

// S += g v^T, z += c g.
template <class V>
void la_update(float* S, float* z, const float* g, const float* v, float c, int d) {
    for (int i = 0; i < d; ++i) la_axpy<V>(S + static_cast<int64_t>(i) * d, g[i], v, d);
    la_axpy<V>(z, c, g, d);
}

// out = S^T f (not divided); returns f . z.
template <class V>
float la_query(const float* S, const float* z, const float* f, int d, float* out) {
    for (int j = 0; j < d; ++j) out[j] = 0.0f;
    for (int i = 0; i < d; ++i) la_axpy<V>(out, f[i], S + static_cast<int64_t>(i) * d, d);
    return la_dot<V>(f, z, d);
}

// df_i = S_i . a + z_i c.
template <class V>
void la_rows_dot(const float* S, const float* z, const float* a, float c, int d, float* df) {
    for (int i = 0; i < d; ++i) df[i] = la_dot<V>(S + static_cast<int64_t>(i) * d, a, d) + z[i] * c;
}

// dv_j = sum_i g_i S_ij.
template <class V>
void la_grad_v(const float* S, const float* g, int d, float* dv) {
    for (int j = 0; j < d; ++j) dv[j] = 0.0f;
    for (int i = 0; i < d; ++i) la_axpy<V>(dv, g[i], S + static_cast<int64_t>(i) * d, d);
}

// y[j] = f(x[j], y[j]) over whole vectors, then the tail.
template <class V, class F>
void la_map(const float* x, float* y, int n, F f) {
    int j = 0;
    for (; j + V::W <= n; j += V::W) V::store(y + j, f(V::load(x + j), V::load(y + j)));
    if (j < n) V::store_n(y + j, f(V::load_n(x + j, n - j), V::load_n(y + j, n - j)), n - j);
}

// The feature map phi(x) = elu(x) + 1: x + 1 above 0, e^x below; y may be x.
template <class V>
void la_phi(const float* x, float* y, int n) {
    const typename V::T zero = V::zero(), one = V::set1(1.0f);
    la_map<V>(x, y, n, [=](typename V::T v, typename V::T) {
        return V::select(V::le(v, zero), V::exp(v), V::add(v, one));
    });
}

// y *= phi'(x): 1 above 0, e^x below.
template <class V>
void la_mul_dphi(const float* x, float* y, int n) {
    const typename V::T zero = V::zero(), one = V::set1(1.0f);
    la_map<V>(x, y, n, [=](typename V::T v, typename V::T w) {
        return V::mul(w, V::select(V::le(v, zero), V::exp(v), one));
    });
}

template <class V>
LinearAttentionKernels linear_attention_table() {
    return {la_update<V>, la_query<V>, la_rows_dot<V>, la_grad_v<V>,
            la_dot<V>,    la_axpy<V>,  la_phi<V>,      la_mul_dphi<V>};
}

}  // namespace
}  // namespace syslm::kernels
