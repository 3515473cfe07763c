// The decode-streams choice (kernels/cpu/decode_streams.hpp): measured on the process's own
// decode calls, and never changing a result while it measures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/thread_pool.hpp"
#include "kernels/cpu/decode_streams.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/type_traits.hpp"
#include "kernel_choices_store.hpp"
#include "kernels/kernel_choices.hpp"
#include "quant_test_inputs.hpp"

namespace syslm::kernels {
namespace {

// N rows of K weight-like values in `type`.
std::vector<uint8_t> quantized_rows(DType type, uint64_t seed, int64_t N, int64_t K) {
    const std::vector<float> wf = testing::make_weight_like(seed, N, K);
    const size_t rb = row_bytes(type, K);
    std::vector<uint8_t> wq(rb * N);
    for (int64_t o = 0; o < N; ++o) type_traits(type).from_float(wf.data() + o * K, &wq[o * rb], K);
    return wq;
}

TEST(DecodeStreams, ChoosesOneWayFromTimedCallsWithoutChangingAResult) {
    if (std::getenv("SYSLM_DECODE_STREAMS")) GTEST_SKIP() << "SYSLM_DECODE_STREAMS fixes the choice";
    // 333 rows of 2048 Q8_0 (~710 KiB): large enough to be timed; an odd row count, so the two
    // streams of a thread's share differ in length.
    constexpr int64_t K = 2048, N = 333;
    const DType type = DType::Q8_0;
    const std::vector<uint8_t> wq = quantized_rows(type, 71, N, K);
    const size_t rb = row_bytes(type, K);
    const WeightView w{type, K, N, wq.data()};
    const std::vector<float> x = testing::make_quant_input(72, K);

    // Each row's own dot, as one token alone computes it.
    const TypeTraits& tt = type_traits(type);
    std::vector<uint8_t> xq(row_bytes(tt.vec_dot_type, K));
    type_traits(tt.vec_dot_type).from_float_fast(x.data(), xq.data(), K);
    std::vector<float> want(N);
    for (int64_t o = 0; o < N; ++o)
        vec_dot_tokens(tt, K, 1, &wq[o * rb], rb, 1, xq.data(), xq.size(), &want[o], 1);

    const testing::StoreAt store;  // the choice made here is stored for the next processes
    ThreadPool pool(2);
    std::vector<float> got(N);
    int calls = 0;
    for (; calls < 2000 && decode_streams_choice(type).streams == 0; ++calls) {
        std::fill(got.begin(), got.end(), NAN);
        matmul(w, x.data(), 1, got.data(), pool);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), N * sizeof(float)), 0) << "call " << calls;
    }
    const DecodeStreamsChoice c = decode_streams_choice(type);
    ASSERT_TRUE(c.streams == 1 || c.streams == 2) << "no choice after " << calls << " calls";
    EXPECT_FALSE(c.from_env);
    if (c.remembered) GTEST_SKIP() << "this process had the choice from its store already";
    std::ifstream stored(std::filesystem::path(kernel_choices_dir()) / "decode-streams-Q8_0");
    std::string value;
    ASSERT_TRUE(std::getline(stored, value)) << "the choice was not stored";
    EXPECT_EQ(value, std::to_string(c.streams));
    for (int v = 0; v < 2; ++v) {
        EXPECT_GE(c.samples[v], 96) << v + 1 << " streams";
        EXPECT_GT(c.gb_per_s[v], 0.0) << v + 1 << " streams";
    }
    // The chosen way, now fixed, still gives every row its own dot.
    matmul(w, x.data(), 1, got.data(), pool);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), N * sizeof(float)), 0);
    EXPECT_NE(describe_decode_streams().find("Q8_0 weights:"), std::string::npos)
        << describe_decode_streams();
}

// Calls too small to time add no sample (other tests may have timed this type already).
TEST(DecodeStreams, SmallCallsAreNotTimed) {
    if (std::getenv("SYSLM_DECODE_STREAMS")) GTEST_SKIP() << "SYSLM_DECODE_STREAMS fixes the choice";
    constexpr int64_t K = 256, N = 45;
    const DType type = DType::Q4_1;
    const std::vector<uint8_t> wq = quantized_rows(type, 73, N, K);
    const std::vector<float> x = testing::make_quant_input(74, K);
    std::vector<float> y(N);
    ThreadPool pool(2);
    const DecodeStreamsChoice before = decode_streams_choice(type);
    for (int i = 0; i < 400; ++i) matmul(WeightView{type, K, N, wq.data()}, x.data(), 1, y.data(), pool);
    const DecodeStreamsChoice after = decode_streams_choice(type);
    EXPECT_EQ(after.streams, before.streams);
    EXPECT_EQ(after.samples[0], before.samples[0]);
    EXPECT_EQ(after.samples[1], before.samples[1]);
}

// A choice stored by an earlier process is used from the first call, without timing (Q5_0: a
// type no other test here decodes, since the choice is per process and type).
TEST(DecodeStreams, AStoredChoiceIsUsedWithoutTiming) {
    if (std::getenv("SYSLM_DECODE_STREAMS")) GTEST_SKIP() << "SYSLM_DECODE_STREAMS fixes the choice";
    const testing::StoreAt store;
    std::filesystem::create_directories(kernel_choices_dir());
    std::ofstream(std::filesystem::path(kernel_choices_dir()) / "decode-streams-Q5_0")
        << "1\none stream 9.9 GB/s, two streams 8.8 GB/s\n";
    constexpr int64_t K = 2048, N = 301;  // ~680 KiB: large enough to be timed
    const DType type = DType::Q5_0;
    const std::vector<uint8_t> wq = quantized_rows(type, 75, N, K);
    const std::vector<float> x = testing::make_quant_input(76, K);
    std::vector<float> y(N);
    ThreadPool pool(2);
    for (int i = 0; i < 3; ++i) matmul(WeightView{type, K, N, wq.data()}, x.data(), 1, y.data(), pool);
    const DecodeStreamsChoice c = decode_streams_choice(type);
    EXPECT_EQ(c.streams, 1);
    EXPECT_TRUE(c.remembered);
    EXPECT_EQ(c.samples[0] + c.samples[1], 0) << "nothing timed";
    EXPECT_NE(describe_decode_streams().find("Q5_0 weights: one stream (remembered: one stream 9.9"),
              std::string::npos)
        << describe_decode_streams();
}

}  // namespace
}  // namespace syslm::kernels
