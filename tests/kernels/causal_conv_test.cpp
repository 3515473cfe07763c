// The causal depthwise convolution of conv hybrids (kernels/cpu/causal_conv.hpp): the forward
// against a direct double sum, the backward against central differences; two sequences that
// must not see each other, more channels than one job's range, a kernel longer than a sequence.
#include "kernels/cpu/causal_conv.hpp"
#include "../common/random_values.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace syslm::kernels {
namespace {

constexpr int64_t B = 2, T = 7, D = 70;

std::vector<double> reference(const std::vector<float>& a, const std::vector<float>& w, int k) {
    std::vector<double> out(a.size());
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
            for (int64_t c = 0; c < D; ++c) {
                double s = 0;
                for (int j = 0; j < k && j <= t; ++j)
                    s += double(w[j * D + c]) * a[((b * T) + t - j) * D + c];
                out[(b * T + t) * D + c] = s;
            }
    return out;
}

TEST(CausalConv, ForwardAndBackwardMatchTheReference) {
    ThreadPool pool(3);
    for (int k : {1, 3, 9}) {  // 9 > T: the first rows see only what precedes them
        const auto a = testing::random_floats(B * T * D, 1 + k),
                   w = testing::random_floats(k * D, 2 + k),
                   r = testing::random_floats(B * T * D, 3 + k);
        std::vector<float> out(a.size());
        causal_conv(a.data(), w.data(), k, B, T, D, out.data(), pool);
        const auto want = reference(a, w, k);
        for (size_t i = 0; i < out.size(); ++i)
            ASSERT_NEAR(out[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << k << " " << i;

        std::vector<float> da(a.size()), dw(w.size(), 0.5f);  // dw is added to
        causal_conv_backward(a.data(), w.data(), r.data(), k, B, T, D, da.data(), dw.data(), pool);
        auto loss = [&](const std::vector<float>& aa, const std::vector<float>& ww) {
            const auto o = reference(aa, ww, k);
            double l = 0;
            for (size_t i = 0; i < o.size(); ++i) l += o[i] * r[i];
            return l;
        };
        // The loss is linear in each input: central differences are exact up to rounding.
        auto check = [&](std::vector<float> p, const std::vector<float>& got, double offset,
                         const std::function<double(const std::vector<float>&)>& f,
                         const char* what) {
            for (size_t i = 0; i < p.size(); ++i) {
                const float keep = p[i];
                p[i] = keep + 0.5f;
                const double up = f(p);
                p[i] = keep - 0.5f;
                const double down = f(p);
                p[i] = keep;
                const double want_i = up - down + offset;
                ASSERT_NEAR(got[i], want_i, 1e-4 * (1 + std::fabs(want_i))) << what << " " << i;
            }
        };
        check(
            a, da, 0, [&](const std::vector<float>& p) { return loss(p, w); }, "da");
        check(
            w, dw, 0.5, [&](const std::vector<float>& p) { return loss(a, p); }, "dw");
    }
}

}  // namespace
}  // namespace syslm::kernels
