// vec_dot of every type against its partner equals the dot product of the two dequantized rows,
// computed independently here in double from to_float. The kernels multiply integers exactly and
// scale per block, so the only differences are float roundings: the tolerance is a few float
// ulps of sum |x_i * y_i| and, where the kernel rounds a level part and a min / offset part on
// their own, of those parts too (dot_magnitude.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.hpp"
#include "dot_magnitude.hpp"
#include "kernels/type_traits.hpp"
#include "quant_test_inputs.hpp"

namespace syslm::kernels {
namespace {

constexpr const auto& kTypes = testing::kVecDotTypes;

struct Quantized {
    std::vector<uint8_t> bytes;
    std::vector<float> dequantized;
};

Quantized quantize(DType t, const std::vector<float>& x) {
    const TypeTraits& tr = type_traits(t);
    const auto n = static_cast<int64_t>(x.size());
    Quantized q{std::vector<uint8_t>(row_bytes(t, n)), std::vector<float>(x.size())};
    tr.from_float(x.data(), q.bytes.data(), n);
    tr.to_float(q.bytes.data(), q.dequantized.data(), n);
    return q;
}

class QuantVecDot : public ::testing::TestWithParam<DType> {};

TEST_P(QuantVecDot, EqualsDotOfDequantizedRows) {
    const DType t = GetParam();
    const TypeTraits& tr = type_traits(t);
    const int64_t block =
        std::max(dtype_info(t).block_size, dtype_info(tr.vec_dot_type).block_size);
    uint64_t seed = 100;
    for (int64_t blocks : {1, 2, 5, 11}) {
        const int64_t n = std::max<int64_t>(block, 32) * blocks;
        // Mixed chunk kinds for the weights, weight-like noise for the activations, and the other
        // way round, so outliers and sign-uniform blocks meet both operands.
        for (int swap = 0; swap < 2; ++swap) {
            const std::vector<float> a = testing::make_quant_input(seed++, n);
            const std::vector<float> b = testing::make_weight_like(seed++, 1, n);
            const Quantized x = quantize(t, swap ? b : a);
            const Quantized y = quantize(tr.vec_dot_type, swap ? a : b);
            double ref = 0;
            for (int64_t i = 0; i < n; ++i)
                ref += static_cast<double>(x.dequantized[i]) * y.dequantized[i];
            const double mag = testing::dot_magnitude(t, x.dequantized, y.dequantized);
            const float got = tr.vec_dot(n, x.bytes.data(), y.bytes.data());
            EXPECT_NEAR(got, ref, 4e-7 * mag + 1e-30)
                << dtype_name(t) << " . " << dtype_name(tr.vec_dot_type) << " n=" << n;
        }
    }
}

// The partner's job is to stand in for float activations: the quantized dot product stays close
// to the exact float dot product of the original rows (a loose bound per type width).
TEST_P(QuantVecDot, ApproximatesFloatDot) {
    const DType t = GetParam();
    const TypeTraits& tr = type_traits(t);
    const int64_t n = 256 * 8;
    const std::vector<float> a = testing::make_weight_like(7, 1, n);
    const std::vector<float> b = testing::make_weight_like(8, 1, n);
    double exact = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
        exact += static_cast<double>(a[i]) * b[i];
        mag += std::fabs(static_cast<double>(a[i]) * b[i]);
    }
    const float got =
        tr.vec_dot(n, quantize(t, a).bytes.data(), quantize(tr.vec_dot_type, b).bytes.data());
    // Independent rounding errors shrink the relative error by ~sqrt(n): 0.1 of mag is loose
    // even for Q2_K, yet a wrong scale or level decoding would exceed it.
    EXPECT_NEAR(got, exact, 0.1 * mag) << dtype_name(t);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantVecDot, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<DType>& info) {
                             return std::string(dtype_name(info.param));
                         });

}  // namespace
}  // namespace syslm::kernels
