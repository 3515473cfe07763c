// The normalized Walsh-Hadamard transform of each head of a row (H / sqrt(d), orthogonal and
// its own inverse): the Hadamard-rotated KV cache (model::KvTypes::hadamard) rotates queries,
// keys and values with it and the attention output back.
#pragma once

#include <cstdint>

namespace syslm::kernels {

// x: `rows` rows, `stride` floats apart; in each, `heads` heads of d floats (d a power of two)
// from its start, each replaced by H x / sqrt(d) in place.
void hadamard_heads(float* x, int64_t rows, int64_t stride, int heads, int d);

}  // namespace syslm::kernels
