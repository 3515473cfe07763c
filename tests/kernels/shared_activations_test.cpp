// matmul() over SharedActivations (one conversion of the input for several matrices) gives the
// same bits as matmul() over the float input, whatever the order of partner types requested
// (each request of a new partner must reconvert), for decode-sized and GEMM-sized token counts.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/type_traits.hpp"
#include "quant_test_inputs.hpp"

namespace syslm::kernels {
namespace {

struct Mat {
    DType type;
    int64_t n_out;
    std::vector<uint8_t> bytes;
    WeightView view(int64_t n_in) const { return {type, n_in, n_out, bytes.data()}; }
};

Mat random_matrix(DType type, int64_t n_in, int64_t n_out, testing::SplitMix64& rng) {
    Mat m{type, n_out, std::vector<uint8_t>(row_bytes(type, n_in) * static_cast<size_t>(n_out))};
    std::vector<float> row(static_cast<size_t>(n_in));
    for (int64_t r = 0; r < n_out; ++r) {
        for (float& v : row) v = rng.normal();
        type_traits(type).from_float(row.data(), m.bytes.data() + r * row_bytes(type, n_in), n_in);
    }
    return m;
}

TEST(SharedActivations, MatmulEqualsThePerCallConversion) {
    const int64_t n_in = 512;  // a multiple of every block size
    testing::SplitMix64 rng(77);
    // Partners in turn: Q8_0, Q8_0 (reused), Q8_K, F16, F32, Q8_0 again.
    const DType types[] = {DType::Q4_0, DType::Q8_0, DType::Q4_K,
                           DType::F16,  DType::F32,  DType::Q4_0};
    std::vector<Mat> mats;
    int64_t n_out = 37;
    for (DType t : types) mats.push_back(random_matrix(t, n_in, n_out++, rng));
    ThreadPool pool(2);
    for (int64_t n_tokens : {1, 3, 40}) {
        std::vector<float> x(static_cast<size_t>(n_tokens * n_in));
        for (float& v : x) v = rng.normal();
        SharedActivations shared;
        shared.reset(x.data(), n_tokens, n_in);
        for (const Mat& m : mats) {
            std::vector<float> want(static_cast<size_t>(n_tokens * m.n_out));
            std::vector<float> got(want.size(), -1.0f);
            matmul(m.view(n_in), x.data(), n_tokens, want.data(), pool);
            matmul(m.view(n_in), shared, got.data(), pool);
            EXPECT_EQ(got, want) << dtype_name(m.type) << " tokens=" << n_tokens;
        }
    }
}

// Several products over one input in one call (q, k and v; gate and up): the same bits as one
// matmul after the other, with mixed partner types, biases and row counts that are not a multiple
// of the tile; one token with small matrices is fused, anything else is not.
TEST(SharedActivations, FusedMatmulsEqualOneAfterTheOther) {
    const int64_t n_in = 256;
    testing::SplitMix64 rng(91);
    const Mat a = random_matrix(DType::Q4_0, n_in, 53, rng);
    const Mat b = random_matrix(DType::Q4_K, n_in, 37, rng);
    const Mat c = random_matrix(DType::F16, n_in, 100, rng);
    const Mat d = random_matrix(DType::Q8_0, n_in, 17, rng);
    std::vector<float> bias_b(37), bias_d(17);
    for (float& v : bias_b) v = rng.normal();
    for (float& v : bias_d) v = rng.normal();
    const WeightView wa = a.view(n_in), wb = b.view(n_in), wc = c.view(n_in), wd = d.view(n_in);
    for (int threads : {1, 2, 3})
        for (int64_t n_tokens : {1, 2}) {
            ThreadPool pool(threads);
            std::vector<float> x(static_cast<size_t>(n_tokens * n_in));
            for (float& v : x) v = rng.normal();
            auto out = [&](const Mat& m, float fill) {
                return std::vector<float>(static_cast<size_t>(n_tokens * m.n_out), fill);
            };
            std::vector<float> ya = out(a, -1), yb = out(b, -1), yc = out(c, -1), yd = out(d, -1);
            std::vector<float> za = out(a, -2), zb = out(b, -2), zc = out(c, -2), zd = out(d, -2);
            const std::initializer_list<MatmulOutput> group = {{wa, ya.data()},
                                                               {wb, yb.data(), bias_b.data()},
                                                               {wc, yc.data()},
                                                               {wd, yd.data(), bias_d.data()}};
            EXPECT_EQ(fused_matmuls(group, n_tokens), n_tokens == 1);
            SharedActivations shared;
            shared.reset(x.data(), n_tokens, n_in);
            matmul(group, shared, pool);
            matmul(wa, x.data(), n_tokens, za.data(), pool);
            matmul(wb, x.data(), n_tokens, zb.data(), pool, bias_b.data());
            matmul(wc, x.data(), n_tokens, zc.data(), pool);
            matmul(wd, x.data(), n_tokens, zd.data(), pool, bias_d.data());
            const std::string at = "threads=" + std::to_string(threads) +
                                   " tokens=" + std::to_string(n_tokens);
            EXPECT_EQ(ya, za) << at;
            EXPECT_EQ(yb, zb) << at;
            EXPECT_EQ(yc, zc) << at;
            EXPECT_EQ(yd, zd) << at;
        }
    // A matrix as large as those whose reading is timed is never fused.
    const Mat big = random_matrix(DType::Q8_0, n_in, 1024, rng);
    std::vector<float> y_big(1024), y_a(53);
    EXPECT_FALSE(fused_matmuls({{big.view(n_in), y_big.data()}, {wa, y_a.data()}}, 1));
}

TEST(SharedActivations, RejectsActivationsOfTheWrongLength) {
    testing::SplitMix64 rng(5);
    const Mat m = random_matrix(DType::Q8_0, 64, 4, rng);
    std::vector<float> x(96, 1.5f), y(4);
    SharedActivations shared;
    shared.reset(x.data(), 1, 96);
    ThreadPool pool(1);
    EXPECT_THROW(matmul(m.view(64), shared, y.data(), pool), Error);
}

}  // namespace
}  // namespace syslm::kernels
