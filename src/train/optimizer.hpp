// Optimizers over a ParamStore: AdamW, Lion and SGD with momentum, each written to match its
// reference update operation for operation (torch.optim.AdamW and SGD's single-tensor code
// paths; Lion as published by Chen et al. 2023, with decoupled weight decay), so a run can be
// compared with PyTorch parameter for parameter. Parameter groups: weight decay applies to the
// matrices only — not to norms, biases or embeddings unless decay_embeddings — as is usual for
// transformer training. Also global-norm gradient clipping and the learning-rate schedules.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "train/params.hpp"

namespace syslm::train {

enum class OptimizerKind { AdamW, Lion, Sgd };
OptimizerKind optimizer_kind(const std::string& name);  // "adamw" | "lion" | "sgd"

struct OptimizerConfig {
    OptimizerKind kind = OptimizerKind::AdamW;
    float beta1 = 0.9f;  // AdamW/Lion; SGD's momentum is `momentum`
    float beta2 = 0.999f;
    float eps = 1e-8f;
    float weight_decay = 0.0f;
    float momentum = 0.9f;  // SGD
    bool nesterov = false;  // SGD
    bool decay_embeddings = false;
};

class Optimizer {
public:
    Optimizer(const OptimizerConfig& cfg, ParamStore& params);

    // One update of every parameter (or of the owned ranges) from its gradient times
    // grad_scale (clip_coefficient's, fused: no pass that scales the gradients), at learning
    // rate lr.
    void step(float lr, backend::Backend& be, float grad_scale = 1.0f);
    // ZeRO: only these [begin, end) float ranges of the parameter arena are updated here, and
    // only their state is kept (the state vectors hold the ranges' floats in order). Call before
    // the first step; an empty list: all parameters.
    using Range = std::pair<size_t, size_t>;
    void shard(std::vector<Range> owned);
    const std::vector<Range>& owned() const { return owned_; }
    size_t state_bytes() const { return (m_.size() + v_.size()) * sizeof(float); }
    // The arena ranges the state vectors hold, in their order.
    std::vector<Range> state_ranges() const;
    // Takes this optimizer's part of a whole-model state (arena-sized m and v; v empty for Lion
    // and SGD), sharded or not.
    void load_full_state(const std::vector<float>& m, const std::vector<float>& v);
    int64_t steps() const { return t_; }
    const OptimizerConfig& config() const { return cfg_; }
    // Whether weight decay applies to a tensor (by its GGUF name and rank).
    static bool decays(const Param& p, bool decay_embeddings);

    // The state a checkpoint must keep for a bit-exact resume.
    std::vector<float>& first_moment() { return m_; }
    std::vector<float>& second_moment() { return v_; }
    const std::vector<float>& first_moment() const { return m_; }
    const std::vector<float>& second_moment() const { return v_; }
    void set_steps(int64_t t) { t_ = t; }

private:
    OptimizerConfig cfg_;
    ParamStore& params_;
    std::vector<float> m_, v_;    // AdamW: both; Lion: m; SGD: the momentum buffer in m
    std::vector<uint8_t> decay_;  // per parameter
    int64_t t_ = 0;
    // What step() updates: a parameter's floats [begin, end) (arena offsets) with their state at
    // state .. state + (end - begin).
    struct Segment {
        size_t param, begin, end, state;
    };
    std::vector<Segment> segments_;
    std::vector<Range> owned_;
};

// The factor that clips a gradient of global L2 norm `norm` (Trainer::global_grad_norm) to
// max_norm as torch.nn.utils.clip_grad_norm_ does: max_norm / (norm + 1e-6), never above 1; 1
// where max_norm <= 0.
float clip_coefficient(double norm, double max_norm);

enum class ScheduleKind { Cosine, Linear, Constant };
ScheduleKind schedule_kind(const std::string& name);  // "cosine" | "linear" | "constant"

// Learning rate at step (0-based) of total: linear warm-up from lr/warmup to lr over `warmup`
// steps, then cosine or linear decay to min_lr at the last step, or constant.
struct Schedule {
    ScheduleKind kind = ScheduleKind::Cosine;
    float lr = 3e-4f;
    float min_lr = 0.0f;
    int64_t warmup = 0;
    int64_t total = 1;
    float at(int64_t step) const;
};

}  // namespace syslm::train
