// The per-head Hadamard transform (kernels/cpu/hadamard.hpp) against the Sylvester matrix in
// double (H_1 = [1], H_2n = [[H_n, H_n], [H_n, -H_n]], divided by sqrt(d)), on strided rows with
// several heads, and applied twice: the input again (H / sqrt(d) is orthogonal and symmetric).
#include "kernels/cpu/hadamard.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "../common/random_values.hpp"

namespace syslm::kernels {
namespace {

// Sylvester's entry (i, j): (-1)^popcount(i & j).
double sylvester(int i, int j) {
    return std::popcount(static_cast<unsigned>(i & j)) % 2 ? -1.0 : 1.0;
}

TEST(Hadamard, HeadsMatchTheSylvesterMatrixAndInvertThemselves) {
    for (int d : {1, 2, 8, 32, 128}) {
        const int heads = 3, rows = 5;
        const int64_t stride = heads * d + 7;  // a gap after the heads, left alone
        const std::vector<float> x0 = syslm::testing::random_floats(rows * stride, 40 + d);
        std::vector<float> x = x0;
        hadamard_heads(x.data(), rows, stride, heads, d);
        for (int r = 0; r < rows; ++r) {
            for (int h = 0; h < heads; ++h)
                for (int i = 0; i < d; ++i) {
                    double ref = 0, abs = 0;
                    for (int j = 0; j < d; ++j) {
                        ref += sylvester(i, j) * x0[r * stride + h * d + j];
                        abs += std::fabs(x0[r * stride + h * d + j]);
                    }
                    // log2(d) rounded butterfly levels and the scaling
                    const double bound = (std::log2(d) + 2) * std::ldexp(1.0, -24) * abs;
                    EXPECT_NEAR(x[r * stride + h * d + i], ref / std::sqrt(d), bound + 1e-30)
                        << "d " << d << " row " << r << " head " << h << " element " << i;
                }
            for (int64_t g = heads * d; g < stride; ++g)
                EXPECT_EQ(x[r * stride + g], x0[r * stride + g]);
        }
        hadamard_heads(x.data(), rows, stride, heads, d);
        for (size_t i = 0; i < x.size(); ++i)
            EXPECT_NEAR(x[i], x0[i], 1e-5 * (1 + std::fabs(x0[i]))) << "d " << d << " at " << i;
    }
}

}  // namespace
}  // namespace syslm::kernels
