// The wire codec of hidden-state rows (infer/wire_rows.hpp): random rows of an awkward width
// with outliers, every value within its format's rounding bound (f16: half an ulp of its
// binade; int8: half the row's scale), values f16 can hold exactly passed exactly, a zero row,
// and bad input refused with what is wrong.
#include "infer/wire_rows.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/half.hpp"

namespace syslm::infer {
namespace {

std::vector<float> random_rows(int64_t rows, int64_t width, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n(0.0f, 1.5f);
    std::vector<float> x(static_cast<size_t>(rows * width));
    for (float& v : x) v = n(rng);
    x[7] = 900.5f;                               // residual streams carry a few large outliers
    x[static_cast<size_t>(width + 3)] = -3e-6f;  // and tiny values (f16 subnormal)
    return x;
}

TEST(WireRows, F16IsWithinHalfAnUlp) {
    const int64_t rows = 5, width = 257;
    const std::vector<float> x = random_rows(rows, width, 1);
    const std::string b = encode_rows(WireType::F16, x, rows, width);
    ASSERT_EQ(b.size(), wire_bytes(WireType::F16, rows, width));
    std::vector<float> y(x.size());
    decode_rows(WireType::F16, b, rows, width, y.data());
    for (size_t i = 0; i < x.size(); ++i) {
        // f16 keeps 11 significant bits; below 2^-14 its step is 2^-24
        const float ax = std::fabs(x[i]);
        const float ulp = ax < 0x1.0p-14f ? 0x1.0p-24f : std::ldexp(1.0f, std::ilogb(ax) - 10);
        EXPECT_LE(std::fabs(y[i] - x[i]), 0.5f * ulp) << i;
    }
    // values f16 holds exactly come back exactly
    std::vector<float> exact(x.size());
    for (size_t i = 0; i < x.size(); ++i) exact[i] = f16_to_f32(f32_to_f16(x[i]));
    decode_rows(WireType::F16, encode_rows(WireType::F16, exact, rows, width), rows, width,
                y.data());
    EXPECT_EQ(y, exact);
}

TEST(WireRows, Int8IsWithinHalfTheRowsScale) {
    const int64_t rows = 4, width = 131;
    std::vector<float> x = random_rows(rows, width, 2);
    for (int64_t i = 0; i < width; ++i) x[static_cast<size_t>(3 * width + i)] = 0;  // zero row
    const std::string b = encode_rows(WireType::Int8, x, rows, width);
    ASSERT_EQ(b.size(), static_cast<size_t>(rows * (width + 4)));
    std::vector<float> y(x.size());
    decode_rows(WireType::Int8, b, rows, width, y.data());
    for (int64_t r = 0; r < rows; ++r) {
        float amax = 0;
        for (int64_t i = 0; i < width; ++i)
            amax = std::max(amax, std::fabs(x[static_cast<size_t>(r * width + i)]));
        const float scale = amax / 127;
        for (int64_t i = 0; i < width; ++i) {
            const size_t k = static_cast<size_t>(r * width + i);
            // half a step of rounding, plus the float error of x / scale and q * scale
            EXPECT_LE(std::fabs(y[k] - x[k]), 0.5f * scale + 4e-7f * amax) << r << " " << i;
        }
    }
    for (int64_t i = 0; i < width; ++i) EXPECT_EQ(y[static_cast<size_t>(3 * width + i)], 0.0f);
}

TEST(WireRows, F32IsExact) {
    const std::vector<float> x = random_rows(5, 37, 4);
    const std::string b = encode_rows(WireType::F32, x, 5, 37);
    ASSERT_EQ(b.size(), 5u * 37 * 4);
    std::vector<float> y(x.size());
    decode_rows(WireType::F32, b, 5, 37, y.data());
    EXPECT_EQ(y, x);
    EXPECT_EQ(wire_type("f32"), WireType::F32);
}

TEST(WireRows, BadInputIsRefusedWithWhatIsWrong) {
    const std::vector<float> x = random_rows(2, 16, 3);
    std::vector<float> y(x.size());
    for (WireType t : {WireType::F16, WireType::Int8, WireType::F32}) {
        const std::string b = encode_rows(t, x, 2, 16);
        EXPECT_THROW(decode_rows(t, b.substr(0, b.size() - 1), 2, 16, y.data()), std::exception);
        EXPECT_THROW(decode_rows(t, b, 3, 16, y.data()), std::exception);
        EXPECT_THROW(encode_rows(t, x, 3, 16), std::exception);
    }
    std::string b = encode_rows(WireType::Int8, x, 2, 16);
    const float bad = -1.0f;
    b.replace(0, 4, reinterpret_cast<const char*>(&bad), 4);
    EXPECT_THROW(decode_rows(WireType::Int8, b, 2, 16, y.data()), std::exception);
    std::vector<float> big = x;
    big[5] = 1e5f;  // past f16's 65504
    EXPECT_THROW(encode_rows(WireType::F16, big, 2, 16), std::exception);
    EXPECT_NO_THROW(encode_rows(WireType::Int8, big, 2, 16));
    big[5] = std::nanf("");
    EXPECT_THROW(encode_rows(WireType::Int8, big, 2, 16), std::exception);
    EXPECT_EQ(wire_type("int8"), WireType::Int8);
    EXPECT_THROW(wire_type("f8"), std::exception);
}

}  // namespace
}  // namespace syslm::infer
