// The magnitude a quantized dot's float rounding scales with, for tolerances derived from the
// arithmetic: sum |x_i * y_i| over the dequantized rows, plus, for types whose kernels split each
// element into a level part and a min / offset part (which cancel in x_i but are rounded on
// their own), the magnitude of those parts.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.hpp"

namespace syslm::kernels::testing {

inline bool splits_levels_and_min(DType t) {
    switch (t) {
        case DType::Q4_1:
        case DType::Q5_1:
        case DType::Q2_K:
        case DType::Q3_K:
        case DType::Q4_K:
        case DType::Q5_K:
        case DType::Q6_K:
        case DType::Q4_K_LANE:
        case DType::Q5_K_LANE:
        case DType::Q6_K_LANE:
            return true;
        default:
            return false;
    }
}

inline double dot_magnitude(DType t, const std::vector<float>& xd, const std::vector<float>& yd) {
    double mag = 0;
    for (size_t i = 0; i < xd.size(); ++i) mag += std::fabs(static_cast<double>(xd[i]) * yd[i]);
    if (splits_levels_and_min(t)) {
        // Bound |min part| by the row's decodable range: twice the row's max |x_i| covers
        // d * sc * level_max and the min (both are at most the block's range).
        double amax = 0;
        for (float v : xd) amax = std::max(amax, std::fabs(static_cast<double>(v)));
        for (float v : yd) mag += 2 * amax * std::fabs(static_cast<double>(v));
    }
    return mag;
}

}  // namespace syslm::kernels::testing
