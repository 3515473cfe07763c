// syslm eval's figures against independent computations: perplexity equals compress::perplexity
// (llama-perplexity's method), KL divergence and top-1 agreement equal a direct computation over
// the same positions from each model's own logits, a model against itself scores KL 0 and 100%
// agreement, and the HTML page is self-contained.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../common/random_model.hpp"
#include "compress/evaluate.hpp"
#include "compress/perplexity.hpp"
#include "compress/quantize_model.hpp"
#include "core/error.hpp"
#include "tokenizer/tokenizer.hpp"

namespace syslm::compress {
namespace {

constexpr const char* kText =
    "In the beginning God created the heaven and the earth. And the earth was without form, and "
    "void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face "
    "of the waters. And God said, Let there be light: and there was light. ";

std::string repeated(int copies) {
    std::string text;
    for (int i = 0; i < copies; ++i) text += kText;
    return text;
}

// The text in a file of the test folder; its path.
std::string write_file(const std::string& name, const std::string& text) {
    const std::string path = std::string(SYSLM_TEST_TMP) + "/" + name;
    std::ofstream(path) << text;
    return path;
}

std::vector<double> log_softmax(std::span<const float> l) {
    double mx = l[0], sum = 0;
    for (float v : l) mx = std::max<double>(mx, v);
    for (float v : l) sum += std::exp(v - mx);
    std::vector<double> out(l.size());
    for (size_t i = 0; i < l.size(); ++i) out[i] = l[i] - mx - std::log(sum);
    return out;
}

// Per scored position (chunks of 32 tokens, positions 16..30, as eval with n_ctx 32), computed
// directly from both models' logits: model b's top probability, KL(a || b), top-1 agreement.
struct DirectPosition {
    double conf, kl;
    bool agree;
};
std::vector<DirectPosition> direct_positions(const model::Model& a, const model::Model& b,
                                             const std::string& text) {
    const auto tok = tokenizer::Tokenizer::from_gguf(a.file());
    const std::vector<int32_t> tokens = tok.encode(text, true, false);
    const int32_t bos = tok.add_bos() ? tok.bos() : -1;
    model::Context ca(a, 32, 2, 32, DType::F16), cb(b, 32, 2, 32, DType::F16);
    const int V = a.hparams().n_vocab;
    std::vector<DirectPosition> pos;
    for (size_t c = 0; c + 32 <= tokens.size(); c += 32) {
        std::vector<int32_t> chunk(tokens.begin() + c, tokens.begin() + c + 32);
        if (bos >= 0) chunk[0] = bos;
        ca.reset();
        cb.reset();
        const auto spa = ca.forward(chunk, true);
        const std::vector<float> lga(spa.begin(), spa.end());
        const auto spb = cb.forward(chunk, true);
        for (int j = 16; j < 31; ++j) {
            const auto pa = log_softmax(std::span<const float>(lga).subspan(j * V, V));
            const auto pb = log_softmax(spb.subspan(static_cast<size_t>(j) * V, V));
            double kl = 0;
            for (int v = 0; v < V; ++v) kl += std::exp(pa[v]) * (pa[v] - pb[v]);
            const auto tb = std::max_element(pb.begin(), pb.end());
            pos.push_back({std::exp(*tb), kl,
                           tb - pb.begin() == std::max_element(pa.begin(), pa.end()) - pa.begin()});
        }
    }
    return pos;
}

TEST(Evaluate, MatchesDirectComputation) {
    const std::string dir = std::string(SYSLM_TEST_TMP) + "/";
    const std::string f32 =
        testing::write_test_model("eval_llama", testing::small_model_config("llama", 64, 8));
    QuantizeOptions q;
    q.target = {DType::Q4_0, KMix::None};  // 48-wide rows fall back to F16: a different model
    quantize_model(f32, dir + "eval_q.gguf", q);
    const std::string other = dir + "eval_q.gguf";
    const std::string text = repeated(6);
    const std::string text_path = write_file("eval_text.txt", text);

    EvalOptions o;
    o.n_ctx = 32;
    o.threads = 2;
    o.speed_prompt = 16;
    o.speed_gen = 4;
    o.speed_reps = 1;
    const EvalReport r = evaluate({f32, other, f32}, {text_path}, o);
    ASSERT_EQ(r.models.size(), 3u);
    EXPECT_EQ(r.models[2].texts[0].kl, 0.0);  // the reference against itself
    EXPECT_EQ(r.models[2].texts[0].top1, 1.0);
    EXPECT_GT(r.models[1].texts[0].kl, 0.0);
    EXPECT_GT(r.models[0].decode_ts, 0.0);
    EXPECT_GT(r.models[0].prefill_ts, 0.0);
    EXPECT_GT(r.models[0].file_bytes, r.models[1].file_bytes);

    // Independent: perplexity() per model, and KL / top-1 from both models' logits.
    const model::Model a(f32), b(other);
    const auto tok = tokenizer::Tokenizer::from_gguf(a.file());
    const std::vector<int32_t> tokens = tok.encode(text, true, false);
    const int32_t bos = tok.add_bos() ? tok.bos() : -1;
    for (const auto& [m, e] : {std::pair{&a, &r.models[0]}, std::pair{&b, &r.models[1]}}) {
        model::Context ctx(*m, 32, 2, 32, DType::F16);
        const PerplexityResult p = perplexity(ctx, tokens, 32, bos);
        EXPECT_NEAR(e->texts[0].ppl, p.ppl, 1e-7 * p.ppl);  // same sums, other order
        EXPECT_EQ(e->texts[0].n_scored, p.n_scored);
    }
    double kl = 0;
    int agree = 0, n = 0;
    for (const DirectPosition& p : direct_positions(a, b, text)) {
        kl += p.kl;
        agree += p.agree;
        ++n;
    }
    EXPECT_NEAR(r.models[1].texts[0].kl, kl / n, 1e-9 + 1e-7 * kl / n);
    EXPECT_NEAR(r.models[1].texts[0].top1, static_cast<double>(agree) / n, 1e-12);

    const std::string html = eval_html(r);
    EXPECT_NE(html.find("<svg"), std::string::npos);
    EXPECT_EQ(html.find("http"), std::string::npos);  // nothing fetched
    EXPECT_EQ(html.find("<script"), std::string::npos);
    EXPECT_NE(eval_markdown(r).find("eval_q.gguf"), std::string::npos);
    EXPECT_NE(eval_json(r).find("\"kl\""), std::string::npos);
}

// The cascade curve against a direct computation: per scored position the answering model's
// top probability, its KL from the reference and top-1 agreement, sorted by that probability;
// deferring the least confident share k / n gives agreement (k + agreeing kept) / n and KL
// (kept KL) / n; random deferral the same share of the averages.
TEST(Evaluate, CascadeCurveMatchesDirectComputation) {
    const std::string dir = std::string(SYSLM_TEST_TMP) + "/";
    const std::string cloud =
        testing::write_test_model("cascade_cloud", testing::small_model_config("llama", 64, 8));
    QuantizeOptions q;
    q.target = {DType::Q4_0, KMix::None};
    quantize_model(cloud, dir + "cascade_edge.gguf", q);
    const std::string edge = dir + "cascade_edge.gguf";
    const std::string text = repeated(5);
    const std::string text_path = write_file("cascade_text.txt", text);
    EvalOptions o;
    o.n_ctx = 32;
    o.threads = 2;
    o.speed_prompt = o.speed_gen = 0;
    o.cascade = true;
    const EvalReport r = evaluate({cloud, edge}, {text_path}, o);
    EXPECT_TRUE(r.models[0].texts[0].cascade.empty());  // the reference answers for itself
    const std::vector<CascadePoint>& curve = r.models[1].texts[0].cascade;
    ASSERT_EQ(curve.size(), 11u);

    const model::Model a(cloud), b(edge);
    std::vector<DirectPosition> pos = direct_positions(a, b, text);
    std::stable_sort(pos.begin(), pos.end(), [](const DirectPosition& x, const DirectPosition& y) {
        return x.conf < y.conf;
    });
    const double n = static_cast<double>(pos.size());
    double all_agree = 0, all_kl = 0;
    for (const DirectPosition& p : pos) {
        all_agree += p.agree;
        all_kl += p.kl;
    }
    for (size_t i = 0; i < curve.size(); ++i) {
        const size_t k = static_cast<size_t>(std::lround(n * static_cast<double>(i) / 10));
        double agree = static_cast<double>(k), kl = 0;
        for (size_t j = k; j < pos.size(); ++j) {
            agree += pos[j].agree;
            kl += pos[j].kl;
        }
        const double share = static_cast<double>(k) / n;
        EXPECT_DOUBLE_EQ(curve[i].share, share) << i;
        EXPECT_NEAR(curve[i].agreement, agree / n, 1e-12) << i;
        EXPECT_NEAR(curve[i].kl, kl / n, 1e-9 + 1e-7 * kl / n) << i;
        EXPECT_NEAR(curve[i].threshold, k < pos.size() ? pos[k].conf : 1.0, 1e-9) << i;
        EXPECT_NEAR(curve[i].random_agreement, share + (1 - share) * all_agree / n, 1e-12) << i;
        EXPECT_NEAR(curve[i].random_kl, (1 - share) * all_kl / n, 1e-9 + 1e-7 * all_kl / n) << i;
    }
    EXPECT_DOUBLE_EQ(curve.back().agreement, 1.0);  // everything deferred
    EXPECT_EQ(curve.back().kl, 0.0);
    EXPECT_NE(eval_markdown(r).find("cascade: "), std::string::npos);
    EXPECT_NE(eval_json(r).find("\"random_agreement\""), std::string::npos);
}

// Successive halving measures a file on the first chunks, then on the rest: the merged figures
// equal one measurement over all of them.
TEST(Evaluate, ChunksMeasuredInTwoPartsMergeToTheWhole) {
    const std::string dir = std::string(SYSLM_TEST_TMP) + "/";
    const std::string f32 =
        testing::write_test_model("eval_parts", testing::small_model_config("llama", 64, 8));
    QuantizeOptions q;
    q.target = {DType::Q8_0, KMix::None};
    quantize_model(f32, dir + "eval_parts_q.gguf", q);
    const std::string text = repeated(6);
    const std::string text_path = write_file("eval_parts.txt", text);
    EvalOptions o;
    o.n_ctx = 32;
    o.threads = 2;
    o.speed_prompt = o.speed_gen = 0;
    o.max_chunks = 5;
    const TextEval whole =
        evaluate({f32, dir + "eval_parts_q.gguf"}, {text_path}, o).models[1].texts[0];
    o.max_chunks = 2;
    const TextEval head =
        evaluate({f32, dir + "eval_parts_q.gguf"}, {text_path}, o).models[1].texts[0];
    o.first_chunk = 2;
    o.max_chunks = 5;
    const TextEval tail =
        evaluate({f32, dir + "eval_parts_q.gguf"}, {text_path}, o).models[1].texts[0];
    ASSERT_GT(head.kl, 0.0);
    const TextEval m = merge(head, tail);
    EXPECT_EQ(m.n_scored, whole.n_scored);
    EXPECT_EQ(head.n_scored * 3, tail.n_scored * 2);
    EXPECT_NEAR(m.kl, whole.kl, 1e-12 * whole.kl);  // sums in another order
    EXPECT_NEAR(m.top1, whole.top1, 1e-12);
    EXPECT_NEAR(m.ppl, whole.ppl, 1e-12 * whole.ppl);
    EXPECT_GT(m.kl_stderr, 0.0);
    o.first_chunk = 5;
    EXPECT_THROW(evaluate({f32}, {text_path}, o), Error);
}

// A split model (eval --split-at): with f32 rows exactly the model (KL 0, the same perplexity);
// with int8 rows the KL equals a direct computation from the logits of the two halves, the rows
// rounded as the wire carries them.
TEST(Evaluate, ASplitModelsKlIsWhatItsWireCosts) {
    const std::string f32 =
        testing::write_test_model("eval_split", testing::small_model_config("llama", 64, 8));
    const std::string text = repeated(4);
    const std::string text_path = write_file("eval_split.txt", text);
    EvalOptions o;
    o.n_ctx = 32;
    o.threads = 2;
    o.speed_prompt = o.speed_gen = 0;
    o.split_at = 1;
    o.wires = {"f32", "int8"};
    const EvalReport r = evaluate({f32}, {text_path}, o);
    ASSERT_EQ(r.models.size(), 3u);
    EXPECT_EQ(r.models[1].split, "1/f32");
    EXPECT_EQ(r.models[1].texts[0].kl, 0.0);
    EXPECT_EQ(r.models[1].texts[0].ppl, r.models[0].texts[0].ppl);
    const double kl8 = r.models[2].texts[0].kl;
    EXPECT_GT(kl8, 0.0);

    const model::Model m(f32);
    const auto tok = tokenizer::Tokenizer::from_gguf(m.file());
    const std::vector<int32_t> tokens = tok.encode(text, true, false);
    const int V = m.hparams().n_vocab;
    const int64_t E = m.hparams().n_embd;
    model::Context whole(m, 32, 2, 32, DType::F16), edge(m, 32, 2, 32, DType::F16),
        cloud(m, 32, 2, 32, DType::F16);
    double kl = 0;
    int n = 0;
    for (size_t c = 0; c + 32 <= tokens.size(); c += 32) {
        std::vector<int32_t> chunk(tokens.begin() + c, tokens.begin() + c + 32);
        chunk[0] = tok.bos();
        whole.reset();
        edge.reset();
        cloud.reset();
        const auto w = whole.forward(chunk, true);
        const std::vector<float> lw(w.begin(), w.end());
        const auto res = edge.residual_until(1, chunk);
        std::vector<float> rounded(res.size());
        for (int64_t t = 0; t < 32; ++t) {  // absmax / 127 per row, to nearest
            float amax = 0;
            for (int64_t i = 0; i < E; ++i) amax = std::max(amax, std::fabs(res[t * E + i]));
            const float scale = amax / 127.0f, inv = 1.0f / scale;
            for (int64_t i = 0; i < E; ++i)
                rounded[t * E + i] =
                    scale * std::clamp(std::nearbyint(res[t * E + i] * inv), -127.0f, 127.0f);
        }
        const auto s = cloud.forward_from(1, rounded);
        for (int j = 16; j < 31; ++j) {
            const auto pa = log_softmax(std::span<const float>(lw).subspan(j * V, V));
            const auto pb = log_softmax(s.subspan(static_cast<size_t>(j) * V, V));
            for (int v = 0; v < V; ++v) kl += std::exp(pa[v]) * (pa[v] - pb[v]);
            ++n;
        }
    }
    EXPECT_NEAR(kl8, kl / n, 1e-9 + 1e-7 * kl / n);  // as MatchesDirectComputation
    EXPECT_GT(kl8, 1e-8);                             // well above that bound
    EXPECT_NE(eval_markdown(r).find("split at 1, int8 rows"), std::string::npos);
}

TEST(Evaluate, RefusesMismatchedVocabularyAndShortText) {
    const std::string dir = std::string(SYSLM_TEST_TMP) + "/";
    const std::string m =
        testing::write_test_model("eval_llama2", testing::small_model_config("llama", 64, 9));
    const std::string text_path = dir + "eval_short.txt";
    std::ofstream(text_path) << "Too short.";
    EvalOptions o;
    o.n_ctx = 32;
    try {
        evaluate({m}, {text_path}, o);
        FAIL() << "short text accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("eval_short.txt"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace syslm::compress
