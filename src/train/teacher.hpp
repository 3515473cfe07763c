// The teacher of knowledge distillation: a GGUF model (any type the inference engine runs,
// quantized included) whose next-token logits over a training batch are the student's soft
// targets (TrainModel::Distill), and whose residual stream after chosen blocks is the target of
// hidden-state matching. It runs online, batch by batch, beside the student.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "model/transformer.hpp"

namespace syslm::train {

// Which blocks hidden-state matching pairs: n student blocks spread evenly and ending with the
// last, each with the teacher block at the same relative depth. Returns (student, teacher) pairs.
std::vector<std::pair<int, int>> hidden_layer_map(int student_layers, int teacher_layers, int n);

class Teacher {
public:
    Teacher(const std::string& path, int seq_len, int threads);
    int n_vocab() const { return model_->hparams().n_vocab; }
    int n_embd() const { return model_->hparams().n_embd; }
    int n_layer() const { return model_->hparams().n_layer; }
    // out: B x T rows of n_vocab logits, the teacher's prediction after each token. With
    // `layers`, hidden gets, for each listed block in order, the residual stream after it:
    // layers.size() x (B x T) x n_embd floats.
    void logits(std::span<const int32_t> tokens, int B, int T, float* out,
                std::span<const int> layers = {}, float* hidden = nullptr);

private:
    std::unique_ptr<model::Model> model_;
    std::unique_ptr<model::Context> ctx_;
};

}  // namespace syslm::train
