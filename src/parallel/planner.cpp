#include "parallel/planner.hpp"

#include "parallel/mesh.hpp"

#include <algorithm>
#include <cctype>
#include <regex>

#include "core/error.hpp"

namespace syslm::parallel {

double ModelShape::block_params() const {
    const double hd = static_cast<double>(head_dim());
    const double attn = 2.0 * dim * heads * hd + 2.0 * dim * kv_heads * hd;  // q, o; k, v
    const double ffn_p = experts > 0 ? experts * 3.0 * dim * ffn_expert + dim * experts
                                     : 3.0 * dim * ffn;
    return attn + ffn_p + 2.0 * dim;
}

double ModelShape::params() const {
    return layers * block_params() + (tied ? 1.0 : 2.0) * vocab * dim + dim;
}

double ModelShape::active_params() const {
    const double hd = static_cast<double>(head_dim());
    const double attn = 2.0 * dim * heads * hd + 2.0 * dim * kv_heads * hd;
    const double ffn_p = experts > 0 ? experts_used * 3.0 * dim * ffn_expert : 3.0 * dim * ffn;
    return layers * (attn + ffn_p) + static_cast<double>(vocab) * dim;  // + the output head
}

// 6 per matrix parameter (forward 2, backward 4) and attention's QK^T and PV over the causal half,
// times 3 (as `syslm train` counts for its MFU); full recompute runs the blocks' forward again.
double training_flops_per_token(double matrix_params, double block_params, double attended,
                                int64_t q_dim, Recompute r) {
    const double attn = 12.0 * attended * static_cast<double>(q_dim);
    double f = 6.0 * matrix_params + attn;
    if (r == Recompute::Full) f += 2.0 * block_params + attn / 3.0;
    return f;
}

double flops_per_token(const ModelShape& m, int64_t seq, Recompute r) {
    const double blocks = m.active_params() - static_cast<double>(m.vocab) * m.dim;
    const double attended = static_cast<double>(m.layers) * static_cast<double>(seq) / 2;
    return training_flops_per_token(m.active_params(), blocks, attended, m.heads * m.head_dim(), r);
}

const std::vector<Device>& device_table() {
    // Dense BF16 peaks and memory from the vendors' data sheets; intra-node bandwidth is what an
    // NCCL all-reduce achieves per GPU over NVLink (bus bandwidth), PCIe for L40S.
    static const std::vector<Device> t = {
        {"H200", 989e12, 0.45, 141e9, 400e9, 5e-6}, {"H100", 989e12, 0.45, 80e9, 400e9, 5e-6},
        {"A100", 312e12, 0.5, 80e9, 230e9, 5e-6},   {"L40S", 362e12, 0.4, 48e9, 20e9, 10e-6},
        {"cpu", 0, 0, 0, 0, 0},
    };
    return t;
}

Cluster parse_cluster(const std::string& text) {
    static const std::regex re(
        R"(^\s*(\d+)\s*nodes?\s*[xX*]\s*(\d+)\s*([A-Za-z0-9_-]+)\s*(?:,\s*([0-9.]+)\s*(Gb/s|Gbit/s|Gbps|GB/s)\s*)?$)");
    std::smatch m;
    SYSLM_CHECK(std::regex_match(text, m, re), "cluster '", text,
                "': expected \"<nodes> nodes x <devices per node> <device>[, <bandwidth> Gb/s]\", "
                "e.g. \"64 nodes x 8 H200, 400 Gb/s\"");
    Cluster c;
    c.nodes = std::stoi(m[1].str());
    c.per_node = std::stoi(m[2].str());
    SYSLM_CHECK(c.nodes > 0 && c.per_node > 0, "cluster '", text, "': empty");
    std::string name = m[3].str();
    std::string upper = name;
    for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    bool found = false;
    for (const Device& d : device_table()) {
        std::string n = d.name;
        for (char& ch : n) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        if (n == upper) {
            c.device = d;
            found = true;
        }
    }
    std::string known;
    for (const Device& d : device_table()) known += " " + d.name;
    SYSLM_CHECK(found, "cluster '", text, "': unknown device '", name, "' (known:", known, ")");
    if (m[4].matched) {
        const double v = std::stod(m[4].str());
        c.inter_bw = m[5].str() == "GB/s" ? v * 1e9 : v * 1e9 / 8;
    } else {
        SYSLM_CHECK(c.nodes == 1, "cluster '", text, "': give the inter-node bandwidth per device");
    }
    return c;
}

Estimate estimate(const ModelShape& m, const Cluster& c, const Workload& w, const Layout& l) {
    Estimate e;
    e.layout = l;
    auto refuse = [&](std::string why) {
        e.why_not = std::move(why);
        return e;
    };
    // The trainer's rank layout (parallel/mesh.hpp): tp innermost, then dp, then pp.
    const Mesh mesh{l.dp, l.tp, l.pp};
    if (mesh.size() != c.devices()) return refuse("dp x tp x pp != devices");
    if (mesh.tp_span() > c.per_node) return refuse("tensor parallelism beyond a node");
    if (m.heads % l.tp || m.kv_heads % l.tp || (m.experts == 0 && m.ffn % l.tp))
        return refuse("heads, KV heads or FFN width not divisible by tp");
    if (m.layers % l.pp) return refuse("layers not divisible by pp");
    if (w.global_batch % (static_cast<int64_t>(l.dp) * w.micro_batch))
        return refuse("batch not divisible by dp x micro-batch");
    const Device& d = c.device;
    SYSLM_CHECK(d.peak > 0 && d.efficiency > 0, "plan: no compute rate for device '", d.name,
                "' (calibrate it: syslm plan --calibrate)");
    e.micro_batches = w.global_batch / (static_cast<int64_t>(l.dp) * w.micro_batch);
    const double mb = static_cast<double>(e.micro_batches);
    const double tokens = static_cast<double>(w.global_batch) * w.seq;
    const double rate = d.peak * d.efficiency;
    e.compute_s = tokens / l.dp * flops_per_token(m, w.seq, l.recompute) / (l.tp * l.pp) / rate;
    if (l.pp > 1) e.bubble_s = e.compute_s * (l.pp - 1) / mb;

    const double act = static_cast<double>(w.micro_batch) * w.seq * m.dim;  // elements
    const double layers_here = static_cast<double>(m.layers) / l.pp;
    const bool dp_crosses = mesh.dp_span() > c.per_node, pp_crosses = mesh.pp_span() > c.per_node;
    auto bw = [&](bool crosses) { return crosses ? c.inter_bw : d.intra_bw; };
    auto lat = [&](bool crosses) { return crosses ? c.inter_latency : d.intra_latency; };
    if (l.tp > 1) {  // Megatron: 2 all-reduces forward, 2 backward per block (+2 recomputed)
        const double n = (4.0 + (l.recompute == Recompute::Full ? 2.0 : 0.0)) * layers_here * mb;
        e.tp_bytes = n * 2.0 * (l.tp - 1) / l.tp * act * w.activation_bytes;
        e.tp_s = e.tp_bytes / d.intra_bw + n * 2.0 * (l.tp - 1) * d.intra_latency;
    }
    if (l.pp > 1) {  // activations forward, their gradients backward, per micro-batch
        e.pp_bytes = 2.0 * mb * act * w.activation_bytes / l.tp;
        e.pp_s = e.pp_bytes / bw(pp_crosses) + 2.0 * mb * lat(pp_crosses);
    }
    const double shard = m.params() / (l.tp * l.pp);
    if (l.dp > 1) {
        const double f = static_cast<double>(l.dp - 1) / l.dp;
        const double grads = shard * w.grad_bytes, params = shard * w.param_bytes;
        const double reduce = (l.zero >= 2 ? 1.0 : 2.0) * f * grads;
        const double gather = (l.zero >= 1 ? f * params : 0.0) + (l.zero >= 3 ? f * params : 0.0);
        e.dp_bytes = reduce + gather;
        const double steps = 2.0 * (l.dp - 1) * (layers_here + 1);  // ring steps x buckets
        const double reduce_s = reduce / bw(dp_crosses) + steps * lat(dp_crosses);
        const double backward = e.compute_s * 2.0 / 3.0;
        e.dp_s = std::max(0.0, reduce_s - c.overlap * backward) + gather / bw(dp_crosses);
    }
    e.step_s = e.compute_s + e.bubble_s + e.tp_s + e.pp_s + e.dp_s;

    e.mem_params = shard * w.param_bytes / (l.zero >= 3 ? l.dp : 1);
    e.mem_grads = shard * w.grad_bytes / (l.zero >= 2 ? l.dp : 1);
    e.mem_optimizer = shard * (w.optimizer_bytes + w.master_bytes) / (l.zero >= 1 ? l.dp : 1);
    // Activations per block and micro-batch (Korthikanti et al. 2022, attention without the T x T
    // scores as in flash attention): s b h (10 + 24 / tp) at 2 bytes per element.
    const double per_block = act * (10.0 + 24.0 / l.tp) * w.activation_bytes / 2.0;
    const double in_flight = l.pp > 1 ? std::min<double>(l.pp, mb) : 1.0;
    double a = 0;
    switch (l.recompute) {
        case Recompute::None: a = layers_here * per_block; break;
        case Recompute::Selective: a = layers_here * per_block * 0.6; break;
        case Recompute::Full: a = layers_here * act * w.activation_bytes + per_block; break;
    }
    const double logits = static_cast<double>(w.micro_batch) * w.seq * m.vocab * 4.0 / l.tp;
    e.mem_activations = a * in_flight + logits;
    e.fits = d.memory <= 0 || e.memory() <= 0.9 * d.memory;
    e.mfu = flops_per_token(m, w.seq, Recompute::None) * tokens /
            (e.step_s * c.devices() * d.peak);
    return e;
}

std::vector<Estimate> search(const ModelShape& m, const Cluster& c, const Workload& w) {
    std::vector<Estimate> out;
    const int n = c.devices();
    for (int tp = 1; tp <= std::min(n, c.per_node); ++tp) {
        if (n % tp) continue;
        for (int pp = 1; pp <= n / tp; ++pp) {
            if ((n / tp) % pp) continue;
            const int dp = n / tp / pp;
            for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero)
                for (Recompute r : {Recompute::None, Recompute::Selective,
                                          Recompute::Full}) {
                    Estimate e = estimate(m, c, w, {dp, tp, pp, zero, r});
                    if (e.why_not.empty()) out.push_back(e);
                }
        }
    }
    std::stable_sort(out.begin(), out.end(), [](const Estimate& a, const Estimate& b) {
        if (a.fits != b.fits) return a.fits;
        return a.step_s < b.step_s;
    });
    return out;
}

}  // namespace syslm::parallel
