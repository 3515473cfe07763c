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

// out[k] = scale (a_k . x) for the r rows a_k of a (n values each): four rows at a time, x's
// vectors loaded once for them (four independent chains).
template <class V, bool F16>
void lora_down(const void* a, int r, int n, const float* x, float scale, float* out) {
    const int64_t es = F16 ? 2 : 4;
    for (int k0 = 0; k0 < r; k0 += 4) {
        const int m = r - k0 < 4 ? r - k0 : 4;
        const void* ak[4];
        for (int u = 0; u < 4; ++u)
            ak[u] = static_cast<const char*>(a) + (k0 + (u < m ? u : 0)) * int64_t{n} * es;
        typename V::T acc[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
        int i = 0;
        for (; i + V::W <= n; i += V::W) {
            const typename V::T xv = V::load(x + i);
            for (int u = 0; u < 4; ++u) acc[u] = V::fmadd(lora_load<V, F16>(ak[u], i), xv, acc[u]);
        }
        if (i < n) {
            const typename V::T xv = V::load_n(x + i, n - i);
            for (int u = 0; u < 4; ++u)
                acc[u] = V::fmadd(lora_load_n<V, F16>(ak[u], i, n - i), xv, acc[u]);
        }
        for (int u = 0; u < m; ++u) out[k0 + u] = scale * V::hsum(acc[u]);
    }
}

// y[0..n) += sum_k m[k] b[k * stride + 0..n) for k < r: y loaded and stored once per vector
// (not once per k, as r axpys would), four vectors in flight.
template <class V, bool F16>
void lora_axpy_rows(float* y, const float* m, const void* b, int64_t stride, int r, int n) {
    int i = 0;
    for (; i + 4 * V::W <= n; i += 4 * V::W) {
        typename V::T acc[4];
        for (int u = 0; u < 4; ++u) acc[u] = V::load(y + i + u * V::W);
        for (int k = 0; k < r; ++k) {
            const typename V::T mk = V::set1(m[k]);
            for (int u = 0; u < 4; ++u)
                acc[u] = V::fmadd(mk, lora_load<V, F16>(b, k * stride + i + u * V::W), acc[u]);
        }
        for (int u = 0; u < 4; ++u) V::store(y + i + u * V::W, acc[u]);
    }
    for (; i + V::W <= n; i += V::W) {
        typename V::T acc = V::load(y + i);
        for (int k = 0; k < r; ++k)
            acc = V::fmadd(V::set1(m[k]), lora_load<V, F16>(b, k * stride + i), acc);
        V::store(y + i, acc);
    }
    if (i < n) {
        typename V::T acc = V::load_n(y + i, n - i);
        for (int k = 0; k < r; ++k)
            acc = V::fmadd(V::set1(m[k]), lora_load_n<V, F16>(b, k * stride + i, n - i), acc);
        V::store_n(y + i, acc, n - i);
    }
}

template <class V>
LoraKernels lora_table() {
    return {{lora_down<V, false>, lora_down<V, true>},
            {lora_axpy_rows<V, false>, lora_axpy_rows<V, true>}};
}

}  // namespace
}  // namespace syslm::kernels
