#include "train/teacher.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace syslm::train {

Teacher::Teacher(const std::string& path, int seq_len, int threads)
    : model_(std::make_unique<model::Model>(path)) {
    SYSLM_CHECK(seq_len > 0, "teacher: sequence length must be positive");
    // F32 cache: the soft targets are the teacher's exact function of the batch.
    ctx_ = std::make_unique<model::Context>(*model_, seq_len, threads, seq_len, DType::F32);
}

void Teacher::logits(std::span<const int32_t> tokens, int B, int T, float* out) {
    SYSLM_CHECK(static_cast<int64_t>(tokens.size()) == static_cast<int64_t>(B) * T,
                "teacher: ", tokens.size(), " tokens for a ", B, " x ", T, " batch");
    SYSLM_CHECK(T <= ctx_->n_ctx(), "teacher: sequences of ", T, " tokens exceed its context of ",
                ctx_->n_ctx());
    const size_t V = static_cast<size_t>(n_vocab());
    for (int b = 0; b < B; ++b) {
        ctx_->reset();
        const std::span<const float> l =
            ctx_->forward(tokens.subspan(static_cast<size_t>(b) * T, static_cast<size_t>(T)), true);
        std::copy(l.begin(), l.end(), out + static_cast<size_t>(b) * T * V);
    }
}

}  // namespace syslm::train
