#include "model/hparams.hpp"

#include <cmath>
#include <optional>
#include <string>

#include "core/error.hpp"

namespace syslm::model {
Arch parse_arch(const std::string& name, const std::string& path) {
    if (name == "llama") return Arch::Llama;
    if (name == "qwen2") return Arch::Qwen2;
    if (name == "qwen2moe") return Arch::Qwen2Moe;
    if (name == "qwen3") return Arch::Qwen3;
    if (name == "qwen3moe") return Arch::Qwen3Moe;
    if (name == "gpt2") return Arch::Gpt2;
    if (name == "bloom") return Arch::Bloom;
    if (name == "mpt") return Arch::Mpt;
    if (name == "phi3") return Arch::Phi3;
    if (name == "gemma2") return Arch::Gemma2;
    if (name == "gemma3") return Arch::Gemma3;
    fail(path, ": unsupported architecture '", name,
         "' (supported: llama, mistral/mixtral as llama, qwen2, qwen2moe, qwen3, qwen3moe, gpt2, "
         "bloom, mpt, phi3, gemma2, gemma3)");
}

namespace {

// attention.sliding_window_pattern: an array of one bool per layer (true: the window applies),
// or llama.cpp's period n (layer il is local unless il % n == n - 1; 0: all local). Absent: the
// architecture's period (ArchSpec::swa_period), or empty (every layer local, as Mistral).
std::vector<bool> local_layers(const io::GGUFFile& f, const std::string& key, int n_layer,
                               int default_period) {
    const io::GGUFValue* v = f.find(key);
    if (!v && default_period == 0) return {};
    std::vector<bool> local(static_cast<size_t>(n_layer));
    auto periodic = [&](uint32_t n) {
        for (size_t il = 0; il < local.size(); ++il) local[il] = n == 0 || il % n < n - 1;
    };
    if (!v) {
        periodic(static_cast<uint32_t>(default_period));
        return local;
    }
    try {
        if (v->is_array()) {
            SYSLM_CHECK(v->size() == local.size(), v->size(), " entries for ", n_layer, " layers");
            v->for_each_item([&](size_t i, const io::GGUFValue& x) { local[i] = x.as_bool(); });
        } else {
            periodic(v->as_u32());
        }
    } catch (const Error& e) {
        fail(f.path(), ": ", key, ": ", e.what());
    }
    return local;
}

// block_source: one block index per layer, each at most its layer and its own source (a
// block is first used by the layer it is named after).
std::vector<int> block_source(const io::GGUFFile& f, const std::string& key, int n_layer) {
    const io::GGUFValue* v = f.find(key);
    if (!v) return {};
    std::vector<int> src(static_cast<size_t>(n_layer));
    try {
        SYSLM_CHECK(v->is_array() && v->size() == src.size(), "expected an array of ", n_layer,
                    " block indices, one per layer");
        v->for_each_item([&](size_t i, const io::GGUFValue& x) {
            const uint32_t b = x.as_u32();
            SYSLM_CHECK(b <= i, "layer ", i, " takes block ", b, ", a later one");
            SYSLM_CHECK(b == i || src[b] == static_cast<int>(b), "layer ", i, " takes block ", b,
                        ", which itself takes block ", src[b]);
            src[i] = static_cast<int>(b);
        });
    } catch (const Error& e) {
        fail(f.path(), ": ", key, ": ", e.what());
    }
    return src;
}

// <prefix>lengths / <prefix><values>: increasing lengths, a value in [lo, hi] for each
// (attention.window_policy.windows, expert_policy.top_p).
LengthPolicy read_length_policy(const io::GGUFFile& f, const std::string& prefix,
                                const std::string& values_name, double lo, double hi) {
    const io::GGUFValue* lengths = f.find(prefix + "lengths");
    const io::GGUFValue* values = f.find(prefix + values_name);
    LengthPolicy p;
    if (!lengths && !values) return p;
    try {
        SYSLM_CHECK(lengths && values && lengths->is_array() && values->is_array() &&
                        lengths->size() == values->size() && lengths->size() > 0,
                    "needs both keys as arrays of equal, non-zero length");
        lengths->for_each_item(
            [&](size_t, const io::GGUFValue& x) { p.lengths.push_back(int(x.as_u32())); });
        values->for_each_item(
            [&](size_t, const io::GGUFValue& x) { p.values.push_back(x.as_f64()); });
        for (size_t i = 0; i < p.lengths.size(); ++i)
            SYSLM_CHECK(p.lengths[i] > 0 && (i == 0 || p.lengths[i] > p.lengths[i - 1]) &&
                            p.values[i] >= lo && p.values[i] <= hi,
                        "lengths must increase and ", values_name, " lie in [", lo, ", ", hi,
                        "] (entry ", i, ")");
    } catch (const Error& e) {
        fail(f.path(), ": ", prefix, "*: ", e.what());
    }
    return p;
}

// Every hyperparameter is checked where it is read, and an error names the file and the key: a
// value out of range (a context of 2^32 - 1 read into an int, a NaN epsilon, a zero RoPE base)
// would otherwise load and compute garbage.
class Reader {
public:
    Reader(const io::GGUFFile& f, std::string prefix) : f_(f), a_(std::move(prefix)) {}

    // A count in [lo, hi]; `def` when the key is absent (nullopt: the key is required).
    int count(const std::string& key, std::optional<uint32_t> def, int64_t lo, int64_t hi) const {
        const std::string k = a_ + key;
        const uint32_t v = def ? f_.get_u32(k, *def) : f_.get_u32(k);
        SYSLM_CHECK(v >= lo && v <= hi, f_.path(), ": ", k, " = ", v, " is outside [", lo, ", ", hi,
                    "]");
        return static_cast<int>(v);
    }
    // A finite number above lo (or at least lo when !lo_open) and at most hi.
    float real(const std::string& key, std::optional<float> def, double lo, double hi,
               bool lo_open = true) const {
        const std::string k = a_ + key;
        const float v = def ? f_.get_f32(k, *def) : f_.get_f32(k);
        SYSLM_CHECK(std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi, f_.path(), ": ", k,
                    " = ", v, " is not a finite number in ", lo_open ? "(" : "[", lo, ", ", hi,
                    "]");
        return v;
    }

private:
    const io::GGUFFile& f_;
    std::string a_;
};

constexpr int64_t kMaxContext = int64_t{1} << 27;  // 134M positions: above any model's
constexpr int64_t kMaxWidth = int64_t{1} << 20;
constexpr int64_t kMaxCount = int64_t{1} << 16;  // layers, heads, experts

}  // namespace

const ArchSpec& arch_spec(Arch arch) {
    static const ArchSpec llama = [] {
        ArchSpec s;
        s.renorm_experts = true;
        return s;
    }();
    static const ArchSpec qwen2 = [] {
        ArchSpec s;
        s.rope_mode = kernels::RopeMode::Neox;
        s.qkv_bias = true;
        return s;
    }();
    static const ArchSpec qwen3 = [] {
        ArchSpec s;
        s.rope_mode = kernels::RopeMode::Neox;
        s.qk_norm = true;
        s.renorm_experts = true;  // qwen3moe: llama.cpp renormalises its top-k weights
        return s;
    }();
    static const ArchSpec gpt2 = [] {
        ArchSpec s;
        s.norm = NormKind::Layer;
        s.position = PositionKind::Learned;
        s.ffn = kernels::FfnActivation::GeluTanh;
        s.fused_qkv = true;
        s.linear_biases = true;
        s.norm_eps_key = "attention.layer_norm_epsilon";
        s.dense_unsplit_training = true;
        s.stores_tied_head_twice = true;
        return s;
    }();
    static const ArchSpec bloom = [] {
        ArchSpec s = gpt2;
        s.position = PositionKind::Alibi;
        s.embed_norm = true;
        return s;
    }();
    static const ArchSpec mpt = [] {
        ArchSpec s;
        s.norm = NormKind::LayerNoBias;
        s.position = PositionKind::Alibi;
        s.ffn = kernels::FfnActivation::GeluErf;
        s.fused_qkv = true;
        s.norm_eps_key = "attention.layer_norm_epsilon";
        s.dense_unsplit_training = true;
        return s;
    }();
    static const ArchSpec gemma3 = [] {
        ArchSpec s = qwen3;
        s.ffn = kernels::FfnActivation::GeGLU;
        s.embed_scale = true;
        s.post_norms = true;
        s.local_rope = true;
        s.swa_period = 6;
        s.ties_head = true;
        return s;
    }();
    static const ArchSpec phi3 = [] {
        ArchSpec s;
        s.rope_mode = kernels::RopeMode::Neox;
        s.fused_qkv = true;
        s.fused_gate_up = true;
        s.dense_unsplit_training = true;
        return s;
    }();
    static const ArchSpec gemma2 = [] {
        ArchSpec s = gemma3;
        s.qk_norm = false;
        s.local_rope = false;
        s.swa_period = 2;
        s.attn_softcap = 50.0f;
        s.final_softcap = 30.0f;
        return s;
    }();
    switch (arch) {
        case Arch::Llama:
            return llama;
        case Arch::Phi3:
            return phi3;
        case Arch::Gemma2:
            return gemma2;
        case Arch::Gemma3:
            return gemma3;
        case Arch::Qwen2:
        case Arch::Qwen2Moe:
            return qwen2;
        case Arch::Qwen3:
        case Arch::Qwen3Moe:
            return qwen3;
        case Arch::Gpt2:
            return gpt2;
        case Arch::Bloom:
            return bloom;
        case Arch::Mpt:
            return mpt;
    }
    return llama;
}

void HParams::set_window(int w) {
    SYSLM_CHECK(sliding_window > 0, "a window of ", w,
                " needs a model with local attention layers (attention.sliding_window); this "
                "one has none");
    SYSLM_CHECK(w > 0 && w <= kMaxContext, "window ", w, " is out of range (1 - ", kMaxContext,
                ")");
    sliding_window = w;
}

int HParams::window_for_length(int64_t n) const {
    SYSLM_CHECK(!window_policy.empty(),
                "--window auto needs a window policy (attention.window_policy.lengths and "
                ".windows, written by `syslm tune window`); this model has none: give a number");
    return static_cast<int>(window_policy.at(n));
}

void HParams::set_expert_top_p(float p) {
    SYSLM_CHECK(expert_top_p > 0, "an expert top-p of ", p,
                " needs a model routed by top-p (expert_top_p); this one routes ",
                n_expert > 0 ? "top-k" : "no experts");
    SYSLM_CHECK(p > 0 && p <= 1, "expert top-p ", p, " is outside (0, 1]");
    expert_top_p = p;
}

float HParams::top_p_for_length(int64_t n) const {
    SYSLM_CHECK(!expert_policy.empty(),
                "--expert-top-p auto needs an expert policy (expert_policy.lengths and .top_p, "
                "written by `syslm tune experts`); this model has none: give a number");
    return static_cast<float>(expert_policy.at(n));
}

kernels::AttentionShape attention_shape(const HParams& hp, int il) {
    kernels::AttentionShape s{};
    s.n_head = hp.n_head;
    s.n_head_kv = hp.n_head_kv;
    s.head_dim = hp.head_dim;
    s.kv_stride = hp.kv_dim();
    s.window = hp.window(il);
    s.scale = hp.attn_scale > 0 ? hp.attn_scale : 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
    if (!hp.alibi_slopes.empty()) s.alibi = hp.alibi_slopes.data();
    s.softcap = hp.attn_softcap;
    if (s.window > 0) {
        s.global_tokens = hp.global_tokens;
        s.random_blocks = hp.random_blocks;
        s.random_block_size = hp.random_block_size;
        const uint32_t key = hp.random_layers.empty() ? static_cast<uint32_t>(il)
                                                      : hp.random_layers[static_cast<size_t>(il)];
        s.random_seed = kernels::splitmix64(uint64_t{hp.random_seed} << 32 | key);
    }
    s.linear = hp.linear_attention(il);
    return s;
}

double attention_pairs(const HParams& hp, int il, int64_t T) {
    return kernels::attention_pairs(attention_shape(hp, il), T, 0);
}

namespace {

// RoPE: rotated dimensions, base, scaling (linear, YaRN, or LongRoPE's magnitude), and the
// local layers' own (gemma3). The frequency factors come with the weights (load_rope_factors).
void read_rope(const Reader& r, const io::GGUFFile& f, const std::string& a, HParams& hp) {
    auto& rope = hp.rope;
    rope.mode = hp.spec().rope_mode;
    rope.n_rot =
        r.count("rope.dimension_count", static_cast<uint32_t>(hp.head_dim), 2, hp.head_dim);
    SYSLM_CHECK(rope.n_rot % 2 == 0, f.path(), ": ", a, "rope.dimension_count ", rope.n_rot,
                " must be even");
    rope.freq_base = r.real("rope.freq_base", 10000.0f, 0, 1e12);
    const std::string scaling = f.get_string(a + "rope.scaling.type", "none");
    float factor = r.real("rope.scaling.factor", 0.0f, 0, 1e6, false);
    if (factor == 0.0f) factor = 1.0f / r.real("rope.scale_linear", 1.0f, 0, 1e6);
    if (scaling == "linear") {
        rope.freq_scale = 1.0f / factor;
    } else if (scaling == "yarn") {
        rope.freq_scale = 1.0f / factor;
        rope.yarn_orig_ctx = r.count("rope.scaling.original_context_length",
                                     static_cast<uint32_t>(hp.n_ctx_train), 1, kMaxContext);
        rope.yarn_attn_factor = r.real("rope.scaling.attn_factor", 1.0f, 0, 1e3);
        rope.yarn_beta_fast = r.real("rope.scaling.yarn_beta_fast", 32.0f, -1e6, 1e6);
        rope.yarn_beta_slow = r.real("rope.scaling.yarn_beta_slow", 1.0f, -1e6, 1e6);
    } else if (scaling == "none") {
        // LongRoPE (phi3): the factor tensors and a plain cos/sin magnitude.
        rope.attn_factor = r.real("rope.scaling.attn_factor", 1.0f, 0, 1e3);
        hp.rope_orig_ctx = r.count("rope.scaling.original_context_length",
                                   static_cast<uint32_t>(hp.n_ctx_train), 1, kMaxContext);
    } else {
        fail(f.path(), ": unsupported ", a, "rope.scaling.type '", scaling,
             "' (supported: none, linear, yarn; llama3 scaling is the rope_freqs tensor)");
    }
    SYSLM_CHECK(rope.freq_scale > 0 && std::isfinite(rope.freq_scale), f.path(),
                ": invalid rope scaling factor ", factor);
    if (hp.spec().local_rope && hp.sliding_window > 0) {
        // llama.cpp fixes gemma3's at base 10000, unscaled, and writes no key.
        kernels::RopeConfig local;
        local.mode = rope.mode;
        local.n_rot = rope.n_rot;
        local.freq_base = r.real("rope.freq_base_swa", 10000.0f, 0, 1e12);
        hp.rope_local = local;
    }
}

}  // namespace

namespace {

// MoE: the experts, their routing (top-k or top-p) and its length policy; without experts, the
// dense FFN's width.
void read_experts(const Reader& r, const io::GGUFFile& f, const std::string& a, HParams& hp) {
    hp.n_expert = r.count("expert_count", 0u, 0, kMaxCount);
    if (hp.n_expert > 0) {
        hp.n_expert_used = r.count("expert_used_count", std::nullopt, 1, hp.n_expert);
        hp.n_ff_exp = r.count("expert_feed_forward_length", static_cast<uint32_t>(hp.n_ff), 1,
                              kMaxWidth * 64);
        hp.n_ff_shexp = r.count("expert_shared_feed_forward_length", 0u, 0, kMaxWidth * 64);
        // Mixtral and Qwen3-MoE renormalise the top-k weights; Qwen2-MoE (norm_topk_prob=false)
        // does not.
        hp.expert_weights_norm = f.get_bool(a + "expert_weights_norm", hp.spec().renorm_experts);
        hp.expert_top_p = r.real("expert_top_p", 0.0f, 0, 1, false);
        hp.expert_used_min = r.count("expert_used_count_min", 1u, 1, hp.n_expert_used);
        hp.expert_policy = read_length_policy(f, a + "expert_policy.", "top_p", 1e-6, 1);
        SYSLM_CHECK(hp.expert_policy.empty() || hp.expert_top_p > 0, f.path(), ": ", a,
                    "expert_policy: the model does not route top-p");
    } else {
        hp.n_expert_used = r.count("expert_used_count", 0u, 0, kMaxCount);
        SYSLM_CHECK(hp.n_ff > 0, f.path(), ": ", a, "feed_forward_length must be positive");
    }
}

// syslm's structure keys: linear attention layers, blocks shared by several layers, and a
// learned Swish beta in the FFN.
void read_structure(const io::GGUFFile& f, const std::string& a, HParams& hp) {
    hp.block_source = block_source(f, a + "block_source", hp.n_layer);
    hp.swish_beta = f.get_bool(a + "feed_forward.swish_beta", false);
    hp.conv_kernel = Reader(f, a).count("attention.conv_kernel", 0u, 0, 64);
    // The same forms as the window's pattern: bools (true: linear), or a period n (layer il
    // linear unless il % n == n - 1).
    if (f.find(a + "attention.linear_pattern"))
        hp.linear_layers = local_layers(f, a + "attention.linear_pattern", hp.n_layer, 0);
    for (int il = 0; il < hp.n_layer; ++il)
        SYSLM_CHECK(!hp.linear_attention(il) || (hp.window(il) == 0 && hp.attn_softcap == 0 &&
                                                 hp.spec().position != PositionKind::Alibi),
                    f.path(), ": ", a, "attention.linear_pattern: layer ", il,
                    " is linear, which takes no window, soft-capping or ALiBi");

    SYSLM_CHECK(!hp.swish_beta || (hp.spec().ffn == kernels::FfnActivation::SwiGLU &&
                                   !hp.spec().fused_gate_up && hp.n_expert == 0),
                f.path(), ": ", a,
                "feed_forward.swish_beta needs a dense FFN with a separate SwiGLU gate");
}

}  // namespace

HParams load_hparams(const io::GGUFFile& f) {
    HParams hp;
    hp.arch_name = f.get_string("general.architecture");
    hp.arch = parse_arch(hp.arch_name, f.path());
    const std::string a = hp.arch_name + ".";
    const Reader r(f, a);
    hp.n_ctx_train = r.count("context_length", std::nullopt, 1, kMaxContext);
    hp.n_embd = r.count("embedding_length", std::nullopt, 1, kMaxWidth);
    hp.n_layer = r.count("block_count", std::nullopt, 1, kMaxCount);
    hp.n_head = r.count("attention.head_count", std::nullopt, 1, kMaxCount);
    hp.n_head_kv =
        r.count("attention.head_count_kv", static_cast<uint32_t>(hp.n_head), 1, hp.n_head);
    hp.n_ff = r.count("feed_forward_length", 0u, 0, kMaxWidth * 64);
    SYSLM_CHECK(hp.n_head % hp.n_head_kv == 0, f.path(), ": head_count ", hp.n_head,
                " is not a multiple of head_count_kv ", hp.n_head_kv);
    hp.head_dim =
        r.count("attention.key_length", static_cast<uint32_t>(hp.n_embd / hp.n_head), 1, kMaxWidth);
    SYSLM_CHECK(r.count("attention.value_length", static_cast<uint32_t>(hp.head_dim), 1,
                        kMaxWidth) == hp.head_dim,
                f.path(), ": attention key and value lengths must be equal");
    hp.norm_eps = r.real(hp.spec().norm_eps_key, std::nullopt, 0, 1);
    hp.sliding_window = r.count("attention.sliding_window", 0u, 0, kMaxContext);
    hp.local_layers = local_layers(f, a + "attention.sliding_window_pattern", hp.n_layer,
                                   hp.sliding_window > 0 ? hp.spec().swa_period : 0);
    hp.global_tokens = r.count("attention.global_tokens", 0u, 0, kMaxContext);
    hp.window_policy = read_length_policy(f, a + "attention.window_policy.", "windows", 1,
                                          static_cast<double>(kMaxContext));
    SYSLM_CHECK(hp.window_policy.empty() || hp.sliding_window > 0, f.path(), ": ", a,
                "attention.window_policy: the model has no local attention layers");
    SYSLM_CHECK(hp.global_tokens == 0 || hp.sliding_window > 0, f.path(), ": ", a,
                "attention.global_tokens needs attention.sliding_window");
    hp.random_blocks = r.count("attention.random_blocks", 0u, 0, kernels::kMaxRandomBlocks);
    if (hp.random_blocks > 0) {
        SYSLM_CHECK(hp.sliding_window > 0, f.path(), ": ", a,
                    "attention.random_blocks needs attention.sliding_window");
        hp.random_block_size = r.count("attention.random_block_size", std::nullopt,
                                       kernels::kMinRandomBlockSize, kMaxContext);
        hp.random_seed = static_cast<uint32_t>(r.count("attention.random_seed", 0u, 0, INT32_MAX));
        if (const io::GGUFValue* v = f.find(a + "attention.random_layers")) {
            SYSLM_CHECK(v->is_array() && v->size() == static_cast<size_t>(hp.n_layer), f.path(),
                        ": ", a, "attention.random_layers: one layer index per layer (", hp.n_layer,
                        ")");
            for (const int32_t x : v->as_i32s()) {
                SYSLM_CHECK(x >= 0, f.path(), ": ", a, "attention.random_layers: ", x,
                            " is not a layer index");
                hp.random_layers.push_back(static_cast<uint32_t>(x));
            }
        }
    }
    hp.attn_scale = r.real("attention.scale", 0.0f, 0, 1e3, false);
    // llama.cpp's gemma2 / gemma3 without the key: query_pre_attn_scalar is n_embd / n_head for
    // the 27B models (46 / 62 layers), head_dim for the others.
    if (hp.attn_scale == 0 && ((hp.arch == Arch::Gemma2 && hp.n_layer == 46) ||
                               (hp.arch == Arch::Gemma3 && hp.n_layer == 62)))
        hp.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.n_embd / hp.n_head));
    hp.attn_softcap = r.real("attn_logit_softcapping", hp.spec().attn_softcap, 0, 1e6, false);
    hp.final_softcap = r.real("final_logit_softcapping", hp.spec().final_softcap, 0, 1e6, false);
    if (hp.spec().position == PositionKind::Alibi) {
        // llama.cpp reads it for mpt and fixes bloom's at 8, which no converter writes.
        hp.max_alibi_bias = r.real("attention.max_alibi_bias", 8.0f, 0, 1e3);
        hp.alibi_slopes = kernels::alibi_slopes(hp.n_head, hp.max_alibi_bias);
        SYSLM_CHECK(hp.global_tokens == 0 && hp.random_blocks == 0, f.path(), ": ", a,
                    "attention.global_tokens and .random_blocks do not combine with ALiBi");
    }

    read_experts(r, f, a, hp);
    read_structure(f, a, hp);
    if (hp.has_rope()) read_rope(r, f, a, hp);
    return hp;
}

}  // namespace syslm::model
