// Every ISA variant of every kernel in the TypeTraits table (kernels/cpu/x86/) against the scalar
// reference, for each ISA this CPU supports:
//   - vec_dot on rows of awkward lengths (1, 2, 3, 7, 33 blocks) built from inputs with outliers,
//     sign-uniform, sparse, constant, tiny and on-grid chunks, and on rows of random bits (every
//     bit pattern of the packed levels and scales); the partner row comes from the reference
//     quantizer. Integer paths are exact per block in both, and the variants sum the scaled
//     blocks in float where the reference uses double: tolerance 1e-6 * sum |x_i * y_i| (plus
//     the min/offset terms' magnitude for types with them, see dot_magnitude).
//   - from_float_fast is bit-identical to from_float (the contract of act_quant_avx2.cpp) for
//     every input without NaN, infinities included.
//   - to_float is bit-identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/half.hpp"
#include "dot_magnitude.hpp"
#include "kernels/isa.hpp"
#include "kernels/quants/block_layouts.hpp"
#include "kernels/type_traits.hpp"
#include "quant_test_inputs.hpp"

namespace syslm::kernels {
namespace {

constexpr const auto& kTypes = testing::kVecDotTypes;

// Partner-only layouts whose own vec_dot (against themselves) no kernel uses: only the scalar.
bool scalar_vec_dot_only(DType t) {
    return t == DType::Q8_0_G8 || t == DType::Q8_K_LANE;
}

const Isa kVariants[] = {Isa::Avx2, Isa::Avx512};

struct Case {
    DType type;
    Isa isa;
};

// Readable parameter values in failure messages.
void PrintTo(const Case& c, std::ostream* os) {
    *os << dtype_name(c.type) << "/" << isa_name(c.isa);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
    return std::string(dtype_name(info.param.type)) + "_" + isa_name(info.param.isa);
}

std::vector<Case> all_cases() {
    std::vector<Case> out;
    for (Isa isa : kVariants)
        for (DType t : kTypes) out.push_back({t, isa});
    return out;
}

int64_t block_of(DType t) {
    return dtype_info(t).block_size;
}

std::vector<uint8_t> quantize(FromFloatFn fn, DType t, const std::vector<float>& x) {
    std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
    fn(x.data(), q.data(), static_cast<int64_t>(x.size()));
    return q;
}

std::vector<float> dequantize(DType t, const std::vector<uint8_t>& q, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    type_traits(t, Isa::Scalar).to_float(q.data(), out.data(), n);
    return out;
}

class IsaVariant : public ::testing::TestWithParam<Case> {
protected:
    void SetUp() override {
        if (!isa_supported(GetParam().isa))
            GTEST_SKIP() << isa_name(GetParam().isa) << " not supported by this CPU";
    }
    const TypeTraits& ref() const { return type_traits(GetParam().type, Isa::Scalar); }
    const TypeTraits& var() const { return type_traits(GetParam().type, GetParam().isa); }
};

// Element counts: block multiples for quant types; for float types also lengths that leave
// every kind of tail.
std::vector<int64_t> lengths(DType t) {
    const int64_t b = std::max(block_of(t), block_of(type_traits(t, Isa::Scalar).vec_dot_type));
    if (b == 1) return {1, 3, 7, 17, 33, 100, 257, 1056, 4099};
    return {b, 2 * b, 3 * b, 7 * b, 33 * b};
}

void expect_dot_close(float got, float want, double mag, const std::string& what) {
    EXPECT_NEAR(got, want, 1e-6 * mag + 1e-30) << what;
}

TEST_P(IsaVariant, VecDotMatchesScalarOnQuantizedRows) {
    const DType t = GetParam().type;
    const DType p = ref().vec_dot_type;
    uint64_t seed = 1000 + static_cast<uint64_t>(t);
    for (int64_t n : lengths(t)) {
        for (int swap = 0; swap < 2; ++swap) {
            const std::vector<float> a = testing::make_quant_input(seed++, n);
            const std::vector<float> b = testing::make_weight_like(seed++, 1, n);
            const auto xq = quantize(ref().from_float, t, swap ? b : a);
            const auto yq = quantize(type_traits(p, Isa::Scalar).from_float, p, swap ? a : b);
            const double mag =
                testing::dot_magnitude(t, dequantize(t, xq, n), dequantize(p, yq, n));
            const float want = ref().vec_dot(n, xq.data(), yq.data());
            const float got = var().vec_dot(n, xq.data(), yq.data());
            expect_dot_close(got, want, mag,
                             "n=" + std::to_string(n) + " swap=" + std::to_string(swap));
        }
    }
}

// Byte offsets of the f16 (or, for Q8_K, f32) scale fields of each block type: random bits
// elsewhere, sane finite scales there.
std::vector<size_t> f16_fields(DType t) {
    switch (t) {
        case DType::Q4_0:
            return {offsetof(BlockQ4_0, d)};
        case DType::Q4_1:
            return {offsetof(BlockQ4_1, d), offsetof(BlockQ4_1, m)};
        case DType::Q5_0:
            return {offsetof(BlockQ5_0, d)};
        case DType::Q5_1:
            return {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)};
        case DType::Q8_0:
            return {offsetof(BlockQ8_0, d)};
        case DType::Q8_1:
            return {offsetof(BlockQ8_1, d), offsetof(BlockQ8_1, s)};
        case DType::Q2_K:
            return {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)};
        case DType::Q3_K:
            return {offsetof(BlockQ3_K, d)};
        case DType::Q4_K:
        case DType::Q4_K_LANE:
            return {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)};
        case DType::Q5_K:
        case DType::Q5_K_LANE:
            return {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)};
        case DType::Q6_K:
        case DType::Q6_K_LANE:
            return {offsetof(BlockQ6_K, d)};
        case DType::Q4_0_G8: {
            std::vector<size_t> d;
            for (int s = 0; s < kG8Blocks; ++s) d.push_back(offsetof(BlockQ4_0G8, d) + 2 * s);
            return d;
        }
        case DType::Q8_0_G8W: {
            std::vector<size_t> d;
            for (int s = 0; s < kG8Blocks; ++s) d.push_back(offsetof(BlockQ8_0G8W, d) + 2 * s);
            return d;
        }
        default:
            return {};
    }
}

TEST_P(IsaVariant, VecDotMatchesScalarOnRandomBits) {
    const DType t = GetParam().type;
    if (block_of(t) == 1) GTEST_SKIP() << "float type: random bits would be NaN/Inf";
    if (t == DType::Q8_0_G8 || t == DType::Q8_K_LANE)
        GTEST_SKIP() << "activation layout: its sums derive from its quants";
    const DType p = ref().vec_dot_type;
    testing::SplitMix64 rng(77 + static_cast<uint64_t>(t));
    for (int64_t n : lengths(t)) {
        std::vector<uint8_t> xq(row_bytes(t, n));
        for (auto& byte : xq) byte = static_cast<uint8_t>(rng.next());
        const size_t bs = dtype_info(t).type_size;
        for (size_t off = 0; off < xq.size(); off += bs) {
            if (t == DType::Q8_K) {  // f32 scale; bsums are not read by Q8_K x Q8_K
                const float d = (rng.uniform() - 0.5f) * 0.01f;
                std::memcpy(&xq[off + offsetof(BlockQ8_K, d)], &d, sizeof d);
            }
            for (size_t f : f16_fields(t)) {
                const uint16_t h = f32_to_f16((rng.uniform() - 0.3f) * 0.05f);
                std::memcpy(&xq[off + f], &h, sizeof h);
            }
        }
        const std::vector<float> b = testing::make_quant_input(rng.next(), n);
        const auto yq = quantize(type_traits(p, Isa::Scalar).from_float, p, b);
        const double mag = testing::dot_magnitude(t, dequantize(t, xq, n), dequantize(p, yq, n));
        const float want = ref().vec_dot(n, xq.data(), yq.data());
        const float got = var().vec_dot(n, xq.data(), yq.data());
        expect_dot_close(got, want, mag, "random bits, n=" + std::to_string(n));
    }
}

// Inputs for the quantizer comparison: the mixed chunk kinds, weight-like rows, and rows with
// infinities and exact rounding ties (k + 0.5 after scaling for Q8_0's amax = 127).
std::vector<std::vector<float>> quantizer_inputs(int64_t n) {
    std::vector<std::vector<float>> rows = {testing::make_quant_input(5, n),
                                            testing::make_quant_input(6, n),
                                            testing::make_weight_like(7, 1, n)};
    std::vector<float> ties(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
        ties[static_cast<size_t>(i)] =
            i % 32 == 0 ? 127.0f : static_cast<float>(i % 61 - 30) + 0.5f;
    rows.push_back(ties);
    std::vector<float> inf = testing::make_quant_input(8, n);
    inf[static_cast<size_t>(n / 3)] = std::numeric_limits<float>::infinity();
    inf[static_cast<size_t>(n - 1)] = -std::numeric_limits<float>::infinity();
    rows.push_back(inf);
    return rows;
}

TEST_P(IsaVariant, FromFloatFastIsBitIdenticalToReference) {
    const DType t = GetParam().type;
    const int64_t b = block_of(t);
    for (int64_t blocks : {1, 3, 7, 33}) {
        const int64_t n = std::max<int64_t>(b, 32) * blocks;
        for (const auto& x : quantizer_inputs(n)) {
            const auto want = quantize(ref().from_float, t, x);
            const auto got = quantize(var().from_float_fast, t, x);
            ASSERT_EQ(got, want) << "n=" << n;
        }
    }
}

TEST_P(IsaVariant, ToFloatIsBitIdentical) {
    const DType t = GetParam().type;
    const int64_t n = std::max<int64_t>(block_of(t), 32) * 7;
    const auto q = quantize(ref().from_float, t, testing::make_quant_input(9, n));
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    ref().to_float(q.data(), want.data(), n);
    var().to_float(q.data(), got.data(), n);
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
}

INSTANTIATE_TEST_SUITE_P(AllTypes, IsaVariant, ::testing::ValuesIn(all_cases()), case_name);

// The variants are really there: a test of the table against itself would pass vacuously.
TEST(IsaVariantTable, AcceleratedKernelsAreRegistered) {
    for (Isa isa : kVariants) {
        if (!isa_supported(isa)) continue;
        for (DType t : kTypes) {
            if (scalar_vec_dot_only(t)) continue;
            // Q8_0_G8W's kernel is vpdpbusd on unsigned weights: AVX-512 VNNI only (AVX2's
            // vpmaddubsw would saturate), and load_layout chooses it only there.
            if (t == DType::Q8_0_G8W && isa != Isa::Avx512) continue;
            EXPECT_NE(type_traits(t, isa).vec_dot, type_traits(t, Isa::Scalar).vec_dot)
                << dtype_name(t) << " " << isa_name(isa);
        }
        for (DType t : {DType::Q8_0, DType::Q8_1, DType::Q8_K, DType::Q8_0_G8, DType::Q8_K_LANE})
            EXPECT_NE(type_traits(t, isa).from_float_fast, type_traits(t, Isa::Scalar).from_float)
                << dtype_name(t) << " " << isa_name(isa);
    }
}

}  // namespace
}  // namespace syslm::kernels
