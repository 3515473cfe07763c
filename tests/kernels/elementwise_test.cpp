// The vectorised element-wise kernels (SwiGLU, GELU-tanh, RMSNorm, LayerNorm) against the scalar
// references, on awkward lengths (vector tails), for every variant this CPU supports. The
// scalar references are themselves checked against double-precision formulas.
//
// Tolerances: the vector variants use a polynomial e^x (about 1 ulp; std::exp is within 1 ulp
// too) and a division, so SwiGLU may differ by a few ulps: 4e-7 relative. GELU-tanh is computed
// as x * sigmoid(2y) instead of x/2 (1 + tanh y); where tanh y is near -1 the reference's
// 1 + tanh y loses digits (absolute error ~1e-7 of 1), so the bound is 4e-7 relative plus
// 2e-7 |x| absolute. The norms sum in double in another order and apply the scale in float:
// 4 ulps of the output, plus for LayerNorm 4 ulps of the mean term it subtracts.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/activations.hpp"
#include "kernels/cpu/norm.hpp"

namespace syslm::kernels {
namespace {

constexpr float kUlp = 1.1920929e-7f;

std::vector<Isa> vector_isas() {
    std::vector<Isa> v;
    for (Isa i : {Isa::Avx2, Isa::Avx512})
        if (isa_supported(i)) v.push_back(i);
    return v;
}

std::vector<float> random_vec(int64_t n, float scale, std::mt19937& rng) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

const int64_t kLengths[] = {1, 7, 8, 15, 16, 17, 31, 33, 100, 2048 + 13};

TEST(Elementwise, ScalarReferencesMatchDoubleFormulas) {
    std::mt19937 rng(1);
    auto g = random_vec(1000, 4.0f, rng), u = random_vec(1000, 1.0f, rng);
    auto sw = g, ge = g;
    swiglu(sw.data(), u.data(), 1000, Isa::Scalar);
    gelu_tanh(ge.data(), 1000, Isa::Scalar);
    for (int i = 0; i < 1000; ++i) {
        const double x = g[i];
        const double want_sw = x / (1 + std::exp(-x)) * u[i];
        const double want_ge =
            0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        EXPECT_NEAR(sw[i], want_sw, 1e-6 * (std::fabs(want_sw) + 1e-3));
        EXPECT_NEAR(ge[i], want_ge, 1e-6 * (std::fabs(want_ge) + std::fabs(x)));
    }
}

TEST(Elementwise, SwigluMatchesScalar) {
    std::mt19937 rng(2);
    for (Isa isa : vector_isas())
        for (int64_t n : kLengths) {
            // Gates up to +-40: e^-g saturates both ways.
            auto g = random_vec(n, 12.0f, rng), u = random_vec(n, 2.0f, rng);
            auto ref = g, got = g;
            swiglu(ref.data(), u.data(), n, Isa::Scalar);
            swiglu(got.data(), u.data(), n, isa);
            for (int64_t i = 0; i < n; ++i)
                ASSERT_NEAR(got[i], ref[i], 4 * kUlp * std::fabs(ref[i]) + 1e-30f)
                    << isa_name(isa) << " n " << n << " at " << i << " gate " << g[i];
        }
}

TEST(Elementwise, GeluTanhMatchesScalar) {
    std::mt19937 rng(3);
    for (Isa isa : vector_isas())
        for (int64_t n : kLengths) {
            auto x = random_vec(n, 5.0f, rng);
            auto ref = x, got = x;
            gelu_tanh(ref.data(), n, Isa::Scalar);
            gelu_tanh(got.data(), n, isa);
            for (int64_t i = 0; i < n; ++i)
                ASSERT_NEAR(got[i], ref[i],
                            4 * kUlp * std::fabs(ref[i]) + 2 * kUlp * std::fabs(x[i]))
                    << isa_name(isa) << " n " << n << " at " << i << " x " << x[i];
        }
}

// GeGLU against the double formula gelu_tanh(g) u, every ISA: the vector kernels compute gelu as
// g sigmoid(2y) (GeluTanhMatchesScalar's bound, times |u|) and multiply once more (1 ulp).
TEST(Elementwise, GegluMatchesTheDefinition) {
    std::mt19937 rng(7);
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
        if (!isa_supported(isa)) continue;
        for (int64_t n : kLengths) {
            auto g = random_vec(n, 5.0f, rng), u = random_vec(n, 2.0f, rng);
            auto got = g;
            geglu(got.data(), u.data(), n, isa);
            for (int64_t i = 0; i < n; ++i) {
                const double x = g[i];
                const double want =
                    0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))) *
                    u[i];
                ASSERT_NEAR(got[i], want,
                            6 * kUlp * std::fabs(want) + 3 * kUlp * std::fabs(x * u[i]))
                    << isa_name(isa) << " n " << n << " at " << i << " g " << x;
            }
        }
    }
    ThreadPool pool(3);
    auto a = random_vec(100003, 3.0f, rng), b = a, u = random_vec(100003, 1.0f, rng);
    geglu(a.data(), u.data(), a.size(), active_isa());
    geglu(b.data(), u.data(), b.size(), pool);
    EXPECT_EQ(a, b);
}

// Soft-capping cap tanh(x / cap) against std::tanh in double, every ISA, inputs up to +-60 caps
// (tanh saturated) and below 1e-4 caps (the rational form keeps relative accuracy near 0): the
// vector tanh is within a few ulps of tanh, so 4 ulps of the output plus 2 of the argument.
TEST(Elementwise, SoftcapMatchesTanh) {
    std::mt19937 rng(8);
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
        if (!isa_supported(isa)) continue;
        for (const float cap : {30.0f, 1.5f})
            for (int64_t n : kLengths) {
                auto x = random_vec(n, 2.0f * cap, rng);
                if (n > 3) x[0] = 60 * cap, x[1] = -60 * cap, x[2] = 1e-4f * cap, x[3] = -3e-6f;
                auto got = x;
                softcap(got.data(), n, cap, isa);
                for (int64_t i = 0; i < n; ++i) {
                    const double want = cap * std::tanh(double(x[i]) / cap);
                    ASSERT_NEAR(got[i], want,
                                4 * kUlp * std::fabs(want) + 2 * kUlp * std::fabs(x[i]))
                        << isa_name(isa) << " cap " << cap << " n " << n << " at " << i << " x "
                        << x[i];
                }
            }
    }
    ThreadPool pool(3);
    auto a = random_vec(100003, 40.0f, rng), b = a;
    softcap(a.data(), a.size(), 30.0f, active_isa());
    softcap(b.data(), b.size(), 30.0f, pool);
    EXPECT_EQ(a, b);
}

// The exact GELU against std::erf in double: the vector kernels' erf is a rational
// approximation within 5e-7 of erf, which moves x Phi(x) by at most 2.5e-7 |x|.
TEST(Elementwise, GeluErfMatchesTheDefinition) {
    std::mt19937 rng(6);
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
        if (!isa_supported(isa)) continue;
        for (int64_t n : kLengths) {
            auto x = random_vec(n, 4.0f, rng);
            if (n > 2) x[0] = 9.5f, x[1] = -9.5f;  // past the approximation's clamp
            auto got = x;
            gelu_erf(got.data(), n, isa);
            for (int64_t i = 0; i < n; ++i) {
                const double v = x[i], want = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
                ASSERT_NEAR(got[i], want, 3e-7 * std::fabs(v) + 2 * kUlp * std::fabs(want))
                    << isa_name(isa) << " n " << n << " at " << i << " x " << v;
            }
        }
    }
    ThreadPool pool(3);
    auto a = random_vec(100003, 3.0f, rng), b = a;
    gelu_erf(a.data(), a.size(), active_isa());
    gelu_erf(b.data(), b.size(), pool);
    EXPECT_EQ(a, b);
}

TEST(Elementwise, ThreadedOverloadsMatch) {
    std::mt19937 rng(4);
    ThreadPool pool(3);
    const int64_t n = 100003;  // several chunks and a ragged end
    auto g = random_vec(n, 3.0f, rng), u = random_vec(n, 1.0f, rng);
    auto a = g, b = g, c = g, e = g;
    swiglu(a.data(), u.data(), n);
    swiglu(b.data(), u.data(), n, pool);
    gelu_tanh(c.data(), n);
    gelu_tanh(e.data(), n, pool);
    EXPECT_EQ(a, b);
    EXPECT_EQ(c, e);
    const int64_t rows = 37, dim = 300;
    auto x = random_vec(rows * dim, 2.0f, rng), w = random_vec(dim, 1.0f, rng),
         bias = random_vec(dim, 1.0f, rng);
    std::vector<float> r1(x.size()), r2(x.size());
    rms_norm(x.data(), r1.data(), rows, dim, w.data(), 1e-5f);
    rms_norm(x.data(), r2.data(), rows, dim, w.data(), 1e-5f, pool);
    EXPECT_EQ(r1, r2);
    layer_norm(x.data(), r1.data(), rows, dim, w.data(), bias.data(), 1e-5f);
    layer_norm(x.data(), r2.data(), rows, dim, w.data(), bias.data(), 1e-5f, pool);
    EXPECT_EQ(r1, r2);
}

TEST(Elementwise, RmsNormMatchesScalar) {
    std::mt19937 rng(5);
    for (Isa isa : vector_isas())
        for (int64_t dim : kLengths) {
            const int64_t rows = 3;
            auto x = random_vec(rows * dim, 3.0f, rng), w = random_vec(dim, 1.0f, rng);
            std::vector<float> ref(x.size()), got(x.size());
            rms_norm(x.data(), ref.data(), rows, dim, w.data(), 1e-6f, Isa::Scalar);
            rms_norm(x.data(), got.data(), rows, dim, w.data(), 1e-6f, isa);
            for (size_t i = 0; i < x.size(); ++i)
                ASSERT_NEAR(got[i], ref[i], 4 * kUlp * std::fabs(ref[i]))
                    << isa_name(isa) << " dim " << dim << " at " << i;
            // In place, as the model calls it.
            auto inplace = x;
            rms_norm(inplace.data(), inplace.data(), rows, dim, w.data(), 1e-6f, isa);
            EXPECT_EQ(inplace, got);
        }
}

TEST(Elementwise, LayerNormMatchesScalar) {
    std::mt19937 rng(6);
    for (Isa isa : vector_isas())
        for (int64_t dim : kLengths) {
            if (dim == 1) continue;  // variance 0: (x - mean) is exactly 0 in both
            const int64_t rows = 3;
            auto x = random_vec(rows * dim, 3.0f, rng), w = random_vec(dim, 1.0f, rng),
                 b = random_vec(dim, 1.0f, rng);
            for (auto& v : x) v += 5.0f;  // a mean to subtract
            for (const float* bias :
                 {static_cast<const float*>(b.data()), static_cast<const float*>(nullptr)}) {
                std::vector<float> ref(x.size()), got(x.size());
                layer_norm(x.data(), ref.data(), rows, dim, w.data(), bias, 1e-5f, Isa::Scalar);
                layer_norm(x.data(), got.data(), rows, dim, w.data(), bias, 1e-5f, isa);
                for (int64_t r = 0; r < rows; ++r) {
                    double sum = 0, var = 0;
                    for (int64_t i = 0; i < dim; ++i) sum += x[r * dim + i];
                    const double mean = sum / dim;
                    for (int64_t i = 0; i < dim; ++i)
                        var += (x[r * dim + i] - mean) * (x[r * dim + i] - mean);
                    const double mean_term = std::fabs(mean) / std::sqrt(var / dim + 1e-5);
                    for (int64_t i = 0; i < dim; ++i) {
                        const size_t k = r * dim + i;
                        const float tol = 4 * kUlp *
                                          (std::fabs(ref[k]) + (1 + mean_term) * std::fabs(w[i]) +
                                           (bias ? std::fabs(bias[i]) : 0.0f));
                        ASSERT_NEAR(got[k], ref[k], tol)
                            << isa_name(isa) << " dim " << dim << " bias " << (bias != nullptr)
                            << " at " << k;
                    }
                }
            }
        }
}

}  // namespace
}  // namespace syslm::kernels
