#include "kernels/cpu/norm.hpp"

#include <cmath>

#include "kernels/cpu/elementwise_kernels.hpp"

namespace syslm::kernels {

// Sums in double: rows are short (thousands) and this keeps the reference exact enough that
// differences to other engines come from the matmuls, not from the norm.
void rms_norm_scalar(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
                     float eps) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * dim;
        float* yr = out + r * dim;
        double ss = 0;
        for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
        const float scale =
            static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
        for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * scale * weight[i];
    }
}

void layer_norm_scalar(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
                       const float* bias, float eps) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * dim;
        float* yr = out + r * dim;
        double sum = 0;
        for (int64_t i = 0; i < dim; ++i) sum += xr[i];
        const double mean = sum / static_cast<double>(dim);
        double var = 0;
        for (int64_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
        const double inv = 1.0 / std::sqrt(var / static_cast<double>(dim) + eps);
        for (int64_t i = 0; i < dim; ++i) {
            const float v = static_cast<float>((xr[i] - mean) * inv) * weight[i];
            yr[i] = bias ? v + bias[i] : v;
        }
    }
}

void rms_norm(const float* x, float* out, int64_t rows, int64_t dim, const float* weight, float eps,
              Isa isa) {
    elementwise_kernels(isa).rms_norm(x, out, rows, dim, weight, eps);
}

void rms_norm(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
              float eps) {
    rms_norm(x, out, rows, dim, weight, eps, active_isa());
}

// Rows run on the calling thread when the pool would cost more than the work: one row, or a few
// short ones (the per-head q/k norms of one decoded token: 2 x 6 rows of 16 took ~9 us through
// the pool, a fifth of a small model's token).
namespace {
bool inline_rows(int64_t rows, int64_t dim, ThreadPool& pool) {
    constexpr int64_t kPoolMinElements = 16384;
    return rows == 1 || pool.size() == 1 || rows * dim < kPoolMinElements;
}
}  // namespace

void rms_norm(const float* x, float* out, int64_t rows, int64_t dim, const float* weight, float eps,
              ThreadPool& pool) {
    const auto fn = elementwise_kernels(active_isa()).rms_norm;
    if (inline_rows(rows, dim, pool)) return fn(x, out, rows, dim, weight, eps);
    pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
        fn(x + b * dim, out + b * dim, e - b, dim, weight, eps);
    });
}

void layer_norm(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
                const float* bias, float eps, Isa isa) {
    elementwise_kernels(isa).layer_norm(x, out, rows, dim, weight, bias, eps);
}

void layer_norm(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
                const float* bias, float eps) {
    layer_norm(x, out, rows, dim, weight, bias, eps, active_isa());
}

void layer_norm(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
                const float* bias, float eps, ThreadPool& pool) {
    const auto fn = elementwise_kernels(active_isa()).layer_norm;
    if (inline_rows(rows, dim, pool)) return fn(x, out, rows, dim, weight, bias, eps);
    pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
        fn(x + b * dim, out + b * dim, e - b, dim, weight, bias, eps);
    });
}

}  // namespace syslm::kernels
