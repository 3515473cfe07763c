// The decode cost model recovers the rates it was generated from (no noise, no ridge), keeps a
// type seen in no file at the common rate, and predicts a mix from its parts.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "tune/decode_cost.hpp"

namespace syslm::tune {
namespace {

TEST(DecodeCost, RecoversKnownRatesAndFixedTime) {
    const double fixed = 40e-6;
    const std::map<DType, double> rate = {{DType::Q4_0, 1 / 30e9}, {DType::Q4_K, 1 / 18e9},
                                          {DType::Q6_K, 1 / 22e9}};
    const std::vector<std::map<DType, double>> mixes = {
        {{DType::Q4_0, 3.1e6}, {DType::Q6_K, 0.9e6}},
        {{DType::Q4_K, 3.7e6}, {DType::Q6_K, 1.1e6}},
        {{DType::Q4_0, 1.3e6}, {DType::Q4_K, 2.2e6}},
        {{DType::Q6_K, 5.3e6}},
        {{DType::Q4_0, 0.7e6}, {DType::Q4_K, 0.4e6}, {DType::Q6_K, 2.9e6}},
    };
    std::vector<DecodeTimeSample> samples;
    for (const auto& m : mixes) {
        double t = fixed;
        for (const auto& [type, b] : m) t += b * rate.at(type);
        samples.push_back({m, t});
    }
    const DecodeCostModel fit = fit_decode_cost(samples, 0.0);
    EXPECT_NEAR(fit.fixed_s, fixed, 1e-3 * fixed);
    for (const auto& [type, r] : rate) EXPECT_NEAR(fit.seconds_per_byte(type), r, 1e-3 * r);
    for (const DecodeTimeSample& s : samples)
        EXPECT_NEAR(fit.predict(s.bytes), s.seconds_per_token, 1e-4 * s.seconds_per_token);
    // A type no file had: the one-rate fit's figure.
    EXPECT_EQ(fit.seconds_per_byte(DType::Q2_K), fit.mean_s_per_byte);
    // With the ridge, rates move towards the common one but keep their order.
    const DecodeCostModel ridged = fit_decode_cost(samples, 0.5);
    EXPECT_LT(ridged.seconds_per_byte(DType::Q4_0), ridged.seconds_per_byte(DType::Q6_K));
    EXPECT_LT(ridged.seconds_per_byte(DType::Q6_K), ridged.seconds_per_byte(DType::Q4_K));
    EXPECT_THROW(fit_decode_cost({samples[0]}), Error);
}

}  // namespace
}  // namespace syslm::tune
