// Mixture-of-experts routing of one token, the one definition the inference forward and the
// training forward share: softmax over the router's X logits, then experts in order of
// probability (ties to the lower expert id), weighted by their probabilities, renormalised over
// the chosen ones when the model says so (expert_weights_norm; Mixtral's top-k softmax).
//
// How many: top-k takes k_max. Top-p (top_p > 0) takes experts until their probabilities sum to
// top_p, at least k_min and at most k_max: a confident router spends fewer experts on a token.
#pragma once

#include <cstdint>

namespace syslm::kernels {

struct MoeRouting {
    int64_t k_max;     // experts per token (top-k), or the most top-p may take
    int64_t k_min;     // the fewest top-p takes (1..k_max)
    float top_p;       // 0: top-k
    bool renormalise;  // weights over the chosen experts sum to 1
};

// p: the X router logits, replaced by the probabilities. ids[j] / weights[j], j < k_max: the
// chosen experts in order of probability, then -1 / 0 for the choices top-p left out. order:
// scratch of X entries. lse (if not null): log-sum-exp of the logits (the router z-loss's).
// Returns the number of experts chosen.
int64_t moe_route_row(float* p, int64_t n_expert, const MoeRouting& r, int64_t* order, int32_t* ids,
                      float* weights, float* lse = nullptr);

}  // namespace syslm::kernels
