#include "train/pipeline.hpp"

#include <chrono>

#include "core/error.hpp"

namespace syslm::train {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}
constexpr int kForwardTag = 11, kBackwardTag = 12;
}  // namespace

PipelineSchedule pipeline_schedule(const std::string& name) {
    if (name == "gpipe") return PipelineSchedule::GPipe;
    if (name == "1f1b") return PipelineSchedule::OneFOneB;
    fail("unknown pipeline schedule '", name, "' (gpipe, 1f1b)");
}

Pipeline::Pipeline(TrainModel& model, parallel::Communicator& stages, PipelineSchedule schedule)
    : model_(model), stages_(stages), schedule_(schedule) {
    SYSLM_CHECK(model.first_stage() == (stages.rank() == 0) &&
                    model.last_stage() == (stages.rank() == stages.size() - 1),
                "pipeline: stage ", stages.rank(), " of ", stages.size(),
                " does not hold the blocks of its position");
}

double Pipeline::run(const std::vector<std::vector<int32_t>>& tokens,
                     const std::vector<std::vector<int32_t>>& targets, int B, int T,
                     ThreadPool& pool, float loss_scale) {
    const int m = static_cast<int>(tokens.size());
    SYSLM_CHECK(m > 0 && targets.size() == tokens.size(), "pipeline: ", m, " micro-batches and ",
                targets.size(), " target sets");
    const int s = stages_.rank(), p = stages_.size();
    const bool first = s == 0, last = s == p - 1;
    const size_t n = static_cast<size_t>(B) * T * static_cast<size_t>(model_.hparams().n_embd);
    const size_t bytes = n * sizeof(float);
    inputs_.resize(static_cast<size_t>(m));
    for (auto& x : inputs_) x.resize(first ? 0 : n);
    out_.resize(n);
    grad_in_.resize(n);
    grad_out_.resize(n);
    const auto t0 = Clock::now();
    double loss = 0;
    auto comm = [&](auto&& f) {  // time spent waiting for a neighbour
        const auto t = Clock::now();
        f();
        wait_s_ += since(t);
    };
    auto recv_forward = [&](int k) {
        if (!first) comm([&] { stages_.recv(inputs_[k].data(), bytes, s - 1, kForwardTag); });
    };
    auto send_forward = [&] {
        if (!last) comm([&] { stages_.send(out_.data(), bytes, s + 1, kForwardTag); });
    };
    auto recv_backward = [&] {
        if (!last) comm([&] { stages_.recv(grad_in_.data(), bytes, s + 1, kBackwardTag); });
    };
    auto send_backward = [&] {
        if (!first) comm([&] { stages_.send(grad_out_.data(), bytes, s - 1, kBackwardTag); });
    };
    // The last stage's forward happens in its backward (one pass computes the loss and its
    // gradient); the others run theirs to hand the output on.
    auto forward = [&](int k) {
        if (last) return;
        TrainModel::StageIO io;
        io.x_in = first ? nullptr : inputs_[k].data();
        io.x_out = out_.data();
        model_.stage_step(tokens[k], targets[k], B, T, pool, loss_scale, io);
    };
    auto backward = [&](int k) {  // recomputes the stage's forward from its kept input
        TrainModel::StageIO io;
        io.x_in = first ? nullptr : inputs_[k].data();
        io.x_out = last ? nullptr : out_.data();
        io.backward = true;
        io.dy = last ? nullptr : grad_in_.data();
        io.dx = first ? nullptr : grad_out_.data();
        loss += model_.stage_step(tokens[k], targets[k], B, T, pool, loss_scale, io);
    };

    if (schedule_ == PipelineSchedule::GPipe) {
        for (int k = 0; k < m; ++k) {
            recv_forward(k);
            forward(k);
            send_forward();
        }
        for (int k = 0; k < m; ++k) {
            recv_backward();
            backward(k);
            send_backward();
        }
    } else {
        const int warm = std::min(p - s - 1, m), steady = m - warm;
        for (int k = 0; k < warm; ++k) {
            recv_forward(k);
            forward(k);
            send_forward();
        }
        if (steady > 0) recv_forward(warm);
        for (int i = 0; i < steady; ++i) {
            const int k = warm + i;
            forward(k);
            if (!last)  // output k forward, the gradient of micro-batch i back
                comm([&] {
                    stages_.send_recv(out_.data(), bytes, s + 1, grad_in_.data(), bytes, s + 1,
                                      kForwardTag);
                });
            backward(i);
            if (first) continue;
            if (i == steady - 1)
                send_backward();
            else  // gradient i back, input k + 1 in
                comm([&] {
                    stages_.send_recv(grad_out_.data(), bytes, s - 1, inputs_[k + 1].data(), bytes,
                                      s - 1, kForwardTag);
                });
        }
        for (int i = steady; i < m; ++i) {
            recv_backward();
            backward(i);
            send_backward();
        }
    }
    total_s_ += since(t0);
    // Every stage reports the step's loss.
    stages_.all_reduce_sum(&loss, 1);
    return loss;
}

}  // namespace syslm::train
