// A 16 x 16 float transpose in AVX-512 registers, for the files compiled for AVX-512 only
// (the GEMM's packers and the AMX GEMM's output).
#pragma once

#include <immintrin.h>

namespace syslm::kernels::x86 {

// Transposes r[i] (16 rows of 16 values) into t[k] (16 vectors, lane i = row i). The classic
// unpack / shuffle network.
inline void transpose16(__m512 (&r)[16], __m512 (&t)[16]) {
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    // r[4q + s] holds, in each 128-bit lane L, elements k = 4L + s of rows 4q..4q+3.
    for (int s = 0; s < 4; ++s) {
        // Gather 128-bit lanes: for lane L, rows 0..15 come from r[s], r[4+s], r[8+s], r[12+s].
        const __m512 a = _mm512_shuffle_f32x4(r[s], r[4 + s], 0x88);       // L0,L2 | L0,L2
        const __m512 b = _mm512_shuffle_f32x4(r[s], r[4 + s], 0xDD);       // L1,L3 | L1,L3
        const __m512 c = _mm512_shuffle_f32x4(r[8 + s], r[12 + s], 0x88);  // L0,L2 | L0,L2
        const __m512 d = _mm512_shuffle_f32x4(r[8 + s], r[12 + s], 0xDD);  // L1,L3 | L1,L3
        t[s] = _mm512_shuffle_f32x4(a, c, 0x88);                           // L0 of all: k = s
        t[8 + s] = _mm512_shuffle_f32x4(a, c, 0xDD);                       // L2: k = 8 + s
        t[4 + s] = _mm512_shuffle_f32x4(b, d, 0x88);                       // L1: k = 4 + s
        t[12 + s] = _mm512_shuffle_f32x4(b, d, 0xDD);                      // L3: k = 12 + s
    }
}

}  // namespace syslm::kernels::x86
