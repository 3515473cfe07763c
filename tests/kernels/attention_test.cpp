// The attention kernel against a dense reference that materialises the whole masked T x T score
// matrix (the formulation the kernel avoids), on awkward sizes, GQA and sliding windows.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/cpu/attention.hpp"

namespace syslm::kernels {
namespace {

std::vector<float> dense_reference(const AttentionShape& s, const std::vector<float>& q,
                                   const std::vector<float>& k, const std::vector<float>& v,
                                   int64_t n_tokens, int64_t pos0) {
    const int64_t total = pos0 + n_tokens;
    std::vector<float> out(q.size());
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int h = 0; h < s.n_head; ++h) {
            const int hk = h / (s.n_head / s.n_head_kv);
            std::vector<double> score(total);
            for (int64_t p = 0; p < total; ++p) {
                const int64_t qp = pos0 + t;
                const bool visible = p <= qp && (s.window == 0 || qp - p < s.window);
                double dot = 0;
                for (int d = 0; d < s.head_dim; ++d)
                    dot += double(q[(t * s.n_head + h) * s.head_dim + d]) *
                           k[p * s.kv_stride + hk * s.head_dim + d];
                score[p] = visible ? dot * s.scale : -INFINITY;
            }
            double mx = -INFINITY, sum = 0;
            for (double x : score) mx = std::max(mx, x);
            for (double& x : score) sum += (x = std::exp(x - mx));
            for (int d = 0; d < s.head_dim; ++d) {
                double acc = 0;
                for (int64_t p = 0; p < total; ++p)
                    acc += score[p] / sum * v[p * s.kv_stride + hk * s.head_dim + d];
                out[(t * s.n_head + h) * s.head_dim + d] = static_cast<float>(acc);
            }
        }
    return out;
}

struct Case {
    int n_head, n_head_kv, head_dim, window;
    int64_t n_tokens, pos0;
};

TEST(Attention, MatchesDenseMaskedReference) {
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.0f, 1.0f);
    ThreadPool pool(2);
    for (const Case c :
         {Case{6, 2, 12, 0, 19, 0}, Case{6, 2, 12, 0, 1, 37}, Case{4, 1, 10, 7, 23, 0},
          Case{4, 4, 8, 5, 3, 29}, Case{3, 3, 14, 64, 17, 5},
                         // several query tiles, a window cutting through position blocks
                         Case{4, 2, 8, 70, 37, 100},
                         // decode over long caches: positions split across threads and merged
                         Case{4, 1, 16, 0, 1, 700}, Case{8, 2, 12, 300, 1, 900},
                         Case{2, 1, 6, 0, 2, 1200}}) {
        AttentionShape s{c.n_head,   c.n_head_kv,
                         c.head_dim, int64_t(c.n_head_kv) * c.head_dim,
                         c.window,   1.0f / std::sqrt(float(c.head_dim))};
        const int64_t total = c.pos0 + c.n_tokens;
        std::vector<float> q(c.n_tokens * c.n_head * c.head_dim), k(total * s.kv_stride),
            v(total * s.kv_stride), out(q.size());
        for (auto* vec : {&q, &k, &v})
            for (auto& x : *vec) x = d(rng);
        attention(s, q.data(), k.data(), v.data(), c.n_tokens, c.pos0, out.data(), pool);
        const auto ref = dense_reference(s, q, k, v, c.n_tokens, c.pos0);
        for (size_t i = 0; i < out.size(); ++i)
            ASSERT_NEAR(out[i], ref[i], 2e-5f * (1 + std::fabs(ref[i])))
                << "case heads " << c.n_head << " window " << c.window << " at " << i;
    }
}

}  // namespace
}  // namespace syslm::kernels
