// CpuBackend's training operations: kernels/cpu's backward kernels, and the loops of
// train/train_model.cpp and train/moe.cpp as they were written there (same order of sums, so
// the same bits).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu_backend.hpp"
#include "core/error.hpp"
#include "kernels/cpu/backward.hpp"
#include "kernels/cpu/causal_conv.hpp"
#include "kernels/cpu/moe_routing.hpp"
#include "kernels/cpu/optimizer_update.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::backend {

void CpuBackend::linear(const float* x, const float* w, const float* bias, int64_t rows,
                        int64_t n_in, int64_t n_out, float* y, const kernels::Rounding* rounding) {
    if (rounding)
        kernels::linear_forward_rounded(*rounding, x, w, bias, rows, n_in, n_out, y, pool_);
    else
        kernels::matmul(kernels::WeightView{DType::F32, n_in, n_out, w}, x, rows, y, pool_, bias);
}

void CpuBackend::linear_backward_weight(const float* dy, const float* x, int64_t rows, int64_t n_in,
                                        int64_t n_out, float* dw, float* db,
                                        const kernels::Rounding* rounding) {
    if (rounding)
        kernels::linear_backward_weight_rounded(*rounding, dy, x, rows, n_in, n_out, dw, db, pool_);
    else
        kernels::linear_backward_weight(dy, x, rows, n_in, n_out, dw, db, pool_);
}

void CpuBackend::linear_backward_input(const float* dy, const float* w, int64_t rows, int64_t n_in,
                                       int64_t n_out, float* dx, bool accumulate,
                                       const kernels::Rounding* rounding) {
    if (rounding)
        kernels::linear_backward_input_rounded(*rounding, dy, w, rows, n_in, n_out, dx, accumulate,
                                               pool_);
    else
        kernels::linear_backward_input(dy, w, rows, n_in, n_out, dx, accumulate, pool_);
}

void CpuBackend::norm_backward(kernels::NormKind k, const float* x, const float* w, const float* dy,
                               float* dx, float* dw, float* db, int64_t rows, int64_t dim,
                               float eps) {
    switch (k) {
        case kernels::NormKind::Rms:
            return kernels::rms_norm_backward(x, w, dy, dx, dw, rows, dim, eps, pool_);
        case kernels::NormKind::Layer:
            return kernels::layer_norm_backward(x, w, dy, dx, dw, db, rows, dim, eps, pool_);
        case kernels::NormKind::LayerNoBias:
            return kernels::layer_norm_backward(x, w, dy, dx, dw, nullptr, rows, dim, eps, pool_);
    }
}

void CpuBackend::softcap_backward(const float* y, float* dy, int64_t n, float cap) {
    kernels::softcap_backward(y, dy, n, cap, pool_);
}

void CpuBackend::ffn_activation_backward(kernels::FfnActivation k, const float* a, const float* b,
                                         const float* dout, float* da, float* db, int64_t n) {
    kernels::ffn_activation_backward(k, a, b, dout, da, db, n, pool_);
}

void CpuBackend::causal_conv_backward(const float* a, const float* w, const float* dout, int k,
                                      int64_t B, int64_t T, int64_t dim, float* da, float* dw) {
    kernels::causal_conv_backward(a, w, dout, k, B, T, dim, da, dw, pool_);
}

void CpuBackend::swish_beta_glu_backward(const float* a, const float* b, const float* beta,
                                         const float* dout, float* da, float* db, float* dbeta,
                                         int64_t rows, int64_t n_ff) {
    kernels::swish_beta_glu_backward(a, b, beta, dout, da, db, dbeta, rows, n_ff, pool_);
}

void CpuBackend::attention_lse(const kernels::AttentionShape& s, const float* q, const float* k,
                               const float* v, int64_t rows, float* out, float* lse) {
    kernels::attention(s, q, k, v, rows, 0, out, pool_, lse);
}

void CpuBackend::attention_backward(const kernels::AttentionShape& s, const float* q,
                                    const float* k, const float* v, const float* o,
                                    const float* lse, const float* dout, int64_t rows, float* dq,
                                    float* dk, float* dv) {
    kernels::attention_backward(s, q, k, v, o, lse, dout, rows, dq, dk, dv, pool_);
}

void CpuBackend::rope_rows_backward(const kernels::Rope& rope, const float* angles, int64_t seq_len,
                                    float* dx, int64_t rows, int64_t heads, int64_t head_dim) {
    const int na = rope.angle_floats();
    const int64_t cols = heads * head_dim;
    pool_.parallel_for(rows, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; ++r)
            rope.apply_angles_backward(angles + (r % seq_len) * na, dx + r * cols,
                                       static_cast<int>(heads), static_cast<int>(head_dim));
    });
}

double CpuBackend::cross_entropy(float* logits, const int32_t* targets, int64_t rows,
                                 int64_t n_vocab, float grad_scale) {
    return kernels::cross_entropy_fused(logits, targets, rows, n_vocab, pool_, grad_scale);
}

double CpuBackend::distill_loss(float* logits, const float* teacher, const int32_t* targets,
                                int64_t rows, int64_t n_vocab, float alpha, float tau,
                                float grad_scale) {
    return kernels::distill_loss_fused(logits, teacher, targets, rows, n_vocab, alpha, tau, pool_,
                                       grad_scale);
}

double CpuBackend::distill_loss_topk(float* logits, const int32_t* teacher_ids,
                                     const float* teacher_logits, int k, const int32_t* targets,
                                     int64_t rows, int64_t n_vocab, float alpha, float tau,
                                     float grad_scale) {
    return kernels::distill_loss_fused_topk(logits, teacher_ids, teacher_logits, k, targets, rows,
                                            n_vocab, alpha, tau, pool_, grad_scale);
}

void CpuBackend::row_max(const float* x, int64_t rows, int64_t cols, float* out) {
    pool_.parallel_for(rows, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; ++r)
            out[r] = *std::max_element(x + r * cols, x + (r + 1) * cols);
    });
}

void CpuBackend::xent_sums(const float* logits, const int32_t* targets, int64_t rows, int64_t cols,
                           int64_t col0, const float* max, double* sums) {
    pool_.parallel_for(rows, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; ++r) {
            const float* z = logits + r * cols;
            double sum = 0;
            for (int64_t i = 0; i < cols; ++i) sum += std::exp(static_cast<double>(z[i]) - max[r]);
            const int64_t t = targets[r] - col0;
            sums[2 * r] = sum;
            sums[2 * r + 1] = t >= 0 && t < cols ? z[t] : 0.0;
        }
    });
}

double CpuBackend::xent_gradient(float* logits, const int32_t* targets, int64_t rows, int64_t cols,
                                 int64_t col0, const float* max, const double* sums, float inv) {
    std::vector<double>& row_loss = row_loss_;
    row_loss.assign(static_cast<size_t>(rows), 0.0);
    pool_.parallel_for(rows, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; ++r) {
            float* z = logits + r * cols;
            if (targets[r] < 0) {
                std::fill_n(z, cols, 0.0f);
                continue;
            }
            const double sum = sums[2 * r], mx = max[r];
            row_loss[r] = std::log(sum) + mx - sums[2 * r + 1];
            for (int64_t i = 0; i < cols; ++i)
                z[i] = static_cast<float>(std::exp(static_cast<double>(z[i]) - mx) / sum) * inv;
            const int64_t t = targets[r] - col0;
            if (t >= 0 && t < cols) z[t] -= inv;
        }
    });
    double loss = 0;
    for (double l : row_loss) loss += l;
    return loss;
}

void CpuBackend::embedding_backward(const int32_t* tokens, int64_t rows, const float* dx,
                                    float* dtable, int64_t n_vocab, int64_t dim) {
    kernels::embedding_backward(tokens, rows, dx, dtable, n_vocab, dim, pool_);
}

void CpuBackend::embedding_backward_range(const int32_t* tokens, int64_t rows, const float* dx,
                                          float* dtable, int64_t row0, int64_t n_rows,
                                          int64_t dim) {
    pool_.parallel_for(dim, [&](int64_t b, int64_t e, int) {  // columns: no two threads share one
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t t = tokens[r] - row0;
            if (t < 0 || t >= n_rows) continue;
            float* g = dtable + t * dim;
            const float* d = dx + r * dim;
            for (int64_t i = b; i < e; ++i) g[i] += d[i];
        }
    });
}

void CpuBackend::embed_rows_range(const float* table, int64_t dim, const int32_t* ids, int64_t rows,
                                  int64_t row0, int64_t n_rows, float* dst) {
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = ids[r] - row0;
        float* x = dst + r * dim;
        if (t >= 0 && t < n_rows)
            std::copy_n(table + t * dim, dim, x);
        else
            std::fill_n(x, dim, 0.0f);
    }
}

double CpuBackend::hidden_state_loss(float* y, const float* teacher, int64_t rows, int64_t dim,
                                     double c, float loss_scale) {
    double loss = 0;
    for (int64_t r = 0; r < rows; ++r) {
        const float* t = teacher + r * dim;
        float* d = y + r * dim;
        double err = 0, norm = 0;
        for (int64_t i = 0; i < dim; ++i) {
            d[i] -= t[i];
            err += static_cast<double>(d[i]) * d[i];
            norm += static_cast<double>(t[i]) * t[i];
        }
        const double inv = 1.0 / std::max(norm, 1e-12);
        loss += err * inv;
        const float g = static_cast<float>(2.0 * c * inv * loss_scale);
        for (int64_t i = 0; i < dim; ++i) d[i] *= g;
    }
    return loss;
}

void CpuBackend::moe_route_rows(float* probs, int64_t rows, int64_t n_expert,
                                const kernels::MoeRouting& route, int32_t* ids, float* weights,
                                float* lse) {
    const int64_t k = route.k_max;
    pool_.parallel_for(rows, [&](int64_t r0, int64_t r1, int) {
        thread_local std::vector<int64_t> order;
        order.resize(static_cast<size_t>(n_expert));
        for (int64_t r = r0; r < r1; ++r)
            kernels::moe_route_row(probs + r * n_expert, n_expert, route, order.data(), ids + r * k,
                                   weights + r * k, lse ? lse + r : nullptr);
    });
}

void CpuBackend::moe_combine(const MoeSlots& m, const float* eo, int64_t dim, float* out) {
    pool_.parallel_for(m.rows, [&](int64_t r0, int64_t r1, int) {
        for (int64_t r = r0; r < r1; ++r) {
            float* o = out + r * dim;
            std::fill_n(o, dim, 0.0f);
            for (int64_t k = 0; k < m.k; ++k) {
                const int64_t j = m.route_slot[r * m.k + k];
                if (j < 0) continue;  // top-p chose fewer experts for this row
                const float w = m.slot_w[j];
                const float* e = eo + j * dim;
                for (int64_t i = 0; i < dim; ++i) o[i] += w * e[i];
            }
        }
    });
}

void CpuBackend::moe_slot_backward(const MoeSlots& m, const float* dy, const float* eo,
                                   const float* x, int64_t dim, float* grad, float* dw,
                                   float* x_slots) {
    pool_.parallel_for(m.expert_begin[m.n_expert], [&](int64_t j0, int64_t j1, int) {
        for (int64_t j = j0; j < j1; ++j) {
            const float* d = dy + m.slot_row[j] * dim;
            const float* e = eo + j * dim;
            float* g = grad + j * dim;
            const float w = m.slot_w[j];
            double s = 0;
            for (int64_t i = 0; i < dim; ++i) {
                g[i] = w * d[i];
                s += static_cast<double>(d[i]) * e[i];
            }
            dw[j] = static_cast<float>(s);
            std::copy_n(x + m.slot_row[j] * dim, dim, x_slots + j * dim);  // expert inputs
        }
    });
}

void CpuBackend::moe_router_backward(const MoeSlots& m, const float* probs, const float* d_in,
                                     const float* dw, const float* aux_grad, bool renormalise,
                                     int64_t dim, float* dx, float* dz) {
    const int64_t X = m.n_expert, K = m.k;
    auto expert_of = [&](int64_t slot) {
        return std::upper_bound(m.expert_begin, m.expert_begin + X + 1, slot) - m.expert_begin - 1;
    };
    pool_.parallel_for(m.rows, [&](int64_t r0, int64_t r1, int) {
        thread_local std::vector<double> dp;
        dp.resize(static_cast<size_t>(X));
        for (int64_t r = r0; r < r1; ++r) {
            float* db = dx + r * dim;
            std::fill_n(db, dim, 0.0f);
            const float* p = probs + r * X;
            for (int64_t e = 0; e < X; ++e) dp[e] = aux_grad[e];
            double top = 0, dot = 0;
            for (int64_t k = 0; k < K; ++k) {
                const int64_t j = m.route_slot[r * K + k];
                if (j < 0) continue;
                const float* din = d_in + j * dim;
                for (int64_t i = 0; i < dim; ++i) db[i] += din[i];
                top += p[expert_of(j)];
                dot += static_cast<double>(dw[j]) * m.slot_w[j];
            }
            for (int64_t k = 0; k < K; ++k) {
                const int64_t j = m.route_slot[r * K + k];
                if (j >= 0) dp[expert_of(j)] += renormalise ? (dw[j] - dot) / top : dw[j];
            }
            double pdp = 0;
            for (int64_t e = 0; e < X; ++e) pdp += p[e] * dp[e];
            for (int64_t e = 0; e < X; ++e)
                dz[r * X + e] = static_cast<float>(p[e] * (dp[e] - pdp));
        }
    });
}

}  // namespace syslm::backend

namespace syslm::backend {

void CpuBackend::optimizer_update(const UpdateStep& s, float* w, const float* g, float* m, float* v,
                                  int64_t n) {
    // Split across the threads (the embedding alone can be a third of a model).
    pool_.parallel_for(n, [&](int64_t b, int64_t e, int) {
        float* x = w + b;
        const float* gx = g + b;
        float* mx = m + b;
        const int64_t k = e - b;
        const float decay = 1.0f - s.lr * s.weight_decay;
        switch (s.rule) {
            case UpdateRule::AdamW:  // m: torch's lerp_; the vector kernel
                kernels::adamw_update(
                    x, gx, mx, v + b, k,
                    {decay, s.b1, s.b2, s.eps, s.step_size, s.bc2_sqrt, s.grad_scale});
                break;
            case UpdateRule::Lion:
                for (int64_t i = 0; i < k; ++i) {
                    const float gi = gx[i] * s.grad_scale;
                    x[i] *= decay;
                    const float c = mx[i] * s.b1 + gi * (1.0f - s.b1);
                    x[i] -= s.lr * static_cast<float>((c > 0.0f) - (c < 0.0f));
                    mx[i] = mx[i] * s.b2 + gi * (1.0f - s.b2);
                }
                break;
            case UpdateRule::Sgd:
                // torch.optim.SGD: L2 decay into the gradient, buffer = gradient at step 1.
                for (int64_t i = 0; i < k; ++i) {
                    float d = gx[i] * s.grad_scale + s.weight_decay * x[i];
                    if (s.momentum != 0.0f) {
                        mx[i] = s.first_step ? d : mx[i] * s.momentum + d;
                        d = s.nesterov ? d + s.momentum * mx[i] : mx[i];
                    }
                    x[i] += -s.lr * d;
                }
                break;
        }
    });
}

void CpuBackend::scale(float* x, std::span<const Range> ranges, float s) {
    for (const auto& [b0, e0] : ranges)
        pool_.parallel_for(static_cast<int64_t>(e0 - b0), [&](int64_t b, int64_t e, int) {
            for (size_t i = b0 + static_cast<size_t>(b); i < b0 + static_cast<size_t>(e); ++i)
                x[i] *= s;
        });
}

std::array<double, 2> CpuBackend::sum_squares(const float* g,
                                              std::span<const SquaresPiece> pieces) {
    // Per worker, then the workers in order: the same sum on every run with these threads.
    std::vector<std::array<double, 2>> partial(static_cast<size_t>(pool_.size()), {0.0, 0.0});
    pool_.parallel_for(static_cast<int64_t>(pieces.size()), [&](int64_t b, int64_t e, int w) {
        for (int64_t k = b; k < e; ++k) {
            double s = 0;
            for (size_t i = pieces[k].b; i < pieces[k].e; ++i)
                s += static_cast<double>(g[i]) * g[i];
            partial[static_cast<size_t>(w)][pieces[k].cls] += s;
        }
    });
    std::array<double, 2> sums = {0.0, 0.0};
    for (const auto& p : partial) {
        sums[1] += p[1];
        sums[0] += p[0];
    }
    return sums;
}

void CpuBackend::round_trip(DType type, float* v, int64_t rows, int64_t n) {
    const kernels::TypeTraits& tr = kernels::type_traits(type);
    const size_t rb = row_bytes(type, n);
    pool_.parallel_for(rows, [&](int64_t b, int64_t e, int) {
        std::vector<uint8_t> q(rb);
        for (int64_t r = b; r < e; ++r) {
            tr.from_float(v + r * n, q.data(), n);
            tr.to_float(q.data(), v + r * n, n);
        }
    });
}

void CpuBackend::fill_zero(float* v, std::span<const Range> ranges) {
    pool_.parallel_for(static_cast<int64_t>(ranges.size()), [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; ++r) std::fill(v + ranges[r].first, v + ranges[r].second, 0.0f);
    });
}

}  // namespace syslm::backend
