// Sensitivity measured by running the model: the file's own type costs nothing, fewer bits cost
// more KL than more bits for the same tensor, every option's bytes are its type's row bytes, and
// mean_kl agrees with the definition computed here in long double.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../common/random_model.hpp"
#include "io/gguf.hpp"
#include "kernels/type_traits.hpp"
#include "tune/sensitivity.hpp"

namespace syslm::tune {
namespace {

// A 2-layer llama of width 64 (rows that fit the 32- and 256-blocks alike) and 130 random
// calibration tokens; one chunk of 64, 2 threads.
struct Setup {
    std::string path;
    std::vector<int32_t> tokens;
    SensitivityOptions options;
};

Setup setup(const std::string& name, uint64_t model_seed, uint32_t token_seed,
            std::vector<DType> types) {
    model::InitConfig c = testing::small_model_config("llama", 64, model_seed);
    c.n_embd = 64;
    c.n_head = 4;
    c.n_ff = 96;
    Setup s{testing::write_test_model(name, c), std::vector<int32_t>(130), {}};
    std::mt19937 rng(token_seed);
    for (auto& t : s.tokens) t = static_cast<int32_t>(3 + rng() % 2000);
    s.options.types = std::move(types);
    s.options.n_ctx = 64;
    s.options.max_chunks = 1;
    s.options.threads = 2;
    return s;
}

TEST(Sensitivity, FewerBitsCostMoreAndTheFileTypeNothing) {
    auto [path, tokens, o] = setup("sens", 31, 5, {DType::F32, DType::Q8_0, DType::Q4_0, DType::Q4_K});
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

// Proxy mode: per tensor one type is run and its KL is exactly the measured mode's; the others
// are scaled by weighted error, so the ordering of a tensor's types follows their error.
TEST(Sensitivity, ProxyRunsOneTypePerTensorAndScalesTheRest) {
    auto [path, tokens, o] =
        setup("sens_proxy", 37, 9, {DType::F32, DType::Q8_0, DType::Q5_0, DType::Q4_0});
    const auto full = measure_sensitivity(path, tokens, o);
    o.proxy = true;
    const auto proxy = measure_sensitivity(path, tokens, o);
    ASSERT_EQ(full.size(), proxy.size());
    for (size_t i = 0; i < full.size(); ++i) {
        int measured = 0;
        for (size_t k = 0; k < proxy[i].options.size(); ++k) {
            const TypeCost& p = proxy[i].options[k];
            const TypeCost& m = full[i].options[k];
            ASSERT_EQ(p.type, m.type);
            if (p.type == DType::F32) {
                EXPECT_EQ(p.kl, 0);
                continue;
            }
            EXPECT_GT(p.weighted_error, 0) << proxy[i].name;
            if (p.measured) {
                ++measured;
                EXPECT_EQ(p.kl, m.kl) << proxy[i].name;  // the same run
            }
            for (const TypeCost& q : proxy[i].options) {
                if (q.type != DType::F32 && q.weighted_error < p.weighted_error) {
                    EXPECT_LT(q.kl, p.kl) << proxy[i].name;
                }
            }
        }
        EXPECT_EQ(measured, 1) << proxy[i].name;
    }
}

// Q8_0 with uniform importance: each element is off by at most half its block's step
// (max |x| / 127), which bounds the error from the arithmetic; F16 of values that F16 holds
// exactly has none.
TEST(Sensitivity, WeightedErrorIsWithinTheRoundingBound) {
    std::mt19937 rng(3);
    const int64_t n = 96, rows = 7;
    std::vector<float> w(static_cast<size_t>(n * rows));
    for (float& x : w) x = std::normal_distribution<float>(0, 0.7f)(rng);
    std::vector<uint8_t> q(row_bytes(DType::Q8_0, n) * rows);
    for (int64_t r = 0; r < rows; ++r)
        kernels::type_traits(DType::Q8_0).from_float(w.data() + r * n,
                                                     q.data() + r * row_bytes(DType::Q8_0, n), n);
    double bound = 0;
    for (size_t b = 0; b < w.size(); b += 32) {
        float mx = 0;
        for (size_t j = b; j < b + 32; ++j) mx = std::max(mx, std::abs(w[j]));
        const double half_step = mx / 127.0 / 2 * (1 + 1e-3);  // d is stored as F16
        bound += 32 * half_step * half_step;
    }
    const double e = weighted_error(w, q, DType::Q8_0, n, {});
    EXPECT_GT(e, 0);
    EXPECT_LE(e, bound);
    std::vector<float> imp(static_cast<size_t>(n), 0.0f);
    imp[5] = 2.0f;  // only column 5 counts, twice
    double col5 = 0;
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
        kernels::type_traits(DType::Q8_0).to_float(q.data() + r * row_bytes(DType::Q8_0, n),
                                                   row.data(), n);
        col5 += 2.0 * std::pow(static_cast<double>(w[r * n + 5]) - row[5], 2);
    }
    EXPECT_NEAR(weighted_error(w, q, DType::Q8_0, n, imp), col5, 1e-12 + 1e-9 * col5);
    std::vector<float> halves(w.size());
    for (size_t i = 0; i < w.size(); ++i) halves[i] = std::ldexp(std::round(w[i] * 64), -6);
    std::vector<uint8_t> h(row_bytes(DType::F16, n) * rows);
    for (int64_t r = 0; r < rows; ++r)
        kernels::type_traits(DType::F16).from_float(halves.data() + r * n,
                                                    h.data() + r * row_bytes(DType::F16, n), n);
    EXPECT_EQ(weighted_error(halves, h, DType::F16, n, {}), 0);
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
