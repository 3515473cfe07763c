// The FFN activation by kind (kernels/cpu/ffn_activation.hpp) is exactly the kind's kernels,
// forward and backward, on awkward lengths (the kernels themselves are checked against PyTorch
// autograd and finite differences in tests/reference and backward_test.cpp).
#include "kernels/cpu/ffn_activation.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "../common/random_values.hpp"
#include "kernels/cpu/activations.hpp"
#include "kernels/cpu/backward.hpp"

namespace syslm::kernels {
namespace {

TEST(FfnActivation, EachKindIsItsKernelsForwardAndBackward) {
    ThreadPool pool(2);
    EXPECT_TRUE(ffn_gated(FfnActivation::SwiGLU));
    EXPECT_FALSE(ffn_gated(FfnActivation::GeluTanh));
    for (const int64_t n : {1, 37, 1031}) {
        const std::vector<float> a = testing::random_floats(n, 1, 2.0f),
                                 b = testing::random_floats(n, 2, 2.0f),
                                 dout = testing::random_floats(n, 3, 2.0f);
        // SwiGLU: silu(a) * b.
        std::vector<float> got = a, want = a;
        ffn_activation(FfnActivation::SwiGLU, got.data(), b.data(), n, pool);
        swiglu(want.data(), b.data(), n, pool);
        EXPECT_EQ(got, want) << n;
        std::vector<float> da(n), db(n), wa(n), wb(n);
        ffn_activation_backward(FfnActivation::SwiGLU, a.data(), b.data(), dout.data(), da.data(),
                                db.data(), n, pool);
        swiglu_backward(a.data(), b.data(), dout.data(), wa.data(), wb.data(), n, pool);
        EXPECT_EQ(da, wa) << n;
        EXPECT_EQ(db, wb) << n;
        // GELU (tanh): b unused.
        got = a;
        want = a;
        ffn_activation(FfnActivation::GeluTanh, got.data(), nullptr, n, pool);
        gelu_tanh(want.data(), n, pool);
        EXPECT_EQ(got, want) << n;
        ffn_activation_backward(FfnActivation::GeluTanh, a.data(), nullptr, dout.data(), da.data(),
                                nullptr, n, pool);
        gelu_tanh_backward(a.data(), dout.data(), wa.data(), n, pool);
        EXPECT_EQ(da, wa) << n;
        // GELU (erf): b unused.
        got = a;
        want = a;
        ffn_activation(FfnActivation::GeluErf, got.data(), nullptr, n, pool);
        gelu_erf(want.data(), n, pool);
        EXPECT_EQ(got, want) << n;
        ffn_activation_backward(FfnActivation::GeluErf, a.data(), nullptr, dout.data(), da.data(),
                                nullptr, n, pool);
        gelu_erf_backward(a.data(), dout.data(), wa.data(), n, pool);
        EXPECT_EQ(da, wa) << n;
        // GeGLU: gelu_tanh(a) * b.
        EXPECT_TRUE(ffn_gated(FfnActivation::GeGLU));
        got = a;
        want = a;
        ffn_activation(FfnActivation::GeGLU, got.data(), b.data(), n, pool);
        geglu(want.data(), b.data(), n, pool);
        EXPECT_EQ(got, want) << n;
        ffn_activation_backward(FfnActivation::GeGLU, a.data(), b.data(), dout.data(), da.data(),
                                db.data(), n, pool);
        geglu_backward(a.data(), b.data(), dout.data(), wa.data(), wb.data(), n, pool);
        EXPECT_EQ(da, wa) << n;
        EXPECT_EQ(db, wb) << n;
    }
}

}  // namespace
}  // namespace syslm::kernels
