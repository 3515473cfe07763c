// Plain floating-point types: F32, F16 (IEEE half) and BF16. Conversions are the bit-exact ones
// of core/half.hpp; dot products accumulate in double, as ggml's scalar ggml_vec_dot_f16/_f32 do.
#include <cstring>

#include "core/half.hpp"
#include "kernels/quants/quant_rows.hpp"

namespace syslm::kernels {

void dequantize_row_f32(const void* src, float* dst, int64_t n) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void quantize_row_f32(const float* src, void* dst, int64_t n) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

float vec_dot_f32_f32(int64_t n, const void* x, const void* y) {
    const auto* a = static_cast<const float*>(x);
    const auto* b = static_cast<const float*>(y);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i] * b[i]);
    return static_cast<float>(sum);
}

void dequantize_row_f16(const void* src, float* dst, int64_t n) {
    const auto* h = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
}

void quantize_row_f16(const float* src, void* dst, int64_t n) {
    auto* h = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
}

float vec_dot_f16_f16(int64_t n, const void* x, const void* y) {
    const auto* a = static_cast<const uint16_t*>(x);
    const auto* b = static_cast<const uint16_t*>(y);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(f16_to_f32(a[i]) * f16_to_f32(b[i]));
    return static_cast<float>(sum);
}

void dequantize_row_bf16(const void* src, float* dst, int64_t n) {
    const auto* h = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
}

void quantize_row_bf16(const float* src, void* dst, int64_t n) {
    auto* h = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
}

float vec_dot_bf16_bf16(int64_t n, const void* x, const void* y) {
    const auto* a = static_cast<const uint16_t*>(x);
    const auto* b = static_cast<const uint16_t*>(y);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i)
        sum += static_cast<double>(bf16_to_f32(a[i]) * bf16_to_f32(b[i]));
    return static_cast<float>(sum);
}

}  // namespace syslm::kernels
