// Round trips float -> type -> float for every type with kernels, on inputs with awkward shapes
// and hostile blocks (outliers, all-negative, constant, zero, tiny, grid values; see
// quant_test_inputs.hpp). Each type gets the error bound its format implies:
//   * per element, relative to the largest magnitude in the group that shares the scale
//     (32 for legacy types, the 256-element super-block for K-quants), plus an absolute floor
//     for f16 scales that underflow to subnormals;
//   * on weight-like data, a relative RMSE bound and the ordering the bit widths imply.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <vector>

#include "core/dtype.hpp"
#include "core/half.hpp"
#include "kernels/quants/block_layouts.hpp"
#include "kernels/type_traits.hpp"
#include "quant_test_inputs.hpp"

namespace syslm::kernels {
namespace {

constexpr float kF16Ulp = 1.0f / 2048.0f;               // relative rounding of an f16 scale
constexpr float kF16SubnormalHalfUlp = 2.9802322e-08f;  // 2^-25

struct Bound {
    DType type;
    int64_t group;      // elements sharing one scale (the amax the bound refers to)
    float rel_to_amax;  // max |error| / amax of the group
    float levels;       // largest multiplier of an f16 scale (for the subnormal floor)
    float rel_rmse;     // bound on relative RMSE for weight-like data
};

// rel_to_amax: legacy types from their step (symmetric: amax / (levels/2), error up to one step
// where the clamp bites, else half a step; asymmetric: half of range / levels with range <= 2 amax)
// plus the f16 rounding of d and m. K-quants: half a level step plus the error of the quantized
// sub-block scales, with margin (their searches trade the worst case for lower RMSE).
// rel_rmse: the values measured on make_weight_like(5, 37, 1024) plus 15%.
constexpr Bound kBounds[] = {
    {DType::F16, 1, kF16Ulp, 1, 2.4e-4f},
    {DType::BF16, 1, 1.0f / 256, 0, 1.95e-3f},
    {DType::Q4_0, 32, (1.0f / 8) * (1 + 8 * kF16Ulp), 8, 0.128f},
    {DType::Q4_1, 32, 1.0f / 15 + 3 * kF16Ulp, 16, 0.0975f},
    {DType::Q5_0, 32, (1.0f / 16) * (1 + 16 * kF16Ulp), 16, 0.064f},
    {DType::Q5_1, 32, 1.0f / 31 + 3 * kF16Ulp, 32, 0.047f},
    {DType::Q8_0, 32, 0.5f / 127 + kF16Ulp, 127, 0.0079f},
    {DType::Q8_1, 32, 0.5f / 127 + kF16Ulp, 127, 0.0079f},
    {DType::Q2_K, 256, 0.50f, 60, 0.338f},
    {DType::Q3_K, 256, 0.30f, 128, 0.188f},
    {DType::Q4_K, 256, 0.10f, 1008, 0.0906f},
    {DType::Q5_K, 256, 0.07f, 2016, 0.0446f},
    {DType::Q6_K, 256, 0.02f, 4096, 0.0246f},
    {DType::Q8_K, 256, (0.5f / 127) * 1.0001f, 0, 0.0176f},
};

void PrintTo(const Bound& b, std::ostream* os) {
    *os << dtype_name(b.type);
}

std::vector<float> roundtrip(DType t, const std::vector<float>& x, int64_t cols) {
    const TypeTraits& tr = type_traits(t);
    const int64_t rows = static_cast<int64_t>(x.size()) / cols;
    const size_t rb = row_bytes(t, cols);
    std::vector<uint8_t> q(rb * static_cast<size_t>(rows));
    std::vector<float> y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
        tr.from_float(x.data() + r * cols, q.data() + r * rb, cols);
        tr.to_float(q.data() + r * rb, y.data() + r * cols, cols);
    }
    return y;
}

double rel_rmse(const std::vector<float>& x, const std::vector<float>& y) {
    double se = 0, sx = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        se += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
        sx += static_cast<double>(x[i]) * x[i];
    }
    return std::sqrt(se / sx);
}

class QuantRoundTrip : public ::testing::TestWithParam<Bound> {};

TEST_P(QuantRoundTrip, ErrorWithinFormatBound) {
    const Bound& b = GetParam();
    const int64_t block = dtype_info(b.type).block_size;
    const int64_t unit = std::max<int64_t>(block, 32);
    uint64_t seed = 1;
    for (int64_t blocks_per_row : {1, 3, 7}) {
        for (int64_t rows : {1, 5, 13}) {
            const int64_t cols = unit * blocks_per_row;
            const std::vector<float> x = testing::make_quant_input(seed++, rows * cols);
            const std::vector<float> y = roundtrip(b.type, x, cols);
            for (size_t g = 0; g < x.size(); g += static_cast<size_t>(b.group)) {
                float amax = 0;
                for (int64_t j = 0; j < b.group; ++j) amax = std::max(amax, std::fabs(x[g + j]));
                for (int64_t j = 0; j < b.group; ++j) {
                    const size_t i = g + static_cast<size_t>(j);
                    // Plain float types round each element on its own.
                    const float ref = b.group == 1 ? std::fabs(x[i]) : amax;
                    const float bound =
                        ref * b.rel_to_amax * 1.00001f + b.levels * kF16SubnormalHalfUlp;
                    ASSERT_LE(std::fabs(x[i] - y[i]), bound)
                        << dtype_name(b.type) << " element " << i << " of " << rows << "x" << cols
                        << ": x=" << x[i] << " y=" << y[i] << " group amax=" << amax;
                }
            }
        }
    }
}

TEST_P(QuantRoundTrip, WeightLikeRmseWithinBound) {
    const Bound& b = GetParam();
    const std::vector<float> x = testing::make_weight_like(5, 37, 1024);
    const double e = rel_rmse(x, roundtrip(b.type, x, 1024));
    EXPECT_LE(e, b.rel_rmse) << dtype_name(b.type);
    EXPECT_GT(e, 0.0) << dtype_name(b.type) << " cannot be lossless on random data";
}

TEST_P(QuantRoundTrip, ZerosStayZero) {
    const Bound& b = GetParam();
    const int64_t cols = std::max<int64_t>(dtype_info(b.type).block_size, 32) * 2;
    const std::vector<float> y = roundtrip(b.type, std::vector<float>(cols * 3, 0.0f), cols);
    for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(b.type);
}

// NaN and Inf inputs give garbage (as in ggml) but must not crash or hit undefined behaviour
// (the sanitizer build checks the latter).
TEST_P(QuantRoundTrip, NonFiniteInputsAreHandled) {
    const Bound& b = GetParam();
    const int64_t cols = std::max<int64_t>(dtype_info(b.type).block_size, 32) * 2;
    std::vector<float> x = testing::make_quant_input(3, cols);
    x[1] = std::numeric_limits<float>::quiet_NaN();
    x[5] = std::numeric_limits<float>::infinity();
    x[cols - 1] = -std::numeric_limits<float>::infinity();
    const std::vector<float> y = roundtrip(b.type, x, cols);
    EXPECT_EQ(y.size(), x.size());
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantRoundTrip, ::testing::ValuesIn(kBounds),
                         [](const ::testing::TestParamInfo<Bound>& info) {
                             return std::string(dtype_name(info.param.type));
                         });

TEST(QuantRoundTrip, F32IsExact) {
    const std::vector<float> x = testing::make_quant_input(4, 32 * 9);
    EXPECT_EQ(roundtrip(DType::F32, x, 32 * 3), x);
}

TEST(QuantRoundTrip, MoreBitsMeanLessError) {
    const std::vector<float> x = testing::make_weight_like(6, 16, 512);
    auto err = [&](DType t) { return rel_rmse(x, roundtrip(t, x, 512)); };
    EXPECT_GT(err(DType::Q2_K), err(DType::Q3_K));
    EXPECT_GT(err(DType::Q3_K), err(DType::Q4_K));
    EXPECT_GT(err(DType::Q4_K), err(DType::Q5_K));
    EXPECT_GT(err(DType::Q5_K), err(DType::Q6_K));
    EXPECT_GT(err(DType::Q6_K), err(DType::Q8_0));
    EXPECT_GT(err(DType::Q4_0), err(DType::Q5_0));
    EXPECT_GT(err(DType::Q4_1), err(DType::Q5_1));
    EXPECT_GT(err(DType::Q5_0), err(DType::Q8_0));
    EXPECT_GT(err(DType::Q8_0), err(DType::F16));
    // The K-quant searches beat the plain legacy format of the same width.
    EXPECT_GT(err(DType::Q4_0), err(DType::Q4_K));
}

// Symmetric legacy types map the largest-magnitude element exactly onto the end of the range, so
// it survives up to the f16 rounding of the scale — also in all-negative blocks.
TEST(QuantRoundTrip, SymmetricTypesKeepTheExtremeElement) {
    for (DType t : {DType::Q4_0, DType::Q5_0, DType::Q8_0}) {
        for (float sign : {1.0f, -1.0f}) {
            std::vector<float> x = testing::make_quant_input(12, 32);
            for (float& v : x) v = sign * (std::fabs(v) + 0.01f);
            x[17] = sign * 3.0f;  // the extreme
            const std::vector<float> y = roundtrip(t, x, 32);
            EXPECT_NEAR(y[17], x[17], 3.0f * kF16Ulp) << dtype_name(t) << " sign " << sign;
        }
    }
}

// Q4_1/Q5_1 store the block minimum as f16: the smallest element comes back up to that rounding.
TEST(QuantRoundTrip, AsymmetricTypesKeepTheMinimum) {
    for (DType t : {DType::Q4_1, DType::Q5_1}) {
        std::vector<float> x = testing::make_quant_input(13, 32);
        for (float& v : x) v = -std::fabs(v) - 1.0f;  // all negative
        const size_t imin = static_cast<size_t>(std::min_element(x.begin(), x.end()) - x.begin());
        const std::vector<float> y = roundtrip(t, x, 32);
        EXPECT_NEAR(y[imin], x[imin], std::fabs(x[imin]) * kF16Ulp) << dtype_name(t);
    }
}

TEST(QuantRoundTrip, Q8KBlockSumsMatchQuants) {
    const std::vector<float> x = testing::make_quant_input(14, QK_K * 5);
    std::vector<BlockQ8_K> q(5);
    type_traits(DType::Q8_K).from_float(x.data(), q.data(), QK_K * 5);
    for (const BlockQ8_K& b : q)
        for (int s = 0; s < QK_K / 16; ++s) {
            int sum = 0;
            for (int j = 0; j < 16; ++j) sum += b.qs[16 * s + j];
            EXPECT_EQ(b.bsums[s], sum);
        }
}

TEST(QuantRoundTrip, Q81BlockSumIsScaledQuantSum) {
    const std::vector<float> x = testing::make_quant_input(15, QK8_1 * 9);
    std::vector<BlockQ8_1> q(9);
    type_traits(DType::Q8_1).from_float(x.data(), q.data(), QK8_1 * 9);
    for (const BlockQ8_1& b : q) {
        int sum = 0;
        for (int8_t v : b.qs) sum += v;
        // ggml scales the sum by d before d is rounded to f16 (possibly to a subnormal), hence
        // the tolerance: the rounding of d times |sum|, plus the rounding of s itself.
        const float expect = static_cast<float>(sum) * f16_to_f32(b.d);
        const float tol = std::fabs(expect) * 2 * kF16Ulp +
                          static_cast<float>(std::abs(sum) + 1) * kF16SubnormalHalfUlp;
        EXPECT_NEAR(f16_to_f32(b.s), expect, tol);
    }
}

}  // namespace
}  // namespace syslm::kernels
