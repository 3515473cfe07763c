// vec_dot_rows, decode's several-rows-per-activation kernel, against its scalar reference (one
// vec_dot per row) for every type and every ISA variant this CPU supports: awkward row counts
// (groups of four plus leftovers), awkward lengths, row strides wider than a row, weights from
// the reference quantizer with Q8_0's extreme levels (-128, 127) forced in, activations from the
// reference partner quantizer. Block integer sums are exact in both; the variants sum scaled
// blocks in float where the reference uses double: tolerance 1e-5 of the dot's magnitude. Each
// row also equals its variant's own vec_dot bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "kernels/isa.hpp"
#include "kernels/quants/block_layouts.hpp"
#include "kernels/type_traits.hpp"
#include "quant_test_inputs.hpp"

namespace syslm::kernels {
namespace {

const DType kTypes[] = {DType::F32,       DType::F16,      DType::BF16,     DType::Q4_0,
                        DType::Q4_1,      DType::Q5_0,     DType::Q5_1,     DType::Q8_0,
                        DType::Q2_K,      DType::Q3_K,     DType::Q4_K,     DType::Q5_K,
                        DType::Q6_K,      DType::Q4_0_G8,  DType::Q8_0_G8W, DType::Q4_K_LANE,
                        DType::Q5_K_LANE, DType::Q6_K_LANE};

struct Case {
    DType type;
    Isa isa;
};

void PrintTo(const Case& c, std::ostream* os) {
    *os << dtype_name(c.type) << "/" << isa_name(c.isa);
}

std::vector<Case> all_cases() {
    std::vector<Case> out;
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
        for (DType t : kTypes) out.push_back({t, isa});
    return out;
}

// The parameter's tables: the scalar reference, the variant under test, the activations'
// (partner) reference quantizer, and the larger of the two block sizes.
class VecDotRows : public ::testing::TestWithParam<Case> {
protected:
    void SetUp() override {
        if (!isa_supported(GetParam().isa))
            GTEST_SKIP() << isa_name(GetParam().isa) << " not supported by this CPU";
    }
    DType type() const { return GetParam().type; }
    Isa isa() const { return GetParam().isa; }
    const TypeTraits& ref() const { return type_traits(type(), Isa::Scalar); }
    const TypeTraits& var() const { return type_traits(type(), isa()); }
    const TypeTraits& partner() const { return type_traits(ref().vec_dot_type, Isa::Scalar); }
    int64_t qk() const {
        return std::max<int64_t>(dtype_info(type()).block_size,
                                 dtype_info(ref().vec_dot_type).block_size);
    }
};

TEST_P(VecDotRows, EqualsTheScalarLoopOverVecDot) {
    const DType type = this->type();
    const Isa isa = this->isa();
    const TypeTraits &ref = this->ref(), &var = this->var(), &partner = this->partner();
    const int64_t qk = this->qk();
    testing::SplitMix64 rng(0xD0C0DE + static_cast<uint64_t>(type) * 131 + static_cast<int>(isa));

    for (int64_t n_blocks : {1, 3, 7, 33}) {
        const int64_t n = n_blocks * (qk == 1 ? 32 : qk) + (qk == 1 ? 5 : 0);
        for (int nr : {1, 3, 4, 5, 11, 16}) {
            const size_t row = row_bytes(type, n);
            const size_t stride = row + (nr % 2 ? 0 : 96);  // rows with gaps between them too
            std::vector<uint8_t> w(stride * static_cast<size_t>(nr));
            std::vector<float> xf(static_cast<size_t>(n));
            for (int r = 0; r < nr; ++r) {
                for (float& v : xf) v = rng.normal() * (1 + static_cast<float>(r % 3));
                ref.from_float(xf.data(), w.data() + r * stride, n);
            }
            if (type == DType::Q8_0) {  // the extreme levels, where AVX2's int16 pairs are tight
                auto* b = reinterpret_cast<BlockQ8_0*>(w.data());
                for (int j = 0; j < 32; ++j) b[0].qs[j] = static_cast<int8_t>(j % 2 ? -128 : 127);
            }
            std::vector<float> yf(static_cast<size_t>(n));
            for (float& v : yf) v = rng.normal();
            std::vector<uint8_t> y(row_bytes(ref.vec_dot_type, n));
            partner.from_float(yf.data(), y.data(), n);

            std::vector<float> want(static_cast<size_t>(nr)), got(static_cast<size_t>(nr), NAN);
            ASSERT_NE(ref.vec_dot_rows, nullptr) << "the scalar table has every reference";
            ref.vec_dot_rows(n, nr, w.data(), stride, y.data(), want.data());
            vec_dot_rows(var, n, nr, w.data(), stride, y.data(), got.data());

            // Magnitude of each dot: sum |x_i| * |y_i| over the dequantized rows, with the
            // largest |x| of the row standing in for min/offset terms the kernels split off.
            std::vector<float> xd(static_cast<size_t>(n)), yd(static_cast<size_t>(n));
            partner.to_float(y.data(), yd.data(), n);
            for (int r = 0; r < nr; ++r) {
                ref.to_float(w.data() + r * stride, xd.data(), n);
                double mag = 0, ysum = 0, xmax = 0;
                for (int64_t i = 0; i < n; ++i) {
                    mag += std::fabs(static_cast<double>(xd[i]) * yd[i]);
                    ysum += std::fabs(yd[i]);
                    xmax = std::max(xmax, std::fabs(static_cast<double>(xd[i])));
                }
                EXPECT_NEAR(got[r], want[r], 1e-5 * (mag + xmax * ysum) + 1e-30)
                    << "n=" << n << " nr=" << nr << " row " << r;
                // A multi-row kernel is the same arithmetic as its tier's vec_dot, so a row's
                // logit does not depend on which path of the matmul computed it.
                EXPECT_EQ(got[r], var.vec_dot(n, w.data() + r * stride, y.data()))
                    << "n=" << n << " nr=" << nr << " row " << r;
            }
        }
    }
}

// vec_dot_tokens (several tokens per call: batched sequences, a draft being verified) gives
// every (row, token) exactly what vec_dot_rows gives for that token alone, so batching never
// changes a token's logits; and it stays within the tolerance above of the scalar reference.
TEST_P(VecDotRows, TokensEqualEachTokenAloneBitForBit) {
    const DType type = this->type();
    const Isa isa = this->isa();
    const TypeTraits &ref = this->ref(), &var = this->var(), &partner = this->partner();
    const int64_t qk = this->qk();
    testing::SplitMix64 rng(0x70CE + static_cast<uint64_t>(type) * 17 + static_cast<int>(isa));
    for (int64_t n_blocks : {1, 5, 33}) {
        const int64_t n = n_blocks * (qk == 1 ? 32 : qk) + (qk == 1 ? 7 : 0);
        for (auto [nr, nt] : {std::pair{1, 2}, {3, 5}, {4, 4}, {7, 9}, {16, 3}, {5, 17}}) {
            const size_t row = row_bytes(type, n), stride = row + 64;
            const size_t prow = row_bytes(ref.vec_dot_type, n), pstride = prow + 32;
            std::vector<uint8_t> w(stride * static_cast<size_t>(nr));
            std::vector<uint8_t> y(pstride * static_cast<size_t>(nt));
            std::vector<float> f(static_cast<size_t>(n));
            for (int r = 0; r < nr; ++r) {
                for (float& v : f) v = rng.normal() * (1 + static_cast<float>(r % 4));
                ref.from_float(f.data(), w.data() + r * stride, n);
            }
            for (int t = 0; t < nt; ++t) {
                for (float& v : f) v = rng.normal() + 0.25f * static_cast<float>(t % 3);
                partner.from_float(f.data(), y.data() + t * pstride, n);
            }
            const size_t bs = static_cast<size_t>(nr) + 3;
            std::vector<float> got(bs * static_cast<size_t>(nt), NAN);
            vec_dot_tokens(var, n, nr, w.data(), stride, nt, y.data(), pstride, got.data(), bs);
            std::vector<float> alone(static_cast<size_t>(nr)), want(static_cast<size_t>(nr));
            for (int t = 0; t < nt; ++t) {
                vec_dot_rows(var, n, nr, w.data(), stride, y.data() + t * pstride, alone.data());
                ref.vec_dot_rows(n, nr, w.data(), stride, y.data() + t * pstride, want.data());
                for (int r = 0; r < nr; ++r) {
                    const float g = got[t * bs + r];
                    EXPECT_EQ(std::memcmp(&g, &alone[r], sizeof g), 0)
                        << "n=" << n << " nr=" << nr << " nt=" << nt << " row " << r << " token "
                        << t << ": " << g << " batched vs " << alone[r] << " alone";
                    EXPECT_NEAR(g, want[r], 1e-4 * (std::fabs(want[r]) + std::sqrt(n) * 4))
                        << "n=" << n << " row " << r << " token " << t;
                }
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, VecDotRows, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                             return std::string(dtype_name(info.param.type)) + "_" +
                                    isa_name(info.param.isa);
                         });

}  // namespace
}  // namespace syslm::kernels
