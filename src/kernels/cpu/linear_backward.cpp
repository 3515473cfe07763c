#include "kernels/cpu/linear_backward.hpp"

#include <algorithm>
#include <vector>

#include "kernels/cpu/matmul.hpp"

namespace syslm::kernels {

void transpose(const float* src, int64_t rows, int64_t cols, float* dst, ThreadPool& pool) {
    constexpr int64_t kTile = 32;  // 32 x 32 floats: both sides of a tile stay in L1
    const int64_t col_tiles = (cols + kTile - 1) / kTile;
    pool.parallel_for(col_tiles, [&](int64_t b, int64_t e, int) {
        for (int64_t ct = b; ct < e; ++ct) {
            const int64_t c0 = ct * kTile, c1 = std::min(cols, c0 + kTile);
            for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
                const int64_t r1 = std::min(rows, r0 + kTile);
                for (int64_t c = c0; c < c1; ++c)
                    for (int64_t r = r0; r < r1; ++r) dst[c * rows + r] = src[r * cols + c];
            }
        }
    });
}

void linear_backward_input(const float* dy, const float* w, int64_t T, int64_t K, int64_t N,
                           float* dx, ThreadPool& pool) {
    // dx = dy W: a matmul whose "weight" is W^T, K rows of N.
    thread_local std::vector<float> wt;
    wt.resize(static_cast<size_t>(K * N));
    transpose(w, N, K, wt.data(), pool);
    matmul(WeightView{DType::F32, N, K, wt.data()}, dy, T, dx, pool);
}

void linear_backward_weight(const float* dy, const float* x, int64_t T, int64_t K, int64_t N,
                            float* dw, float* db, ThreadPool& pool) {
    // dW = dy^T x: N "tokens" (rows of dy^T, T long) times a "weight" x^T (K rows of T).
    thread_local std::vector<float> dyt, xt, prod;
    dyt.resize(static_cast<size_t>(N * T));
    xt.resize(static_cast<size_t>(K * T));
    prod.resize(static_cast<size_t>(N * K));
    transpose(dy, T, N, dyt.data(), pool);
    transpose(x, T, K, xt.data(), pool);
    matmul(WeightView{DType::F32, T, K, xt.data()}, dyt.data(), N, prod.data(), pool);
    const float* p = prod.data();
    const float* dytp = dyt.data();
    pool.parallel_for(N, [&](int64_t b, int64_t e, int) {
        for (int64_t n = b; n < e; ++n) {
            for (int64_t k = 0; k < K; ++k) dw[n * K + k] += p[n * K + k];
            if (db) {
                double s = 0;
                for (int64_t t = 0; t < T; ++t) s += dytp[n * T + t];
                db[n] += static_cast<float>(s);
            }
        }
    });
}

}  // namespace syslm::kernels
