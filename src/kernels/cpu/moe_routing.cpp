#include "kernels/cpu/moe_routing.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace syslm::kernels {

void moe_route_row(float* p, int64_t n_expert, int64_t k, bool renormalise, int64_t* order,
                   int32_t* ids, float* weights) {
    const float mx = *std::max_element(p, p + n_expert);
    double sum = 0;
    for (int64_t e = 0; e < n_expert; ++e) sum += (p[e] = std::exp(p[e] - mx));
    for (int64_t e = 0; e < n_expert; ++e) p[e] = static_cast<float>(p[e] / sum);
    std::iota(order, order + n_expert, 0);
    std::partial_sort(order, order + k, order + n_expert, [&](int64_t a, int64_t b) {
        return p[a] > p[b] || (p[a] == p[b] && a < b);
    });
    double top = 0;
    for (int64_t j = 0; j < k; ++j) top += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
        ids[j] = static_cast<int32_t>(order[j]);
        weights[j] = renormalise ? static_cast<float>(p[order[j]] / top) : p[order[j]];
    }
}

}  // namespace syslm::kernels
