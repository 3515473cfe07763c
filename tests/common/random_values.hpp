// Seeded normal random floats for kernel tests: awkward values, never zeros.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace syslm::testing {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float stddev = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, stddev);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

}  // namespace syslm::testing
