#include "kernels/cpu/lora.hpp"

#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/isa.hpp"

namespace syslm::kernels {

void lora_update(const float* x, int64_t n_in, float* y, int64_t n_out, int64_t rows,
                 const int32_t* start, const LoraTerm* terms, ThreadPool& pool) {
    if (start[rows] == start[0]) return;
    const LinearAttentionKernels& v = attention_kernels(active_isa()).linear;  // dot, axpy
    pool.parallel_for(rows, [&](int64_t begin, int64_t end, int) {
        thread_local std::vector<float> mid;
        for (int64_t i = begin; i < end; ++i) {
            const float* xi = x + i * n_in;
            float* yi = y + i * n_out;
            for (int32_t t = start[i]; t < start[i + 1]; ++t) {
                const LoraTerm& lt = terms[t];
                mid.resize(static_cast<size_t>(lt.r));
                for (int k = 0; k < lt.r; ++k)
                    mid[static_cast<size_t>(k)] =
                        lt.scale * v.dot(lt.a + k * n_in, xi, static_cast<int>(n_in));
                for (int k = 0; k < lt.r; ++k)
                    v.axpy(yi, mid[static_cast<size_t>(k)], lt.bt + k * n_out,
                           static_cast<int>(n_out));
            }
        }
    });
}

}  // namespace syslm::kernels
