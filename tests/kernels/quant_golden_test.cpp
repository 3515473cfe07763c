// Bit-identity with ggml's reference quantizers. The fingerprints below were produced by compiling
// llama.cpp's own ggml/src/ggml-quants.c (commit c392e50, quantize_row_*_ref and dequantize_row_*)
// on the inputs of quant_test_inputs.hpp — not by syslm — so a mismatch means syslm writes blocks
// llama.cpp would not (or decodes them differently). The same comparison was run block by block
// on 600 seeds x 16384 values per type while developing; these fixed seeds keep it in CI.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <ostream>
#include <vector>

#include "core/dtype.hpp"
#include "kernels/type_traits.hpp"
#include "quant_test_inputs.hpp"

namespace syslm::kernels {
namespace {

struct Golden {
    DType type;
    int input;             // 0: mixed chunk kinds (seed 7), 1: weight-like 8 x 768 (seed 11)
    uint64_t blocks_hash;  // FNV-1a of the quantized bytes
    uint64_t floats_hash;  // FNV-1a of the dequantized floats (0: ggml has no dequantizer)
};

constexpr Golden kGolden[] = {
    {DType::Q4_0, 0, 0xc5d8ea36cb48c201ull, 0xbf2c8873a57ecfd7ull},
    {DType::Q4_0, 1, 0x7e0707c86cab6ef7ull, 0x9be54605f08b0d9aull},
    {DType::Q4_1, 0, 0xd70504443b4d68faull, 0x18594b8000395972ull},
    {DType::Q4_1, 1, 0x64b84458f9539213ull, 0x2dc3a9031dd13792ull},
    {DType::Q5_0, 0, 0xf71de556979d6e2cull, 0x8c594bce9c355c23ull},
    {DType::Q5_0, 1, 0x402457135e7a52b6ull, 0x3aaa404df7fd8074ull},
    {DType::Q5_1, 0, 0xe1120055d0550711ull, 0xa52f9373ad4a4244ull},
    {DType::Q5_1, 1, 0x18f961cf1b5de16full, 0x8b403581d586f6e9ull},
    {DType::Q8_0, 0, 0xf2043853b31d0293ull, 0x9e6e3ebb111ad488ull},
    {DType::Q8_0, 1, 0x0739abfebeaeefa8ull, 0xeaa2c7d6a3155a98ull},
    {DType::Q8_1, 0, 0x77cb33915cf1a724ull, 0x0000000000000000ull},
    {DType::Q8_1, 1, 0xaa1b12ce5dd5affdull, 0x0000000000000000ull},
    {DType::Q2_K, 0, 0x984911e56704adb0ull, 0x503482eba7209480ull},
    {DType::Q2_K, 1, 0x17dc7679a91e8e62ull, 0x0f3633a84c909e9eull},
    {DType::Q3_K, 0, 0xdd5ca0493a8f54a9ull, 0xf9cab6936cfba269ull},
    {DType::Q3_K, 1, 0x06b693a43596fd05ull, 0xca7f4b71d8029770ull},
    {DType::Q4_K, 0, 0xca426a6b2f85ff48ull, 0x1493e6ce00beb5e1ull},
    {DType::Q4_K, 1, 0xd52ad4e8748bb36dull, 0xc48d4ad08b46cadaull},
    {DType::Q5_K, 0, 0x1ec83c148a18f053ull, 0xea3334e86f458842ull},
    {DType::Q5_K, 1, 0x5f3061a96fade55aull, 0x48d5b0cc04ee8a7aull},
    {DType::Q6_K, 0, 0x56cd4957dfbe9657ull, 0x67969d0aa5b8bfbcull},
    {DType::Q6_K, 1, 0x2355368d992879ffull, 0x69ef6e8b61447ba6ull},
    {DType::Q8_K, 0, 0x790b0aad7656ce1bull, 0x12763e8ef98baff1ull},
    {DType::Q8_K, 1, 0x1c65aaa9b05ac1a3ull, 0x869998b86061d3edull},
};

void PrintTo(const Golden& g, std::ostream* os) {
    *os << dtype_name(g.type) << " input " << g.input;
}

class QuantGolden : public ::testing::TestWithParam<Golden> {};

TEST_P(QuantGolden, MatchesGgmlReference) {
    const Golden& g = GetParam();
    constexpr int64_t n = 256 * 24;
    const std::vector<float> x =
        g.input == 0 ? testing::make_quant_input(7, n) : testing::make_weight_like(11, 8, n / 8);
    const TypeTraits& tr = type_traits(g.type);
    std::vector<uint8_t> q(row_bytes(g.type, n), 0);
    tr.from_float(x.data(), q.data(), n);
    EXPECT_EQ(testing::fnv1a(q.data(), q.size()), g.blocks_hash)
        << dtype_name(g.type) << ": quantized blocks differ from ggml's quantize_row_*_ref";
    if (g.floats_hash != 0) {
        std::vector<float> y(n);
        tr.to_float(q.data(), y.data(), n);
        EXPECT_EQ(testing::fnv1a(y.data(), y.size() * sizeof(float)), g.floats_hash)
            << dtype_name(g.type) << ": dequantized floats differ from ggml's dequantize_row_*";
    }
}

INSTANTIATE_TEST_SUITE_P(AllQuantTypes, QuantGolden, ::testing::ValuesIn(kGolden),
                         [](const ::testing::TestParamInfo<Golden>& info) {
                             return std::string(dtype_name(info.param.type)) + "_input" +
                                    std::to_string(info.param.input);
                         });

// Importance-weighted quantizers (llama-quantize --imatrix). Fingerprints from llama.cpp's
// ggml-quants.c (commit c392e50, quantize_<type>(src, dst, nrow, n_per_row, quant_weights),
// compiled with gcc -O2 -std=c11) on the inputs below as rows of 1024 (input 0, importance seed
// 13) or 768 columns (input 1, seed 17): the same function computed by ggml.
struct ImatrixGolden {
    DType type;
    int input;
    uint64_t blocks_hash;
};

constexpr ImatrixGolden kImatrixGolden[] = {
    {DType::Q4_0, 0, 0x123e7f3761d67599ull}, {DType::Q4_0, 1, 0x28ec5b2b58ff6557ull},
    {DType::Q4_1, 0, 0xf7f47dd8d86e404full}, {DType::Q4_1, 1, 0x9910de2cc5f0ddb0ull},
    {DType::Q5_0, 0, 0x34fdac1609357d31ull}, {DType::Q5_0, 1, 0xd5281c9f5022b25bull},
    {DType::Q5_1, 0, 0xc4b6973b19b5d393ull}, {DType::Q5_1, 1, 0xe4d40187c4c5174eull},
    {DType::Q2_K, 0, 0x2912b98289c95a46ull}, {DType::Q2_K, 1, 0x62956d5cc06788eeull},
    {DType::Q3_K, 0, 0x9afbc0eb589fc9a9ull}, {DType::Q3_K, 1, 0xdb9f923915f379e9ull},
    {DType::Q4_K, 0, 0x2093b27f5dfc8bb5ull}, {DType::Q4_K, 1, 0xe59f3a83bef6aa83ull},
    {DType::Q5_K, 0, 0xe6594f241c1e4603ull}, {DType::Q5_K, 1, 0x405a89b46eb2f40dull},
    {DType::Q6_K, 0, 0xf9e3e1bf7d1859cfull}, {DType::Q6_K, 1, 0xce8d70206c14e7d0ull},
};

void PrintTo(const ImatrixGolden& g, std::ostream* os) {
    *os << dtype_name(g.type) << " input " << g.input;
}

class QuantImatrixGolden : public ::testing::TestWithParam<ImatrixGolden> {};

TEST_P(QuantImatrixGolden, MatchesGgmlImpl) {
    const ImatrixGolden& g = GetParam();
    constexpr int64_t n = 256 * 24;
    const int64_t cols = g.input == 0 ? 1024 : 768, rows = n / cols;
    const std::vector<float> x = g.input == 0 ? testing::make_quant_input(7, n)
                                              : testing::make_weight_like(11, rows, cols);
    const std::vector<float> importance = testing::make_importance(g.input == 0 ? 13 : 17, cols);
    const FromFloatImatrixFn quantize = ggml_imatrix_quantizer(g.type);
    ASSERT_NE(quantize, nullptr);
    const size_t rb = row_bytes(g.type, cols);
    std::vector<uint8_t> q(rb * static_cast<size_t>(rows), 0);
    for (int64_t r = 0; r < rows; ++r)
        quantize(x.data() + r * cols, q.data() + static_cast<size_t>(r) * rb, cols,
                 importance.data());
    EXPECT_EQ(testing::fnv1a(q.data(), q.size()), g.blocks_hash)
        << dtype_name(g.type) << ": blocks differ from ggml's importance-weighted quantizer";
}

INSTANTIATE_TEST_SUITE_P(WeightedTypes, QuantImatrixGolden, ::testing::ValuesIn(kImatrixGolden),
                         [](const ::testing::TestParamInfo<ImatrixGolden>& info) {
                             return std::string(dtype_name(info.param.type)) + "_input" +
                                    std::to_string(info.param.input);
                         });

// Weighting works: on weight-like rows, each weighted quantizer's importance-weighted squared
// error is below the plain quantizer's (summed over rows; the point of --imatrix).
TEST(QuantImatrix, LowersImportanceWeightedError) {
    const int64_t cols = 1024, rows = 16;
    const std::vector<float> x = testing::make_weight_like(23, rows, cols);
    const std::vector<float> importance = testing::make_importance(29, cols);
    for (const ImatrixGolden& g : kImatrixGolden) {
        if (g.input != 0) continue;
        const TypeTraits& tr = type_traits(g.type);
        const size_t rb = row_bytes(g.type, cols);
        std::vector<uint8_t> q(rb);
        std::vector<float> y(static_cast<size_t>(cols));
        double err_plain = 0, err_weighted = 0;
        for (int64_t r = 0; r < rows; ++r) {
            const float* xr = x.data() + r * cols;
            for (int pass = 0; pass < 2; ++pass) {
                if (pass == 0)
                    tr.from_float(xr, q.data(), cols);
                else
                    imatrix_quantizer(g.type)(xr, q.data(), cols, importance.data());
                tr.to_float(q.data(), y.data(), cols);
                double e = 0;
                for (int64_t j = 0; j < cols; ++j) {
                    const double d = static_cast<double>(y[static_cast<size_t>(j)]) - xr[j];
                    e += importance[static_cast<size_t>(j)] * d * d;
                }
                (pass == 0 ? err_plain : err_weighted) += e;
            }
        }
        EXPECT_LT(err_weighted, 0.8 * err_plain) << dtype_name(g.type);
    }
    for (DType t : {DType::Q8_0, DType::F16, DType::F32}) EXPECT_EQ(imatrix_quantizer(t), nullptr);
}

// syslm's Q2_K weighted search is the plain quantizer's with importance-weighted fits: uniform
// importance gives the plain (ggml reference) blocks bit for bit, real importance other blocks.
TEST(QuantImatrix, Q2KSearchWithUniformImportanceIsThePlainQuantizer) {
    const int64_t cols = 768, rows = 8;
    const std::vector<float> x = testing::make_weight_like(31, rows, cols);
    const std::vector<float> ones(static_cast<size_t>(cols), 1.0f);
    const std::vector<float> importance = testing::make_importance(37, cols);
    const TypeTraits& tr = type_traits(DType::Q2_K, Isa::Scalar);
    const size_t rb = row_bytes(DType::Q2_K, cols);
    std::vector<uint8_t> plain(rb), uniform(rb), weighted(rb);
    int differ = 0;
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x.data() + r * cols;
        tr.from_float(xr, plain.data(), cols);
        imatrix_quantizer(DType::Q2_K)(xr, uniform.data(), cols, ones.data());
        imatrix_quantizer(DType::Q2_K)(xr, weighted.data(), cols, importance.data());
        EXPECT_EQ(std::memcmp(plain.data(), uniform.data(), rb), 0) << "row " << r;
        differ += std::memcmp(plain.data(), weighted.data(), rb) != 0;
    }
    EXPECT_EQ(differ, rows);
    EXPECT_NE(imatrix_quantizer(DType::Q2_K), ggml_imatrix_quantizer(DType::Q2_K));
    EXPECT_EQ(imatrix_quantizer(DType::Q4_K), ggml_imatrix_quantizer(DType::Q4_K));
}

// The row functions work block by block: quantizing rows separately equals quantizing them as
// one long row (what the multithreaded quantize_model relies on).
TEST(QuantGolden, RowSplittingDoesNotChangeBlocks) {
    for (DType t : {DType::Q4_0, DType::Q5_1, DType::Q3_K, DType::Q6_K}) {
        const int64_t block = dtype_info(t).block_size;
        const int64_t cols = block * 3, rows = 5;
        const std::vector<float> x = testing::make_quant_input(99, rows * cols);
        const TypeTraits& tr = type_traits(t);
        std::vector<uint8_t> whole(row_bytes(t, rows * cols)), split(whole.size());
        tr.from_float(x.data(), whole.data(), rows * cols);
        for (int64_t r = 0; r < rows; ++r)
            tr.from_float(x.data() + r * cols, split.data() + r * row_bytes(t, cols), cols);
        EXPECT_EQ(whole, split) << dtype_name(t);
    }
}

}  // namespace
}  // namespace syslm::kernels
