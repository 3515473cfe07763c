#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/half.hpp"

namespace syslm {
namespace {

TEST(DType, BlockSizesMatchGgml) {
    // Values from ggml-common.h's static_asserts on the block structs.
    EXPECT_EQ(dtype_info(DType::Q4_0).type_size, 18u);
    EXPECT_EQ(dtype_info(DType::Q4_1).type_size, 20u);
    EXPECT_EQ(dtype_info(DType::Q5_0).type_size, 22u);
    EXPECT_EQ(dtype_info(DType::Q8_0).type_size, 34u);
    EXPECT_EQ(dtype_info(DType::Q2_K).type_size, 84u);
    EXPECT_EQ(dtype_info(DType::Q3_K).type_size, 110u);
    EXPECT_EQ(dtype_info(DType::Q4_K).type_size, 144u);
    EXPECT_EQ(dtype_info(DType::Q5_K).type_size, 176u);
    EXPECT_EQ(dtype_info(DType::Q6_K).type_size, 210u);
    EXPECT_EQ(dtype_info(DType::Q8_K).type_size, 292u);
    EXPECT_EQ(row_bytes(DType::Q4_K, 512), 288u);
    EXPECT_THROW(row_bytes(DType::Q4_0, 33), Error);
    EXPECT_EQ(dtype_info(uint32_t{16}), nullptr);  // IQ2_XXS: not supported, reported as unknown
    EXPECT_EQ(dtype_from_name("q4_k"), DType::Q4_K);
    EXPECT_FALSE(dtype_from_name("q4_k_x").has_value());
    // Load-time layouts are not file types: no name a user could ask for.
    EXPECT_TRUE(dtype_info(DType::Q4_0_G8).runtime_only);
    EXPECT_FALSE(dtype_from_name("Q4_0_G8").has_value());
    EXPECT_EQ(dtype_info(DType::Q4_0_G8).type_size, 8 * dtype_info(DType::Q4_0).type_size);
    EXPECT_TRUE(dtype_info(DType::Q8_0_G8W).runtime_only);
    EXPECT_FALSE(dtype_from_name("Q8_0_G8W").has_value());
    EXPECT_EQ(dtype_info(DType::Q8_0_G8W).type_size, 8 * dtype_info(DType::Q8_0).type_size);
    for (const auto& [lane, file] :
         {std::pair{DType::Q4_K_LANE, DType::Q4_K}, std::pair{DType::Q5_K_LANE, DType::Q5_K},
          std::pair{DType::Q6_K_LANE, DType::Q6_K}, std::pair{DType::Q8_K_LANE, DType::Q8_K}}) {
        EXPECT_TRUE(dtype_info(lane).runtime_only);
        EXPECT_FALSE(dtype_from_name(dtype_name(lane)).has_value());
        EXPECT_EQ(dtype_info(lane).type_size, dtype_info(file).type_size);
        EXPECT_EQ(dtype_info(lane).block_size, dtype_info(file).block_size);
    }
}

// Reference conversion through the compiler's own correctly rounded _Float16.
TEST(Half, F16RoundTripMatchesCompiler) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = f16_to_f32(static_cast<uint16_t>(h));
        if (std::isnan(f)) continue;
        EXPECT_EQ(f32_to_f16(f), h) << h;
    }
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-70000.f, 70000.f);
    for (int i = 0; i < 200000; ++i) {
        float f = dist(rng) * std::pow(10.f, static_cast<float>(static_cast<int>(rng() % 12) - 9));
        const _Float16 ref = static_cast<_Float16>(f);
        uint16_t ref_bits;
        std::memcpy(&ref_bits, &ref, 2);
        ASSERT_EQ(f32_to_f16(f), ref_bits) << f;
        ASSERT_EQ(f16_to_f32(ref_bits), static_cast<float>(ref)) << f;
    }
}

TEST(Half, Bf16RoundsToNearestEven) {
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
    EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
    // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to the even mantissa.
    EXPECT_EQ(f32_to_bf16(1.0f + 0x1.0p-8f), 0x3F80);
    EXPECT_EQ(f32_to_bf16(1.0f + 0x1.8p-7f), 0x3F82);
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

}  // namespace
}  // namespace syslm
