// Mixture-of-experts routing of one token, the one definition the inference forward and the
// training forward share: softmax over the router's X logits, then the top-k experts by
// probability (ties to the lower expert id), weighted by their probabilities, renormalised over
// the k when the model says so (expert_weights_norm; Mixtral's top-k softmax).
#pragma once

#include <cstdint>

namespace syslm::kernels {

// p: the X router logits, replaced by the probabilities. ids[j] / weights[j], j < k: the chosen
// experts in order of probability. order: scratch of X entries.
void moe_route_row(float* p, int64_t n_expert, int64_t k, bool renormalise, int64_t* order,
                   int32_t* ids, float* weights);

}  // namespace syslm::kernels
