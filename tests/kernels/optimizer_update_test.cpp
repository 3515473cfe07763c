// The AdamW kernel's ISA variants give bit-identical weights and moments to the scalar one (the
// contract of optimizer_update.hpp), on awkward lengths that leave every kind of tail; and the
// scalar one follows the update formula (checked in double), with a clipping scale on the
// gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/optimizer_update.hpp"

namespace syslm::kernels {
namespace {

TEST(AdamW, VariantsAreBitIdenticalToScalar) {
    std::mt19937 rng(4);
    std::normal_distribution<float> d(0.0f, 1.0f);
    const AdamWStep s{1.0f - 1e-3f * 0.1f, 0.9f, 0.999f, 1e-8f, 1e-3f / 0.19f, std::sqrt(0.002f),
                      0.75f};
    for (int64_t n : {1, 7, 16, 33, 1000}) {
        std::vector<float> w(n), g(n), m(n), v(n);
        for (int64_t i = 0; i < n; ++i) {
            w[i] = d(rng);
            g[i] = d(rng) * (i % 5 == 0 ? 1e-6f : 1.0f);
            m[i] = 0.1f * d(rng);
            v[i] = std::fabs(d(rng)) * 0.01f;
        }
        auto ws = w, ms = m, vs = v;
        adamw_update(ws.data(), g.data(), ms.data(), vs.data(), n, s, Isa::Scalar);
        for (int64_t i = 0; i < n; ++i) {  // the formula, in double, on the scaled gradient
            const double gi = double(g[i]) * s.grad_scale;
            const double mi = m[i] + (gi - m[i]) * (1 - double(s.b1));
            const double vi = v[i] * double(s.b2) + gi * gi * (1 - double(s.b2));
            const double wi =
                w[i] * double(s.decay) - s.step_size * mi / (std::sqrt(vi) / s.bc2_sqrt + s.eps);
            ASSERT_NEAR(ws[i], wi, 1e-5 * (1 + std::fabs(wi))) << i;
        }
        for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
            if (!isa_supported(isa)) continue;
            auto wx = w, mx = m, vx = v;
            adamw_update(wx.data(), g.data(), mx.data(), vx.data(), n, s, isa);
            EXPECT_EQ(wx, ws) << isa_name(isa) << " n=" << n;
            EXPECT_EQ(mx, ms) << isa_name(isa) << " n=" << n;
            EXPECT_EQ(vx, vs) << isa_name(isa) << " n=" << n;
        }
    }
}

}  // namespace
}  // namespace syslm::kernels
