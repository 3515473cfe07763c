// Every variant of the peak micro-kernels: the streaming kernels compute what they claim (sums
// within float rounding of a double-precision sum, copies exact, on awkward lengths and
// offsets); the compute kernels count operations in proportion to their iterations and finish.
#include "kernels/cpu/peak.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "../common/isas.hpp"
#include "core/cpu_features.hpp"

namespace syslm::kernels {
namespace {

TEST(PeakKernels, ReadSumMatchesDoubleSumOnAwkwardSizes) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> data(5003);
    for (float& x : data) x = u(rng);
    for (Isa isa : syslm::testing::supported_isas()) {
        const PeakKernels& k = peak_kernels(isa);
        for (int64_t off : {0, 1, 3}) {
            for (int64_t n : {0, 1, 15, 17, 63, 65, 127, 1000, 4999}) {
                double ref = 0, mag = 0;
                for (int64_t i = 0; i < n; ++i) {
                    ref += data[off + i];
                    mag += std::fabs(data[off + i]);
                }
                EXPECT_NEAR(k.read_sum(data.data() + off, n), ref, 1e-5 * mag + 1e-6)
                    << isa_name(isa) << " n=" << n << " offset=" << off;
            }
        }
    }
}

TEST(PeakKernels, CopyIsExactAndStaysInBounds) {
    std::vector<float> src(3001);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) * 0.37f - 11.0f;
    for (Isa isa : syslm::testing::supported_isas()) {
        for (int64_t n : {1, 7, 16, 33, 64, 100, 2999}) {
            std::vector<float> dst(static_cast<size_t>(n) + 2, -999.0f);
            peak_kernels(isa).copy(dst.data() + 1, src.data() + 1, n);
            EXPECT_EQ(dst[0], -999.0f);
            EXPECT_EQ(dst[static_cast<size_t>(n) + 1], -999.0f) << isa_name(isa) << " n=" << n;
            for (int64_t i = 0; i < n; ++i)
                ASSERT_EQ(dst[static_cast<size_t>(i) + 1], src[static_cast<size_t>(i) + 1]);
        }
    }
}

TEST(PeakKernels, ComputeKernelsCountOperationsPerIteration) {
    for (Isa isa : syslm::testing::supported_isas()) {
        const PeakKernels& k = peak_kernels(isa);
        for (PeakKernels::ComputeFn fn : {k.fma_f32, k.dot_bf16, k.dot_int8}) {
            if (!fn) continue;
            float sink = NAN;
            const double a = fn(1000, &sink);
            EXPECT_TRUE(std::isfinite(sink)) << isa_name(isa);
            const double b = fn(3000, &sink);
            EXPECT_GT(a, 0);
            EXPECT_DOUBLE_EQ(b, 3 * a) << isa_name(isa);
        }
    }
}

TEST(PeakKernels, Bf16KernelOnlyWhereTheCpuHasIt) {
    if (!isa_supported(Isa::Avx512)) GTEST_SKIP() << "no AVX-512 here";
    EXPECT_EQ(peak_kernels(Isa::Avx512).dot_bf16 != nullptr, cpu_features().avx512bf16);
    EXPECT_EQ(peak_kernels(Isa::Avx2).dot_bf16, nullptr);
}

// The FMA kernel runs the recurrence c <- c * a + b; whatever the chains' starting values, after
// many iterations every chain converges to b / (1 - a), which the sink then reflects.
TEST(PeakKernels, FmaKernelsComputeTheirRecurrence) {
    for (Isa isa : syslm::testing::supported_isas()) {
        float sink = 0;
        const PeakKernels& k = peak_kernels(isa);
        k.fma_f32(200000, &sink);
        const double fixed = 1e-4 / (1 - 0.999);  // 0.1 per chain
        const double chains = std::round(sink / fixed);
        EXPECT_GE(chains, 1) << isa_name(isa);
        EXPECT_NEAR(sink, chains * fixed, 1e-3 * chains) << isa_name(isa);
    }
}

}  // namespace
}  // namespace syslm::kernels
