// `syslm tune edge`: a model split between a small device and its cloud, packaged for a device
// profile such as "2GB,2cores" (issue 24; docs/design/edge_cloud.md). The knobs: the split
// point L (the edge runs layers [0, L)), the edge's copy's weight type (stock recipes), and the
// wire format of the residual rows. Every point is measured: the edge's memory (its weights for
// the embedding and layers [0, L), its KV cache and working buffers), the KL of the split model
// against the input on held-out text (compress::evaluate with the edge's file as the first
// half), the edge's time per token on the profile's cores, and the link's time per token. The
// choice: the most layers at the edge (the least cloud compute per token) among the points within
// the memory, the KL limit and the per-token edge time limit; then the fewest bytes on the wire,
// then the least KL.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace syslm::tune {

struct DeviceProfile {
    uint64_t memory_bytes = 0;
    int cores = 1;
};
// "2GB,2cores", "512MiB,1core" (train::parse_memory_size's units); throws Error saying what is
// wrong.
DeviceProfile parse_device(std::string_view spec);

struct EdgeTuneOptions {
    std::string model, eval, out_dir;
    DeviceProfile device;
    double link_rtt_s = 0, link_bits_per_s = 0;  // 0: no rate limit
    double max_kl = 0.02;
    double max_edge_ms = 0;  // the edge's own time per token, at most; 0: no limit
    std::vector<std::string> types = {"F16", "Q8_0", "Q6_K", "Q4_K_M", "Q4_0"};
    std::vector<std::string> wires = {"f16", "int8"};
    int n_ctx = 4096;    // the positions the edge serves (its KV cache)
    int eval_ctx = 128;  // chunk size of the KL measurement
    int eval_chunks = 8;
    int threads = 0;  // of the quantizer and the KL measurement (the timing uses the cores)
    std::ostream* log = nullptr;
};

struct EdgePoint {
    int split_at = 0;
    std::string type, wire;
    uint64_t memory_bytes = 0;  // the edge's: weights, KV cache and buffers
    uint64_t weight_bytes = 0;  // of it, the embedding's and layers [0, L)'s tensors
    double kl = 0, top1 = 0;    // of the split model against the input
    double edge_ms = 0;         // the edge's layers, per token, on the profile's cores
    double wire_bytes = 0;      // per token, both directions
    double link_ms = 0;         // per token: the round trip and the bytes at the rate
    double cloud_share = 0;     // of the model's weight bytes read per token, at the cloud
    bool fits = false, within_kl = false, fast_enough = false;
    bool ok() const { return fits && within_kl && fast_enough; }
};

struct EdgeTuneResult {
    std::vector<EdgePoint> points;
    std::optional<size_t> chosen;
    int n_layer = 0;
    double seconds = 0;
};

// Writes the candidates' files under out_dir/candidates, and for the chosen point model.gguf (the
// edge's file) and plan.json (its edge section); throws Error when the inputs are unusable.
EdgeTuneResult tune_edge(const EdgeTuneOptions& o);

std::string edge_report_table(const EdgeTuneResult& r, const EdgeTuneOptions& o);
std::string edge_report_json(const EdgeTuneResult& r, const EdgeTuneOptions& o);

}  // namespace syslm::tune
