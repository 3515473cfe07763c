#include "model/random_init.hpp"

#include "model/hparams.hpp"

#include <charconv>
#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "io/gguf.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::model {
namespace {

using io::GGUFValue;

class TensorMaker {
public:
    TensorMaker(io::GGUFWriter& w, uint64_t seed, DType type) : w_(w), rng_(seed), type_(type) {}

    // ne in GGML order. Matrices get `type`, vectors stay F32 (as llama.cpp keeps them).
    void normal(const std::string& name, std::vector<int64_t> ne, float std) {
        std::normal_distribution<float> dist(0.0f, std);
        std::vector<float> v(count(ne));
        for (auto& x : v) x = dist(rng_);
        add(name, std::move(ne), v);
    }
    void constant(const std::string& name, std::vector<int64_t> ne, float value) {
        add(name, std::move(ne), std::vector<float>(count(ne), value));
    }
    // A causal convolution's k rows of dim taps, F32 (as llama.cpp keeps its conv weights):
    // lag 0 one (the identity), the other lags N(0, std).
    void conv_taps(const std::string& name, int64_t dim, int k, float std) {
        std::normal_distribution<float> dist(0.0f, std);
        std::vector<float> v(static_cast<size_t>(dim) * k, 1.0f);
        for (size_t i = static_cast<size_t>(dim); i < v.size(); ++i) v[i] = dist(rng_);
        add(name, {dim, k}, v, DType::F32);
    }

private:
    static size_t count(const std::vector<int64_t>& ne) {
        size_t n = 1;
        for (int64_t d : ne) n *= static_cast<size_t>(d);
        return n;
    }
    void add(const std::string& name, std::vector<int64_t> ne, const std::vector<float>& v,
             std::optional<DType> as = std::nullopt) {
        const DType t = as ? *as : ne.size() >= 2 ? type_ : DType::F32;
        std::vector<uint8_t> bytes(row_bytes(t, ne[0]) * (v.size() / ne[0]));
        kernels::type_traits(t).from_float(v.data(), bytes.data(), static_cast<int64_t>(v.size()));
        w_.add_tensor(name, t, std::move(ne), std::move(bytes));
    }

    io::GGUFWriter& w_;
    std::mt19937_64 rng_;
    DType type_;
};

// What the config leaves to defaults, checked.
struct InitShape {
    bool gpt2;  // gpt2-shaped blocks (gpt2, bloom, mpt): LayerNorm, fused QKV, GELU
    bool biases, norm_bias;
    bool learned_positions, embed_norm, alibi, moe;
    int n_head_kv, head_dim, n_ff;
};

InitShape check_config(const InitConfig& c) {
    InitShape s{};
    const ArchSpec& spec = arch_spec(parse_arch(c.arch, "init"));  // or an error listing them
    s.gpt2 = spec.fused_qkv && spec.norm != NormKind::Rms;         // phi3 fuses QKV in llama blocks
    s.biases = spec.linear_biases;
    s.norm_bias = kernels::norm_has_bias(spec.norm);
    s.learned_positions = spec.position == PositionKind::Learned;
    s.alibi = spec.position == PositionKind::Alibi;
    s.embed_norm = spec.embed_norm;
    SYSLM_CHECK(c.type == DType::F32 || c.type == DType::F16 || c.type == DType::BF16,
                "init: weight type must be F32, F16 or BF16");
    s.n_head_kv = c.n_head_kv > 0 ? c.n_head_kv : c.n_head;
    SYSLM_CHECK(c.n_layer > 0 && c.n_embd > 0 && c.n_head > 0 && c.n_embd % c.n_head == 0 &&
                    c.n_head % s.n_head_kv == 0,
                "init: need layers > 0 and dim divisible by heads divisible by kv-heads");
    s.head_dim = c.n_embd / c.n_head;
    SYSLM_CHECK(spec.position != PositionKind::Rope || s.head_dim % 2 == 0,
                "init: RoPE needs an even head size");
    s.moe = c.n_expert > 0;
    SYSLM_CHECK(
        !s.moe || (!s.gpt2 && c.n_expert_used > 0 && c.n_expert_used <= c.n_expert),
        "init: experts need a llama/qwen2moe/qwen3moe arch and 1 <= experts-used <= experts");
    const bool moe_arch = c.arch == "qwen2moe" || c.arch == "qwen3moe";
    SYSLM_CHECK(s.moe == moe_arch || c.arch == "llama",
                "init: qwen2moe / qwen3moe need --experts, and only llama and they can have "
                "experts");
    SYSLM_CHECK(c.expert_top_p >= 0 && c.expert_top_p <= 1 &&
                    (c.expert_top_p == 0 ||
                     (s.moe && c.n_expert_used_min >= 1 && c.n_expert_used_min <= c.n_expert_used)),
                "init: top-p routing needs experts, p in (0, 1] and 1 <= min used <= used");
    SYSLM_CHECK(c.window >= 0 && (c.local_layers.empty() ||
                                  (c.window > 0 && c.local_layers.size() == size_t(c.n_layer))),
                "init: an attention pattern needs a window and one entry per layer");
    if (!c.block_source.empty()) {
        SYSLM_CHECK(c.block_source.size() == size_t(c.n_layer), "init: ", c.block_source.size(),
                    " block sources for ", c.n_layer, " layers");
        for (int il = 0; il < c.n_layer; ++il) {
            const int b = c.block_source[il];
            SYSLM_CHECK(0 <= b && b <= il && c.block_source[b] == b, "init: layer ", il,
                        " cannot share block ", b);
        }
    }
    if (!c.linear_layers.empty()) {
        SYSLM_CHECK(c.linear_layers.size() == size_t(c.n_layer), "init: ", c.linear_layers.size(),
                    " linear-attention entries for ", c.n_layer, " layers");
        SYSLM_CHECK(spec.position != PositionKind::Alibi && spec.attn_softcap == 0,
                    "init: linear attention takes no ALiBi or soft-capping (", c.arch, ")");
        for (int il = 0; il < c.n_layer; ++il)
            SYSLM_CHECK(!c.linear_layers[il] || c.window == 0 ||
                            (!c.local_layers.empty() && !c.local_layers[il]),
                        "init: layer ", il, " cannot be both linear and local (--window)");
    }
    SYSLM_CHECK(!c.swish_beta ||
                    (spec.ffn == kernels::FfnActivation::SwiGLU && !spec.fused_gate_up && !s.moe),
                "init: a learned Swish beta needs a dense FFN with a separate SwiGLU gate "
                "(llama, qwen2, qwen3)");
    SYSLM_CHECK(c.conv_kernel >= 0 && c.conv_kernel <= 64, "init: conv kernel ", c.conv_kernel,
                " is outside 0..64");
    s.n_ff = c.n_ff;
    if (s.n_ff <= 0) s.n_ff = s.gpt2 ? 4 * c.n_embd : (8 * c.n_embd / 3 + 31) / 32 * 32;
    return s;
}

void set_hparams(const InitConfig& c, const InitShape& s, io::GGUFWriter& w) {
    const std::string a = c.arch + ".";
    w.set("general.architecture", GGUFValue::string(c.arch));
    w.set("general.name", GGUFValue::string(c.name));
    w.set("general.file_type", GGUFValue::u32(c.type == DType::F32   ? 0
                                              : c.type == DType::F16 ? 1
                                                                     : 32));
    w.set(a + "context_length", GGUFValue::u32(c.n_ctx));
    w.set(a + "embedding_length", GGUFValue::u32(c.n_embd));
    w.set(a + "block_count", GGUFValue::u32(c.n_layer));
    w.set(a + "feed_forward_length", GGUFValue::u32(s.n_ff));
    w.set(a + "attention.head_count", GGUFValue::u32(c.n_head));
    w.set(a + "attention.head_count_kv", GGUFValue::u32(s.n_head_kv));
    if (s.gpt2) {
        w.set(a + "attention.layer_norm_epsilon", GGUFValue::f32(c.norm_eps));
        if (s.alibi) w.set(a + "attention.max_alibi_bias", GGUFValue::f32(8.0f));
    } else {
        w.set(a + "attention.layer_norm_rms_epsilon", GGUFValue::f32(c.norm_eps));
        w.set(a + "rope.freq_base", GGUFValue::f32(c.rope_freq_base));
        w.set(a + "rope.dimension_count", GGUFValue::u32(s.head_dim));
    }
    // llama.cpp's phi3 refuses a file without the key (0: no window).
    if (c.window > 0 || c.arch == "phi3") {
        w.set(a + "attention.sliding_window", GGUFValue::u32(c.window));
        if (!c.local_layers.empty()) {
            std::vector<GGUFValue> local;
            for (bool b : c.local_layers) local.push_back(GGUFValue::boolean(b));
            w.set(a + "attention.sliding_window_pattern",
                  GGUFValue::array(io::GGUFType::BOOL, local));
        }
        // syslm's key: llama.cpp would run such a file without them.
        if (c.global_tokens > 0)
            w.set(a + "attention.global_tokens", GGUFValue::u32(c.global_tokens));
        if (c.random_blocks > 0) {
            w.set(a + "attention.random_blocks", GGUFValue::u32(c.random_blocks));
            w.set(a + "attention.random_block_size", GGUFValue::u32(c.random_block_size));
            w.set(a + "attention.random_seed", GGUFValue::u32(c.seed & 0x7fffffff));
        }
    }
    if (!c.linear_layers.empty()) {  // syslm's key: llama.cpp would run softmax attention
        std::vector<GGUFValue> linear;
        for (bool b : c.linear_layers) linear.push_back(GGUFValue::boolean(b));
        w.set(a + "attention.linear_pattern", GGUFValue::array(io::GGUFType::BOOL, linear));
    }
    if (c.conv_kernel > 0)  // syslm's key: llama.cpp would run the attention without the conv
        w.set(a + "attention.conv_kernel", GGUFValue::u32(c.conv_kernel));
    if (c.swish_beta) w.set(a + "feed_forward.swish_beta", GGUFValue::boolean(true));  // syslm's
    if (!c.block_source.empty()) {  // syslm's key: llama.cpp would miss the shared blocks
        std::vector<GGUFValue> src;
        for (int b : c.block_source) src.push_back(GGUFValue::u32(b));
        w.set(a + "block_source", GGUFValue::array(io::GGUFType::U32, src));
    }
    if (s.moe) {
        w.set(a + "expert_count", GGUFValue::u32(c.n_expert));
        w.set(a + "expert_used_count", GGUFValue::u32(c.n_expert_used));
        w.set(a + "expert_feed_forward_length", GGUFValue::u32(s.n_ff));
        if (c.expert_top_p > 0) {  // syslm's keys: llama.cpp would route top-k instead
            w.set(a + "expert_top_p", GGUFValue::f32(c.expert_top_p));
            w.set(a + "expert_used_count_min", GGUFValue::u32(c.n_expert_used_min));
        }
    }
}

// The vocabulary file's tokenizer keys; returns its number of tokens.
int copy_tokenizer(const std::string& vocab_path, io::GGUFWriter& w) {
    const io::GGUFFile vocab(vocab_path);
    int n_vocab = 0;
    for (const auto& [key, value] : vocab.metadata()) {
        if (key.rfind("tokenizer.", 0) != 0) continue;
        w.set(key, value);
        if (key == "tokenizer.ggml.tokens") n_vocab = static_cast<int>(value.size());
    }
    SYSLM_CHECK(n_vocab > 0, vocab_path, ": no tokenizer.ggml.tokens to take the vocabulary from");
    return n_vocab;
}

// GPT-2's block: LayerNorms with biases, fused QKV, a GELU FFN, biases everywhere.
void add_gpt2_block(TensorMaker& t, const std::string& p, int64_t E, int64_t QD, int64_t KD,
                    int64_t F, float std, float proj_std, bool biases, bool norm_bias) {
    const int64_t QKV = QD + 2 * KD;
    if (norm_bias) {
        t.constant(p + "attn_norm.bias", {E}, 0.0f);
        t.constant(p + "ffn_norm.bias", {E}, 0.0f);
    }
    t.normal(p + "attn_qkv.weight", {E, QKV}, std);
    t.normal(p + "attn_output.weight", {QD, E}, proj_std);
    t.normal(p + "ffn_up.weight", {E, F}, std);
    t.normal(p + "ffn_down.weight", {F, E}, proj_std);
    if (!biases) return;
    t.constant(p + "attn_qkv.bias", {QKV}, 0.0f);
    t.constant(p + "attn_output.bias", {E}, 0.0f);
    t.constant(p + "ffn_up.bias", {F}, 0.0f);
    t.constant(p + "ffn_down.bias", {E}, 0.0f);
}

// A llama-family block: separate Q/K/V (qwen2: with biases; phi3: fused), a SwiGLU FFN (phi3:
// gate and up in one tensor) or its experts.
void add_llama_block(TensorMaker& t, const std::string& p, const InitConfig& c, const InitShape& s,
                     float std, float proj_std) {
    const int64_t E = c.n_embd, QD = c.n_head * s.head_dim, KD = s.n_head_kv * s.head_dim;
    const int64_t F = s.n_ff;
    const ArchSpec& spec = arch_spec(parse_arch(c.arch, "init"));
    if (spec.fused_qkv) {
        t.normal(p + "attn_qkv.weight", {E, QD + 2 * KD}, std);
    } else {
        t.normal(p + "attn_q.weight", {E, QD}, std);
        t.normal(p + "attn_k.weight", {E, KD}, std);
        t.normal(p + "attn_v.weight", {E, KD}, std);
    }
    if (spec.qkv_bias) {
        t.constant(p + "attn_q.bias", {QD}, 0.0f);
        t.constant(p + "attn_k.bias", {KD}, 0.0f);
        t.constant(p + "attn_v.bias", {KD}, 0.0f);
    }
    if (spec.qk_norm) {
        t.constant(p + "attn_q_norm.weight", {s.head_dim}, 1.0f);
        t.constant(p + "attn_k_norm.weight", {s.head_dim}, 1.0f);
    }
    if (spec.post_norms) {
        t.constant(p + "post_attention_norm.weight", {E}, 1.0f);
        t.constant(p + "post_ffw_norm.weight", {E}, 1.0f);
    }
    t.normal(p + "attn_output.weight", {QD, E}, proj_std);
    if (s.moe) {
        t.normal(p + "ffn_gate_inp.weight", {E, c.n_expert}, std);
        t.normal(p + "ffn_gate_exps.weight", {E, F, c.n_expert}, std);
        t.normal(p + "ffn_up_exps.weight", {E, F, c.n_expert}, std);
        t.normal(p + "ffn_down_exps.weight", {F, E, c.n_expert}, proj_std);
    } else if (spec.fused_gate_up) {
        t.normal(p + "ffn_up.weight", {E, 2 * F}, std);  // the gate's rows, then up's
        t.normal(p + "ffn_down.weight", {F, E}, proj_std);
    } else {
        t.normal(p + "ffn_gate.weight", {E, F}, std);
        t.normal(p + "ffn_up.weight", {E, F}, std);
        t.normal(p + "ffn_down.weight", {F, E}, proj_std);
        if (c.swish_beta) t.constant(p + "ffn_act_beta.weight", {F}, 1.0f);  // SwiGLU at first
    }
}

}  // namespace

std::pair<int, int> random_blocks_spec(const std::string& spec) {
    int r = 0, b = 64;
    const char* end = spec.data() + spec.size();
    std::from_chars_result x = std::from_chars(spec.data(), end, r);
    if (x.ec == std::errc{} && x.ptr < end && *x.ptr == ':') x = std::from_chars(x.ptr + 1, end, b);
    SYSLM_CHECK(x.ec == std::errc{} && x.ptr == end, "random blocks '", spec,
                "': expected R or R:B (R blocks of B positions)");
    SYSLM_CHECK(1 <= r && r <= kernels::kMaxRandomBlocks && b >= kernels::kMinRandomBlockSize,
                "random blocks '", spec, "': R between 1 and ", kernels::kMaxRandomBlocks,
                ", B at least ", kernels::kMinRandomBlockSize);
    return {r, b};
}

std::vector<bool> attention_pattern(const std::string& spec, int n_layer) {
    const size_t colon = spec.find(':');
    int local = 0, global = 0;
    try {
        SYSLM_CHECK(colon != std::string::npos, "no ':'");
        size_t end = 0;
        local = std::stoi(spec.substr(0, colon), &end);
        SYSLM_CHECK(end == colon, "not a number");
        global = std::stoi(spec.substr(colon + 1), &end);
        SYSLM_CHECK(end == spec.size() - colon - 1, "not a number");
    } catch (const std::exception&) {
        fail("attention pattern '", spec, "': expected LOCAL:GLOBAL layer counts, e.g. 5:1");
    }
    SYSLM_CHECK(local >= 0 && global >= 0 && local + global > 0, "attention pattern '", spec,
                "': counts must be >= 0, not both 0");
    std::vector<bool> out(static_cast<size_t>(n_layer));
    for (int il = 0; il < n_layer; ++il)
        out[static_cast<size_t>(il)] = il % (local + global) < local;
    return out;
}

void write_random_model(const InitConfig& c, const std::string& vocab_path,
                        const std::string& out_path) {
    const InitShape s = check_config(c);
    io::GGUFWriter w;
    set_hparams(c, s, w);
    const int n_vocab = copy_tokenizer(vocab_path, w);

    TensorMaker t(w, c.seed, c.type);
    const int64_t E = c.n_embd;
    const float std = 0.02f, proj_std = 0.02f / std::sqrt(2.0f * c.n_layer);
    t.normal("token_embd.weight", {E, n_vocab}, std);
    if (s.learned_positions) t.normal("position_embd.weight", {E, c.n_ctx}, 0.01f);
    if (s.embed_norm) {
        t.constant("token_embd_norm.weight", {E}, 1.0f);
        if (s.norm_bias) t.constant("token_embd_norm.bias", {E}, 0.0f);
    }
    for (int il = 0; il < c.n_layer; ++il) {
        if (!c.block_source.empty() && c.block_source[il] != il) continue;  // shared: held once
        const std::string p = "blk." + std::to_string(il) + ".";
        t.constant(p + "attn_norm.weight", {E}, 1.0f);
        t.constant(p + "ffn_norm.weight", {E}, 1.0f);
        if (c.conv_kernel > 0) t.conv_taps(p + "attn_conv.weight", E, c.conv_kernel, 0.1f);
        if (s.gpt2)
            add_gpt2_block(t, p, E, c.n_head * s.head_dim, s.n_head_kv * s.head_dim, s.n_ff, std,
                           proj_std, s.biases, s.norm_bias);
        else
            add_llama_block(t, p, c, s, std, proj_std);
    }
    t.constant("output_norm.weight", {E}, 1.0f);
    if (s.norm_bias) t.constant("output_norm.bias", {E}, 0.0f);
    if (!arch_spec(parse_arch(c.arch, "init")).ties_head)
        t.normal("output.weight", {E, n_vocab}, std);
    w.write(out_path);
}

}  // namespace syslm::model
