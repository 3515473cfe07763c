// The backward kernels (kernels/cpu/backward.hpp, Rope::apply_backward) against central finite
// differences of the forward written out in double here, on random inputs of awkward sizes. The
// loss is L = sum(y * r) for a random r, so dL/dy = r is what each backward receives.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "../common/random_values.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "kernels/cpu/activations.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/backward.hpp"
#include "kernels/cpu/elementwise_kernels.hpp"
#include "kernels/cpu/ffn_activation.hpp"
#include "kernels/cpu/linear_backward.hpp"
#include "kernels/cpu/rope.hpp"

namespace syslm::kernels {
namespace {

using Vec = std::vector<double>;
using testing::random_floats;

Vec to_double(const std::vector<float>& v) {
    return Vec(v.begin(), v.end());
}

// dL/dp for every element of p by central differences of loss(p).
Vec numeric_grad(Vec p, const std::function<double(const Vec&)>& loss) {
    Vec g(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
        const double h = 1e-4 * std::max(1.0, std::fabs(p[i]));
        const double keep = p[i];
        p[i] = keep + h;
        const double up = loss(p);
        p[i] = keep - h;
        const double down = loss(p);
        p[i] = keep;
        g[i] = (up - down) / (2 * h);
    }
    return g;
}

void expect_grad_near(const std::vector<float>& got, const Vec& want, const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    double scale = 0;
    for (double w : want) scale = std::max(scale, std::fabs(w));
    for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 2e-4 * scale + 1e-6) << what << " at " << i;
}

double dot(const Vec& a, const Vec& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

constexpr int64_t kRows = 5, kDim = 37;  // awkward: not a vector multiple

TEST(Backward, RmsNorm) {
    const float eps = 1e-5f;
    const auto x = random_floats(kRows * kDim, 1), w = random_floats(kDim, 2),
               r = random_floats(kRows * kDim, 3);
    auto forward = [&](const Vec& xs, const Vec& ws) {
        Vec y(xs.size());
        for (int64_t row = 0; row < kRows; ++row) {
            double ss = 0;
            for (int64_t i = 0; i < kDim; ++i) ss += xs[row * kDim + i] * xs[row * kDim + i];
            const double rs = 1 / std::sqrt(ss / kDim + eps);
            for (int64_t i = 0; i < kDim; ++i) y[row * kDim + i] = xs[row * kDim + i] * rs * ws[i];
        }
        return dot(y, to_double(r));
    };
    ThreadPool pool(2);
    std::vector<float> dx(x.size()), dw(kDim, 0.5f);  // dw accumulates onto what is there
    rms_norm_backward(x.data(), w.data(), r.data(), dx.data(), dw.data(), kRows, kDim, eps, pool);
    expect_grad_near(
        dx, numeric_grad(to_double(x), [&](const Vec& p) { return forward(p, to_double(w)); }),
        "dx");
    Vec want_dw =
        numeric_grad(to_double(w), [&](const Vec& p) { return forward(to_double(x), p); });
    for (double& v : want_dw) v += 0.5;
    expect_grad_near(dw, want_dw, "dw");
}

TEST(Backward, LayerNorm) {
    const float eps = 1e-5f;
    const auto x = random_floats(kRows * kDim, 4, 2.0f), w = random_floats(kDim, 5),
               b = random_floats(kDim, 6), r = random_floats(kRows * kDim, 7);
    auto forward = [&](const Vec& xs, const Vec& ws, const Vec& bs) {
        Vec y(xs.size());
        for (int64_t row = 0; row < kRows; ++row) {
            double mean = 0, var = 0;
            for (int64_t i = 0; i < kDim; ++i) mean += xs[row * kDim + i] / kDim;
            for (int64_t i = 0; i < kDim; ++i) {
                const double d = xs[row * kDim + i] - mean;
                var += d * d / kDim;
            }
            for (int64_t i = 0; i < kDim; ++i)
                y[row * kDim + i] =
                    (xs[row * kDim + i] - mean) / std::sqrt(var + eps) * ws[i] + bs[i];
        }
        return dot(y, to_double(r));
    };
    ThreadPool pool(3);
    std::vector<float> dx(x.size()), dw(kDim, 0.0f), db(kDim, 0.0f);
    layer_norm_backward(x.data(), w.data(), r.data(), dx.data(), dw.data(), db.data(), kRows, kDim,
                        eps, pool);
    const Vec xd = to_double(x), wd = to_double(w), bd = to_double(b);
    expect_grad_near(dx, numeric_grad(xd, [&](const Vec& p) { return forward(p, wd, bd); }), "dx");
    expect_grad_near(dw, numeric_grad(wd, [&](const Vec& p) { return forward(xd, p, bd); }), "dw");
    expect_grad_near(db, numeric_grad(bd, [&](const Vec& p) { return forward(xd, wd, p); }), "db");
}

TEST(Backward, SwiGluAndGelu) {
    const int64_t n = 203;  // tails for every vector width
    const auto g = random_floats(n, 8, 3.0f), u = random_floats(n, 9), r = random_floats(n, 10);
    const Vec gd = to_double(g), ud = to_double(u), rd = to_double(r);
    auto swiglu = [&](const Vec& a, const Vec& b) {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += a[i] / (1 + std::exp(-a[i])) * b[i] * rd[i];
        return s;
    };
    auto gelu = [&](const Vec& a) {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) {
            const double v = a[i];
            s +=
                0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))) * rd[i];
        }
        return s;
    };
    const Vec want_dg = numeric_grad(gd, [&](const Vec& p) { return swiglu(p, ud); });
    const Vec want_du = numeric_grad(ud, [&](const Vec& p) { return swiglu(gd, p); });
    const Vec want_dx = numeric_grad(gd, gelu);
    auto gelu_erf = [&](const Vec& a) {
        double s = 0;
        for (int64_t i = 0; i < n; ++i)
            s += 0.5 * a[i] * (1 + std::erf(a[i] / std::sqrt(2.0))) * rd[i];
        return s;
    };
    const Vec want_erf = numeric_grad(gd, gelu_erf);
    auto geglu = [&](const Vec& a, const Vec& b) {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) {
            const double v = a[i];
            s += 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))) *
                 b[i] * rd[i];
        }
        return s;
    };
    const Vec want_geg = numeric_grad(gd, [&](const Vec& p) { return geglu(p, ud); });
    const Vec want_geu = numeric_grad(ud, [&](const Vec& p) { return geglu(gd, p); });
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
        if (!isa_supported(isa)) continue;
        const ElementwiseKernels& k = elementwise_kernels(isa);
        std::vector<float> dg(n), du(n), dx(n);
        k.swiglu_backward(g.data(), u.data(), r.data(), dg.data(), du.data(), n);
        expect_grad_near(dg, want_dg, isa_name(isa));
        expect_grad_near(du, want_du, isa_name(isa));
        k.gelu_tanh_backward(g.data(), r.data(), dx.data(), n);
        expect_grad_near(dx, want_dx, isa_name(isa));
        k.gelu_erf_backward(g.data(), r.data(), dx.data(), n);
        expect_grad_near(dx, want_erf, isa_name(isa));
        k.geglu_backward(g.data(), u.data(), r.data(), dg.data(), du.data(), n);
        expect_grad_near(dg, want_geg, isa_name(isa));
        expect_grad_near(du, want_geu, isa_name(isa));
    }
    ThreadPool pool(3);  // the pool entry points split the work
    std::vector<float> dg(n), du(n), dx(n);
    swiglu_backward(g.data(), u.data(), r.data(), dg.data(), du.data(), n, pool);
    expect_grad_near(dg, want_dg, "pool");
    gelu_tanh_backward(g.data(), r.data(), dx.data(), n, pool);
    expect_grad_near(dx, want_dx, "pool");
    gelu_erf_backward(g.data(), r.data(), dx.data(), n, pool);
    expect_grad_near(dx, want_erf, "pool");
    geglu_backward(g.data(), u.data(), r.data(), dg.data(), du.data(), n, pool);
    expect_grad_near(dg, want_geg, "pool");
    expect_grad_near(du, want_geu, "pool");
}

// Swish-beta GLU: y = g sigmoid(beta g) u with beta per channel, rows x n_ff. The gradients of
// g, u and beta (summed over rows) against central differences of the double-precision
// forward, for every ISA's kernel pair and the pooled entry points (channel ranges per thread).
TEST(Backward, SwishBetaGlu) {
    const int64_t rows = 5, F = 43;  // tails for every vector width
    const int64_t n = rows * F;
    const auto g = random_floats(n, 11, 3.0f), u = random_floats(n, 12), r = random_floats(n, 13);
    const auto beta = random_floats(F, 14, 1.5f);  // negative and positive betas
    const Vec gd = to_double(g), ud = to_double(u), rd = to_double(r), bd = to_double(beta);
    auto forward = [&](const Vec& a, const Vec& b, const Vec& be) {
        double s = 0;
        for (int64_t i = 0; i < n; ++i)
            s += a[i] / (1 + std::exp(-be[i % F] * a[i])) * b[i] * rd[i];
        return s;
    };
    const Vec want_dg = numeric_grad(gd, [&](const Vec& p) { return forward(p, ud, bd); });
    const Vec want_du = numeric_grad(ud, [&](const Vec& p) { return forward(gd, p, bd); });
    const Vec want_db = numeric_grad(bd, [&](const Vec& p) { return forward(gd, ud, p); });
    std::vector<float> want_y(n);
    for (int64_t i = 0; i < n; ++i)
        want_y[i] = static_cast<float>(gd[i] / (1 + std::exp(-bd[i % F] * gd[i])) * ud[i]);
    auto check = [&](const std::vector<float>& y, const std::vector<float>& dg,
                     const std::vector<float>& du, const std::vector<float>& db, const char* what) {
        for (int64_t i = 0; i < n; ++i)  // a few ulps of exp and the division
            ASSERT_NEAR(y[i], want_y[i], 1e-5f * (1 + std::fabs(want_y[i]))) << what << " " << i;
        expect_grad_near(dg, want_dg, what);
        expect_grad_near(du, want_du, what);
        expect_grad_near(db, want_db, what);
    };
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
        if (!isa_supported(isa)) continue;
        const ElementwiseKernels& k = elementwise_kernels(isa);
        std::vector<float> y = g, dg(n), du(n), db(F, 0.0f);
        for (int64_t row = 0; row < rows; ++row) {
            k.swish_beta(y.data() + row * F, u.data() + row * F, beta.data(), F);
            k.swish_beta_backward(g.data() + row * F, u.data() + row * F, beta.data(),
                                  r.data() + row * F, dg.data() + row * F, du.data() + row * F,
                                  db.data(), F);
        }
        check(y, dg, du, db, isa_name(isa));
    }
    ThreadPool pool(3);
    std::vector<float> y = g, dg(n), du(n), db(F, 0.0f);
    swish_beta_glu(y.data(), u.data(), beta.data(), rows, F, pool);
    swish_beta_glu_backward(g.data(), u.data(), beta.data(), r.data(), dg.data(), du.data(),
                            db.data(), rows, F, pool);
    check(y, dg, du, db, "pool");
    // At beta = 1 it is SwiGLU.
    const std::vector<float> ones(F, 1.0f);
    std::vector<float> a = g, b = g;
    swish_beta_glu(a.data(), u.data(), ones.data(), rows, F, pool);
    swiglu(b.data(), u.data(), n, pool);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(a[i], b[i], 1e-6f * (1 + std::fabs(b[i]))) << i;
}

// RoPE is linear in x: the backward must be its adjoint, <R x, dy> = <x, R^T dy>, for both
// pairings, partial rotation (n_rot < head_dim) and YaRN's magnitude scale.
TEST(Backward, RopeIsTheAdjoint) {
    for (RopeMode mode : {RopeMode::Norm, RopeMode::Neox}) {
        RopeConfig cfg;
        cfg.n_rot = 10;
        cfg.mode = mode;
        cfg.yarn_orig_ctx = mode == RopeMode::Neox ? 64 : 0;
        cfg.freq_scale = mode == RopeMode::Neox ? 0.25f : 1.0f;
        const Rope rope(cfg);
        const int heads = 3, head_dim = 14;
        for (int64_t pos : {0, 1, 17, 1000}) {
            auto x = random_floats(heads * head_dim, 11 + static_cast<uint32_t>(pos));
            auto dy = random_floats(heads * head_dim, 12 + static_cast<uint32_t>(pos));
            const Vec xd = to_double(x), dyd = to_double(dy);
            rope.apply(x.data(), heads, head_dim, pos);
            rope.apply_backward(dy.data(), heads, head_dim, pos);
            const double lhs = dot(to_double(x), dyd), rhs = dot(xd, to_double(dy));
            EXPECT_NEAR(lhs, rhs, 1e-5 * (1 + std::fabs(lhs))) << "pos " << pos;
        }
    }
}

TEST(Backward, EmbeddingScatterAdds) {
    const int64_t vocab = 11, dim = 6;
    const std::vector<int32_t> tokens = {3, 7, 3, 0, 10, 3, 7};
    const auto dx = random_floats(tokens.size() * dim, 13);
    std::vector<float> table(vocab * dim, 1.0f), want(table);
    for (size_t t = 0; t < tokens.size(); ++t)
        for (int64_t i = 0; i < dim; ++i) want[tokens[t] * dim + i] += dx[t * dim + i];
    ThreadPool pool(3);
    embedding_backward(tokens.data(), static_cast<int64_t>(tokens.size()), dx.data(), table.data(),
                       vocab, dim, pool);
    for (size_t i = 0; i < table.size(); ++i) EXPECT_FLOAT_EQ(table[i], want[i]) << i;
    const int32_t bad[] = {11};
    EXPECT_THROW(embedding_backward(bad, 1, dx.data(), table.data(), vocab, dim, pool), Error);
}

TEST(Backward, CrossEntropyLossAndGradient) {
    const int64_t rows = 6, vocab = 53;
    const auto z = random_floats(rows * vocab, 14, 4.0f);
    const std::vector<int32_t> targets = {5, -1, 52, 0, 17, -1};  // -1: ignored rows
    auto loss = [&](const Vec& zs) {
        double total = 0;
        int counted = 0;
        for (int64_t r = 0; r < rows; ++r) {
            if (targets[r] < 0) continue;
            double m = -1e300, s = 0;
            for (int64_t i = 0; i < vocab; ++i) m = std::max(m, zs[r * vocab + i]);
            for (int64_t i = 0; i < vocab; ++i) s += std::exp(zs[r * vocab + i] - m);
            total += std::log(s) + m - zs[r * vocab + targets[r]];
            ++counted;
        }
        return total / counted;
    };
    ThreadPool pool(2);
    const Vec want = numeric_grad(to_double(z), loss);
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
        if (!isa_supported(isa)) continue;
        std::vector<float> grad = z;
        const double got = cross_entropy_fused(grad.data(), targets.data(), rows, vocab, pool, isa);
        EXPECT_NEAR(got, loss(to_double(z)), 1e-6) << isa_name(isa);
        expect_grad_near(grad, want, isa_name(isa));
    }
    const std::vector<int32_t> bad = {5, 53, 0, 0, 0, 0};
    std::vector<float> again = z;
    EXPECT_THROW(cross_entropy_fused(again.data(), bad.data(), rows, vocab, pool), Error);
}

// The linear layer's two GEMMs against plain double loops, on sizes on both sides of the
// matmul's 32-row GEMM threshold.
TEST(Backward, LinearLayer) {
    for (const auto& [T, K, N] :
         {std::tuple<int64_t, int64_t, int64_t>{7, 45, 29}, {70, 37, 53}, {33, 130, 96}}) {
        const auto dy = random_floats(T * N, 20), w = random_floats(N * K, 21),
                   x = random_floats(T * K, 22);
        ThreadPool pool(2);
        std::vector<float> dx(T * K, 0.5f), dw(N * K, 0.25f), db(N, -1.0f);
        linear_backward_input(dy.data(), w.data(), T, K, N, dx.data(), /*accumulate=*/true, pool);
        linear_backward_weight(dy.data(), x.data(), T, K, N, dw.data(), db.data(), pool);
        for (int64_t t = 0; t < T; ++t)
            for (int64_t k = 0; k < K; ++k) {
                double s = 0.5;
                for (int64_t n = 0; n < N; ++n) s += double(dy[t * N + n]) * w[n * K + k];
                ASSERT_NEAR(dx[t * K + k], s, 1e-4 * (1 + std::fabs(s)))
                    << T << " dx " << t << "," << k;
            }
        for (int64_t n = 0; n < N; ++n) {
            double sb = -1.0;
            for (int64_t t = 0; t < T; ++t) sb += dy[t * N + n];
            ASSERT_NEAR(db[n], sb, 1e-4 * (1 + std::fabs(sb))) << "db " << n;
            for (int64_t k = 0; k < K; ++k) {
                double s = 0.25;
                for (int64_t t = 0; t < T; ++t) s += double(dy[t * N + n]) * x[t * K + k];
                ASSERT_NEAR(dw[n * K + k], s, 1e-4 * (1 + std::fabs(s))) << "dw " << n << "," << k;
            }
        }
    }
}

// Mixed precision: forward, input and weight gradients equal double sums of the rounded operands
// (bias gradients unrounded): bf16 on the native bf16 GEMM where the CPU has it and on the
// emulated path (rounded copies through sgemm) everywhere; fp16 (emulated), incl. its overflow
// to inf above 65504.
TEST(Backward, LinearLayerRounded) {
    for (const Rounding rounding : {Rounding::BF16, Rounding::F16}) {
        auto r = [&](float v) {
            return rounding == Rounding::BF16 ? static_cast<double>(bf16_to_f32(f32_to_bf16(v)))
                                              : static_cast<double>(f16_to_f32(f32_to_f16(v)));
        };
        for (const bool emulate : {false, true})
            for (const auto& [T, K, N] :
                 {std::tuple<int64_t, int64_t, int64_t>{7, 45, 29}, {70, 37, 53}, {33, 131, 96}}) {
                const auto dy = random_floats(T * N, 30), w = random_floats(N * K, 31),
                           x = random_floats(T * K, 32), bias = random_floats(N, 33);
                ThreadPool pool(2);
                std::vector<float> y(T * N), dx(T * K, 0.5f), dw(N * K, 0.25f), db(N, -1.0f);
                linear_forward_rounded(rounding, x.data(), w.data(), bias.data(), T, K, N, y.data(),
                                       pool, emulate);
                linear_backward_input_rounded(rounding, dy.data(), w.data(), T, K, N, dx.data(),
                                              true, pool, emulate);
                linear_backward_weight_rounded(rounding, dy.data(), x.data(), T, K, N, dw.data(),
                                               db.data(), pool, emulate);
                const std::string path = std::string(rounding == Rounding::BF16 ? "bf16" : "f16") +
                                         (emulate ? " emulated" : " default");
                for (int64_t t = 0; t < T; ++t) {
                    for (int64_t n = 0; n < N; ++n) {
                        double s = bias[n];
                        for (int64_t k = 0; k < K; ++k) s += r(x[t * K + k]) * r(w[n * K + k]);
                        ASSERT_NEAR(y[t * N + n], s, 1e-5 * (1 + std::fabs(s))) << path << " y";
                    }
                    for (int64_t k = 0; k < K; ++k) {
                        double s = 0.5;
                        for (int64_t n = 0; n < N; ++n) s += r(dy[t * N + n]) * r(w[n * K + k]);
                        ASSERT_NEAR(dx[t * K + k], s, 1e-5 * (1 + std::fabs(s))) << path << " dx";
                    }
                }
                for (int64_t n = 0; n < N; ++n) {
                    double sb = -1.0;
                    for (int64_t t = 0; t < T; ++t) sb += dy[t * N + n];
                    ASSERT_NEAR(db[n], sb, 1e-5 * (1 + std::fabs(sb))) << path << " db";
                    for (int64_t k = 0; k < K; ++k) {
                        double s = 0.25;
                        for (int64_t t = 0; t < T; ++t) s += r(dy[t * N + n]) * r(x[t * K + k]);
                        ASSERT_NEAR(dw[n * K + k], s, 1e-5 * (1 + std::fabs(s))) << path << " dw";
                    }
                }
            }
    }
    // FP16 overflow: an operand above 65504 becomes inf, and so does the product's sum.
    ThreadPool pool(1);
    const float big[2] = {70000.0f, 1.0f}, one[2] = {1.0f, 1.0f};
    float y = 0;
    linear_forward_rounded(Rounding::F16, big, one, nullptr, 1, 2, 1, &y, pool);
    EXPECT_TRUE(std::isinf(y));
    linear_forward_rounded(Rounding::BF16, big, one, nullptr, 1, 2, 1, &y, pool);
    EXPECT_FALSE(std::isinf(y));
}

// Attention's backward (and the forward's log-sum-exp) against finite differences of a dense
// double forward: causal, GQA (4 query heads on 2 KV heads), with and without a window.
TEST(Backward, Attention) {
    for (int window : {0, 4}) {
        const int H = 4, HK = 2, D = 6;
        const int64_t T = 9, QS = H * D, KS = HK * D;
        const AttentionShape shape{H, HK, D, KS, window, 1.0f / std::sqrt(float(D))};
        const auto q = random_floats(T * QS, 30), k = random_floats(T * KS, 31),
                   v = random_floats(T * KS, 32), r = random_floats(T * QS, 33);
        auto forward = [&](const Vec& qs, const Vec& ks, const Vec& vs, Vec* lse) {
            Vec o(qs.size(), 0.0);
            for (int64_t t = 0; t < T; ++t)
                for (int h = 0; h < H; ++h) {
                    const int hk = h / (H / HK);
                    std::vector<double> sc;
                    double m = -1e300;
                    for (int64_t j = 0; j <= t; ++j) {
                        double d = 0;
                        for (int i = 0; i < D; ++i)
                            d += qs[t * QS + h * D + i] * ks[j * KS + hk * D + i];
                        d *= shape.scale;
                        const bool visible = window == 0 || t - j < window;
                        sc.push_back(visible ? d : -1e300);
                        if (visible) m = std::max(m, d);
                    }
                    double l = 0;
                    for (double x : sc) l += x > -1e299 ? std::exp(x - m) : 0.0;
                    if (lse) (*lse)[t * H + h] = m + std::log(l);
                    for (int64_t j = 0; j <= t; ++j) {
                        const double p = sc[j] > -1e299 ? std::exp(sc[j] - m) / l : 0.0;
                        for (int i = 0; i < D; ++i)
                            o[t * QS + h * D + i] += p * vs[j * KS + hk * D + i];
                    }
                }
            return o;
        };
        const Vec qd = to_double(q), kd = to_double(k), vd = to_double(v), rd = to_double(r);
        ThreadPool pool(2);
        std::vector<float> o(T * QS), lse(T * H), dq(T * QS), dk(T * KS), dv(T * KS);
        attention(shape, q.data(), k.data(), v.data(), T, 0, o.data(), pool, lse.data());
        Vec want_lse(T * H);
        forward(qd, kd, vd, &want_lse);
        for (size_t i = 0; i < lse.size(); ++i)
            ASSERT_NEAR(lse[i], want_lse[i], 1e-5) << "lse " << i;
        attention_backward(shape, q.data(), k.data(), v.data(), o.data(), lse.data(), r.data(), T,
                           dq.data(), dk.data(), dv.data(), pool);
        expect_grad_near(
            dq,
            numeric_grad(qd, [&](const Vec& p) { return dot(forward(p, kd, vd, nullptr), rd); }),
            "dq");
        expect_grad_near(
            dk,
            numeric_grad(kd, [&](const Vec& p) { return dot(forward(qd, p, vd, nullptr), rd); }),
            "dk");
        expect_grad_near(
            dv,
            numeric_grad(vd, [&](const Vec& p) { return dot(forward(qd, kd, p, nullptr), rd); }),
            "dv");
    }
}

// Long sequences (several key blocks), windows across block boundaries, head_dim tails and GQA,
// ALiBi, for every ISA variant: against the plain per-pair loop, the definition written out.
TEST(Backward, AttentionVariantsOnLongSequences) {
    struct Case {
        int H, HK, D, window;
        int64_t T;
        float alibi = 0.0f;           // ALiBi's maximum bias (0: none)
        float softcap = 0.0f;         // Gemma 2's soft-capping of the scores (0: none)
        int global = 0;               // global tokens before the window
        int random = 0, rblock = 16;  // BigBird's random blocks before the window
    };
    for (const Case c :
         {Case{4, 2, 12, 0, 150}, Case{3, 3, 20, 70, 131}, Case{8, 1, 16, 0, 65},
          Case{2, 1, 64, 100, 200}, Case{2, 2, 130, 0, 70}, Case{6, 6, 16, 0, 140, 8.0f},
          Case{4, 2, 12, 50, 90, 8.0f},
          // caps low enough that tanh bends most scores
          Case{4, 2, 12, 0, 150, 0.0f, 1.5f}, Case{3, 3, 20, 70, 131, 0.0f, 0.8f},
          // global tokens: inside one block, across blocks, with a cap
          Case{4, 2, 12, 20, 150, 0.0f, 0.0f, 3}, Case{3, 3, 20, 10, 200, 0.0f, 0.0f, 70},
          Case{2, 1, 16, 5, 131, 0.0f, 1.5f, 9},
          // BigBird's random blocks: of 16 and 24 positions, with global tokens, a long sequence
          // (rows reached only through a random block), a cap
          Case{4, 2, 12, 20, 150, 0.0f, 0.0f, 0, 2, 16},
          Case{3, 3, 20, 17, 200, 0.0f, 0.0f, 5, 3, 24},
          Case{2, 1, 16, 16, 400, 0.0f, 0.0f, 0, 4, 16},
          Case{2, 2, 12, 30, 140, 0.0f, 1.5f, 0, 2, 32}}) {
        const int64_t QS = c.H * c.D, KS = c.HK * c.D;
        AttentionShape shape{c.H, c.HK, c.D, KS, c.window, 1.0f / std::sqrt(float(c.D))};
        shape.softcap = c.softcap;
        shape.global_tokens = c.global;
        shape.random_blocks = c.random;
        shape.random_block_size = c.rblock;
        shape.random_seed = 1234;
        const auto drawn = [&](int64_t t, int64_t j) {  // t sees j through a random block
            int64_t b[kMaxRandomBlocks];
            const int n = random_key_blocks(shape, t / c.rblock, b);
            return std::find(b, b + n, j / c.rblock) != b + n;
        };
        const std::vector<float> slopes = alibi_slopes(c.H, c.alibi);
        if (c.alibi > 0) shape.alibi = slopes.data();
        const auto q = random_floats(c.T * QS, 40), k = random_floats(c.T * KS, 41),
                   v = random_floats(c.T * KS, 42), r = random_floats(c.T * QS, 43);
        ThreadPool pool(2);
        std::vector<float> o(c.T * QS), lse(c.T * c.H);
        attention(shape, q.data(), k.data(), v.data(), c.T, 0, o.data(), pool, lse.data());
        // The reference: per (head, query, visible key) in double.
        std::vector<double> wq(q.size(), 0.0), wk(k.size(), 0.0), wv(v.size(), 0.0);
        const int G = c.H / c.HK;
        for (int h = 0; h < c.H; ++h)
            for (int64_t t = 0; t < c.T; ++t) {
                const int64_t hk = h / G, qa = t * QS + h * c.D;
                double Dt = 0;
                for (int d = 0; d < c.D; ++d) Dt += double(r[qa + d]) * o[qa + d];
                const int64_t first = c.window > 0 ? std::max<int64_t>(0, t - c.window + 1) : 0;
                double psum = 0;  // 1 when the forward's lse includes what the scores add
                for (int64_t j = 0; j <= t; ++j) {
                    // neither in the window, nor global, nor in a random block
                    if (j < first && j >= c.global && !(c.random > 0 && drawn(t, j))) continue;
                    const int64_t ka = j * KS + hk * c.D;
                    double sdot = 0, pdot = 0;
                    for (int d = 0; d < c.D; ++d) {
                        sdot += double(q[qa + d]) * k[ka + d];
                        pdot += double(r[qa + d]) * v[ka + d];
                    }
                    const double bias = c.alibi > 0 ? double(slopes[h]) * double(j - t) : 0.0;
                    double score = shape.scale * sdot, dcap = 1.0;
                    if (c.softcap > 0) {
                        const double th = std::tanh(score / c.softcap);
                        score = c.softcap * th;
                        dcap = 1 - th * th;
                    }
                    const double p = std::exp(score + bias - lse[t * c.H + h]);
                    psum += p;
                    const double ds = p * (pdot - Dt) * shape.scale * dcap;
                    for (int d = 0; d < c.D; ++d) {
                        wq[qa + d] += ds * k[ka + d];
                        wk[ka + d] += ds * q[qa + d];
                        wv[ka + d] += p * r[qa + d];
                    }
                }
                ASSERT_NEAR(psum, 1.0, 1e-4) << "head " << h << " token " << t;
            }
        for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
            if (!isa_supported(isa)) continue;
            std::vector<float> dq(q.size(), 9.0f), dk(k.size(), 9.0f), dv(v.size(), 9.0f);
            attention_backward(shape, q.data(), k.data(), v.data(), o.data(), lse.data(), r.data(),
                               c.T, dq.data(), dk.data(), dv.data(), pool, isa);
            expect_grad_near(dq, wq, isa_name(isa));
            expect_grad_near(dk, wk, isa_name(isa));
            expect_grad_near(dv, wv, isa_name(isa));
        }
    }
}

}  // namespace
}  // namespace syslm::kernels
