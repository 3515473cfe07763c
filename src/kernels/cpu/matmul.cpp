#include "kernels/cpu/matmul.hpp"

#include <vector>

#include "core/error.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::kernels {

void matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
            const float* bias) {
    const TypeTraits& tt = type_traits(w.type);
    const size_t w_row = row_bytes(w.type, w.n_in);
    const auto* w_bytes = static_cast<const uint8_t*>(w.data);

    // Activations in the partner type; F32 weights use the activations as they are.
    const void* xq = x;
    size_t x_row = static_cast<size_t>(w.n_in) * sizeof(float);
    thread_local std::vector<uint8_t> scratch;
    if (tt.vec_dot_type != DType::F32) {
        const TypeTraits& pt = type_traits(tt.vec_dot_type);
        x_row = row_bytes(tt.vec_dot_type, w.n_in);
        scratch.resize(x_row * static_cast<size_t>(n_tokens));
        uint8_t* dst = scratch.data();
        pool.parallel_for(n_tokens, [&](int64_t b, int64_t e, int) {
            for (int64_t t = b; t < e; ++t) pt.from_float_fast(x + t * w.n_in, dst + t * x_row, w.n_in);
        });
        xq = scratch.data();
    }
    const auto* xb = static_cast<const uint8_t*>(xq);
    pool.parallel_for(w.n_out, [&](int64_t b, int64_t e, int) {
        for (int64_t o = b; o < e; ++o) {
            const uint8_t* wr = w_bytes + o * w_row;
            const float add = bias ? bias[o] : 0.0f;
            for (int64_t t = 0; t < n_tokens; ++t)
                y[t * w.n_out + o] = tt.vec_dot(w.n_in, wr, xb + t * x_row) + add;
        }
    });
}

}  // namespace syslm::kernels
