// Vectorised element-wise kernels, written once against a vector type V (V512, V256) and
// instantiated in the ISA files. Internal linkage only. Tails use masked loads and stores.
//
// silu(g) * u = g * u / (1 + e^-g). gelu_tanh(x) = x / 2 * (1 + tanh(y)) with
// y = sqrt(2/pi) (x + 0.044715 x^3) is computed as x / (1 + e^(-2y)) (the same function:
// (1 + tanh y) / 2 = sigmoid(2y)), which needs no tanh and does not cancel for negative x.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/elementwise_kernels.hpp"
#include "kernels/cpu/vec_tanh.hpp"

namespace syslm::kernels {
namespace {

template <class V>
void swiglu_v(float* gate, const float* up, int64_t n) {
    constexpr int W = V::W;
    const typename V::T one = V::set1(1.0f), zero = V::zero();
    auto f = [&](typename V::T g, typename V::T u) {
        return V::div(V::mul(g, u), V::add(one, V::exp(V::sub(zero, g))));
    };
    int64_t i = 0;
    for (; i + W <= n; i += W) V::store(gate + i, f(V::load(gate + i), V::load(up + i)));
    if (i < n) {
        const int r = static_cast<int>(n - i);
        V::store_n(gate + i, f(V::load_n(gate + i, r), V::load_n(up + i, r)), r);
    }
}

// x[i] = f(x[i]), a vector at a time (the tail masked).
template <class V, class F>
void map_in_place(float* x, int64_t n, F f) {
    constexpr int W = V::W;
    int64_t i = 0;
    for (; i + W <= n; i += W) V::store(x + i, f(V::load(x + i)));
    if (i < n) {
        const int r = static_cast<int>(n - i);
        V::store_n(x + i, f(V::load_n(x + i, r)), r);
    }
}

// Visits n elements a vector at a time, the tail masked: f(ld, st), ld(p) giving the current
// lanes of p and st(p, v) storing v there.
template <class V, class F>
void for_lanes(int64_t n, F f) {
    constexpr int W = V::W;
    auto step = [&](int64_t i, int r) {
        auto ld = [&](const float* p) { return r == W ? V::load(p + i) : V::load_n(p + i, r); };
        auto st = [&](float* p, typename V::T v) {
            if (r == W)
                V::store(p + i, v);
            else
                V::store_n(p + i, v, r);
        };
        f(ld, st);
    };
    int64_t i = 0;
    for (; i + W <= n; i += W) step(i, W);
    if (i < n) step(i, static_cast<int>(n - i));
}

template <class V>
void gelu_tanh_v(float* x, int64_t n) {
    const typename V::T one = V::set1(1.0f), a = V::set1(-2.0f * 0.7978845608028654f),
                        b = V::set1(0.044715f);
    map_in_place<V>(x, n, [&](typename V::T v) {
        const typename V::T y = V::mul(a, V::fmadd(V::mul(b, v), V::mul(v, v), v));  // -2y
        return V::div(v, V::add(one, V::exp(y)));
    });
}

// gate = gelu_tanh(gate) * up (GeGLU, Gemma's FFN), gelu_tanh as above.
template <class V>
void geglu_v(float* gate, const float* up, int64_t n) {
    constexpr int W = V::W;
    const typename V::T one = V::set1(1.0f), a = V::set1(-2.0f * 0.7978845608028654f),
                        b = V::set1(0.044715f);
    auto f = [&](typename V::T v, typename V::T u) {
        const typename V::T y = V::mul(a, V::fmadd(V::mul(b, v), V::mul(v, v), v));  // -2y
        return V::div(V::mul(v, u), V::add(one, V::exp(y)));
    };
    int64_t i = 0;
    for (; i + W <= n; i += W) V::store(gate + i, f(V::load(gate + i), V::load(up + i)));
    if (i < n) {
        const int r = static_cast<int>(n - i);
        V::store_n(gate + i, f(V::load_n(gate + i, r), V::load_n(up + i, r)), r);
    }
}

template <class V>
void softcap_array_v(float* x, int64_t n, float cap) {
    const typename V::T c = V::set1(cap), inv = V::set1(1.0f / cap);
    map_in_place<V>(x, n, [&](typename V::T v) { return softcap_v<V>(v, c, inv); });
}

// erf(x) as a rational function of x on [-4, 4] (odd degree-13 numerator, even degree-8
// denominator; the approximation Eigen and XLA use), +-1 beyond: within 5e-7 of erf in float
// (tests/kernels check it against std::erf).
template <class V>
typename V::T erf_v(typename V::T x) {
    const typename V::T lim = V::set1(4.0f), zero = V::zero();
    x = V::max(V::sub(zero, V::max(V::sub(zero, x), V::sub(zero, lim))), V::sub(zero, lim));
    const typename V::T x2 = V::mul(x, x);
    typename V::T p = V::set1(-2.72614225801306e-10f);
    for (const float c : {2.77068142495902e-08f, -2.10102402082508e-06f, -5.69250639462346e-05f,
                          -7.34990630326855e-04f, -2.95459980854025e-03f, -1.60960333262415e-02f})
        p = V::fmadd(x2, p, V::set1(c));
    typename V::T q = V::set1(-1.45660718464996e-05f);
    for (const float c : {-2.13374055278905e-04f, -1.68282697438203e-03f, -7.37332916720468e-03f,
                          -1.42647390514189e-02f})
        q = V::fmadd(x2, q, V::set1(c));
    return V::div(V::mul(x, p), q);
}

// gelu(x) = x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2 (MPT's, PyTorch's default GELU).
template <class V>
void gelu_erf_v(float* x, int64_t n) {
    const typename V::T half = V::set1(0.5f), one = V::set1(1.0f),
                        r2 = V::set1(0.70710678118654752f);
    map_in_place<V>(x, n, [&](typename V::T v) {
        return V::mul(V::mul(half, v), V::add(one, erf_v<V>(V::mul(v, r2))));
    });
}

// d/dx x Phi(x) = Phi(x) + x phi(x), phi(x) = e^(-x^2 / 2) / sqrt(2 pi).
template <class V>
void gelu_erf_backward_v(const float* x, const float* dy, float* dx, int64_t n) {
    const typename V::T half = V::set1(0.5f), one = V::set1(1.0f), zero = V::zero(),
                        r2 = V::set1(0.70710678118654752f),
                        rpi = V::set1(0.39894228040143268f);  // 1 / sqrt(2 pi)
    for_lanes<V>(n, [&](auto ld, auto st) {
        const typename V::T v = ld(x);
        const typename V::T cdf = V::mul(half, V::add(one, erf_v<V>(V::mul(v, r2))));
        const typename V::T pdf = V::mul(rpi, V::exp(V::sub(zero, V::mul(half, V::mul(v, v)))));
        st(dx, V::mul(ld(dy), V::fmadd(v, pdf, cdf)));
    });
}

// Sum over a row with double accumulators; Op(acc, vector).
template <class V, class Op>
double row_sum(const float* x, int64_t dim, Op op) {
    constexpr int W = V::W;
    typename V::D a0 = V::dzero(), a1 = V::dzero();
    int64_t i = 0;
    for (; i + 2 * W <= dim; i += 2 * W) {
        op(a0, V::load(x + i));
        op(a1, V::load(x + i + W));
    }
    for (; i + W <= dim; i += W) op(a0, V::load(x + i));
    if (i < dim) op(a1, V::load_n(x + i, static_cast<int>(dim - i)));  // zeros add nothing
    return V::dsum(a0) + V::dsum(a1);
}

template <class V>
void rms_norm_v(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
                float eps) {
    constexpr int W = V::W;
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * dim;
        float* yr = out + r * dim;
        const double ss =
            row_sum<V>(xr, dim, [](typename V::D& a, typename V::T v) { V::dadd_sq(a, v); });
        const typename V::T sc =
            V::set1(static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps)));
        int64_t i = 0;
        for (; i + W <= dim; i += W)
            V::store(yr + i, V::mul(V::mul(V::load(xr + i), sc), V::load(weight + i)));
        if (i < dim) {
            const int n = static_cast<int>(dim - i);
            V::store_n(yr + i, V::mul(V::mul(V::load_n(xr + i, n), sc), V::load_n(weight + i, n)),
                       n);
        }
    }
}

template <class V>
void layer_norm_v(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
                  const float* bias, float eps) {
    constexpr int W = V::W;
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * dim;
        float* yr = out + r * dim;
        const double mean =
            row_sum<V>(xr, dim, [](typename V::D& a, typename V::T v) { V::dadd(a, v); }) /
            static_cast<double>(dim);
        // Zero-filled tail lanes would add mean^2 each: sum full vectors, the tail separately.
        const int64_t full = dim / W * W;
        double var = row_sum<V>(
            xr, full, [mean](typename V::D& a, typename V::T v) { V::dadd_sqdev(a, v, mean); });
        for (int64_t i = full; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
        const double inv = 1.0 / std::sqrt(var / static_cast<double>(dim) + eps);
        // y = (x - mean) * inv * w + b = x * (inv w) + (b - mean inv w), in float.
        const typename V::T vi = V::set1(static_cast<float>(inv)),
                            vm = V::set1(static_cast<float>(-mean * inv));
        auto f = [&](typename V::T xv, typename V::T w, typename V::T b) {
            return V::fmadd(V::fmadd(xv, vi, vm), w, b);
        };
        int64_t i = 0;
        for (; i + W <= dim; i += W)
            V::store(yr + i,
                     f(V::load(xr + i), V::load(weight + i), bias ? V::load(bias + i) : V::zero()));
        if (i < dim) {
            const int n = static_cast<int>(dim - i);
            V::store_n(yr + i,
                       f(V::load_n(xr + i, n), V::load_n(weight + i, n),
                         bias ? V::load_n(bias + i, n) : V::zero()),
                       n);
        }
    }
}

// silu'(a) = s (1 + a (1 - s)) with s = sigmoid(a).
template <class V>
void swiglu_backward_v(const float* gate, const float* up, const float* dout, float* dgate,
                       float* dup, int64_t n) {
    const typename V::T one = V::set1(1.0f), zero = V::zero();
    for_lanes<V>(n, [&](auto ld, auto st) {
        const typename V::T a = ld(gate), u = ld(up), d = ld(dout);
        const typename V::T sg = V::div(one, V::add(one, V::exp(V::sub(zero, a))));
        const typename V::T silu = V::mul(a, sg);
        const typename V::T dsilu = V::mul(sg, V::fmadd(a, V::sub(one, sg), one));
        st(dgate, V::mul(V::mul(d, u), dsilu));
        st(dup, V::mul(d, silu));
    });
}

// Swish-beta: y = g s u with s = sigmoid(beta g); dy/dg = s (1 + beta g (1 - s)),
// dy/dbeta = g^2 s (1 - s), dy/du = g s.
template <class V>
void swish_beta_v(float* gate, const float* up, const float* beta, int64_t n) {
    const typename V::T one = V::set1(1.0f), zero = V::zero();
    for_lanes<V>(n, [&](auto ld, auto st) {
        const typename V::T g = ld(gate);
        const typename V::T e = V::exp(V::sub(zero, V::mul(ld(beta), g)));
        st(gate, V::div(V::mul(g, ld(up)), V::add(one, e)));
    });
}

template <class V>
void swish_beta_backward_v(const float* gate, const float* up, const float* beta, const float* dout,
                           float* dgate, float* dup, float* dbeta, int64_t n) {
    const typename V::T one = V::set1(1.0f), zero = V::zero();
    for_lanes<V>(n, [&](auto ld, auto st) {
        const typename V::T g = ld(gate), u = ld(up), d = ld(dout), b = ld(beta);
        const typename V::T bg = V::mul(b, g);
        const typename V::T s = V::div(one, V::add(one, V::exp(V::sub(zero, bg))));
        const typename V::T s1 = V::sub(one, s), du = V::mul(d, u);
        st(dgate, V::mul(du, V::mul(s, V::fmadd(bg, s1, one))));
        st(dup, V::mul(d, V::mul(g, s)));
        st(dbeta, V::fmadd(V::mul(du, V::mul(g, g)), V::mul(s, s1), ld(dbeta)));
    });
}

// gelu_tanh(x) = x s with s = sigmoid(2y), y = k (x + c x^3) (see the top of the file), and
// its derivative d/dx = s + x * 2 s (1 - s) * k (1 + 3 c x^2): s and the derivative of x.
template <class V>
void gelu_tanh_parts(typename V::T v, typename V::T& s, typename V::T& dydx) {
    const typename V::T one = V::set1(1.0f), two = V::set1(2.0f);
    const typename V::T a = V::set1(-2.0f * 0.7978845608028654f), k = V::set1(0.7978845608028654f);
    const typename V::T c = V::set1(0.044715f), c3 = V::set1(3.0f * 0.044715f);
    const typename V::T v2 = V::mul(v, v);
    s = V::div(one, V::add(one, V::exp(V::mul(a, V::fmadd(V::mul(c, v), v2, v)))));
    dydx = V::fmadd(V::mul(V::mul(two, v), V::mul(s, V::sub(one, s))),
                    V::mul(k, V::fmadd(c3, v2, one)), s);
}

template <class V>
void gelu_tanh_backward_v(const float* x, const float* dy, float* dx, int64_t n) {
    for_lanes<V>(n, [&](auto ld, auto st) {
        typename V::T s, dydx;
        gelu_tanh_parts<V>(ld(x), s, dydx);
        st(dx, V::mul(ld(dy), dydx));
    });
}

// GeGLU's backward, gelu = g s as above: dgate = dout up gelu'(g), dup = dout gelu(g).
template <class V>
void geglu_backward_v(const float* gate, const float* up, const float* dout, float* dgate,
                      float* dup, int64_t n) {
    for_lanes<V>(n, [&](auto ld, auto st) {
        const typename V::T g = ld(gate), u = ld(up), d = ld(dout);
        typename V::T s, dgelu;
        gelu_tanh_parts<V>(g, s, dgelu);
        st(dgate, V::mul(V::mul(d, u), dgelu));
        st(dup, V::mul(d, V::mul(g, s)));
    });
}

// Softmax cross-entropy of one row: max, then e^(z - max) stored in place and summed in double,
// then scaled (the scalar reference computes e^x in double; this one in float, ~1 ulp).
template <class V>
double xent_row_v(float* z, int64_t n, int32_t target, float scale) {
    constexpr int W = V::W;
    const int64_t full = n / W * W;
    const int r = static_cast<int>(n - full);
    typename V::T mv = V::set1(-INFINITY);
    for (int64_t i = 0; i < full; i += W) mv = V::max(mv, V::load(z + i));
    float lanes[W];
    V::store(lanes, mv);
    float m = lanes[0];
    for (int i = 1; i < W; ++i) m = std::max(m, lanes[i]);
    for (int64_t i = full; i < n; ++i) m = std::max(m, z[i]);
    const float zt = z[target];
    const typename V::T mb = V::set1(m);
    typename V::D acc = V::dzero();
    for (int64_t i = 0; i < full; i += W) {
        const typename V::T e = V::exp(V::sub(V::load(z + i), mb));
        V::store(z + i, e);
        V::dadd(acc, e);
    }
    double sum = V::dsum(acc);
    if (r) {
        const typename V::T e = V::exp(V::sub(V::load_n(z + full, r), mb));
        V::store_n(z + full, e, r);
        V::store(lanes, e);
        for (int i = 0; i < r; ++i) sum += lanes[i];
    }
    const typename V::T k = V::set1(static_cast<float>(scale / sum));
    for (int64_t i = 0; i < full; i += W) V::store(z + i, V::mul(V::load(z + i), k));
    if (r) V::store_n(z + full, V::mul(V::load_n(z + full, r), k), r);
    z[target] -= scale;
    return std::log(sum) + m - zt;
}

// The table of one vector type, for an ISA's own file (compiled with that ISA's flags).
template <class V>
ElementwiseKernels elementwise_table(Isa isa) {
    ElementwiseKernels k{};
    k.isa = isa;
    k.swiglu = swiglu_v<V>;
    k.gelu_tanh = gelu_tanh_v<V>;
    k.rms_norm = rms_norm_v<V>;
    k.layer_norm = layer_norm_v<V>;
    k.xent_row = xent_row_v<V>;
    k.swiglu_backward = swiglu_backward_v<V>;
    k.gelu_tanh_backward = gelu_tanh_backward_v<V>;
    k.gelu_erf = gelu_erf_v<V>;
    k.gelu_erf_backward = gelu_erf_backward_v<V>;
    k.geglu = geglu_v<V>;
    k.geglu_backward = geglu_backward_v<V>;
    k.softcap = softcap_array_v<V>;
    k.swish_beta = swish_beta_v<V>;
    k.swish_beta_backward = swish_beta_backward_v<V>;
    return k;
}

}  // namespace
}  // namespace syslm::kernels
