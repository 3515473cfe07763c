// Rounding helpers shared by the reference quantizers. Their exact results matter: the files
// syslm writes must be bit-identical to ggml's, so these reproduce ggml's conversions for every
// finite input, and stay defined (no UB) for NaN/Inf and out-of-range values.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace syslm::kernels::detail {

// Round to nearest, ties to even, for |x| <= 2^22 (ggml's nearest_int): adding 1.5 * 2^23 puts
// the integer into the low mantissa bits. Outside that range the result is meaningless but
// defined; callers clamp.
inline int nearest_int(float x) {
    const float v = x + 12582912.0f;
    return static_cast<int>(std::bit_cast<uint32_t>(v) & 0x007fffffu) - 0x00400000;
}

// C's float -> integer conversion (truncation toward zero), as ggml's `(int8_t)(x + 8.5f)`,
// but clamped to [lo, hi] first so NaN (-> lo) and huge values cannot invoke undefined
// behaviour. Branch-free, so the quantizer loops vectorize.
inline int trunc_clamped(float x, int lo, int hi) {
    const auto flo = static_cast<float>(lo), fhi = static_cast<float>(hi);
    x = x > flo ? x : flo;
    x = x < fhi ? x : fhi;
    return static_cast<int>(x);
}

// C's roundf (half away from zero), clamped to [-127, 127] (finite inputs of Q8 never leave it).
inline int8_t round_to_i8(float x) {
    if (!(x > -127.0f)) return x != x ? 0 : -127;
    if (x >= 127.0f) return 127;
    return static_cast<int8_t>(std::round(x));
}

}  // namespace syslm::kernels::detail
