#include "kernels/cpu/linear_backward.hpp"

#include <cblas.h>

namespace syslm::kernels {
namespace {

// OpenBLAS runs its own threads; as many as the pool has, while the pool's workers wait.
void use_threads(const ThreadPool& pool) {
    openblas_set_num_threads(pool.size());
}

int blas_int(int64_t v) {
    return static_cast<int>(v);  // model dimensions: far below 2^31
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
    if (!db) return;
    pool.parallel_for(N, [&](int64_t b, int64_t e, int) {
        for (int64_t n = b; n < e; ++n) {
            double s = 0;
            for (int64_t t = 0; t < T; ++t) s += dy[t * N + n];
            db[n] += static_cast<float>(s);
        }
    });
}

}  // namespace syslm::kernels
