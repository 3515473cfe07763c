// attention_backward (attention.hpp): one job per (sequence, KV head) of the active ISA's
// backward kernel (attention_backward_body.hpp); each job owns its dk / dv columns, so no two
// threads write the same gradient.
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/linear_attention.hpp"

namespace syslm::kernels {

void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                        const float* o, const float* lse, const float* dout, int64_t n_tokens,
                        float* dq, float* dk, float* dv, ThreadPool& pool) {
    attention_backward(s, q, k, v, o, lse, dout, n_tokens, dq, dk, dv, pool, active_isa());
}

void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                        const float* o, const float* lse, const float* dout, int64_t n_tokens,
                        float* dq, float* dk, float* dv, ThreadPool& pool, Isa isa) {
    if (s.linear)  // lse holds the forward's denominators
        return linear_attention_backward(s, q, k, v, o, lse, dout, n_tokens, dq, dk, dv, pool, isa);
    const AttentionKernels& kern = attention_kernels(isa);
    const int64_t scratch = attention_backward_scratch(s, n_tokens);
    pool.parallel_for(s.n_head_kv, [&](int64_t b, int64_t e, int) {
        thread_local std::vector<float> buf;
        buf.resize(static_cast<size_t>(scratch));
        for (int64_t hk = b; hk < e; ++hk)
            kern.backward_job({&s, static_cast<int>(hk), n_tokens, q, k, v, o, lse, dout, dq, dk,
                               dv, buf.data()});
    });
}

}  // namespace syslm::kernels
