// LoRA's row-kernel loops (lora.cpp), written once against a vector type V (V512, V256, VScalar)
// as linear_attention_body.hpp, for adapter matrices stored as f32 or f16 (the adapter file's own
// f16 is kept: half the bytes that decode reads each step). Internal linkage only.
#pragma once

#include <cstdint>

#include "kernels/cpu/attention.hpp"

namespace syslm::kernels {
namespace {

template <class V, bool F16>
typename V::T lora_load(const void* p, int64_t i) {
    if constexpr (F16)
        return V::load_h(static_cast<const uint16_t*>(p) + i);
    else
        return V::load(static_cast<const float*>(p) + i);
}

template <class V, bool F16>
typename V::T lora_load_n(const void* p, int64_t i, int n) {
    if constexpr (F16)
        return V::load_h_n(static_cast<const uint16_t*>(p) + i, n);
    else
        return V::load_n(static_cast<const float*>(p) + i, n);
}

// A vector of floats at p + i: whole (Tail false), or its first w lanes.
template <class V, bool F16, bool Tail>
typename V::T lora_vec(const void* p, int64_t i, int w) {
    if constexpr (Tail)
        return lora_load_n<V, F16>(p, i, w);
    else
        return lora_load<V, F16>(p, i);
}

// acc[j][u] += a_u[i..] x_j[i..] for one vector (or tail of w lanes) of the KA rows a_u.
template <class V, bool F16, int NX, int KA, bool Tail>
void lora_down_step(const void* const* ak, const float* const* x, int i, int w,
                    typename V::T (&acc)[NX][KA]) {
    typename V::T av[KA];
    for (int u = 0; u < KA; ++u) av[u] = lora_vec<V, F16, Tail>(ak[u], i, w);
    for (int j = 0; j < NX; ++j) {
        const typename V::T xv = lora_vec<V, false, Tail>(x[j], i, w);
        for (int u = 0; u < KA; ++u) acc[j][u] = V::fmadd(av[u], xv, acc[j][u]);
    }
}

// out[j * r + k] = scale (a_k . x_j) for the r rows a_k of a (n values each) and the NX rows x_j:
// KA rows of a at a time, each vector of a loaded (and widened) once for the NX rows.
template <class V, bool F16, int NX>
void lora_down_rows(const void* a, int r, int n, const float* const* x, float scale, float* out) {
    constexpr int KA = NX <= 2 || V::W >= 16 ? 4 : 2;  // accumulators within 16 registers on AVX2
    const int64_t es = F16 ? 2 : 4;
    for (int k0 = 0; k0 < r; k0 += KA) {
        const int m = r - k0 < KA ? r - k0 : KA;
        const void* ak[KA];
        for (int u = 0; u < KA; ++u)
            ak[u] = static_cast<const char*>(a) + (k0 + (u < m ? u : 0)) * int64_t{n} * es;
        typename V::T acc[NX][KA];
        for (auto& row : acc)
            for (auto& v : row) v = V::zero();
        int i = 0;
        for (; i + V::W <= n; i += V::W) lora_down_step<V, F16, NX, KA, false>(ak, x, i, V::W, acc);
        if (i < n) lora_down_step<V, F16, NX, KA, true>(ak, x, i, n - i, acc);
        for (int j = 0; j < NX; ++j)
            for (int u = 0; u < m; ++u) out[j * r + k0 + u] = scale * V::hsum(acc[j][u]);
    }
}

// y_j[i..i + U W) (+ the first w lanes of the last vector when Tail) += sum_k m[j * r + k]
// b[k * stride + i..]: each y vector loaded and stored once (not once per k, as r axpys would),
// each vector of b loaded (and widened) once for the NY rows.
template <class V, bool F16, int NY, int U, bool Tail>
void lora_axpy_block(float* const* y, const float* m, const void* b, int64_t stride, int r, int i,
                     int w) {
    typename V::T acc[NY][U];
    for (int j = 0; j < NY; ++j)
        for (int u = 0; u < U; ++u) acc[j][u] = lora_vec<V, false, Tail>(y[j], i + u * V::W, w);
    for (int k = 0; k < r; ++k) {
        typename V::T bv[U];
        for (int u = 0; u < U; ++u) bv[u] = lora_vec<V, F16, Tail>(b, k * stride + i + u * V::W, w);
        for (int j = 0; j < NY; ++j) {
            const typename V::T mk = V::set1(m[j * r + k]);
            for (int u = 0; u < U; ++u) acc[j][u] = V::fmadd(mk, bv[u], acc[j][u]);
        }
    }
    for (int j = 0; j < NY; ++j)
        for (int u = 0; u < U; ++u) {
            if constexpr (Tail)
                V::store_n(y[j] + i + u * V::W, acc[j][u], w);
            else
                V::store(y[j] + i + u * V::W, acc[j][u]);
        }
}

// y_j[0..n) += sum_k m[j * r + k] b[k * stride + 0..n) for k < r and the NY rows y_j: U vectors
// per row at a time, then single ones, then the tail.
template <class V, bool F16, int NY>
void lora_axpy_rows_n(float* const* y, const float* m, const void* b, int64_t stride, int r,
                      int n) {
    constexpr int U = NY <= 2 || V::W >= 16 ? 4 : 2;  // accumulators within 16 registers on AVX2
    int i = 0;
    for (; i + U * V::W <= n; i += U * V::W)
        lora_axpy_block<V, F16, NY, U, false>(y, m, b, stride, r, i, V::W);
    for (; i + V::W <= n; i += V::W)
        lora_axpy_block<V, F16, NY, 1, false>(y, m, b, stride, r, i, V::W);
    if (i < n) lora_axpy_block<V, F16, NY, 1, true>(y, m, b, stride, r, i, n - i);
}

template <class V, bool F16>
void lora_down(const void* a, int r, int n, const float* const* x, int nx, float scale,
               float* out) {
    switch (nx) {
        case 1:
            return lora_down_rows<V, F16, 1>(a, r, n, x, scale, out);
        case 2:
            return lora_down_rows<V, F16, 2>(a, r, n, x, scale, out);
        case 3:
            return lora_down_rows<V, F16, 3>(a, r, n, x, scale, out);
        default:
            return lora_down_rows<V, F16, kLoraRowGroup>(a, r, n, x, scale, out);
    }
}

template <class V, bool F16>
void lora_axpy_rows(float* const* y, int ny, const float* m, const void* b, int64_t stride, int r,
                    int n) {
    switch (ny) {
        case 1:
            return lora_axpy_rows_n<V, F16, 1>(y, m, b, stride, r, n);
        case 2:
            return lora_axpy_rows_n<V, F16, 2>(y, m, b, stride, r, n);
        case 3:
            return lora_axpy_rows_n<V, F16, 3>(y, m, b, stride, r, n);
        default:
            return lora_axpy_rows_n<V, F16, kLoraRowGroup>(y, m, b, stride, r, n);
    }
}

template <class V>
LoraKernels lora_table() {
    return {{lora_down<V, false>, lora_down<V, true>},
            {lora_axpy_rows<V, false>, lora_axpy_rows<V, true>}};
}

}  // namespace
}  // namespace syslm::kernels
