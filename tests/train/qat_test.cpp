// Quantization-aware training: the step's gradients are those of the fake-quantized network
// (computed here independently on a copy whose weights were quantized and dequantized by hand),
// they update the float master weights (straight-through estimator), and the master weights are
// not left quantized.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend/cpu_backend.hpp"
#include "../common/random_model.hpp"
#include "core/error.hpp"
#include "io/gguf.hpp"
#include "kernels/type_traits.hpp"
#include "train/trainer.hpp"

namespace syslm::train {
namespace {

void fake_quantize(float* v, int64_t numel, int64_t n, DType type) {
    const auto& tr = kernels::type_traits(type);
    std::vector<uint8_t> q(row_bytes(type, n));
    for (int64_t r = 0; r < numel / n; ++r) {
        tr.from_float(v + r * n, q.data(), n);
        tr.to_float(q.data(), v + r * n, n);
    }
}

TEST(Qat, StepUsesGradientsOfTheFakeQuantizedNetwork) {
    model::InitConfig c = testing::small_model_config("llama", 64, 12);
    c.n_embd = 64;
    c.n_head = 4;
    c.n_ff = 96;
    const std::string path = testing::write_test_model("qat_llama", c);
    const io::GGUFFile file(path);
    TrainModel a(file), b(file);
    const std::vector<std::string> names = {"blk.0.attn_q.weight", "blk.1.ffn_down.weight",
                                            "blk.0.ffn_gate.weight"};
    std::mt19937 rng(2);
    const int B = 2, T = 12;
    std::vector<int32_t> ids(static_cast<size_t>(B * (T + 1)));
    for (auto& v : ids) v = static_cast<int32_t>(rng() % 1000);
    backend::CpuBackend be(2);

    // Independent: the gradient of the network whose listed matrices are Q4_0-rounded.
    for (const std::string& n : names) {
        const Param& p = *b.params().find(n);
        fake_quantize(b.params().value(n), p.numel, p.ne[0], DType::Q4_0);
    }
    FixedBatch batch_b(ids, B, T);
    std::vector<int32_t> tok, tgt;
    batch_b.next(tok, tgt);
    b.params().zero_grads();
    b.forward_backward(tok, tgt, B, T, be);

    // The trainer: plain SGD at lr 1, no momentum, no clipping: W_new = W - grad.
    std::vector<float> before(a.params().values(), a.params().values() + a.params().size());
    FixedBatch batch_a(ids, B, T);
    TrainOptions opt;
    opt.B = B;
    opt.T = T;
    opt.steps = 1;
    opt.clip = 0;
    opt.optimizer.kind = OptimizerKind::Sgd;
    opt.optimizer.momentum = 0;
    opt.schedule.kind = ScheduleKind::Constant;
    opt.schedule.lr = 1.0f;
    for (const std::string& n : names) opt.fake_quant.emplace_back(n, DType::Q4_0);
    Trainer t(a, batch_a, opt, be);
    t.step();

    for (const Param& p : a.params().params()) {
        const float* after = a.params().values() + p.offset;
        const float* g = b.params().grads() + p.offset;
        for (int64_t i = 0; i < p.numel; ++i)
            ASSERT_FLOAT_EQ(after[i], before[p.offset + i] - g[i]) << p.name << " [" << i << "]";
    }
    // The master weights are not on the Q4_0 grid: re-quantizing changes them.
    const Param& q = *a.params().find(names[0]);
    std::vector<float> w(a.params().value(names[0]), a.params().value(names[0]) + q.numel);
    std::vector<float> wq = w;
    fake_quantize(wq.data(), q.numel, q.ne[0], DType::Q4_0);
    EXPECT_NE(w, wq);

    opt.fake_quant = {{"blk.0.attn_q.weight", DType::Q4_K}};  // 64 columns: not a Q4_K row
    EXPECT_THROW(Trainer(a, batch_a, opt, be), syslm::Error);
}

}  // namespace
}  // namespace syslm::train
