// Inputs for the one-time timings that choose kernels at run time (the GEMM panels, the
// vec_dot/GEMM crossover, the training GEMMs, prefill attention): deterministic values spread
// over [-scale, scale), from a 64-bit LCG whose state the caller carries from one buffer to the
// next. Speed does not depend on the values; they only must not be zeros or denormals.
#pragma once

#include <cstdint>
#include <vector>

namespace syslm::kernels {

inline void fill_timing_values(std::vector<float>& v, uint64_t& state, float scale = 1.0f) {
    for (float& f : v) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        f = scale * (static_cast<float>(static_cast<int64_t>(state >> 40) - (1 << 23)) / (1 << 23));
    }
}

}  // namespace syslm::kernels
