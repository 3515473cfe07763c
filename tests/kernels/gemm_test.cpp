// The prefill GEMM (kernels/cpu/gemm.hpp) against a double-precision reference computed here from
// the dequantized operands, for every ISA variant and panel format this CPU supports, on awkward
// shapes: partial micro-tiles in both directions, several depth blocks with a short last one, an
// odd depth, one token, bias on and off.
//
// Tolerances, with mag = sum_k |w_k x_k| + |b| (the scale of y before cancellation):
//   - against the operands as the kernel sees them (f32, or both rounded to bf16 for BF16 and
//     AMX panels): 1e-5 mag — float accumulation over <= 2.3k terms;
//   - BF16 panels against the unrounded operands: 2^-7 mag — each product carries at most two
//     bf16 roundings of u = 2^-8 relative (8-bit significand).
// matmul() is checked to route prefill through the GEMM (bit-identical) and decode to vec_dot.
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/linear_backward.hpp"

#include <cstdlib>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "core/cpu_features.hpp"
#include "core/half.hpp"
#include "core/thread_pool.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/type_traits.hpp"
#include "quant_test_inputs.hpp"

namespace syslm::kernels {
namespace {

struct Case {
    DType type;
    int64_t n_in;
};

// N rows of K weight-like values (seeded), quantized row by row to `type`.
std::vector<uint8_t> quantized_weights(DType type, uint64_t seed, int64_t N, int64_t K) {
    const std::vector<float> wf = testing::make_weight_like(seed, N, K);
    const size_t rb = row_bytes(type, K);
    std::vector<uint8_t> wq(rb * static_cast<size_t>(N));
    for (int64_t o = 0; o < N; ++o)
        type_traits(type).from_float(wf.data() + o * K, wq.data() + o * rb, K);
    return wq;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
    return std::string(dtype_info(info.param.type).name) + "_k" + std::to_string(info.param.n_in);
}

// 96 and 2048 + 32 for types with 32-element blocks (2048 + 256 for the K-quants, whose blocks are
// 256); 97 (odd: bf16 pairs padded) for the float types.
std::vector<Case> cases() {
    std::vector<Case> out;
    for (DType t : {DType::F32, DType::F16, DType::BF16})
        for (int64_t k : {96, 97, 2080}) out.push_back({t, k});
    for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1})
        for (int64_t k : {96, 2080}) out.push_back({t, k});
    for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                    DType::Q4_K_LANE, DType::Q5_K_LANE, DType::Q6_K_LANE})
        for (int64_t k : {256, 2304}) out.push_back({t, k});
    return out;
}

float round_bf16(float v) {
    return bf16_to_f32(f32_to_bf16(v));
}

class Gemm : public ::testing::TestWithParam<Case> {};

TEST_P(Gemm, MatchesDoubleReferenceOfDequantizedOperands) {
    const auto [type, K] = GetParam();
    const TypeTraits& scalar = type_traits(type, Isa::Scalar);
    ThreadPool pool(2);
    uint64_t seed = 7000 + static_cast<uint64_t>(type) * 31 + static_cast<uint64_t>(K);
    int checked = 0;
    for (int64_t N : {13, 100}) {
        // Weights: quantized by the reference quantizer, dequantized by the scalar table.
        const std::vector<float> wf = testing::make_weight_like(seed++, N, K);
        const size_t rb = row_bytes(type, K);
        std::vector<uint8_t> wq(rb * static_cast<size_t>(N));
        std::vector<float> wd(wf.size());
        for (int64_t o = 0; o < N; ++o) {
            scalar.from_float(wf.data() + o * K, wq.data() + o * rb, K);
            scalar.to_float(wq.data() + o * rb, wd.data() + o * K, K);
        }
        const WeightView w{type, K, N, wq.data()};
        std::vector<float> bias(static_cast<size_t>(N));
        for (int64_t o = 0; o < N; ++o) bias[o] = 0.01f * static_cast<float>(o % 7) - 0.03f;

        for (int64_t T : {1, 7, 65, 130}) {
            const std::vector<float> x = testing::make_quant_input(seed++, T * K);
            for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
                if (!isa_supported(isa)) continue;
                for (GemmPanel panel : {GemmPanel::F32, GemmPanel::BF16, GemmPanel::AmxBF16}) {
                    const GemmKernels& kn = gemm_kernels(isa);
                    if (panel == GemmPanel::BF16 && !kn.tile_bf16) continue;
                    if (panel == GemmPanel::AmxBF16 && (isa != Isa::Avx512 || !amx_bf16_available()))
                        continue;
                    for (const bool with_bias : {false, true}) {
                        const float* b = with_bias ? bias.data() : nullptr;
                        std::vector<float> y(static_cast<size_t>(T * N), NAN);
                        gemm(w, x.data(), T, y.data(), pool, b, isa, panel);
                        const bool bf = panel != GemmPanel::F32;
                        for (int64_t t = 0; t < T; ++t)
                            for (int64_t o = 0; o < N; ++o) {
                                double exact = 0, seen = 0, mag = 0;
                                for (int64_t k = 0; k < K; ++k) {
                                    const float wv = wd[o * K + k], xv = x[t * K + k];
                                    exact += static_cast<double>(wv) * xv;
                                    seen +=
                                        bf ? static_cast<double>(round_bf16(wv)) * round_bf16(xv)
                                           : static_cast<double>(wv) * xv;
                                    mag += std::fabs(static_cast<double>(wv) * xv);
                                }
                                const double add = b ? b[o] : 0.0;
                                const float got = y[t * N + o];
                                ASSERT_NEAR(got, seen + add, 1e-5 * (mag + std::fabs(add)) + 1e-30)
                                    << isa_name(isa) << " " << gemm_panel_name(panel) << " N=" << N
                                    << " T=" << T << " t=" << t << " o=" << o;
                                if (bf) {
                                    ASSERT_NEAR(got, exact + add,
                                                std::ldexp(mag, -7) + 1e-5 * std::fabs(add) + 1e-30)
                                        << isa_name(isa) << " N=" << N << " T=" << T;
                                }
                                ++checked;
                            }
                    }
                }
            }
        }
    }
    if (!isa_supported(Isa::Avx2)) GTEST_SKIP() << "no AVX2: the GEMM has no variant here";
    EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(Types, Gemm, ::testing::ValuesIn(cases()), case_name);

TEST(GemmRouting, MatmulUsesTheGemmForPrefillOnly) {
    const Isa isa = active_isa();
    const int64_t K = 512, N = 45;
    ThreadPool pool(2);
    for (DType type :
         {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_K, DType::Q6_K_LANE}) {
        EXPECT_EQ(matmul_gemm_panel(type, 1), GemmPanel::None) << "decode stays on vec_dot";
        if (gemm_crossover(type).record.value == "never") {  // the vec_dot won at every size
            EXPECT_EQ(matmul_gemm_panel(type, 4096), GemmPanel::None);
            continue;
        }
        const int64_t T = std::max<int64_t>(gemm_min_tokens(type), 40);  // a prefill batch
        const GemmPanel panel = matmul_gemm_panel(type, T);
        if (isa == Isa::Scalar) {
            EXPECT_EQ(panel, GemmPanel::None);
            continue;
        }
        ASSERT_NE(panel, GemmPanel::None) << dtype_info(type).name;
        const std::vector<uint8_t> wq = quantized_weights(type, 41, N, K);
        const WeightView w{type, K, N, wq.data()};
        const std::vector<float> x = testing::make_quant_input(42, T * K);
        std::vector<float> via_matmul(static_cast<size_t>(T * N)), via_gemm(via_matmul.size());
        matmul(w, x.data(), T, via_matmul.data(), pool);
        gemm(w, x.data(), T, via_gemm.data(), pool, nullptr, isa, panel);
        EXPECT_EQ(via_matmul, via_gemm) << dtype_info(type).name;
    }
}

// The measured crossover is the one its timings give, and matmul() follows it.
TEST(GemmCrossover, StartsWhereTheGemmWinsAtEveryLargerBatchTried) {
    if (std::getenv("SYSLM_GEMM_MIN_TOKENS")) GTEST_SKIP() << "SYSLM_GEMM_MIN_TOKENS overrides it";
    for (DType type : {DType::F32, DType::F16, DType::BF16})
        EXPECT_EQ(gemm_min_tokens(type), kGemmMinTokens) << dtype_info(type).name;
    for (DType type : {DType::Q8_0, DType::Q4_0_G8, DType::Q8_0_G8W, DType::Q4_K, DType::Q6_K,
                       DType::Q4_K_LANE, DType::Q6_K_LANE}) {
        const GemmCrossover& c = gemm_crossover(type);
        EXPECT_EQ(gemm_min_tokens(type), c.min_tokens);
        if (active_isa() == Isa::Scalar) {
            EXPECT_TRUE(c.timings.empty()) << "no GEMM to time";
            continue;
        }
        if (!c.record.remembered) {  // else timed by another process (SYSLM_KERNEL_CACHE)
            ASSERT_FALSE(c.timings.empty()) << dtype_info(type).name;
            // Batches past 48 are timed only while the vec_dot is clearly ahead, up to 512.
            const auto vec_dot_ahead = [](const GemmCrossover::Timing& t) {
                return t.vec_dot_s * kGemmCrossoverMargin < t.gemm_s;
            };
            for (size_t i = 1; i < c.timings.size(); ++i) {
                if (c.timings[i].tokens > 48) {
                    EXPECT_TRUE(vec_dot_ahead(c.timings[i - 1]));
                }
            }
            const GemmCrossover::Timing& last = c.timings.back();
            EXPECT_GE(last.tokens, 48);
            EXPECT_LE(last.tokens, 512);
            if (last.tokens < 512) {
                EXPECT_FALSE(vec_dot_ahead(last)) << "should time larger ones";
            }
            bool wins_from_here = true;  // walking down from the largest batch
            // The latest it starts; never where the vec_dot is still ahead at 512.
            int64_t want = last.tokens == 512 && vec_dot_ahead(last)
                               ? std::numeric_limits<int32_t>::max()
                               : last.tokens;
            for (auto it = c.timings.rbegin(); it != c.timings.rend(); ++it) {
                EXPECT_GT(it->vec_dot_s, 0);
                EXPECT_GT(it->gemm_s, 0);
                wins_from_here =
                    wins_from_here && it->gemm_s * kGemmCrossoverMargin < it->vec_dot_s;
                if (wins_from_here) want = it->tokens;
            }
            EXPECT_EQ(c.min_tokens, want) << dtype_info(type).name;
        }
        EXPECT_EQ(matmul_gemm_panel(type, 1), GemmPanel::None) << "decode stays on vec_dot";
        if (c.record.value == "never") {
            EXPECT_EQ(matmul_gemm_panel(type, 4096), GemmPanel::None)
                << "the vec_dot at every size";
            continue;
        }
        EXPECT_NE(matmul_gemm_panel(type, c.min_tokens), GemmPanel::None);
        if (c.min_tokens > 2) {
            EXPECT_EQ(matmul_gemm_panel(type, c.min_tokens - 1), GemmPanel::None);
        }
    }
}

// Under ExactSmallBatches a batch below 32 tokens gives each token exactly its result alone.
TEST(GemmCrossover, ExactSmallBatchesKeepEachTokensOwnResult) {
    if (std::getenv("SYSLM_GEMM_MIN_TOKENS")) GTEST_SKIP() << "SYSLM_GEMM_MIN_TOKENS overrides it";
    const int64_t K = 512, N = 45, T = 24;
    ThreadPool pool(2);
    for (DType type : {DType::Q8_0, DType::Q4_K}) {
        const std::vector<uint8_t> wq = quantized_weights(type, 43, N, K);
        const WeightView w{type, K, N, wq.data()};
        const std::vector<float> x = testing::make_quant_input(44, T * K);
        std::vector<float> batch(static_cast<size_t>(T * N)), alone(static_cast<size_t>(N));
        {
            const ExactSmallBatches exact;
            EXPECT_EQ(matmul_gemm_panel(type, T), GemmPanel::None);
            matmul(w, x.data(), T, batch.data(), pool);
        }
        for (int64_t t = 0; t < T; ++t) {
            matmul(w, x.data() + t * K, 1, alone.data(), pool);
            for (int64_t o = 0; o < N; ++o)
                ASSERT_EQ(batch[static_cast<size_t>(t * N + o)], alone[static_cast<size_t>(o)])
                    << dtype_info(type).name << " token " << t << " row " << o;
        }
        EXPECT_EQ(gemm_min_tokens(type), gemm_crossover(type).min_tokens) << "the guard is gone";
    }
}

// Decode reads each thread's slice as two interleaved streams of row runs (matmul.cpp): every row
// must come out exactly once, with its bias, equal to that row's own vec_dot, whatever the row
// count (one, a partial tile, odd splits) and the run length (short rows make runs of many rows).
TEST(Matmul, DecodeStreamsGiveEveryRowItsOwnDot) {
    ThreadPool pool(2);
    for (DType type : {DType::Q8_0, DType::Q4_K, DType::F16})
        for (int64_t K : {int64_t{256}, int64_t{2048}})
            for (int64_t N : {1, 2, 15, 17, 45, 100, 333}) {
                const std::vector<uint8_t> wq = quantized_weights(type, 50 + N, N, K);
                const WeightView w{type, K, N, wq.data()};
                const std::vector<float> x = testing::make_quant_input(51 + N, K);
                const std::vector<float> bias = testing::make_quant_input(52 + N, N);
                std::vector<float> got(static_cast<size_t>(N), NAN);
                matmul(w, x.data(), 1, got.data(), pool, bias.data());
                const TypeTraits& tt = type_traits(type);
                std::vector<uint8_t> xq(row_bytes(tt.vec_dot_type, K));
                type_traits(tt.vec_dot_type).from_float_fast(x.data(), xq.data(), K);
                const size_t rb = row_bytes(type, K);
                for (int64_t o = 0; o < N; ++o) {
                    float want = 0;
                    vec_dot_tokens(tt, K, 1, wq.data() + o * rb, rb, 1, xq.data(), xq.size(),
                                   &want, 1);
                    ASSERT_EQ(got[static_cast<size_t>(o)], want + bias[static_cast<size_t>(o)])
                        << dtype_info(type).name << " K " << K << " N " << N << " row " << o;
                }
            }
}

// Packers alone against an index-by-index transpose, including partial panels.
TEST(GemmPack, PanelsAreTheTransposedRows) {
    for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
        if (!isa_supported(isa)) continue;
        const GemmKernels& kn = gemm_kernels(isa);
        for (int64_t n_rows : {1, 31, 32, 45}) {
            for (int64_t kc : {1, 16, 37, 256}) {
                const int64_t ld = kc + 6;
                std::vector<float> rows = testing::make_quant_input(99 + n_rows + kc, n_rows * ld);
                const int64_t panels = (n_rows + kn.nr_f32 - 1) / kn.nr_f32;
                std::vector<float> got(static_cast<size_t>(panels * kc * kn.nr_f32), NAN);
                kn.pack_f32(rows.data(), ld, n_rows, kc, got.data());
                for (int64_t r = 0; r < panels * kn.nr_f32; ++r)
                    for (int64_t k = 0; k < kc; ++k) {
                        const float want = r < n_rows ? rows[r * ld + k] : 0.0f;
                        ASSERT_EQ(got[(r / kn.nr_f32 * kc + k) * kn.nr_f32 + r % kn.nr_f32], want)
                            << isa_name(isa) << " f32 r=" << r << " k=" << k;
                    }
                if (!kn.pack_bf16) continue;
                const int64_t nr = kn.nr_bf16, kc2 = (kc + 1) / 2;
                std::vector<uint16_t> src(rows.size());
                for (size_t i = 0; i < rows.size(); ++i) src[i] = f32_to_bf16(rows[i]);
                std::vector<uint16_t> g1(static_cast<size_t>(panels * kc2 * 2 * nr), 0xFFFF);
                std::vector<uint16_t> g2(g1);
                kn.pack_bf16(src.data(), ld, n_rows, kc, g1.data());
                kn.pack_bf16_from_f32(rows.data(), ld, n_rows, kc, g2.data());
                for (int64_t r = 0; r < panels * nr; ++r)
                    for (int64_t k = 0; k < 2 * kc2; ++k) {
                        const uint16_t want = r < n_rows && k < kc ? src[r * ld + k] : 0;
                        const size_t at =
                            static_cast<size_t>(((r / nr * kc2 + k / 2) * nr + r % nr) * 2 + k % 2);
                        ASSERT_EQ(g1[at], want) << isa_name(isa) << " bf16 r=" << r << " k=" << k;
                        ASSERT_EQ(g2[at], want)
                            << isa_name(isa) << " bf16<-f32 r=" << r << " k=" << k;
                    }
            }
        }
    }
}

// Every training GEMM engine the CPU has (BLAS, f32 panels, bf16 panels, AMX tiles), every
// orientation of both operands (forward x W^T, input gradient dY W, weight gradient dY^T X),
// awkward sizes incl. odd depth and depths past one block of the AMX sweep, with and without
// accumulation and bias: equal to a double-precision sum of the operands, rounded to bf16 first
// for the bf16 engines. Bound: f32 summation error, ~K ulp of the sum of |products|.
TEST(TrainGemm, EveryEngineAndOrientationMatchesTheReference) {
    ThreadPool pool(2);
    uint64_t seed = 91;
    int tested = 0;
    for (const TrainGemm g : {TrainGemm::Blas, TrainGemm::F32Panels, TrainGemm::BF16Panels,
                              TrainGemm::AmxBF16}) {
        if (!train_gemm_available(g)) continue;
        ++tested;
        const bool bf16 = g == TrainGemm::BF16Panels || g == TrainGemm::AmxBF16;
        auto r = [&](float v) { return bf16 ? static_cast<double>(round_bf16(v)) : double{v}; };
        for (const auto& [T, N, K] : {std::array<int64_t, 3>{1, 1, 1}, {13, 45, 7},
                                      {30, 70, 261}, {131, 33, 517}, {40, 37, 1100}}) {
            for (const bool xt : {false, true})
                for (const bool wt : {false, true})
                    for (const bool accumulate : {false, true}) {
                        const std::vector<float> x = testing::make_quant_input(seed++, T * K);
                        const std::vector<float> w = testing::make_quant_input(seed++, N * K);
                        const std::vector<float> bias = testing::make_quant_input(seed++, N);
                        std::vector<float> y = testing::make_quant_input(seed++, T * N);
                        const std::vector<float> y0 = y;
                        const bool with_bias = (T + xt + wt) % 2 == 0;
                        // x(t, k), w(o, k) in the chosen storage order.
                        auto xv = [&](int64_t t, int64_t k) { return xt ? x[k * T + t] : x[t * K + k]; };
                        auto wv = [&](int64_t o, int64_t k) { return wt ? w[k * N + o] : w[o * K + k]; };
                        train_gemm(g, {x.data(), xt ? T : K, xt}, {w.data(), wt ? N : K, wt}, T,
                                   N, K, y.data(), accumulate, pool,
                                   with_bias ? bias.data() : nullptr);
                        for (int64_t t = 0; t < T; ++t)
                            for (int64_t o = 0; o < N; ++o) {
                                double ref = (accumulate ? y0[t * N + o] : 0.0) +
                                             (with_bias ? bias[o] : 0.0);
                                double mag = std::fabs(ref);
                                for (int64_t k = 0; k < K; ++k) {
                                    const double p = r(xv(t, k)) * r(wv(o, k));
                                    ref += p;
                                    mag += std::fabs(p);
                                }
                                ASSERT_NEAR(y[t * N + o], ref, 1e-5 * mag + 1e-30)
                                    << train_gemm_name(g) << " T=" << T << " N=" << N
                                    << " K=" << K << " xt=" << xt << " wt=" << wt
                                    << " acc=" << accumulate << " t=" << t << " o=" << o;
                            }
                    }
        }
    }
    EXPECT_GE(tested, 1);
}

// The measured choice keeps each precision's first engine unless another is clearly faster.
TEST(TrainGemm, ChoiceKeepsTheFirstEngineUnlessAnotherIsClearlyFaster) {
    const TrainGemmChoice& c = train_gemm_choice();
    EXPECT_TRUE(train_gemm_available(c.f32));
    if (c.bf16 != TrainGemm::None) {
        EXPECT_TRUE(train_gemm_available(c.bf16));
    }
    // Each list's first timed engine (blas; bf16 panels) unless a later one beat the one kept
    // before it by the margin.
    for (const bool f32 : {true, false}) {
        TrainGemm want = TrainGemm::None;
        double kept = 0;
        for (const auto& t : c.timings) {
            EXPECT_GT(t.gflops, 0);
            if ((t.gemm == TrainGemm::Blas || t.gemm == TrainGemm::F32Panels) != f32) continue;
            if (want == TrainGemm::None || t.gflops > kTrainGemmMargin * kept) {
                want = t.gemm;
                kept = t.gflops;
            }
        }
        if (want != TrainGemm::None) {
            EXPECT_EQ(f32 ? c.f32 : c.bf16, want) << (f32 ? "f32" : "bf16");
        }
    }
}

// A resumed training run pins the engines its checkpoint names (train/trainer.cpp).
TEST(TrainGemm, PinnedEnginesReplaceTheMeasuredOnes) {
    const TrainGemmChoice before = train_gemm_choice();
    for (const TrainGemm f32 : {TrainGemm::Blas, TrainGemm::F32Panels}) {
        if (!train_gemm_available(f32)) continue;
        ASSERT_TRUE(pin_train_gemms(f32, TrainGemm::None)) << train_gemm_name(f32);
        EXPECT_EQ(train_gemm_choice().f32, f32);
        EXPECT_EQ(train_gemm_choice().bf16, TrainGemm::None);
    }
    const TrainGemmChoice pinned = train_gemm_choice();
    // Refused, changing nothing: a bf16 engine as the f32 one, an f32 engine as the bf16 one,
    // and engines this CPU lacks.
    EXPECT_FALSE(pin_train_gemms(TrainGemm::BF16Panels, TrainGemm::None));
    EXPECT_FALSE(pin_train_gemms(TrainGemm::Blas, TrainGemm::Blas));
    for (const TrainGemm g : {TrainGemm::BF16Panels, TrainGemm::AmxBF16}) {
        if (!train_gemm_available(g)) {
            EXPECT_FALSE(pin_train_gemms(TrainGemm::Blas, g));
        }
    }
    EXPECT_EQ(train_gemm_choice().f32, pinned.f32);
    EXPECT_EQ(train_gemm_choice().bf16, pinned.bf16);
    ASSERT_TRUE(pin_train_gemms(before.f32, before.bf16));  // as the other tests expect it
}

}  // namespace
}  // namespace syslm::kernels

namespace syslm::kernels {
namespace {

TEST(GemmAmx, UsedWhereTheCpuHasTheTiles) {
    const CpuFeatures& f = cpu_features();
    if (!f.amx_bf16 || !f.avx512bf16 || !isa_supported(Isa::Avx512))
        GTEST_SKIP() << "no AMX-BF16 on this CPU: the AMX GEMM is not tested here";
    EXPECT_TRUE(amx_bf16_available()) << "the OS refused the tile state (arch_prctl)";
}

TEST(GemmPanelChoice, KeepsTheFastestTimedPanel) {
    const PanelChoice& c = gemm_panel_choice(active_isa());
    if (c.timings.empty()) GTEST_SKIP() << "one panel format only, or SYSLM_GEMM_PANEL set";
    double best = 0;
    for (const auto& t : c.timings) {
        EXPECT_GT(t.gflops, 0);
        best = std::max(best, t.gflops);
    }
    for (const auto& t : c.timings) {
        if (t.panel == c.panel) {
            EXPECT_EQ(t.gflops, best);
        }
    }
    EXPECT_EQ(gemm_panel(DType::Q4_K, active_isa()), c.panel);
    EXPECT_EQ(gemm_panel(DType::F32, active_isa()), GemmPanel::F32) << "F32 stays exact";
    EXPECT_EQ(gemm_panel(DType::F16, active_isa()),
              c.panel == GemmPanel::AmxBF16 ? GemmPanel::AmxBF16 : GemmPanel::F32)
        << "F16: exact, or on the AMX tiles";
}

}  // namespace
}  // namespace syslm::kernels
