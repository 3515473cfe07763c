// Which type each weight matrix gets: a multiple-choice knapsack over the sensitivity table
// (tune/sensitivity.hpp), with the model's quality cost taken as the sum of the tensors' KLs and
// its goal cost as the sum of the options' costs (bytes, or the decode time the fitted cost
// model predicts, tune/decode_cost.hpp). Minimising cost + mu * KL for every mu >= 0 gives the
// lower convex hull of what any choice of types can reach in (cost, predicted KL); each tensor
// then independently takes a point of its own hull. Walking mu from 0 up is the greedy that
// always takes, among all tensors, the next step down its own hull that saves cost at the least
// KL per unit; every point it passes is optimal for its own cost budget among all choices (a
// Lagrangian solution), which the tests check against exhaustive search.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.hpp"
#include "tune/sensitivity.hpp"

namespace syslm::tune {

struct Allocation {
    std::vector<DType> types;  // one per tensor of the table, in its order
    uint64_t bytes = 0;        // the matrices' bytes
    double cost = 0;           // the sum of the chosen options' goal costs
    double predicted_kl = 0;   // the sum of the chosen options' KLs
};

// The hull points, from the costliest (every tensor at its least-KL option) to the cheapest.
std::vector<Allocation> allocation_hull(const std::vector<TensorSensitivity>& table);

}  // namespace syslm::tune
