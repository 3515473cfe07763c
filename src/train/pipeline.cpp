#include "train/pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <functional>

#include "core/error.hpp"

namespace syslm::train {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}
constexpr int kForwardTag = 11, kBackwardTag = 12;

// One stage's moves in a step, as the schedules call them: a micro-batch's activation in from
// the previous stage / out to the next, its gradient in from the next / out to the previous,
// the stage's forward and backward, and the two exchanges 1F1B's steady state pairs up.
struct StageMoves {
    bool first = false, last = false;
    std::function<void(int)> recv_forward, forward, backward;
    std::function<void()> send_forward, recv_backward, send_backward;
    std::function<void()> send_output_recv_gradient;  // to and from the next stage
    std::function<void(int)> send_gradient_recv_input;  // to and from the previous stage
};

void gpipe(const StageMoves& st, int m) {
    for (int k = 0; k < m; ++k) {
        st.recv_forward(k);
        st.forward(k);
        st.send_forward();
    }
    for (int k = 0; k < m; ++k) {
        st.recv_backward();
        st.backward(k);
        st.send_backward();
    }
}

// Stage s of p warms up with p - s - 1 forwards, then alternates one forward with one backward,
// then drains the backwards: at most p - s micro-batches' inputs are live at once.
void one_f_one_b(const StageMoves& st, int m, int s, int p) {
    const int warm = std::min(p - s - 1, m), steady = m - warm;
    for (int k = 0; k < warm; ++k) {
        st.recv_forward(k);
        st.forward(k);
        st.send_forward();
    }
    if (steady > 0) st.recv_forward(warm);
    for (int i = 0; i < steady; ++i) {
        const int k = warm + i;
        st.forward(k);
        if (!st.last) st.send_output_recv_gradient();  // output k forward, gradient i back
        st.backward(i);
        if (st.first) continue;
        if (i == steady - 1)
            st.send_backward();
        else
            st.send_gradient_recv_input(k + 1);  // gradient i back, input k + 1 in
    }
    for (int i = steady; i < m; ++i) {
        st.recv_backward();
        st.backward(i);
        st.send_backward();
    }
}

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
                     backend::Backend& be, float loss_scale) {
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
    StageMoves st;
    st.first = first;
    st.last = last;
    st.recv_forward = [&](int k) {
        if (!first) comm([&] { stages_.recv(inputs_[k].data(), bytes, s - 1, kForwardTag); });
    };
    st.send_forward = [&] {
        if (!last) comm([&] { stages_.send(out_.data(), bytes, s + 1, kForwardTag); });
    };
    st.recv_backward = [&] {
        if (!last) comm([&] { stages_.recv(grad_in_.data(), bytes, s + 1, kBackwardTag); });
    };
    st.send_backward = [&] {
        if (!first) comm([&] { stages_.send(grad_out_.data(), bytes, s - 1, kBackwardTag); });
    };
    st.send_output_recv_gradient = [&] {
        comm([&] {
            stages_.send_recv(out_.data(), bytes, s + 1, grad_in_.data(), bytes, s + 1,
                              kForwardTag);
        });
    };
    st.send_gradient_recv_input = [&](int k) {
        comm([&] {
            stages_.send_recv(grad_out_.data(), bytes, s - 1, inputs_[k].data(), bytes, s - 1,
                              kForwardTag);
        });
    };
    // The last stage's forward happens in its backward (one pass computes the loss and its
    // gradient); the others run theirs to hand the output on.
    st.forward = [&](int k) {
        if (last) return;
        TrainModel::StageIO io;
        io.x_in = first ? nullptr : inputs_[k].data();
        io.x_out = out_.data();
        model_.stage_step(tokens[k], targets[k], B, T, be, loss_scale, io);
    };
    st.backward = [&](int k) {  // recomputes the stage's forward from its kept input
        TrainModel::StageIO io;
        io.x_in = first ? nullptr : inputs_[k].data();
        io.x_out = last ? nullptr : out_.data();
        io.backward = true;
        io.dy = last ? nullptr : grad_in_.data();
        io.dx = first ? nullptr : grad_out_.data();
        loss += model_.stage_step(tokens[k], targets[k], B, T, be, loss_scale, io);
    };
    if (schedule_ == PipelineSchedule::GPipe)
        gpipe(st, m);
    else
        one_f_one_b(st, m, s, p);
    total_s_ += since(t0);
    // Every stage reports the step's loss.
    stages_.all_reduce_sum(&loss, 1);
    return loss;
}

}  // namespace syslm::train
