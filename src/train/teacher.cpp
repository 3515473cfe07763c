#include "train/teacher.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace syslm::train {

namespace {

// Copies the residual after the listed blocks into slot m of the hidden-state buffer, at the
// rows of the sequence being run.
class ResidualCapture final : public model::ActivationObserver {
public:
    ResidualCapture(std::span<const int> layers, float* hidden, int64_t rows_per_layer)
        : layers_(layers), hidden_(hidden), per_layer_(rows_per_layer) {}
    void set_row(int64_t row) { row_ = row; }
    void observe(const std::string&, int, const float*, int64_t, int64_t) override {}
    void observe_residual(int il, const float* x, int64_t rows, int64_t n_embd) override {
        for (size_t m = 0; m < layers_.size(); ++m)
            if (layers_[m] == il)
                std::copy_n(x, rows * n_embd,
                            hidden_ + (static_cast<int64_t>(m) * per_layer_ + row_) * n_embd);
    }

private:
    std::span<const int> layers_;
    float* hidden_;
    int64_t per_layer_, row_ = 0;
};

}  // namespace

std::vector<std::pair<int, int>> hidden_layer_map(int student_layers, int teacher_layers, int n) {
    SYSLM_CHECK(n >= 1 && n <= student_layers, "hidden-state matching: ", n,
                " blocks to match, the student has ", student_layers);
    SYSLM_CHECK(teacher_layers >= 1, "hidden-state matching: the teacher has no blocks");
    std::vector<std::pair<int, int>> map;
    for (int j = 0; j < n; ++j) {
        // Depth (s + 1) / Ls of the student is matched at depth (t + 1) / Lt of the teacher.
        const int s = static_cast<int>(std::lround(static_cast<double>(j + 1) * student_layers / n)) - 1;
        const int t = std::max(
            0, static_cast<int>(std::lround(static_cast<double>(s + 1) * teacher_layers /
                                            student_layers)) - 1);
        map.emplace_back(s, t);
    }
    return map;
}

Teacher::Teacher(const std::string& path, int seq_len, int threads)
    : model_(std::make_unique<model::Model>(path)) {
    SYSLM_CHECK(seq_len > 0, "teacher: sequence length must be positive");
    // F32 cache: the soft targets are the teacher's exact function of the batch.
    ctx_ = std::make_unique<model::Context>(*model_, seq_len, threads, seq_len, DType::F32);
}

void Teacher::logits(std::span<const int32_t> tokens, int B, int T, float* out,
                     std::span<const int> layers, float* hidden) {
    SYSLM_CHECK(static_cast<int64_t>(tokens.size()) == static_cast<int64_t>(B) * T,
                "teacher: ", tokens.size(), " tokens for a ", B, " x ", T, " batch");
    SYSLM_CHECK(T <= ctx_->n_ctx(), "teacher: sequences of ", T, " tokens exceed its context of ",
                ctx_->n_ctx());
    for (int il : layers)
        SYSLM_CHECK(il >= 0 && il < n_layer(), "teacher: no block ", il, " (it has ", n_layer(),
                    ")");
    SYSLM_CHECK(layers.empty() || hidden, "teacher: hidden states asked for without a buffer");
    ResidualCapture capture(layers, hidden, static_cast<int64_t>(B) * T);
    ctx_->set_observer(layers.empty() ? nullptr : &capture);
    const size_t V = static_cast<size_t>(n_vocab());
    for (int b = 0; b < B; ++b) {
        ctx_->reset();
        capture.set_row(static_cast<int64_t>(b) * T);
        const std::span<const float> l =
            ctx_->forward(tokens.subspan(static_cast<size_t>(b) * T, static_cast<size_t>(T)), true);
        std::copy(l.begin(), l.end(), out + static_cast<size_t>(b) * T * V);
    }
    ctx_->set_observer(nullptr);
}

}  // namespace syslm::train
