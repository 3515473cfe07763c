// Scalar backward kernels (backward.hpp). They are a small share of a training step next to
// the matmuls, so they are written for clarity and split across the pool by rows; a SIMD
// variant can come when the profiler says so.
#include "kernels/cpu/backward.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "kernels/cpu/elementwise_kernels.hpp"

namespace syslm::kernels {
namespace {

// Per-thread partial sums of a parameter gradient (dim doubles per thread), added into dw at the
// end in thread order, so the result does not depend on timing.
class PartialSums {
public:
    PartialSums(int threads, int64_t dim) : dim_(dim), sums_(static_cast<size_t>(threads * dim)) {}
    double* of(int thread) { return sums_.data() + static_cast<size_t>(thread) * dim_; }
    void add_to(float* dw) const {
        if (!dw) return;
        for (int64_t i = 0; i < dim_; ++i) {
            double s = 0;
            for (size_t t = 0; t < sums_.size() / static_cast<size_t>(dim_); ++t)
                s += sums_[t * static_cast<size_t>(dim_) + static_cast<size_t>(i)];
            dw[i] += static_cast<float>(s);
        }
    }

private:
    int64_t dim_;
    std::vector<double> sums_;
};

float silu(float a) {
    return a / (1.0f + std::exp(-a));
}

}  // namespace

void rms_norm_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                       int64_t rows, int64_t dim, float eps, ThreadPool& pool) {
    PartialSums dws(pool.size(), dim);
    pool.parallel_for(rows, [&](int64_t b, int64_t e, int thread) {
        double* dwt = dws.of(thread);
        for (int64_t r = b; r < e; ++r) {
            const float* xr = x + r * dim;
            const float* dyr = dy + r * dim;
            double ss = 0, gx = 0;
            for (int64_t i = 0; i < dim; ++i) {
                ss += static_cast<double>(xr[i]) * xr[i];
                gx += static_cast<double>(dyr[i]) * w[i] * xr[i];
            }
            // y = x * rs * w with rs = (mean(x^2) + eps)^-1/2:
            // dx = rs * (dy * w) - rs^3 / dim * x * sum(dy * w * x).
            const double rs = 1.0 / std::sqrt(ss / static_cast<double>(dim) + eps);
            const double c = rs * rs * rs * gx / static_cast<double>(dim);
            for (int64_t i = 0; i < dim; ++i) {  // dy read before dx is written: may alias
                const double dyi = dyr[i];
                dwt[i] += dyi * xr[i] * rs;
                dx[r * dim + i] = static_cast<float>(rs * dyi * w[i] - c * xr[i]);
            }
        }
    });
    dws.add_to(dw);
}

void layer_norm_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                         float* db, int64_t rows, int64_t dim, float eps, ThreadPool& pool) {
    PartialSums dws(pool.size(), dim), dbs(pool.size(), dim);
    pool.parallel_for(rows, [&](int64_t b, int64_t e, int thread) {
        double* dwt = dws.of(thread);
        double* dbt = dbs.of(thread);
        for (int64_t r = b; r < e; ++r) {
            const float* xr = x + r * dim;
            const float* dyr = dy + r * dim;
            double mean = 0;
            for (int64_t i = 0; i < dim; ++i) mean += xr[i];
            mean /= static_cast<double>(dim);
            double var = 0;
            for (int64_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
            const double rs = 1.0 / std::sqrt(var / static_cast<double>(dim) + eps);
            // g = dy * w; dx = rs * (g - mean(g) - xhat * mean(g * xhat)).
            double g_mean = 0, gx_mean = 0;
            for (int64_t i = 0; i < dim; ++i) {
                const double g = static_cast<double>(dyr[i]) * w[i];
                const double xhat = (xr[i] - mean) * rs;
                g_mean += g;
                gx_mean += g * xhat;
                dwt[i] += static_cast<double>(dyr[i]) * xhat;
                dbt[i] += dyr[i];
            }
            g_mean /= static_cast<double>(dim);
            gx_mean /= static_cast<double>(dim);
            for (int64_t i = 0; i < dim; ++i) {
                const double g = static_cast<double>(dyr[i]) * w[i];
                const double xhat = (xr[i] - mean) * rs;
                dx[r * dim + i] = static_cast<float>(rs * (g - g_mean - xhat * gx_mean));
            }
        }
    });
    dws.add_to(dw);
    if (db) dbs.add_to(db);
}

void swiglu_backward_scalar(const float* gate, const float* up, const float* dout, float* dgate,
                            float* dup, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float a = gate[i];
        const float sig = 1.0f / (1.0f + std::exp(-a));
        // d silu(a) / da = sig * (1 + a * (1 - sig))
        dgate[i] = dout[i] * up[i] * sig * (1.0f + a * (1.0f - sig));
        dup[i] = dout[i] * silu(a);
    }
}

void gelu_tanh_backward_scalar(const float* x, const float* dy, float* dx, int64_t n) {
    constexpr float k = 0.7978845608028654f;  // sqrt(2 / pi)
    constexpr float c = 0.044715f;
    for (int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        const float t = std::tanh(k * (v + c * v * v * v));
        // y = v/2 (1 + t): dy/dv = (1 + t)/2 + v/2 (1 - t^2) k (1 + 3 c v^2)
        dx[i] =
            dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * k * (1.0f + 3.0f * c * v * v));
    }
}

void gelu_erf_backward_scalar(const float* x, const float* dy, float* dx, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const double v = x[i];  // Phi(v) + v phi(v)
        const double d = 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))) +
                         v * std::exp(-0.5 * v * v) / std::sqrt(2.0 * 3.14159265358979323846);
        dx[i] = dy[i] * static_cast<float>(d);
    }
}

void swish_beta_backward_scalar(const float* gate, const float* up, const float* beta,
                                const float* dout, float* dgate, float* dup, float* dbeta,
                                int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i], bg = beta[i] * g;
        const float s = 1.0f / (1.0f + std::exp(-bg));
        const float du = dout[i] * up[i];
        dgate[i] = du * s * (1.0f + bg * (1.0f - s));
        dup[i] = dout[i] * g * s;
        dbeta[i] += du * g * g * s * (1.0f - s);
    }
}

void geglu_backward_scalar(const float* gate, const float* up, const float* dout, float* dgate,
                           float* dup, int64_t n) {
    constexpr float k = 0.7978845608028654f;  // sqrt(2 / pi)
    constexpr float c = 0.044715f;
    for (int64_t i = 0; i < n; ++i) {
        const float v = gate[i];
        const float t = std::tanh(k * (v + c * v * v * v));
        const float gelu = 0.5f * v * (1.0f + t);
        const float dgelu =
            0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * k * (1.0f + 3.0f * c * v * v);
        dgate[i] = dout[i] * up[i] * dgelu;
        dup[i] = dout[i] * gelu;
    }
}

void swiglu_backward(const float* gate, const float* up, const float* dout, float* dgate,
                     float* dup, int64_t n, ThreadPool& pool) {
    const auto fn = elementwise_kernels(active_isa()).swiglu_backward;
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
        fn(gate + b, up + b, dout + b, dgate + b, dup + b, e - b);
    });
}

void geglu_backward(const float* gate, const float* up, const float* dout, float* dgate, float* dup,
                    int64_t n, ThreadPool& pool) {
    const auto fn = elementwise_kernels(active_isa()).geglu_backward;
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
        fn(gate + b, up + b, dout + b, dgate + b, dup + b, e - b);
    });
}

void softcap_backward(const float* y, float* dy, int64_t n, float cap, ThreadPool& pool) {
    const float inv = 1.0f / cap;
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) {
            const float t = y[i] * inv;
            dy[i] *= 1.0f - t * t;
        }
    });
}

void gelu_tanh_backward(const float* x, const float* dy, float* dx, int64_t n, ThreadPool& pool) {
    const auto fn = elementwise_kernels(active_isa()).gelu_tanh_backward;
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) { fn(x + b, dy + b, dx + b, e - b); });
}

void gelu_erf_backward(const float* x, const float* dy, float* dx, int64_t n, ThreadPool& pool) {
    const auto fn = elementwise_kernels(active_isa()).gelu_erf_backward;
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) { fn(x + b, dy + b, dx + b, e - b); });
}

void embedding_backward(const int32_t* tokens, int64_t n_tokens, const float* dx, float* dtable,
                        int64_t n_vocab, int64_t dim, ThreadPool& pool) {
    for (int64_t t = 0; t < n_tokens; ++t)
        SYSLM_CHECK(tokens[t] >= 0 && tokens[t] < n_vocab, "embedding backward: token ", tokens[t],
                    " at position ", t, " is outside the vocabulary of ", n_vocab);
    pool.parallel_for(n_vocab, [&](int64_t b, int64_t e, int) {
        for (int64_t t = 0; t < n_tokens; ++t) {
            const int64_t v = tokens[t];
            if (v < b || v >= e) continue;
            float* row = dtable + v * dim;
            const float* g = dx + t * dim;
            for (int64_t i = 0; i < dim; ++i) row[i] += g[i];
        }
    });
}

double xent_row_scalar(float* z, int64_t n, int32_t target, float scale) {
    const float m = *std::max_element(z, z + n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(z[i]) - m);
    const double loss = std::log(sum) + m - z[target];
    const double k = scale / sum;
    for (int64_t i = 0; i < n; ++i)
        z[i] = static_cast<float>(std::exp(static_cast<double>(z[i]) - m) * k);
    z[target] -= scale;
    return loss;
}

double cross_entropy_fused(float* logits, const int32_t* targets, int64_t rows, int64_t n_vocab,
                           ThreadPool& pool, float grad_scale) {
    return cross_entropy_fused(logits, targets, rows, n_vocab, pool, active_isa(), grad_scale);
}

double cross_entropy_fused(float* logits, const int32_t* targets, int64_t rows, int64_t n_vocab,
                           ThreadPool& pool, Isa isa, float grad_scale) {
    const auto xent = elementwise_kernels(isa).xent_row;
    int64_t counted = 0;
    for (int64_t r = 0; r < rows; ++r) {
        SYSLM_CHECK(targets[r] < n_vocab, "cross-entropy: target ", targets[r], " of row ", r,
                    " is outside the vocabulary of ", n_vocab);
        counted += targets[r] >= 0;
    }
    std::vector<double> row_loss(static_cast<size_t>(rows), 0.0);
    const float inv = counted > 0 ? grad_scale / static_cast<float>(counted) : 0.0f;
    pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; ++r) {
            float* z = logits + r * n_vocab;
            if (targets[r] < 0) {
                std::fill_n(z, n_vocab, 0.0f);
                continue;
            }
            row_loss[static_cast<size_t>(r)] = xent(z, n_vocab, targets[r], inv);
        }
    });
    double loss = 0;
    for (double l : row_loss) loss += l;
    return counted > 0 ? loss / static_cast<double>(counted) : 0.0;
}

namespace {

// One row of the distillation loss: pt holds the teacher's distribution at tau over `support`
// (all tokens when support is null); overwrites z with the scaled gradient, returns the loss.
double distill_row(float* z, const std::vector<double>& pt, const int32_t* support, int n_support,
                   int32_t target, int64_t n_vocab, double a, double t, double inv,
                   std::vector<double>& q, std::vector<double>& qt) {
    auto softmax = [&](auto value, std::vector<double>& out) {  // returns log-sum-exp
        double mx = -INFINITY;
        for (int64_t i = 0; i < n_vocab; ++i) mx = std::max(mx, value(i));
        double sum = 0;
        for (int64_t i = 0; i < n_vocab; ++i) sum += (out[i] = std::exp(value(i) - mx));
        for (int64_t i = 0; i < n_vocab; ++i) out[i] /= sum;
        return mx + std::log(sum);
    };
    const double lse = softmax([&](int64_t i) { return double(z[i]); }, q);
    const double lse_s = softmax([&](int64_t i) { return z[i] / t; }, qt);
    double kl = 0;
    for (int j = 0; j < n_support; ++j) {
        const int64_t i = support ? support[j] : j;
        const double p = pt[static_cast<size_t>(j)];
        if (p > 0) kl += p * (std::log(p) - (z[i] / t - lse_s));
    }
    const double ce = lse - z[target];
    for (int64_t i = 0; i < n_vocab; ++i) {
        const double hard = q[i] - (i == target ? 1.0 : 0.0);
        z[i] = static_cast<float>((a * t * qt[i] + (1 - a) * hard) * inv);
    }
    for (int j = 0; j < n_support; ++j) {
        const int64_t i = support ? support[j] : j;
        z[i] -= static_cast<float>(a * t * pt[static_cast<size_t>(j)] * inv);
    }
    return a * t * t * kl + (1 - a) * ce;
}

int64_t count_targets(const int32_t* targets, int64_t rows, int64_t n_vocab) {
    int64_t counted = 0;
    for (int64_t r = 0; r < rows; ++r) {
        SYSLM_CHECK(targets[r] < n_vocab, "distillation: target ", targets[r], " of row ", r,
                    " is outside the vocabulary of ", n_vocab);
        counted += targets[r] >= 0;
    }
    return counted;
}

// Shared driver: fill_pt(row, pt) sets the teacher distribution of a row over its support.
template <typename Teacher>
double distill_rows(float* logits, const int32_t* targets, int64_t rows, int64_t n_vocab,
                    float alpha, float tau, ThreadPool& pool, float grad_scale, int n_support,
                    const Teacher& fill_pt) {
    SYSLM_CHECK(alpha >= 0 && alpha <= 1 && tau > 0, "distillation: alpha ", alpha,
                " must be in [0, 1] and the temperature ", tau, " positive");
    const int64_t counted = count_targets(targets, rows, n_vocab);
    std::vector<double> row_loss(static_cast<size_t>(rows), 0.0);
    const double inv =
        counted > 0 ? static_cast<double>(grad_scale) / static_cast<double>(counted) : 0.0;
    pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
        std::vector<double> q(static_cast<size_t>(n_vocab)), qt(static_cast<size_t>(n_vocab)),
            pt(static_cast<size_t>(n_support));
        for (int64_t r = b; r < e; ++r) {
            float* z = logits + r * n_vocab;
            if (targets[r] < 0) {
                std::fill_n(z, n_vocab, 0.0f);
                continue;
            }
            const int32_t* support = fill_pt(r, pt);
            row_loss[static_cast<size_t>(r)] =
                distill_row(z, pt, support, n_support, targets[r], n_vocab, alpha, tau, inv, q, qt);
        }
    });
    double loss = 0;
    for (double l : row_loss) loss += l;
    return counted > 0 ? loss / static_cast<double>(counted) : 0.0;
}

// Softmax at tau of n teacher logits into pt.
void teacher_softmax(const float* l, int n, double tau, std::vector<double>& pt) {
    double mx = -INFINITY;
    for (int i = 0; i < n; ++i) mx = std::max(mx, l[i] / tau);
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += (pt[static_cast<size_t>(i)] = std::exp(l[i] / tau - mx));
    for (int i = 0; i < n; ++i) pt[static_cast<size_t>(i)] /= sum;
}

}  // namespace

double distill_loss_fused(float* logits, const float* teacher, const int32_t* targets, int64_t rows,
                          int64_t n_vocab, float alpha, float tau, ThreadPool& pool,
                          float grad_scale) {
    return distill_rows(
        logits, targets, rows, n_vocab, alpha, tau, pool, grad_scale, static_cast<int>(n_vocab),
        [&](int64_t r, std::vector<double>& pt) -> const int32_t* {
            teacher_softmax(teacher + r * n_vocab, static_cast<int>(n_vocab), tau, pt);
            return nullptr;
        });
}

double distill_loss_fused_topk(float* logits, const int32_t* teacher_ids,
                               const float* teacher_logits, int k, const int32_t* targets,
                               int64_t rows, int64_t n_vocab, float alpha, float tau,
                               ThreadPool& pool, float grad_scale) {
    SYSLM_CHECK(k > 0 && k <= n_vocab, "distillation: top-k of ", k, " for a vocabulary of ",
                n_vocab);
    for (int64_t i = 0; i < rows * k; ++i)
        SYSLM_CHECK(teacher_ids[i] >= 0 && teacher_ids[i] < n_vocab, "distillation: teacher token ",
                    teacher_ids[i], " is outside the vocabulary of ", n_vocab);
    return distill_rows(logits, targets, rows, n_vocab, alpha, tau, pool, grad_scale, k,
                        [&](int64_t r, std::vector<double>& pt) -> const int32_t* {
                            teacher_softmax(teacher_logits + r * k, k, tau, pt);
                            return teacher_ids + r * k;
                        });
}

}  // namespace syslm::kernels
