// Activation checkpointing, one policy for the trainer (train::TrainModel) and the planner
// (parallel::estimate), which predicts its memory and its extra forward.
//   None:      every layer's intermediates are kept from the forward for the backward.
//   Selective: the matmul outputs are kept; the cheap large ones (the two norm outputs and the
//              SwiGLU / GELU output) are recomputed before each layer's backward.
//   Full:      only each layer's input is kept; the layer's whole forward runs again just before
//              its backward (one more forward pass of compute, activation memory of one layer
//              plus one residual row block per layer).
// Gradients are bit-identical under every policy.
#pragma once

#include <string>

namespace syslm::parallel {

enum class Recompute { None, Selective, Full };

const char* recompute_name(Recompute r);              // "none" | "selective" | "full"
Recompute recompute_policy(const std::string& name);  // the inverse; anything else is an error

}  // namespace syslm::parallel
