// `syslm plan`'s cost model: for a model, a cluster and a batch, the step time, memory per device
// and communication volume of a data x tensor x pipeline layout with a ZeRO stage and an
// activation-recompute policy, and the search over every layout that fits. Analytic and
// deliberately simple (docs/design/distributed.md, "Planning"); its rates come from a
// calibration the user measures on their own hardware, or from a device table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/recompute.hpp"

namespace syslm::parallel {

struct ModelShape {
    int64_t layers = 0, dim = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0;
    int64_t experts = 0, experts_used = 0, ffn_expert = 0;  // MoE (experts 0: dense)
    bool tied = false;                                      // output matrix = embedding
    int64_t head_dim() const { return dim / heads; }
    double params() const;         // every parameter
    double active_params() const;  // the matrix parameters one token uses (MoE: its k experts)
    double block_params() const;   // one block's
};

struct Device {
    std::string name;
    double peak = 0;          // FLOP/s of dense matmuls in the training precision
    double efficiency = 0.5;  // achieved share of the peak in a training step
    double memory = 0;        // bytes
    double intra_bw = 0;      // bytes/s one rank moves in a collective within a node (bus bw)
    double intra_latency = 0; // seconds per collective step within a node
};

struct Cluster {
    int nodes = 1, per_node = 1;
    Device device;
    double inter_bw = 0;       // bytes/s per rank across nodes
    double inter_latency = 5e-6;
    double overlap = 0.8;      // share of the data-parallel reduction hidden behind the backward
    int devices() const { return nodes * per_node; }
};
// "64 nodes x 8 H200, 400 Gb/s" (inter-node bandwidth per device); known devices in
// device_table(); "cpu" needs a calibration.
Cluster parse_cluster(const std::string& text);
const std::vector<Device>& device_table();

struct Workload {
    int64_t seq = 2048;
    int64_t global_batch = 512;  // sequences per optimizer step
    int64_t micro_batch = 1;     // sequences per micro-step of one replica
    double param_bytes = 2;      // compute copy (bf16); f32 training: 4 and no separate master
    double master_bytes = 4;     // 0 when the compute copy is the master (f32)
    double grad_bytes = 4;
    double optimizer_bytes = 8;  // AdamW: two f32 moments
    double activation_bytes = 2; // per activation element
};

struct Layout {
    int dp = 1, tp = 1, pp = 1, zero = 0;
    Recompute recompute = Recompute::None;
};

struct Estimate {
    Layout layout;
    int64_t micro_batches = 0;
    double compute_s = 0, bubble_s = 0, tp_s = 0, pp_s = 0, dp_s = 0, step_s = 0;
    double dp_bytes = 0, tp_bytes = 0, pp_bytes = 0;  // sent per device per step
    double mem_params = 0, mem_grads = 0, mem_optimizer = 0, mem_activations = 0;
    double memory() const { return mem_params + mem_grads + mem_optimizer + mem_activations; }
    bool fits = false;
    double mfu = 0;      // of the device peak
    std::string why_not; // a layout that cannot run: why
};

double flops_per_token(const ModelShape& m, int64_t seq, Recompute r);
// The one formula both use (the planner from a shape, `syslm train`'s MFU from the model's own
// matrices): 6 FLOPs per matrix parameter a token uses (forward 2, backward 4), attention's QK^T
// and PV over the keys a token attends (`attended`, summed over the layers: seq / 2 a layer for
// causal attention over a length-seq sequence, about the window for a local layer) times 3, and
// under full recompute the blocks' forward again (block_params: the blocks' share of
// matrix_params).
double training_flops_per_token(double matrix_params, double block_params, double attended,
                                int64_t q_dim, Recompute r);
Estimate estimate(const ModelShape& m, const Cluster& c, const Workload& w, const Layout& l);
// Every valid layout for the cluster's device count (tp within a node and dividing the heads,
// pp dividing the layers, dp x micro-batch dividing the batch), fitting ones first, fastest first.
std::vector<Estimate> search(const ModelShape& m, const Cluster& c, const Workload& w);

}  // namespace syslm::parallel
