// LoRA adapters on the forward pass: a merged model (W + s B A, `lora merge`) gives the logits of
// the base with the adapter applied; an adapter on some rows of a call changes those rows alone
// (the others bit for bit the base's), and those rows get what a call of their own would; bad
// adapter files are errors naming the file and tensor. (Agreement with PEFT:
// tests/reference/test_lora.py.)
#include "model/lora.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "../common/model_checks.hpp"
#include "../common/random_lora.hpp"
#include "../common/random_model.hpp"
#include "core/error.hpp"
#include "io/gguf.hpp"
#include "model/random_init.hpp"
#include "model/transformer.hpp"

namespace syslm::model {
namespace {

using testing::max_rel_diff;

std::vector<float> run(const Model& m, std::span<const int32_t> ids, std::vector<LoraUse> uses) {
    Context ctx(m, 64, 2, 64, DType::F32);
    ctx.set_loras(std::move(uses));
    const auto l = ctx.forward(ids, true);
    return {l.begin(), l.end()};
}

TEST(Lora, AMergedModelEqualsTheBaseWithItsAdapter) {
    const Model base(
        testing::write_test_model("lora_base", testing::small_model_config("llama", 64, 3)));
    const LoraAdapter a(testing::write_random_lora(base, "all", {}), base);
    EXPECT_EQ(a.n_pairs(), 14);
    const std::string merged_path = std::string(SYSLM_TEST_TMP) + "/lora_merged.gguf";
    EXPECT_EQ(merge_lora(base, {{&a, 0.7f, {}}}, merged_path), 14);
    const Model merged(merged_path);
    // 11 rows take the row kernel, 40 the two GEMMs of a prefill run.
    for (const size_t n : {11, 40}) {
        const std::vector<int32_t> ids = testing::random_ids(n, 5);
        const std::vector<float> plain = run(base, ids, {});
        const std::vector<float> with = run(base, ids, {{&a, 0.7f, {}}});
        EXPECT_GT(max_rel_diff(with, plain), 1e-2f);  // the adapter matters
        // F32 throughout: the two orders of the same sums differ by rounding only.
        EXPECT_LT(max_rel_diff(run(merged, ids, {}), with), 1e-4f) << n;
    }
}

TEST(Lora, AnAdapterOnSomeRowsChangesThoseRowsAlone) {
    const Model base(
        testing::write_test_model("lora_base", testing::small_model_config("llama", 64, 3)));
    const LoraAdapter a(testing::write_random_lora(base, "all", {}), base);
    const std::vector<int32_t> ids = testing::random_ids(9, 6);
    const int64_t V = base.hparams().n_vocab, T = static_cast<int64_t>(ids.size());
    const std::vector<float> plain = run(base, ids, {});
    const std::vector<float> last = run(base, ids, {{&a, 1.0f, {T - 1}}});
    // Rows before the last: the base's, bit for bit (the same products, nothing added).
    EXPECT_TRUE(std::equal(plain.begin(), plain.begin() + (T - 1) * V, last.begin()));
    // The last row: as the base prefill of the others, then that row alone with the adapter.
    Context ctx(base, 64, 2, 64, DType::F32);
    ctx.forward(std::span(ids).first(static_cast<size_t>(T - 1)));
    ctx.set_loras({{&a, 1.0f, {}}});
    const auto one = ctx.forward(std::span(ids).last(1));
    EXPECT_LT(max_rel_diff(std::span(last).last(static_cast<size_t>(V)), one), 1e-4f);
    EXPECT_GT(max_rel_diff(std::span(last).last(static_cast<size_t>(V)),
                           std::span(plain).last(static_cast<size_t>(V))),
              1e-2f);
}

TEST(Lora, BadAdapterFilesAreErrorsNamingWhat) {
    const Model base(
        testing::write_test_model("lora_base", testing::small_model_config("llama", 64, 3)));
    const auto message = [&](const testing::RandomLora& s, const std::string& tag) {
        try {
            LoraAdapter a(testing::write_random_lora(base, tag, s), base);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    testing::RandomLora other;
    other.arch = "qwen2";
    EXPECT_NE(message(other, "arch").find("adapter for 'qwen2' models"), std::string::npos);
    testing::RandomLora transposed;
    transposed.transposed_a = true;
    const std::string t = message(transposed, "transposed");
    EXPECT_NE(t.find("blk.0.attn_"), std::string::npos) << t;
    testing::RandomLora unpaired;
    unpaired.drop_first_b = true;
    EXPECT_NE(message(unpaired, "unpaired").find(".lora_a without its .lora_b"), std::string::npos);
    testing::RandomLora norm;
    norm.targets = {"attn_norm"};
    EXPECT_NE(message(norm, "norm").find("LoRA on 'blk.0.attn_norm.weight' is not supported"),
              std::string::npos);
    EXPECT_THROW(LoraAdapter(base.file().path(), base), Error);  // a model, not an adapter
}

}  // namespace
}  // namespace syslm::model
