#include "train/optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "kernels/cpu/optimizer_update.hpp"

namespace syslm::train {

OptimizerKind optimizer_kind(const std::string& name) {
    if (name == "adamw") return OptimizerKind::AdamW;
    if (name == "lion") return OptimizerKind::Lion;
    if (name == "sgd") return OptimizerKind::Sgd;
    fail("optimizer '", name, "': expected adamw, lion or sgd");
}

ScheduleKind schedule_kind(const std::string& name) {
    if (name == "cosine") return ScheduleKind::Cosine;
    if (name == "linear") return ScheduleKind::Linear;
    if (name == "constant") return ScheduleKind::Constant;
    fail("schedule '", name, "': expected cosine, linear or constant");
}

bool Optimizer::decays(const Param& p, bool decay_embeddings) {
    if (p.ne.size() < 2) return false;  // norms and biases
    const bool embedding = p.name == "token_embd.weight" || p.name == "position_embd.weight";
    return !embedding || decay_embeddings;
}

Optimizer::Optimizer(const OptimizerConfig& cfg, ParamStore& params) : cfg_(cfg), params_(params) {
    m_.assign(params.size(), 0.0f);
    if (cfg.kind == OptimizerKind::AdamW) v_.assign(params.size(), 0.0f);
    for (const Param& p : params.params()) decay_.push_back(decays(p, cfg.decay_embeddings));
    shard({});
}

void Optimizer::shard(std::vector<Range> owned) {
    SYSLM_CHECK(t_ == 0, "optimizer: sharded after ", t_, " steps");
    const auto& ps = params_.params();
    segments_.clear();
    size_t state = 0;
    if (owned.empty()) {  // every parameter, state at the arena's offsets (checkpoint layout)
        for (size_t pi = 0; pi < ps.size(); ++pi)
            segments_.push_back({pi, ps[pi].offset, ps[pi].offset + ps[pi].numel, ps[pi].offset});
        state = params_.size();
    } else {
        std::sort(owned.begin(), owned.end());
        for (const Range& r : owned)
            for (size_t pi = 0; pi < ps.size(); ++pi) {
                const size_t b = std::max(r.first, ps[pi].offset);
                const size_t e = std::min(r.second, ps[pi].offset + static_cast<size_t>(ps[pi].numel));
                if (b >= e) continue;
                segments_.push_back({pi, b, e, state});
                state += e - b;
            }
    }
    owned_ = std::move(owned);
    m_.assign(state, 0.0f);
    if (cfg_.kind == OptimizerKind::AdamW) v_.assign(state, 0.0f);
}

std::vector<Optimizer::Range> Optimizer::state_ranges() const {
    std::vector<Range> r;
    for (const Segment& sg : segments_) r.emplace_back(sg.begin, sg.end);
    return r;
}

void Optimizer::load_full_state(const std::vector<float>& m, const std::vector<float>& v) {
    const size_t full = params_.size();
    SYSLM_CHECK(m.size() == full && v.size() == (v_.empty() ? 0 : full),
                "optimizer state of ", m.size(), " + ", v.size(), " values for a model of ", full,
                " (another model or optimizer?)");
    for (const Segment& sg : segments_) {
        std::copy(m.begin() + static_cast<std::ptrdiff_t>(sg.begin),
                  m.begin() + static_cast<std::ptrdiff_t>(sg.end),
                  m_.begin() + static_cast<std::ptrdiff_t>(sg.state));
        if (!v_.empty())
            std::copy(v.begin() + static_cast<std::ptrdiff_t>(sg.begin),
                      v.begin() + static_cast<std::ptrdiff_t>(sg.end),
                      v_.begin() + static_cast<std::ptrdiff_t>(sg.state));
    }
}

void Optimizer::step(float lr, backend::Backend& be, float grad_scale) {
    ++t_;
    float* w = params_.values();
    const float* g = params_.grads();
    const float b1 = cfg_.beta1, b2 = cfg_.beta2;
    // torch.optim.AdamW (single-tensor): bias corrections in double, as Python floats are.
    const double bc1 = 1.0 - std::pow(static_cast<double>(b1), static_cast<double>(t_));
    const double bc2 = 1.0 - std::pow(static_cast<double>(b2), static_cast<double>(t_));
    using Rule = backend::Backend::UpdateRule;
    backend::Backend::UpdateStep st{};
    st.rule = cfg_.kind == OptimizerKind::AdamW ? Rule::AdamW
              : cfg_.kind == OptimizerKind::Lion ? Rule::Lion
                                                  : Rule::Sgd;
    st.lr = lr;
    st.b1 = b1;
    st.b2 = b2;
    st.eps = cfg_.eps;
    st.step_size = static_cast<float>(lr / bc1);
    st.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    st.grad_scale = grad_scale;
    st.momentum = cfg_.momentum;
    st.nesterov = cfg_.nesterov;
    st.first_step = t_ == 1;
    // Segment by segment (a tensor, or its owned part), each split across the threads by the
    // backend (the embedding alone can be a third of a model).
    for (const Segment& sg : segments_) {
        st.weight_decay = decay_[sg.param] ? cfg_.weight_decay : 0.0f;
        be.optimizer_update(st, w + sg.begin, g + sg.begin, m_.data() + sg.state,
                            v_.empty() ? nullptr : v_.data() + sg.state,
                            static_cast<int64_t>(sg.end - sg.begin));
    }
}

float clip_coefficient(double norm, double max_norm) {
    return max_norm > 0 ? static_cast<float>(std::min(1.0, max_norm / (norm + 1e-6))) : 1.0f;
}

float Schedule::at(int64_t step) const {
    if (warmup > 0 && step < warmup)
        return lr * static_cast<float>(step + 1) / static_cast<float>(warmup);
    if (kind == ScheduleKind::Constant) return lr;
    const int64_t span = std::max<int64_t>(1, total - warmup - 1);
    const double progress =
        std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(span));
    const double f =
        kind == ScheduleKind::Cosine ? 0.5 * (1.0 + std::cos(M_PI * progress)) : 1.0 - progress;
    return static_cast<float>(min_lr + (lr - min_lr) * f);
}

}  // namespace syslm::train
