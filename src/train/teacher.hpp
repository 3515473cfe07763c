// The teacher of knowledge distillation: a GGUF model (any type the inference engine runs,
// quantized included) whose next-token logits over a training batch are the student's soft
// targets (TrainModel::Distill). It runs online, batch by batch, beside the student.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "model/transformer.hpp"

namespace syslm::train {

class Teacher {
public:
    Teacher(const std::string& path, int seq_len, int threads);
    int n_vocab() const { return model_->hparams().n_vocab; }
    // out: B x T rows of n_vocab logits, the teacher's prediction after each token.
    void logits(std::span<const int32_t> tokens, int B, int T, float* out);

private:
    std::unique_ptr<model::Model> model_;
    std::unique_ptr<model::Context> ctx_;
};

}  // namespace syslm::train
