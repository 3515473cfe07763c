#include "profile/model_costs.hpp"

#include <algorithm>
#include <string_view>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/isa.hpp"

namespace syslm::profile {
namespace {

void add_matrix(ModelCosts& c, const char* op, const kernels::WeightView& w, double share = 1) {
    if (!w.data) return;
    c.matrices.push_back(
        {op, w.type, 2.0 * static_cast<double>(w.n_in) * static_cast<double>(w.n_out) * share,
         static_cast<double>(row_bytes(w.type, w.n_in)) * static_cast<double>(w.n_out)});
}

void add_experts(ModelCosts& c, const char* op, const model::Experts& e, double share) {
    if (!e.data) return;
    for (int64_t x = 0; x < e.n_expert; ++x) add_matrix(c, op, e.expert(x), share);
}

}  // namespace

ModelCosts model_costs(const model::Model& m, model::KvTypes kv_types) {
    const model::HParams& hp = m.hparams();
    const model::Weights& w = m.weights();
    ModelCosts c;
    const double routed = hp.n_expert > 0 ? static_cast<double>(hp.n_expert_used) / hp.n_expert : 1;
    for (const io::GGUFTensor& t : m.file().tensors()) {
        c.model_bytes += static_cast<double>(t.nbytes);
        c.n_params += static_cast<double>(t.numel());
        if (t.name == "token_embd.weight" || t.name == "position_embd.weight") {
            c.decode_weight_bytes += static_cast<double>(t.nbytes) / static_cast<double>(t.rows());
            continue;
        }
        const bool expert = t.name.ends_with("_exps.weight");
        c.decode_weight_bytes += static_cast<double>(t.nbytes) * (expert ? routed : 1.0);
    }
    // Tied embeddings: the output matrix is the embedding table, read whole for every token.
    if (w.output.data == w.token_embd.data)
        c.decode_weight_bytes += static_cast<double>(row_bytes(w.output.type, w.output.n_in)) *
                                 static_cast<double>(w.output.n_out);
    c.kv_bytes_per_position =
        static_cast<double>(hp.n_layer) * static_cast<double>(kv_types.row_bytes(hp.kv_dim()));
    c.attn_flops_per_pair = 4.0 * hp.n_layer * hp.q_dim();
    for (int il = 0; il < hp.n_layer; ++il) {
        c.layer_attention.push_back(model::attention_shape(hp, il));
        c.layer_attention.back().alibi = nullptr;  // not needed, and the model may go first
    }

    for (const model::LayerWeights& l : w.layers) {
        add_matrix(c, "attn_qkv", l.wqkv);
        add_matrix(c, "attn_q", l.wq);
        add_matrix(c, "attn_k", l.wk);
        add_matrix(c, "attn_v", l.wv);
        add_matrix(c, "attn_out", l.wo);
        add_matrix(c, "ffn_gate", l.ffn_gate);
        add_matrix(c, "ffn_up", l.ffn_up);
        add_matrix(c, "ffn_down", l.ffn_down);
        add_matrix(c, "moe_routing", l.ffn_gate_inp);
        add_experts(c, "ffn_gate_exps", l.gate_exps, routed);
        add_experts(c, "ffn_up_exps", l.up_exps, routed);
        add_experts(c, "ffn_down_exps", l.down_exps, routed);
        add_matrix(c, "ffn_gate_shexp", l.ffn_gate_shexp);
        add_matrix(c, "ffn_up_shexp", l.ffn_up_shexp);
        add_matrix(c, "ffn_down_shexp", l.ffn_down_shexp);
    }
    add_matrix(c, "output", w.output);
    return c;
}

// The peak of the units the prefill GEMM runs `type` on: its panel format (gemm_panel).
double matmul_peak(DType type, const ProbeResult& probe, int threads) {
    const kernels::Isa isa = kernels::active_isa();
    switch (kernels::gemm_panel(type, isa)) {
        case kernels::GemmPanel::AmxBF16:
            if (probe.amx_bf16 > 0) return probe.amx_bf16_for(threads) * 1e9;
            break;
        case kernels::GemmPanel::BF16:
            if (probe.bf16 > 0) return probe.bf16_for(threads) * 1e9;
            break;
        case kernels::GemmPanel::None:  // no GEMM (scalar tier): quantized dots in int8
            if (type != DType::F32 && type != DType::F16 && type != DType::BF16)
                return probe.int8_for(threads) * 1e9;
            break;
        case kernels::GemmPanel::F32:
            break;
    }
    return probe.fma_f32_for(threads) * 1e9;
}

double ModelCosts::attention_pairs(int64_t n, int64_t depth) const {
    if (layer_attention.empty()) return kernels::attention_pairs(n, depth, 0);
    double pairs = 0;
    for (const kernels::AttentionShape& s : layer_attention)
        pairs += kernels::attention_pairs(s, n, depth);
    return pairs / static_cast<double>(layer_attention.size());
}

double ModelCosts::decode_kv_bytes(int64_t n, int64_t depth) const {
    const double per_layer = kv_bytes_per_position / std::max<size_t>(layer_attention.size(), 1);
    if (layer_attention.empty())
        return kv_bytes_per_position * kernels::attention_pairs(n, depth, 0);
    double bytes = 0;
    for (const kernels::AttentionShape& s : layer_attention)
        bytes += s.linear ? static_cast<double>(n) * s.n_head_kv * s.head_dim * (s.head_dim + 1) * 4
                          : per_layer * kernels::attention_pairs(s, n, depth);
    return bytes;
}

double decode_roofline_seconds(const ModelCosts& c, int n_gen, const ProbeResult& probe,
                               int threads, int depth) {
    // Step p reads the weights and positions 0..p of the cache (the last w of a local layer, a
    // linear layer's state).
    const double n = n_gen;
    const double bytes = n * c.decode_weight_bytes + c.decode_kv_bytes(n_gen, depth);
    return bytes / (probe.read_gbs_for(threads) * 1e9);
}

double prefill_roofline_seconds(const ModelCosts& c, int n_prompt, const ProbeResult& probe,
                                int threads, int depth) {
    const double n = n_prompt;
    double seconds = 0;
    for (const MatrixCost& m : c.matrices) {
        const double tokens = m.op == "output" ? 1.0 : n;
        seconds += m.flops_per_token * tokens / matmul_peak(m.type, probe, threads);
    }
    seconds += c.attn_flops_per_pair * c.attention_pairs(n_prompt, depth) /
               (probe.fma_f32_for(threads) * 1e9);
    return seconds;
}

double op_peak(const ModelCosts& c, const std::string& op, const ProbeResult& probe, int threads) {
    double flops = 0, seconds = 0;
    for (const MatrixCost& m : c.matrices) {
        if (m.op != op) continue;
        flops += m.flops_per_token;
        seconds += m.flops_per_token / matmul_peak(m.type, probe, threads);
    }
    return seconds > 0 ? flops / seconds : probe.fma_f32_for(threads) * 1e9;
}

}  // namespace syslm::profile
