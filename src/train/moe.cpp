// The mixture-of-experts FFN of TrainModel (mixtral-style): softmax router, top-k experts per row
// or top-p (as many as reach the probability p, between a min and a max; weights renormalised
// over the chosen ones when the model says so), SwiGLU experts run on the rows routed
// to them (grouped, so each expert is one GEMM per step), and the load-balancing auxiliary loss
// of Switch Transformer as HF's Mixtral computes it over all layers' rows:
//   aux = X * sum_e f_e * P_e,  f_e = (choices of e) / (L*R),  P_e = mean router probability of e.
// f is a count (no gradient), so d aux / d p[l, r, e] = X * f_e / (L*R). The router z-loss
// (ST-MoE) is the mean over layers and rows of lse(router logits)^2. Expert capacity (Switch,
// GShard) drops the choices past ceil(factor R K / X) per expert and step, in row order; f
// counts the choices before the drop (the pressure to balance stays where the load is).
#include <algorithm>
#include <array>
#include <cmath>

#include "core/profiler.hpp"
#include "kernels/cpu/backward.hpp"
#include "kernels/cpu/moe_routing.hpp"
#include "train/train_model.hpp"

namespace syslm::train {

// A layer's routing as the backend's MoE operations take it.
backend::Backend::MoeSlots TrainModel::slots(const Saved& S, int64_t R) const {
    return {R,
            hp_.n_expert_used,
            hp_.n_expert,
            S.route_slot.data(),
            S.slot_row.data(),
            S.slot_w.data(),
            S.expert_begin.data()};
}

void TrainModel::moe_forward(int il, Saved& S, const float* b, int64_t R, backend::Backend& be) {
    const Layer& l = layers_[static_cast<size_t>(il)];
    const int64_t E = hp_.n_embd, F = hp_.n_ff_exp, X = hp_.n_expert, K = hp_.n_expert_used;

    linear(l.router, {}, b, R, E, X, S.router_p.data(), be);
    // Softmax and top-k (or top-p) per row (the inference forward's routing,
    // kernels/cpu/moe_routing); the choices go to slot_w (weights) and route_slot (expert ids,
    // -1 where top-p chose fewer; turned into slots below), each row's log-sum-exp to
    // router_lse (the z-loss).
    be.moe_route_rows(S.router_p.data(), R, X, hp_.moe_routing(), S.route_slot.data(),
                      S.slot_w.data(), S.router_lse.data());
    for (int64_t r = 0; r < R; ++r) moe_z_sum_ += double(S.router_lse[r]) * S.router_lse[r];
    int64_t* count = moe_count_.data() + static_cast<size_t>(il) * X;
    std::fill_n(count, X, 0);
    for (int64_t i = 0; i < R * K; ++i)
        if (S.route_slot[i] >= 0) ++count[S.route_slot[i]];
    moe_dropped_[static_cast<size_t>(il)] = capacity_factor_ > 0 ? apply_capacity(S, R) : 0;
    // Slots grouped by expert, rows in order within an expert (deterministic).
    std::array<int64_t, kMaxTrainedExperts> kept{};
    for (int64_t i = 0; i < R * K; ++i)
        if (S.route_slot[i] >= 0) ++kept[S.route_slot[i]];
    S.expert_begin[0] = 0;
    for (int64_t e = 0; e < X; ++e) S.expert_begin[e + 1] = S.expert_begin[e] + kept[e];
    std::array<int64_t, kMaxTrainedExperts> cursor;
    std::copy(S.expert_begin.begin(), S.expert_begin.end() - 1, cursor.begin());
    float* weight = moe_slot_dw_.data();  // scratch here; the backward's dL/dw later
    std::copy_n(S.slot_w.data(), R * K, weight);
    for (int64_t i = 0; i < R * K; ++i) {
        if (S.route_slot[i] < 0) continue;
        const int64_t j = cursor[S.route_slot[i]]++;
        S.slot_row[j] = static_cast<int32_t>(i / K);
        S.slot_w[j] = weight[i];
        S.route_slot[i] = static_cast<int32_t>(j);
    }
    double* psum = moe_psum_.data() + static_cast<size_t>(il) * X;
    for (int64_t e = 0; e < X; ++e) {
        double s = 0;
        for (int64_t r = 0; r < R; ++r) s += S.router_p[r * X + e];
        psum[e] = s;
    }

    const int64_t n_slots = S.expert_begin[X];  // R * K, or fewer with top-p
    slot_rows_.assign(S.slot_row.data(), S.slot_row.data() + n_slots);
    be.gather_rows(b, slot_rows_, E, moe_in_.data());
    for (int64_t e = 0; e < X; ++e) {
        const int64_t j = S.expert_begin[e], n = S.expert_begin[e + 1] - j;
        if (n == 0) continue;
        const int64_t m = E * F;  // floats of one expert's matrix
        linear({l.gate_exps.w + e * m}, {}, moe_in_.data() + j * E, n, E, F, S.g.data() + j * F,
               be);
        linear({l.up_exps.w + e * m}, {}, moe_in_.data() + j * E, n, E, F, S.u.data() + j * F, be);
    }
    activation(S, n_slots * F, be);
    const float* s = act_out(S);
    for (int64_t e = 0; e < X; ++e) {
        const int64_t j = S.expert_begin[e], n = S.expert_begin[e + 1] - j;
        if (n == 0) continue;
        linear({l.down_exps.w + e * E * F}, {}, s + j * F, n, F, E, S.eo.data() + j * E, be);
    }
    be.moe_combine(slots(S, R), S.eo.data(), E, tmp_.data());
}

int64_t TrainModel::apply_capacity(Saved& S, int64_t R) const {
    const int64_t X = hp_.n_expert, K = hp_.n_expert_used;
    // At most every choice: a huge factor cannot overflow the count.
    const auto cap = static_cast<int64_t>(
        std::min(std::ceil(capacity_factor_ * static_cast<double>(R * K) / static_cast<double>(X)),
                 static_cast<double>(R * K)));
    std::array<int64_t, kMaxTrainedExperts> taken{};
    int64_t dropped = 0;
    for (int64_t r = 0; r < R; ++r) {
        int32_t* ids = S.route_slot.data() + r * K;
        float* w = S.slot_w.data() + r * K;
        bool any = false;
        for (int64_t k = 0; k < K; ++k) {
            if (ids[k] < 0 || taken[ids[k]]++ < cap) continue;
            ids[k] = -1;
            w[k] = 0.0f;
            any = true;
            ++dropped;
        }
        if (!any || !hp_.expert_weights_norm) continue;
        // Renormalised over what the row keeps (DeepSpeed's top-2 gate), as the router's
        // backward assumes; a row left with none passes through on its residual.
        const float* p = S.router_p.data() + r * X;
        double top = 0;
        for (int64_t k = 0; k < K; ++k)
            if (ids[k] >= 0) top += p[ids[k]];
        for (int64_t k = 0; k < K; ++k)
            if (ids[k] >= 0) w[k] = static_cast<float>(p[ids[k]] / top);
    }
    return dropped;
}

void TrainModel::record_routing() {
    double chosen = 0, dropped = 0;
    for (size_t i = 0; i < moe_count_.size(); ++i) chosen += static_cast<double>(moe_count_[i]);
    for (size_t i = 0; i < moe_dropped_.size(); ++i)
        dropped += static_cast<double>(moe_dropped_[i]);
    const double rows = static_cast<double>(planned_B_) * planned_T_ * (stage_.end - stage_.first);
    experts_per_token_ = rows > 0 ? (chosen - dropped) / rows : 0.0;
    dropped_share_ = chosen > 0 ? dropped / chosen : 0.0;
}

double TrainModel::moe_z_loss() const {
    return moe_z_sum_ / (static_cast<double>(planned_B_) * planned_T_ * hp_.n_layer);
}

double TrainModel::moe_aux_loss(float grad_scale) {
    const int64_t X = hp_.n_expert;
    const double N = static_cast<double>(hp_.n_layer) * planned_B_ * planned_T_;
    double aux = 0;
    for (int64_t e = 0; e < X; ++e) {
        double count = 0, psum = 0;
        for (int il = 0; il < hp_.n_layer; ++il) {
            count += static_cast<double>(moe_count_[static_cast<size_t>(il * X + e)]);
            psum += moe_psum_[static_cast<size_t>(il * X + e)];
        }
        aux += (count / N) * (psum / N);
        moe_aux_grad_[static_cast<size_t>(e)] =
            static_cast<float>(grad_scale * aux_coef_ * X * count / N / N);
    }
    return X * aux;
}

void TrainModel::moe_backward(int il, Saved& S, const float* b, int64_t R, backend::Backend& be) {
    Layer& l = layers_[static_cast<size_t>(il)];
    const int64_t E = hp_.n_embd, F = hp_.n_ff_exp, X = hp_.n_expert;
    const int64_t m = E * F;

    // Per slot: dL/d(expert output) = w * dL/dout[row]; dL/dw = dL/dout[row] . expert output.
    const backend::Backend::MoeSlots m_slots = slots(S, R);
    be.moe_slot_backward(m_slots, dx_.data(), S.eo.data(), b, E, moe_grad_.data(),
                         moe_slot_dw_.data(), moe_in_.data());
    const float* s = act_out(S);
    for (int64_t e = 0; e < X; ++e) {
        const int64_t j = S.expert_begin[e], n = S.expert_begin[e + 1] - j;
        if (n == 0) continue;
        linear_backward({l.down_exps.w + e * m, l.down_exps.g + e * m}, {}, s + j * F,
                        moe_grad_.data() + j * E, n, F, E, d_s_.data() + j * F, false, be);
    }
    be.ffn_activation_backward(kernels::FfnActivation::SwiGLU, S.g.data(), S.u.data(), d_s_.data(),
                               d_g_.data(), d_u_.data(), S.expert_begin[X] * F);
    for (int64_t e = 0; e < X; ++e) {  // moe_grad_ now takes dL/d(expert input)
        const int64_t j = S.expert_begin[e], n = S.expert_begin[e + 1] - j;
        if (n == 0) continue;
        const float* in = moe_in_.data() + j * E;
        float* din = moe_grad_.data() + j * E;
        linear_backward({l.gate_exps.w + e * m, l.gate_exps.g + e * m}, {}, in, d_g_.data() + j * F,
                        n, E, F, din, false, be);
        linear_backward({l.up_exps.w + e * m, l.up_exps.g + e * m}, {}, in, d_u_.data() + j * F, n,
                        E, F, din, true, be);
    }

    // Per row: the expert inputs' gradients summed back, and the router's: through the top-k
    // weights (renormalised or not), plus the auxiliary loss, then the softmax.
    be.moe_router_backward(m_slots, S.router_p.data(), moe_grad_.data(), moe_slot_dw_.data(),
                           moe_aux_grad_.data(), hp_.expert_weights_norm, E, d_b_.data(),
                           moe_dz_.data());
    if (z_coef_ > 0) {  // the z-loss's: d (lse^2) / dz = 2 lse softmax(z), per row and layer mean
        const double c = 2.0 * z_coef_ * z_grad_scale_ / (double(R) * hp_.n_layer);
        for (int64_t r = 0; r < R; ++r) {
            const float g = static_cast<float>(c * S.router_lse[r]);
            for (int64_t e = 0; e < X; ++e) moe_dz_[r * X + e] += g * S.router_p[r * X + e];
        }
    }
    linear_backward(l.router, {}, b, moe_dz_.data(), R, E, X, d_b_.data(), true, be);
}

}  // namespace syslm::train
