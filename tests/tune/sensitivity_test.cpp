// Sensitivity measured by running the model: the file's own type costs nothing, fewer bits cost
// more KL than more bits for the same tensor, every option's bytes are its type's row bytes, and
// mean_kl agrees with the definition computed here in long double.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../common/random_model.hpp"
#include "io/gguf.hpp"
#include "tune/sensitivity.hpp"

namespace syslm::tune {
namespace {

TEST(Sensitivity, FewerBitsCostMoreAndTheFileTypeNothing) {
    model::InitConfig c = testing::small_model_config("llama", 64, 31);
    c.n_embd = 64;
    c.n_head = 4;
    c.n_ff = 96;
    const std::string path = testing::write_test_model("sens", c);
    std::mt19937 rng(5);
    std::vector<int32_t> tokens(130);
    for (auto& t : tokens) t = static_cast<int32_t>(3 + rng() % 2000);
    SensitivityOptions o;
    o.types = {DType::F32, DType::Q8_0, DType::Q4_0, DType::Q4_K};
    o.n_ctx = 64;
    o.max_chunks = 1;
    o.threads = 2;
    size_t calls = 0;
    o.progress = [&](size_t done, size_t total) {
        ++calls;
        EXPECT_LE(done, total);
    };
    const auto table = measure_sensitivity(path, tokens, o);
    const io::GGUFFile f(path);
    ASSERT_EQ(table.size(), 2u * 7 + 2);  // 7 matrices per block, the output and the embedding
    size_t options = 0;
    for (const TensorSensitivity& s : table) {
        const io::GGUFTensor& t = f.tensor(s.name);
        for (const TypeCost& q : s.options) {
            ++options;
            EXPECT_EQ(q.bytes, row_bytes(q.type, t.ne[0]) * static_cast<uint64_t>(t.rows()));
            if (q.type == DType::F32) EXPECT_EQ(q.kl, 0.0) << s.name;
            else EXPECT_GT(q.kl, 0.0) << s.name << " " << dtype_name(q.type);
        }
        // Q4_K's 256-blocks fit no row of 64 or 96: not offered.
        for (const TypeCost& q : s.options) EXPECT_NE(q.type, DType::Q4_K) << s.name;
        double q8 = -1, q4 = -1;
        for (const TypeCost& q : s.options) {
            if (q.type == DType::Q8_0) q8 = q.kl;
            if (q.type == DType::Q4_0) q4 = q.kl;
        }
        ASSERT_GE(q8, 0);
        ASSERT_GE(q4, 0);
        EXPECT_LT(q8, q4) << s.name;
    }
    EXPECT_EQ(calls, options);
}

TEST(Sensitivity, MeanKlIsTheDefinition) {
    std::mt19937 rng(8);
    const int64_t V = 37, rows = 5;
    std::vector<float> a(V * rows), b(V * rows);
    for (auto& x : a) x = std::normal_distribution<float>(0, 3)(rng);
    for (auto& x : b) x = std::normal_distribution<float>(0, 3)(rng);
    long double want = 0;
    for (int64_t r = 0; r < rows; ++r) {
        long double za = 0, zb = 0;
        for (int64_t j = 0; j < V; ++j) {
            za += std::exp(static_cast<long double>(a[r * V + j]));
            zb += std::exp(static_cast<long double>(b[r * V + j]));
        }
        for (int64_t j = 0; j < V; ++j) {
            const long double p = std::exp(static_cast<long double>(a[r * V + j])) / za;
            const long double q = std::exp(static_cast<long double>(b[r * V + j])) / zb;
            want += p * std::log(p / q);
        }
    }
    want /= rows;
    EXPECT_NEAR(mean_kl(a, b, V), static_cast<double>(want), 1e-12 * static_cast<double>(want) + 1e-15);
    EXPECT_EQ(mean_kl(a, a, V), 0.0);
}

}  // namespace
}  // namespace syslm::tune
