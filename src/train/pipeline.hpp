// Pipeline parallelism: the micro-batches of one optimizer step through the stages of a model
// (TrainModel::stage_step), one stage per rank of the pipeline group, in GPipe's order (every
// forward, then every backward) or 1F1B's (after a warm-up of pp - stage - 1 forwards, one
// forward and one backward alternate, so at most pp micro-batches are in flight). A stage keeps
// only its input of each micro-batch in flight and recomputes its forward before the backward
// (GPipe's re-materialisation), so activations cost one row block per micro-batch in flight.
// Neighbouring stages exchange activations forward and their gradients backward; in 1F1B's
// steady state both directions go in one send_recv, as Megatron's schedule does.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "parallel/communicator.hpp"
#include "train/train_model.hpp"

namespace syslm::train {

enum class PipelineSchedule { GPipe, OneFOneB };
PipelineSchedule pipeline_schedule(const std::string& name);  // "gpipe" | "1f1b"

class Pipeline {
public:
    Pipeline(TrainModel& model, parallel::Communicator& stages, PipelineSchedule schedule);

    // Forward and backward of every micro-batch (tokens and targets: B x T each, all the same on
    // every stage), gradients added into the model's. Returns the sum of the micro-batch losses
    // on every stage (the last stage computes them).
    double run(const std::vector<std::vector<int32_t>>& tokens,
               const std::vector<std::vector<int32_t>>& targets, int B, int T, backend::Backend& be,
               float loss_scale);

    // Time this stage waited for its neighbours, and the whole schedule's, over every run: their
    // ratio is the measured bubble (the theoretical one is (pp - 1) / (m + pp - 1)).
    double wait_seconds() const { return wait_s_; }
    double total_seconds() const { return total_s_; }

private:
    TrainModel& model_;
    parallel::Communicator& stages_;
    PipelineSchedule schedule_;
    std::vector<std::vector<float>> inputs_;  // each micro-batch's stage input, kept for backward
    std::vector<float> out_, grad_in_, grad_out_;
    double wait_s_ = 0, total_s_ = 0;
};

}  // namespace syslm::train
