// Scalar IEEE half (F16) and bfloat16 (BF16) conversions, bit-exact with ggml's reference
// conversions: round-to-nearest-even, infinities and NaNs kept, F16 subnormals handled.
#pragma once

#include <bit>
#include <cstdint>

namespace syslm {

inline float f16_to_f32(uint16_t h) {
    const uint32_t w = static_cast<uint32_t>(h) << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    // Normal numbers: shift the exponent/mantissa into place and rescale by 2^-112.
    const float normal = std::bit_cast<float>((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
    // Subnormals: build 0.5 + m*2^-24 with a magic exponent, then subtract 0.5.
    const float denormal = std::bit_cast<float>((two_w >> 17) | (126u << 23)) - 0.5f;
    const uint32_t bits =
        two_w < (1u << 27) ? std::bit_cast<uint32_t>(denormal) : std::bit_cast<uint32_t>(normal);
    return std::bit_cast<float>(sign | bits);
}

inline uint16_t f32_to_f16(float f) {
    // Scaling up then down lets the FPU do the round-to-nearest-even of the mantissa.
    float base = (__builtin_fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
    const uint32_t w = std::bit_cast<uint32_t>(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = std::bit_cast<float>((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = std::bit_cast<uint32_t>(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

inline float bf16_to_f32(uint16_t h) {
    return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

inline uint16_t f32_to_bf16(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64);  // quiet NaN
    return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

}  // namespace syslm
