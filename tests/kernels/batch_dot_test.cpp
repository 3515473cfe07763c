// Batches of tokens against Q4_0_G8 / Q8_0_G8W rows on the AMX int8 tiles (matmul.hpp,
// x86/quant_tokens_amx.cpp), against a double-precision sum of the same integer block products:
// partial row and token tiles, several groups, one and many token chunks. Skips without AMX.
//
// Bound: each block term d_w d_x (sum of q_w q_x) is an exact integer times two floats (two
// roundings of 2^-24 relative), and a token's result sums n/32 of them in float: |got - exact|
// <= (n/32 + 2) 2^-24 sum |terms|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/half.hpp"
#include "core/thread_pool.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/quants/block_layouts.hpp"
#include "kernels/repack.hpp"
#include "kernels/type_traits.hpp"
#include "quant_test_inputs.hpp"

namespace syslm::kernels {
namespace {

// Element k of row r as (quant, scale): weights from the legacy blocks the G8 layouts were
// repacked from; activations from their Q8_0_G8 rows (block_layouts.hpp: scales in slot order,
// quants in pair order).
struct Legacy {
    DType type;  // Q4_0 or Q8_0 (weights), Q8_0_G8 (activations)
    std::vector<uint8_t> bytes;
    size_t row;
    double value(int64_t r, int64_t k, double* d) const {
        const int64_t b = k / 32, e = k % 32;
        if (type == DType::Q8_0_G8) {
            const auto* g = reinterpret_cast<const BlockQ8_0G8*>(bytes.data() + r * row) + b / 8;
            *d = g->d[kG8Slot[b % 8]];
            const int pair = g8_pair_offset(static_cast<int>(b % 8), static_cast<int>(e / 16));
            return g->qs[pair + e % 16];
        }
        if (type == DType::Q4_0) {
            const auto* blk = reinterpret_cast<const BlockQ4_0*>(bytes.data() + r * row) + b;
            *d = f16_to_f32(blk->d);
            const uint8_t q = blk->qs[e % 16];
            return (e < 16 ? (q & 15) : (q >> 4)) - 8;
        }
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(bytes.data() + r * row) + b;
        *d = f16_to_f32(blk->d);
        return blk->qs[e];
    }
};

// The exact dot of weight row r with activation row t over K, and the sum of its block terms'
// magnitudes.
double exact_dot(const Legacy& w, const Legacy& x, int r, int t, int64_t K, double* mag) {
    double exact = 0;
    *mag = 0;
    for (int64_t b = 0; b < K / 32; ++b) {
        double isum = 0, dw = 0, dx = 0;
        for (int64_t e = 0; e < 32; ++e)
            isum += w.value(r, 32 * b + e, &dw) * x.value(t, 32 * b + e, &dx);
        exact += dw * dx * isum;
        *mag += std::fabs(dw * dx * isum);
    }
    return exact;
}

double bound(int64_t K, double mag) {
    return (K / 32 + 2) * std::ldexp(1.0, -24) * mag;
}

TEST(BatchDot, AmxInt8MatchesTheExactBlockSums) {
    if (!amx_int8_available()) GTEST_SKIP() << "no AMX int8 tiles on this CPU";
    for (DType legacy : {DType::Q4_0, DType::Q8_0}) {
        const DType g8 = legacy == DType::Q4_0 ? DType::Q4_0_G8 : DType::Q8_0_G8W;
        for (int64_t K : {256, 768})
            for (int nr : {16, 5})
                for (int nt : {1, 2, 16, 17, 40, 64}) {
                    const std::vector<float> wf = testing::make_weight_like(7 + K + nr, nr, K);
                    Legacy w{legacy, std::vector<uint8_t>(row_bytes(legacy, K) * nr),
                             row_bytes(legacy, K)};
                    for (int r = 0; r < nr; ++r)
                        type_traits(legacy).from_float(wf.data() + r * K,
                                                       w.bytes.data() + r * w.row, K);
                    const size_t rb = row_bytes(g8, K);
                    std::vector<uint8_t> wg(rb * nr);
                    repack_rows(legacy, g8, w.bytes.data(), wg.data(), K, nr);
                    const std::vector<float> xf = testing::make_quant_input(9 + nt, nt * K);
                    const size_t xr = row_bytes(DType::Q8_0_G8, K);
                    Legacy x{DType::Q8_0_G8, std::vector<uint8_t>(xr * nt), xr};
                    for (int t = 0; t < nt; ++t)
                        type_traits(DType::Q8_0_G8)
                            .from_float_fast(xf.data() + t * K, x.bytes.data() + t * xr, K);
                    const std::vector<uint8_t>& xg = x.bytes;
                    const size_t bs = nr + 3;
                    std::vector<float> got(bs * nt, NAN);
                    x86::dot_tokens_amx_int8(g8, K, nr, wg.data(), rb, nt, xg.data(), xr,
                                             got.data(), bs);
                    for (int t = 0; t < nt; ++t)
                        for (int r = 0; r < nr; ++r) {
                            double mag = 0;
                            const double exact = exact_dot(w, x, r, t, K, &mag);
                            ASSERT_NEAR(got[t * bs + r], exact, bound(K, mag))
                                << dtype_name(g8) << " K " << K << " rows " << nr << " tokens "
                                << nt << " t " << t << " r " << r;
                        }
                }
    }
}

// matmul's batch path (whichever kernel batch_dot_choice picked) against the exact sums, and
// under ExactSmallBatches bit for bit each token's result alone (the VNNI decode kernel).
TEST(BatchDot, MatmulBatchesAreExactOrEachTokensOwn) {
    const int64_t K = 512, N = 40, T = 16;
    ThreadPool pool(2);
    const std::vector<float> wf = testing::make_weight_like(21, N, K);
    Legacy w{DType::Q4_0, std::vector<uint8_t>(row_bytes(DType::Q4_0, K) * N),
             row_bytes(DType::Q4_0, K)};
    for (int r = 0; r < N; ++r)
        type_traits(DType::Q4_0).from_float(wf.data() + r * K, w.bytes.data() + r * w.row, K);
    std::vector<uint8_t> wg(row_bytes(DType::Q4_0_G8, K) * N);
    repack_rows(DType::Q4_0, DType::Q4_0_G8, w.bytes.data(), wg.data(), K, N);
    const WeightView view{DType::Q4_0_G8, K, N, wg.data()};
    const std::vector<float> xf = testing::make_quant_input(22, T * K);
    // The activations as matmul quantizes them.
    Legacy x{DType::Q8_0_G8, std::vector<uint8_t>(row_bytes(DType::Q8_0_G8, K) * T),
             row_bytes(DType::Q8_0_G8, K)};
    for (int t = 0; t < T; ++t)
        type_traits(DType::Q8_0_G8)
            .from_float_fast(xf.data() + t * K, x.bytes.data() + t * x.row, K);
    std::vector<float> batch(T * N), exact_batch(T * N), alone(N);
    matmul_vec_dot(view, xf.data(), T, batch.data(), pool);
    {
        const ExactSmallBatches exact;
        matmul_vec_dot(view, xf.data(), T, exact_batch.data(), pool);
    }
    for (int t = 0; t < T; ++t) {
        matmul(view, xf.data() + t * K, 1, alone.data(), pool);
        for (int r = 0; r < N; ++r) {
            ASSERT_EQ(exact_batch[t * N + r], alone[r]) << "token " << t << " row " << r;
            double mag = 0;
            const double want = exact_dot(w, x, r, t, K, &mag);
            ASSERT_NEAR(batch[t * N + r], want, bound(K, mag)) << "token " << t << " row " << r;
        }
    }
}

}  // namespace
}  // namespace syslm::kernels
