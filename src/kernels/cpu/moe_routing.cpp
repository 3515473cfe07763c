#include "kernels/cpu/moe_routing.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace syslm::kernels {

int64_t moe_route_row(float* p, int64_t n_expert, const MoeRouting& r, int64_t* order, int32_t* ids,
                      float* weights, float* lse) {
    const float mx = *std::max_element(p, p + n_expert);
    double sum = 0;
    for (int64_t e = 0; e < n_expert; ++e) sum += (p[e] = std::exp(p[e] - mx));
    for (int64_t e = 0; e < n_expert; ++e) p[e] = static_cast<float>(p[e] / sum);
    if (lse) *lse = mx + static_cast<float>(std::log(sum));
    const int64_t k = r.k_max;
    std::iota(order, order + n_expert, 0);
    std::partial_sort(order, order + k, order + n_expert,
                      [&](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    int64_t n = k;
    if (r.top_p > 0) {  // the fewest experts whose probabilities reach top_p, within the bounds
        double cum = 0;
        n = 0;
        while (n < k && (n < r.k_min || cum < r.top_p)) cum += p[order[n++]];
    }
    double top = 0;
    for (int64_t j = 0; j < n; ++j) top += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
        ids[j] = j < n ? static_cast<int32_t>(order[j]) : -1;
        weights[j] = j >= n          ? 0.0f
                     : r.renormalise ? static_cast<float>(p[order[j]] / top)
                                     : p[order[j]];
    }
    return n;
}

}  // namespace syslm::kernels
