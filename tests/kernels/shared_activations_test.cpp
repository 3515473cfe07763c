// matmul() over SharedActivations (one conversion of the input for several matrices) gives the
// same bits as matmul() over the float input, whatever the order of partner types requested
// (each request of a new partner must reconvert), for decode-sized and GEMM-sized token counts.
#include <gtest/gtest.h>

#include <cstdint>
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
