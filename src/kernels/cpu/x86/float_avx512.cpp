// AVX-512 dot products of float rows (F32 x F32, F16 x F16). Compiled with the AVX-512 flags; see
// kernels/isa.hpp for the rules of ISA files.
#include "kernels/cpu/x86/simd.hpp"

#include <algorithm>

#include "kernels/cpu/x86/x86_kernels.hpp"

namespace syslm::kernels::x86 {
namespace {

// Lane shuffles instead of _mm512_reduce_add_ps / extracts, whose GCC 12 header trips a false
// -Wuninitialized.
float hsum(__m512 v) {
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));  // + the other 256-bit half
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));  // + the neighbouring 128-bit lane
    __m128 s = _mm512_castps512_ps128(v);
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// The weight row (x) prefetched 4 KiB ahead, as in the quantized dots: without it the
// hardware prefetchers leave a decode step's stream well short of the read bandwidth on Intel.
void prefetch_lines(const void* p, int lines) {
    const char* c = static_cast<const char*>(p) + 4096;
    for (int l = 0; l < lines; ++l) _mm_prefetch(c + 64 * l, _MM_HINT_T0);
}

float dot_f32(int64_t n, const void* xv, const void* yv) {
    const float* x = static_cast<const float*>(xv);
    const float* y = static_cast<const float*>(yv);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        prefetch_lines(x + i, 4);
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), _mm512_loadu_ps(y + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), _mm512_loadu_ps(y + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16)
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
    if (i < n) {  // masked tail: no scalar loop
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i), a1);
    }
    return hsum(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

__m512 load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// F16 rows: 16 halves widened per vector; the tail is a masked load (zeros add nothing).
float dot_f16(int64_t n, const void* xv, const void* yv) {
    const uint16_t* x = static_cast<const uint16_t*>(xv);
    const uint16_t* y = static_cast<const uint16_t*>(yv);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        prefetch_lines(x + i, 2);
        a0 = _mm512_fmadd_ps(load_f16(x + i), load_f16(y + i), a0);
        a1 = _mm512_fmadd_ps(load_f16(x + i + 16), load_f16(y + i + 16), a1);
        a2 = _mm512_fmadd_ps(load_f16(x + i + 32), load_f16(y + i + 32), a2);
        a3 = _mm512_fmadd_ps(load_f16(x + i + 48), load_f16(y + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(load_f16(x + i), load_f16(y + i), a0);
    if (i < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        const __m512 xv16 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i));
        const __m512 yv16 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, y + i));
        a1 = _mm512_fmadd_ps(xv16, yv16, a1);
    }
    return hsum(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

// Several tokens against one weight row, each (row, token) summed exactly as dot_f32 / dot_f16
// sum it alone (the same four accumulators, tail and reduction), so a token's logits do not
// depend on what it is batched with; but each weight vector is loaded once for NT tokens, which
// halves the loads per FMA at 4 tokens (decode's dot needs two). Verifying a speculative draft
// and small batches run this; one token keeps the plain dot (decode streams rows best that way).
template <class E>
__m512 load16(const E* p) {
    if constexpr (sizeof(E) == 4) return _mm512_loadu_ps(reinterpret_cast<const float*>(p));
    else return load_f16(reinterpret_cast<const uint16_t*>(p));
}
template <class E>
__m512 load16_n(const E* p, __mmask16 m) {
    if constexpr (sizeof(E) == 4)
        return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(p));
    else
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

template <class E, int NT>
void dot_row_tokens(int64_t n, const E* x, const uint8_t* y, size_t by, float* s, size_t bs) {
    const E* yt[NT];
    for (int t = 0; t < NT; ++t) yt[t] = reinterpret_cast<const E*>(y + t * by);
    __m512 acc[NT][4];
    for (int t = 0; t < NT; ++t)
        for (int k = 0; k < 4; ++k) acc[t][k] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        const __m512 w0 = load16(x + i), w1 = load16(x + i + 16), w2 = load16(x + i + 32),
                     w3 = load16(x + i + 48);
        for (int t = 0; t < NT; ++t) {
            acc[t][0] = _mm512_fmadd_ps(w0, load16(yt[t] + i), acc[t][0]);
            acc[t][1] = _mm512_fmadd_ps(w1, load16(yt[t] + i + 16), acc[t][1]);
            acc[t][2] = _mm512_fmadd_ps(w2, load16(yt[t] + i + 32), acc[t][2]);
            acc[t][3] = _mm512_fmadd_ps(w3, load16(yt[t] + i + 48), acc[t][3]);
        }
    }
    for (; i + 16 <= n; i += 16) {
        const __m512 w = load16(x + i);
        for (int t = 0; t < NT; ++t) acc[t][0] = _mm512_fmadd_ps(w, load16(yt[t] + i), acc[t][0]);
    }
    if (i < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        const __m512 w = load16_n(x + i, m);
        for (int t = 0; t < NT; ++t)
            acc[t][1] = _mm512_fmadd_ps(w, load16_n(yt[t] + i, m), acc[t][1]);
    }
    for (int t = 0; t < NT; ++t)
        s[t * bs] = hsum(_mm512_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]),
                                       _mm512_add_ps(acc[t][2], acc[t][3])));
}

template <class E>
void dot_tokens(int64_t n, int nr, const void* xv, size_t bx, int nt, const void* yv, size_t by,
                float* s, size_t bs) {
    const auto* x = static_cast<const uint8_t*>(xv);
    const auto* y = static_cast<const uint8_t*>(yv);
    for (int r = 0; r < nr; ++r) {
        const E* xr = reinterpret_cast<const E*>(x + r * bx);
        for (int t0 = 0; t0 < nt; t0 += 4) {
            const uint8_t* yt = y + t0 * by;
            float* st = s + t0 * bs + r;
            switch (std::min(4, nt - t0)) {
                case 1: st[0] = (sizeof(E) == 4 ? dot_f32 : dot_f16)(n, xr, yt); break;
                case 2: dot_row_tokens<E, 2>(n, xr, yt, by, st, bs); break;
                case 3: dot_row_tokens<E, 3>(n, xr, yt, by, st, bs); break;
                default: dot_row_tokens<E, 4>(n, xr, yt, by, st, bs); break;
            }
        }
    }
}

// F16 -> f32 (exact: every half is a float), 16 per vector; the tail masked.
void f16_to_float(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const uint16_t*>(src);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, load_f16(x + i));
    if (i < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i)));
    }
}

}  // namespace

void register_float_avx512(TypeTraits* rows, int n) {
    if (TypeTraits* r = find_row(rows, n, DType::F32)) {
        r->vec_dot = dot_f32;
        r->vec_dot_tokens = dot_tokens<float>;
    }
    if (TypeTraits* r = find_row(rows, n, DType::F16)) {
        r->vec_dot = dot_f16;
        r->vec_dot_tokens = dot_tokens<uint16_t>;
        r->to_float = f16_to_float;
    }
}

}  // namespace syslm::kernels::x86
