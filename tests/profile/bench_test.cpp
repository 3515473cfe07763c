// syslm bench's pieces on a small random llama model: the per-token costs equal the shapes'
// arithmetic worked out by hand, the runner produces one sample per repetition with
// tokens/s = tokens / time, and a profiled run names every op of the forward pass with
// flops that add up to the model's.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "core/profiler.hpp"
#include "model/random_init.hpp"
#include "profile/bench_runner.hpp"
#include "profile/model_costs.hpp"

namespace syslm::profile {
namespace {

constexpr int kLayers = 2, kEmbd = 96, kHeads = 6, kKvHeads = 2, kFf = 160;

const std::string& model_path() {
    static const std::string path = [] {
        std::filesystem::create_directories(SYSLM_TEST_TMP);
        const std::string p = std::string(SYSLM_TEST_TMP) + "/bench_model.gguf";
        model::InitConfig cfg;
        cfg.n_layer = kLayers;
        cfg.n_embd = kEmbd;
        cfg.n_head = kHeads;
        cfg.n_head_kv = kKvHeads;
        cfg.n_ff = kFf;
        cfg.n_ctx = 256;
        cfg.type = DType::F32;
        model::write_random_model(
            cfg, std::string(SYSLM_VOCAB_DIR) + "/ggml-vocab-llama-spm.gguf", p);
        return p;
    }();
    return path;
}

TEST(ModelCosts, MatchTheShapes) {
    const model::Model m(model_path());
    const ModelCosts c = model_costs(m, DType::F32);
    const double V = m.hparams().n_vocab, E = kEmbd, F = kFf, KD = kEmbd / kHeads * kKvHeads;
    const double per_layer_w = E * E + 2 * E * KD + E * E + 3 * E * F;  // q, k, v, o, gate/up/down
    const double norms = kLayers * 2 * E + E;
    const bool tied = !m.file().find_tensor("output.weight");
    const double output = V * E;
    // F32 weights: 4 bytes per element; one embedding row per token.
    EXPECT_DOUBLE_EQ(c.decode_weight_bytes, 4 * (kLayers * per_layer_w + norms + output + E));
    EXPECT_DOUBLE_EQ(c.n_params, kLayers * per_layer_w + norms + V * E + (tied ? 0 : output));
    EXPECT_DOUBLE_EQ(c.kv_bytes_per_position, 2.0 * kLayers * KD * 4);
    double flops = 0;
    for (const MatrixCost& mc : c.matrices) flops += mc.flops_per_token;
    EXPECT_DOUBLE_EQ(flops, 2 * (kLayers * per_layer_w + output));
}

TEST(BenchRunner, OneSamplePerRepetitionAndConsistentRates) {
    const model::Model m(model_path());
    BenchOptions opt;
    opt.threads = 2;
    opt.reps = 3;
    int before = 0, after = 0;
    opt.before_rep = [&](int rep) { EXPECT_EQ(rep, before++); };
    opt.after_rep = [&](int) { ++after; };
    for (const BenchTest& t : {BenchTest{37, 0}, BenchTest{0, 9}}) {
        before = after = 0;
        const BenchResult r = run_bench(m, t, opt);
        EXPECT_EQ(before, 3);
        EXPECT_EQ(after, 3);
        ASSERT_EQ(r.samples_ns.size(), 3u);
        for (size_t i = 0; i < 3; ++i)
            EXPECT_NEAR(r.samples_ts[i], t.n_tokens() / (r.samples_ns[i] * 1e-9),
                        1e-9 * r.samples_ts[i]);
        EXPECT_GT(r.avg_ts, 0);
        EXPECT_GE(r.stddev_ts, 0);
    }
    EXPECT_EQ((BenchTest{512, 0}.name()), "pp512");
    EXPECT_EQ((BenchTest{0, 128}.name()), "tg128");
}

TEST(BenchRunner, ProfileNamesEveryOpAndItsFlops) {
    const model::Model m(model_path());
    const ModelCosts c = model_costs(m, DType::F32);
    BenchOptions opt;
    opt.threads = 1;
    opt.reps = 2;
    opt.before_rep = [](int) { profiler::set_enabled(true); };
    opt.after_rep = [](int) { profiler::set_enabled(false); };
    profiler::reset();
    constexpr int kGen = 5;
    run_bench(m, BenchTest{0, kGen}, opt);
    const auto stats = profiler::collect();
    // Small matrices over one input decode as one step (kernels::fused_matmuls): q, k and v as
    // attn_qkv, gate and up as ffn_gate_up; otherwise each is its own step.
    const std::map<std::string, std::vector<std::string>> fused = {
        {"attn_qkv", {"attn_q", "attn_k", "attn_v"}}, {"ffn_gate_up", {"ffn_gate", "ffn_up"}}};
    std::set<std::string> names;
    double matmul_flops = 0;
    for (const auto& s : stats) {
        names.insert(s.name);
        bool matrix = fused.count(s.name) > 0;
        for (const MatrixCost& mc : c.matrices) matrix = matrix || mc.op == s.name;
        if (matrix) matmul_flops += s.flops;
    }
    for (const char* op : {"embedding", "attn_norm", "rope_kv_store", "attention", "attn_out",
                           "residual_add", "ffn_norm", "swiglu", "ffn_down", "output_norm",
                           "output"})
        EXPECT_TRUE(names.count(op)) << op;
    for (const auto& [name, members] : fused)
        for (const std::string& op : members)
            EXPECT_TRUE(names.count(name) + names.count(op) == 1) << name << " or " << op;
    double per_token = 0;
    for (const MatrixCost& mc : c.matrices) per_token += mc.flops_per_token;
    EXPECT_DOUBLE_EQ(matmul_flops, per_token * kGen * 2);
    for (const auto& s : stats)
        if (s.name == std::string("attn_q") || s.name == std::string("attn_qkv")) {
            EXPECT_EQ(s.calls, 2u * kGen * kLayers);
        }
    profiler::reset();
}

}  // namespace
}  // namespace syslm::profile
