#include "kernels/cpu/linear_backward.hpp"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "core/half.hpp"
#include "kernels/cpu/gemm.hpp"

namespace syslm::kernels {
namespace {

// OpenBLAS runs its own threads; as many as the pool has, while the pool's workers wait.
void use_threads(const ThreadPool& pool) {
    openblas_set_num_threads(pool.size());
}

int blas_int(int64_t v) {
    return static_cast<int>(v);  // model dimensions: far below 2^31
}

// db += column sums of dy, in double: columns in chunks of 64 per job, rows streamed in order
// (each row's chunk is contiguous and vectorises; the old column-by-column walk strode N floats).
void bias_backward(const float* dy, int64_t T, int64_t N, float* db, ThreadPool& pool) {
    constexpr int64_t kChunk = 64;
    pool.parallel_for((N + kChunk - 1) / kChunk, [&](int64_t b, int64_t e, int) {
        for (int64_t c = b; c < e; ++c) {
            const int64_t n0 = c * kChunk, nn = std::min(kChunk, N - n0);
            double acc[kChunk] = {};
            for (int64_t t = 0; t < T; ++t) {
                const float* row = dy + t * N + n0;
                for (int64_t i = 0; i < nn; ++i) acc[i] += row[i];
            }
            for (int64_t i = 0; i < nn; ++i) db[n0 + i] += static_cast<float>(acc[i]);
        }
    });
}

bool native(Rounding r, bool emulate) {
    return r == Rounding::BF16 && !emulate && gemm_bf16_supported();
}

// The emulated path's operands: a rounded f32 copy in one of two grow-only buffers.
const float* rounded(Rounding r, const float* v, int64_t n, int slot, ThreadPool& pool) {
    thread_local std::vector<float> copies[2];
    std::vector<float>& c = copies[slot];
    if (c.size() < static_cast<size_t>(n)) c.resize(static_cast<size_t>(n));
    float* d = c.data();
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
        if (r == Rounding::BF16)
            for (int64_t i = b; i < e; ++i) d[i] = bf16_to_f32(f32_to_bf16(v[i]));
        else
            for (int64_t i = b; i < e; ++i) d[i] = f16_to_f32(f32_to_f16(v[i]));
    });
    return d;
}

}  // namespace

void linear_backward_input(const float* dy, const float* w, int64_t T, int64_t K, int64_t N,
                           float* dx, bool accumulate, ThreadPool& pool) {
    use_threads(pool);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_int(T), blas_int(K), blas_int(N),
                1.0f, dy, blas_int(N), w, blas_int(K), accumulate ? 1.0f : 0.0f, dx, blas_int(K));
}

void linear_backward_weight(const float* dy, const float* x, int64_t T, int64_t K, int64_t N,
                            float* dw, float* db, ThreadPool& pool) {
    use_threads(pool);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas_int(N), blas_int(K), blas_int(T),
                1.0f, dy, blas_int(N), x, blas_int(K), 1.0f, dw, blas_int(K));
    if (db) bias_backward(dy, T, N, db, pool);
}

void linear_forward_rounded(Rounding r, const float* x, const float* w, const float* bias,
                            int64_t T, int64_t K, int64_t N, float* y, ThreadPool& pool,
                            bool emulate) {
    if (native(r, emulate)) {
        gemm_bf16({x, K, false}, {w, K, false}, T, N, K, y, false, pool, bias);
        return;
    }
    const float* xr = rounded(r, x, T * K, 0, pool);
    const float* wr = rounded(r, w, N * K, 1, pool);
    use_threads(pool);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(T), blas_int(N), blas_int(K),
                1.0f, xr, blas_int(K), wr, blas_int(K), 0.0f, y, blas_int(N));
    if (bias)
        pool.parallel_for(T, [&](int64_t b, int64_t e, int) {
            for (int64_t t = b; t < e; ++t)
                for (int64_t n = 0; n < N; ++n) y[t * N + n] += bias[n];
        });
}

void linear_backward_input_rounded(Rounding r, const float* dy, const float* w, int64_t T,
                                   int64_t K, int64_t N, float* dx, bool accumulate,
                                   ThreadPool& pool, bool emulate) {
    if (native(r, emulate)) {
        gemm_bf16({dy, N, false}, {w, K, true}, T, K, N, dx, accumulate, pool);
        return;
    }
    linear_backward_input(rounded(r, dy, T * N, 0, pool), rounded(r, w, N * K, 1, pool), T, K, N,
                          dx, accumulate, pool);
}

void linear_backward_weight_rounded(Rounding r, const float* dy, const float* x, int64_t T,
                                    int64_t K, int64_t N, float* dw, float* db, ThreadPool& pool,
                                    bool emulate) {
    if (native(r, emulate)) {
        gemm_bf16({dy, N, true}, {x, K, true}, N, K, T, dw, true, pool);
    } else {
        linear_backward_weight(rounded(r, dy, T * N, 0, pool), rounded(r, x, T * K, 1, pool), T,
                               K, N, dw, nullptr, pool);
    }
    if (db) bias_backward(dy, T, N, db, pool);  // f32: bias gradients are sums, not products
}

}  // namespace syslm::kernels
