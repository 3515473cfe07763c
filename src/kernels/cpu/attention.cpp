#include "kernels/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace syslm::kernels {

void attention(const AttentionShape& s, const float* q, const float* k_cache, const float* v_cache,
               int64_t n_tokens, int64_t pos0, float* out, ThreadPool& pool) {
    const int group = s.n_head / s.n_head_kv;
    const int64_t q_stride = static_cast<int64_t>(s.n_head) * s.head_dim;
    pool.parallel_for(n_tokens * s.n_head, [&](int64_t b, int64_t e, int) {
        thread_local std::vector<float> scores;
        for (int64_t job = b; job < e; ++job) {
            const int64_t t = job / s.n_head;
            const int h = static_cast<int>(job % s.n_head);
            const int64_t pos = pos0 + t;
            const int64_t first = s.window > 0 ? std::max<int64_t>(0, pos - s.window + 1) : 0;
            const int64_t n = pos - first + 1;
            const float* qv = q + t * q_stride + static_cast<int64_t>(h) * s.head_dim;
            const int64_t kv_off = static_cast<int64_t>(h / group) * s.head_dim;
            scores.resize(n);
            float max_score = -INFINITY;
            for (int64_t j = 0; j < n; ++j) {
                const float* kv = k_cache + (first + j) * s.kv_stride + kv_off;
                float dot = 0;
                for (int d = 0; d < s.head_dim; ++d) dot += qv[d] * kv[d];
                scores[j] = dot * s.scale;
                max_score = std::max(max_score, scores[j]);
            }
            double sum = 0;
            for (int64_t j = 0; j < n; ++j) {
                scores[j] = std::exp(scores[j] - max_score);
                sum += scores[j];
            }
            const float inv = static_cast<float>(1.0 / sum);
            float* o = out + t * q_stride + static_cast<int64_t>(h) * s.head_dim;
            std::fill(o, o + s.head_dim, 0.0f);
            for (int64_t j = 0; j < n; ++j) {
                const float* vv = v_cache + (first + j) * s.kv_stride + kv_off;
                const float w = scores[j] * inv;
                for (int d = 0; d < s.head_dim; ++d) o[d] += w * vv[d];
            }
        }
    });
}

}  // namespace syslm::kernels
