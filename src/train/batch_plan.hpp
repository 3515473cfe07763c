// Batches under a token budget and a memory limit: a step trains on a fixed number of sequences
// (the token budget / seq); the micro-batch is the largest divisor of that count whose memory
// estimate fits the limit, and the rest of the step is gradient accumulation — the same tokens
// per optimizer step, and the same mean gradient, whatever the memory allows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "train/optimizer.hpp"
#include "train/train_model.hpp"

namespace syslm::train {

struct BatchPlan {
    int micro_batch = 0;  // sequences per forward/backward
    int accum = 0;        // micro-batches per optimizer step
    size_t bytes = 0;     // the memory estimate of that micro-batch
};

// Estimated bytes of a training process for micro-batches of B x T: parameters and gradients,
// the optimizer's state, the activation arena (as planned) and GEMM packing scratch (one
// logits-sized operand).
size_t training_memory_bytes(TrainModel& model, OptimizerKind optimizer, int B, int T);

// sequences: per optimizer step (>= 1); memory_limit 0: no limit (micro-batch = sequences).
// Throws Error naming the estimate when even one sequence does not fit.
BatchPlan plan_batches(TrainModel& model, OptimizerKind optimizer, int T, int sequences,
                       size_t memory_limit);

// "512MiB", "2GiB", "1.5G", "100000000" (bytes), "2GB" (decimal); Error otherwise.
size_t parse_memory_size(const std::string& text);

}  // namespace syslm::train
