// Scalar variants of the peak micro-kernels and the choice of variant (see peak.hpp).
#include "kernels/cpu/peak.hpp"

#include <array>
#include <cstring>

#include "core/cpu_features.hpp"
#include "core/error.hpp"

namespace syslm::kernels {
namespace {

// Eight independent chains: enough to hide the latency of a scalar multiply-add.
double fma_f32_scalar(int64_t iters, float* sink) {
    float acc[8] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
    float a = 0.999f, b = 1e-4f;
    for (int64_t i = 0; i < iters; ++i) {
        __asm__ volatile("" : "+x"(a), "+x"(b));  // opaque: keeps the loop honest
        for (float& c : acc) c = c * a + b;
    }
    float s = 0;
    for (float c : acc) s += c;
    *sink = s;
    return 2.0 * 8 * static_cast<double>(iters);
}

double dot_int8_scalar(int64_t iters, float* sink) {
    int32_t acc[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint8_t a[4] = {3, 200, 17, 99};
    int8_t b[4] = {-5, 7, -128, 127};
    for (int64_t i = 0; i < iters; ++i) {
        uint32_t av, bv;
        std::memcpy(&av, a, 4);
        std::memcpy(&bv, b, 4);
        __asm__ volatile("" : "+r"(av), "+r"(bv));
        std::memcpy(a, &av, 4);
        std::memcpy(b, &bv, 4);
        for (int32_t& c : acc)
            for (int k = 0; k < 4; ++k) c += static_cast<int32_t>(a[k]) * b[k];
    }
    int64_t s = 0;
    for (int32_t c : acc) s += c;
    *sink = static_cast<float>(s);
    return 2.0 * 8 * 4 * static_cast<double>(iters);
}

float read_sum_scalar(const float* p, int64_t n) {
    float acc[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; ++k) acc[k] += p[i + k];
    float s = 0;
    for (; i < n; ++i) s += p[i];
    for (float c : acc) s += c;
    return s;
}

void copy_scalar(float* dst, const float* src, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

}  // namespace

const PeakKernels& peak_kernels(Isa isa) {
    static const std::array<PeakKernels, 3> variants = [] {
        std::array<PeakKernels, 3> v{};
        v[0] = PeakKernels{Isa::Scalar,
                           fma_f32_scalar,
                           nullptr,
                           dot_int8_scalar,
                           "scalar fma",
                           nullptr,
                           "scalar int8 multiply-add",
                           read_sum_scalar,
                           copy_scalar,
                           nullptr,
                           nullptr};
        if (isa_supported(Isa::Avx2)) v[1] = x86::peak_kernels_avx2();
        if (isa_supported(Isa::Avx512)) {
            v[2] = x86::peak_kernels_avx512(cpu_features().avx512bf16);
            if (cpu_features().amx_bf16 && amx_tiles_permitted()) v[2].tile_bf16 = x86::peak_amx_bf16;
            if (cpu_features().amx_int8 && amx_tiles_permitted()) v[2].tile_int8 = x86::peak_amx_int8;
        }
        return v;
    }();
    SYSLM_CHECK(isa_supported(isa), "peak kernels: this CPU does not support ", isa_name(isa));
    return variants[static_cast<int>(isa)];
}

const PeakKernels& peak_kernels() {
    return peak_kernels(active_isa());
}

}  // namespace syslm::kernels
