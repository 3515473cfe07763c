// The traits table itself: one complete row per compute type, block structs of the sizes GGUF
// (and dtype_info) say, and the partner types ggml uses.
#include <gtest/gtest.h>

#include <utility>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "kernels/quants/block_layouts.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::kernels {
namespace {

TEST(QuantTypeTraits, BlockStructsMatchDtypeInfo) {
    const std::pair<DType, size_t> sizes[] = {
        {DType::Q4_0, sizeof(BlockQ4_0)}, {DType::Q4_1, sizeof(BlockQ4_1)},
        {DType::Q5_0, sizeof(BlockQ5_0)}, {DType::Q5_1, sizeof(BlockQ5_1)},
        {DType::Q8_0, sizeof(BlockQ8_0)}, {DType::Q8_1, sizeof(BlockQ8_1)},
        {DType::Q2_K, sizeof(BlockQ2_K)}, {DType::Q3_K, sizeof(BlockQ3_K)},
        {DType::Q4_K, sizeof(BlockQ4_K)}, {DType::Q5_K, sizeof(BlockQ5_K)},
        {DType::Q6_K, sizeof(BlockQ6_K)}, {DType::Q8_K, sizeof(BlockQ8_K)},
    };
    for (const auto& [t, size] : sizes) EXPECT_EQ(dtype_info(t).type_size, size) << dtype_name(t);
    EXPECT_EQ(dtype_info(DType::Q4_0).block_size, QK4_0);
    EXPECT_EQ(dtype_info(DType::Q8_1).block_size, QK8_1);
    EXPECT_EQ(dtype_info(DType::Q6_K).block_size, QK_K);
    EXPECT_EQ(dtype_info(DType::Q8_K).block_size, QK_K);
}

TEST(QuantTypeTraits, PartnersAreGgmls) {
    const std::pair<DType, DType> partners[] = {
        {DType::F32, DType::F32},   {DType::F16, DType::F16},   {DType::BF16, DType::BF16},
        {DType::Q4_0, DType::Q8_0}, {DType::Q4_1, DType::Q8_1}, {DType::Q5_0, DType::Q8_0},
        {DType::Q5_1, DType::Q8_1}, {DType::Q8_0, DType::Q8_0}, {DType::Q8_1, DType::Q8_1},
        {DType::Q2_K, DType::Q8_K}, {DType::Q3_K, DType::Q8_K}, {DType::Q4_K, DType::Q8_K},
        {DType::Q5_K, DType::Q8_K}, {DType::Q6_K, DType::Q8_K}, {DType::Q8_K, DType::Q8_K},
    };
    for (const auto& [t, partner] : partners) {
        ASSERT_TRUE(has_type_traits(t)) << dtype_name(t);
        const TypeTraits& tr = type_traits(t);
        EXPECT_EQ(tr.type, t);
        EXPECT_EQ(tr.vec_dot_type, partner) << dtype_name(t);
        EXPECT_NE(tr.to_float, nullptr);
        EXPECT_NE(tr.from_float, nullptr);
        EXPECT_NE(tr.vec_dot, nullptr);
    }
}

TEST(QuantTypeTraits, StorageOnlyTypesHaveNoKernels) {
    for (DType t : {DType::I8, DType::I16, DType::I32, DType::I64, DType::F64}) {
        EXPECT_FALSE(has_type_traits(t)) << dtype_name(t);
        try {
            type_traits(t);
            ADD_FAILURE() << "expected an Error for " << dtype_name(t);
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(dtype_name(t)), std::string::npos) << e.what();
        }
    }
    EXPECT_THROW(type_traits(static_cast<DType>(20)), Error);  // IQ4_NL: unknown to syslm
}

}  // namespace
}  // namespace syslm::kernels
