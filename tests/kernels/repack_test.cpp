// Load-time repacking (kernels/repack.hpp): the run-time layouts hold exactly the numbers of the
// file type they come from, and the dot products over them agree with the file type's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "dot_magnitude.hpp"
#include "kernels/isa.hpp"
#include "kernels/quants/block_layouts.hpp"
#include "kernels/quants/quant_rows.hpp"
#include "kernels/repack.hpp"
#include "kernels/type_traits.hpp"
#include "quant_test_inputs.hpp"

namespace syslm::kernels {
namespace {

std::vector<float> to_floats(DType t, const std::vector<uint8_t>& q, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    type_traits(t, Isa::Scalar).to_float(q.data(), out.data(), n);
    return out;
}

std::vector<uint8_t> quantize(DType t, const std::vector<float>& x) {
    std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
    type_traits(t, Isa::Scalar).from_float(x.data(), q.data(), static_cast<int64_t>(x.size()));
    return q;
}

TEST(Repack, LayoutChoice) {
    const bool simd = active_isa() != Isa::Scalar;
    EXPECT_EQ(load_layout(DType::Q4_0, 2048), simd ? DType::Q4_0_G8 : DType::Q4_0);
    EXPECT_EQ(load_layout(DType::Q4_0, 96), DType::Q4_0);  // not whole groups of 8 blocks
    // Q8_0_G8W's kernel needs AVX-512 VNNI (vpdpbusd on unsigned weights).
    EXPECT_EQ(load_layout(DType::Q8_0, 2048),
              active_isa() == Isa::Avx512 ? DType::Q8_0_G8W : DType::Q8_0);
    EXPECT_EQ(load_layout(DType::Q8_0, 96), DType::Q8_0);
    EXPECT_EQ(load_layout(DType::F16, 2048), DType::F16);
    // Q4_K / Q6_K: lane order where it timed faster here, never on the scalar tier.
    for (const auto& [file, lane] :
         {std::pair{DType::Q4_K, DType::Q4_K_LANE}, std::pair{DType::Q5_K, DType::Q5_K_LANE},
          std::pair{DType::Q6_K, DType::Q6_K_LANE}}) {
        EXPECT_EQ(lane_layout(file), lane);
        const std::string& v = lane_order_choice(file).value;
        EXPECT_TRUE(simd ? v == "lane" || v == "file" : v.empty()) << v;
        EXPECT_EQ(load_layout(file, 2048), v == "lane" ? lane : file);
    }
    EXPECT_TRUE(lane_order_choice(DType::Q8_0).value.empty());
    EXPECT_THROW(repack_rows(DType::Q8_0, DType::Q4_0_G8, nullptr, nullptr, 256, 1), Error);
    EXPECT_THROW(repack_rows(DType::Q4_K, DType::Q6_K_LANE, nullptr, nullptr, 256, 1), Error);
}

// Random rows (every quant pattern, finite scales) keep every value through the repack.
TEST(Repack, RowsKeepTheirValues) {
    struct Case {
        DType from, to;
        size_t block;
        std::vector<size_t> f16_fields;  // sane finite scales there, random bits elsewhere
        void (*back_to_file)(const void*, void*, int64_t);  // lane order: its own inverse
    };
    const Case cases[] = {
        {DType::Q4_0, DType::Q4_0_G8, sizeof(BlockQ4_0), {0}, g8_to_q4_0},
        {DType::Q8_0, DType::Q8_0_G8W, sizeof(BlockQ8_0), {0}, g8w_to_q8_0},
        {DType::Q4_K,
         DType::Q4_K_LANE,
         sizeof(BlockQ4_K),
         {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)},
         q4_k_to_lane},
        {DType::Q5_K,
         DType::Q5_K_LANE,
         sizeof(BlockQ5_K),
         {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)},
         q5_k_to_lane},
        {DType::Q6_K, DType::Q6_K_LANE, sizeof(BlockQ6_K), {offsetof(BlockQ6_K, d)}, q6_k_to_lane}};
    for (const Case& c : cases) {
        testing::SplitMix64 rng(5);
        const int64_t n = 256 * 3, rows = 5;
        const size_t rb = row_bytes(c.from, n);
        std::vector<uint8_t> src(rb * rows), dst(rb * rows), back(rb * rows);
        for (auto& b : src) b = static_cast<uint8_t>(rng.next());
        for (size_t off = 0; off < src.size(); off += c.block)
            for (size_t f : c.f16_fields) {
                const uint16_t d = f32_to_f16((rng.uniform() - 0.5f) * 0.1f);
                std::memcpy(&src[off + f], &d, sizeof d);
            }
        repack_rows(c.from, c.to, src.data(), dst.data(), n, rows);
        for (int64_t r = 0; r < rows; ++r) {
            const std::vector<uint8_t> a(src.begin() + r * rb, src.begin() + (r + 1) * rb);
            const std::vector<uint8_t> b(dst.begin() + r * rb, dst.begin() + (r + 1) * rb);
            EXPECT_EQ(to_floats(c.from, a, n), to_floats(c.to, b, n))
                << dtype_name(c.to) << " row " << r;
        }
        // Every bit comes back (Q8_0_G8W: every int8 q, -128 included, maps to q + 128 and
        // back), and the layout really moved them.
        c.back_to_file(dst.data(), back.data(), n * rows);
        EXPECT_EQ(back, src) << dtype_name(c.from) << " -> " << dtype_name(c.to) << " and back";
        EXPECT_NE(dst, src) << dtype_name(c.to);
    }
}

TEST(Repack, Q8_0G8HoldsQ8_0AndItsSums) {
    const int64_t n = 256 * 4;
    const std::vector<float> x = testing::make_quant_input(11, n);
    const auto q8 = quantize(DType::Q8_0, x);
    const auto g8 = quantize(DType::Q8_0_G8, x);
    EXPECT_EQ(to_floats(DType::Q8_0, q8, n), to_floats(DType::Q8_0_G8, g8, n));
    const auto* blocks = reinterpret_cast<const BlockQ8_0*>(q8.data());
    const auto* groups = reinterpret_cast<const BlockQ8_0G8*>(g8.data());
    for (int64_t b = 0; b < n / 32; ++b) {
        int sum = 0;
        for (int8_t v : blocks[b].qs) sum += v;
        EXPECT_EQ(groups[b / 8].s[kG8Slot[b % 8]], sum) << "block " << b;
    }
}

// The whole path a matmul takes: repacked weights . activations quantized to their partner
// (Q8_0_G8, Q8_K_LANE) by the active ISA equals the file path (against Q8_0, Q8_K) up to float
// summation order; for the K-quants the magnitude includes the min / offset parts, which the
// kernels round separately (as in isa_variants_test).
TEST(Repack, DotOverRepackedRowsEqualsFileTypeDot) {
    for (const auto& [from, to] :
         {std::pair{DType::Q4_0, DType::Q4_0_G8}, std::pair{DType::Q8_0, DType::Q8_0_G8W},
          std::pair{DType::Q4_K, DType::Q4_K_LANE}, std::pair{DType::Q5_K, DType::Q5_K_LANE},
          std::pair{DType::Q6_K, DType::Q6_K_LANE}})
        for (int64_t groups : {1, 2, 7, 22}) {
            const int64_t n = 256 * groups;
            const auto w = quantize(from, testing::make_weight_like(groups, 1, n));
            const std::vector<float> x = testing::make_quant_input(100 + groups, n);
            std::vector<uint8_t> wg(w.size());
            repack_rows(from, to, w.data(), wg.data(), n, 1);
            const DType partner = type_traits(to).vec_dot_type;
            const DType file_partner = type_traits(from).vec_dot_type;
            std::vector<uint8_t> xg(row_bytes(partner, n));
            type_traits(partner).from_float_fast(x.data(), xg.data(), n);
            const auto xq = quantize(file_partner, x);
            const float want = type_traits(from, Isa::Scalar).vec_dot(n, w.data(), xq.data());
            const float got = type_traits(to).vec_dot(n, wg.data(), xg.data());
            const auto wf = to_floats(from, w, n), xf = to_floats(file_partner, xq, n);
            const double mag = testing::dot_magnitude(from, wf, xf);
            EXPECT_NEAR(got, want, 1e-6 * mag) << dtype_name(to) << " n=" << n;
        }
}

}  // namespace
}  // namespace syslm::kernels
