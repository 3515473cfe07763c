#include "model/weights.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>

#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "core/mapped_file.hpp"
#include "kernels/repack.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::model {

Matrix Experts::expert(int64_t e) const {
    const size_t bytes = row_bytes(type, n_in) * static_cast<size_t>(n_out);
    return {type, n_in, n_out, data + bytes * static_cast<size_t>(e)};
}

namespace {

std::string shape_str(const std::vector<int64_t>& ne) {
    std::string s = "[";
    for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

// Shapes match as llama.cpp checks them: trailing dimensions of 1 are ignored, so a [72, 1]
// tensor (as HF's converter writes a 1-row gate) binds where [72] is expected.
bool same_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i)
        if ((i < a.size() ? a[i] : 1) != (i < b.size() ? b[i] : 1)) return false;
    return true;
}

class Binder {
public:
    // W8A8 files (compress/quantize_model.hpp) name their statically scaled matrices and the
    // activation scales in two metadata arrays.
    Binder(const io::GGUFFile& f, const std::vector<TensorOverride>& overrides) : f_(f) {
        for (const TensorOverride& o : overrides) {
            const io::GGUFTensor* t = f.find_tensor(o.name);
            SYSLM_CHECK(t, f.path(), ": an override names tensor '", o.name, "', which it lacks");
            SYSLM_CHECK(o.bytes && o.bytes->size() == row_bytes(o.type, t->ne[0]) * t->rows(),
                        f.path(), ": the override of '", o.name, "' holds ",
                        o.bytes ? o.bytes->size() : 0, " bytes, not the ",
                        row_bytes(o.type, t->ne[0]) * t->rows(), " of ", t->rows(), " rows of ",
                        dtype_name(o.type));
            io::GGUFTensor r = *t;
            r.type = o.type;
            r.nbytes = o.bytes->size();
            r.data = o.bytes->data();
            overridden_[o.name] = std::move(r);
        }
        const io::GGUFValue* names = f.find("syslm.w8a8.tensors");
        const io::GGUFValue* scales = f.find("syslm.w8a8.act_scales");
        if (!names && !scales) return;
        SYSLM_CHECK(names && scales, f.path(),
                    ": syslm.w8a8.tensors and syslm.w8a8.act_scales "
                    "must come together");
        const std::vector<std::string> n = names->as_strings();
        const std::vector<float> v = scales->as_f32s();
        SYSLM_CHECK(n.size() == v.size(), f.path(), ": ", n.size(), " W8A8 tensors but ", v.size(),
                    " activation scales");
        for (size_t i = 0; i < n.size(); ++i) {
            SYSLM_CHECK(std::isfinite(v[i]) && v[i] > 0, f.path(), ": activation scale of ", n[i],
                        " is ", v[i]);
            act_scales_[n[i]] = v[i];
        }
    }

    const io::GGUFTensor* find(const std::string& name, std::vector<int64_t> ne, bool required) {
        const io::GGUFTensor* t = f_.find_tensor(name);
        if (const auto it = overridden_.find(name); t && it != overridden_.end()) t = &it->second;
        if (!t) {
            SYSLM_CHECK(!required, f_.path(), ": missing tensor '", name, "'");
            return nullptr;
        }
        SYSLM_CHECK(same_shape(t->ne, ne), f_.path(), ": tensor '", name, "' has shape ",
                    shape_str(t->ne), ", expected ", shape_str(ne));
        SYSLM_CHECK(kernels::has_type_traits(t->type), f_.path(), ": tensor '", name, "' has type ",
                    dtype_name(t->type), " which syslm cannot compute with");
        return t;
    }

    Matrix matrix(const std::string& name, int64_t n_in, int64_t n_out, bool required = true) {
        const io::GGUFTensor* t = find(name, {n_in, n_out}, required);
        if (!t) return {DType::F32, n_in, n_out, nullptr};
        Matrix m{t->type, n_in, n_out, t->data};
        // A static scale describes int8 activations for Q8_0 weights; a file derived from a W8A8
        // one (fine-tuned to F32, requantized) may still carry it for other types: unused then.
        if (const auto it = act_scales_.find(name);
            it != act_scales_.end() && t->type == DType::Q8_0)
            m.act_scale = it->second;
        return m;
    }

    Experts experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert) {
        const io::GGUFTensor* t = find(name, {n_in, n_out, n_expert}, true);
        return {t->type, n_in, n_out, n_expert, t->data};
    }

    // A small tensor of any shape (a conv's taps) as floats, row after row.
    Vector floats(const std::string& name, const std::vector<int64_t>& ne) {
        const io::GGUFTensor* t = find(name, ne, true);
        Vector v(static_cast<size_t>(t->numel()));
        kernels::type_traits(t->type).to_float(t->data, v.data(), t->numel());
        return v;
    }
    Vector vector(const std::string& name, int64_t n, bool required = true) {
        const io::GGUFTensor* t = find(name, {n}, required);
        if (!t) return {};
        Vector v(static_cast<size_t>(n));
        kernels::type_traits(t->type).to_float(t->data, v.data(), n);
        return v;
    }

private:
    const io::GGUFFile& f_;
    std::map<std::string, float> act_scales_;
    std::map<std::string, io::GGUFTensor> overridden_;  // views of the overrides' bytes
};

// Whether every matrix is copied to huge pages, or only those repacked. By default (or
// SYSLM_WEIGHTS=auto) they are copied when the file is mapped, transparent huge pages can back
// the copy, and it fits with room to spare in the memory available: decode streams every weight
// once per token, and through huge pages instead of the file's 4 KiB pages it measured 0-28%
// faster (AMD EPYC Zen 3, bench/RESULTS.md). The file pages are released as they are copied,
// so the resident size stays that of the file.
bool copy_weights(const io::GGUFFile& f) {
    const char* env = std::getenv("SYSLM_WEIGHTS");
    if (env && std::strcmp(env, "mmap") == 0) return false;
    if (env && std::strcmp(env, "copy") == 0) return true;
    SYSLM_CHECK(!env || std::strcmp(env, "auto") == 0, "SYSLM_WEIGHTS='", env,
                "': expected 'auto' (the default), 'mmap' (every matrix a view of the file) or "
                "'copy' (every matrix copied to huge pages)");
    return f.mapped() && huge_pages_available() &&
           f.file_size() < meminfo_bytes("MemAvailable") / 2;
}

// Whether matrices are converted to their load-time layouts (kernels/repack.hpp).
bool repack_weights() {
    const char* env = std::getenv("SYSLM_REPACK");
    if (!env || std::strcmp(env, "1") == 0) return true;
    if (std::strcmp(env, "0") == 0) return false;
    fail("SYSLM_REPACK='", env, "': expected 1 (the default: repack where it pays) or 0");
}

// Moves the matrices that are repacked (and, with copy_all, every other matrix but the token
// embedding) into one buffer on transparent huge pages, converting them on the way, and
// points the views there; the file pages they came from are released (see weights.hpp).
void place_matrices(Weights& w, bool copy_all, bool repack, bool release_source,
                    const std::vector<TensorOverride>& overrides) {
    auto in_file = [&](const void* src) {
        for (const TensorOverride& o : overrides)
            if (src == o.bytes->data()) return false;
        return true;
    };
    struct Span {
        const void* src;
        DType from, to;
        int64_t n_in, rows;
        std::function<void(uint8_t*, DType)> point_to;
        bool in_file;  // a view of the mapped file (not an override's buffer): pages released
    };
    std::vector<Span> spans;
    auto add = [&](const void* src, DType type, int64_t n_in, int64_t rows,
                   std::function<void(uint8_t*, DType)> point_to) {
        const DType to = repack ? kernels::load_layout(type, n_in) : type;
        if (src && (copy_all || to != type))
            spans.push_back({src, type, to, n_in, rows, std::move(point_to), in_file(src)});
    };
    auto add_m = [&](Matrix& m) {
        if (m.data != w.token_embd.data)
            add(m.data, m.type, m.n_in, m.n_out, [&m](uint8_t* p, DType t) {
                m.data = p;
                m.type = t;
            });
    };
    auto add_e = [&](Experts& x) {
        add(x.data, x.type, x.n_in, x.n_out * x.n_expert, [&x](uint8_t* p, DType t) {
            x.data = p;
            x.type = t;
        });
    };
    add_m(w.output);
    for (LayerWeights& l : w.layers) {
        for (Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wqkv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down,
                          &l.ffn_gate_inp, &l.ffn_gate_shexp, &l.ffn_up_shexp, &l.ffn_down_shexp})
            add_m(*m);
        for (Experts* x : {&l.gate_exps, &l.up_exps, &l.down_exps}) add_e(*x);
    }
    constexpr size_t kAlign = 64, kHuge = size_t{2} << 20;
    const auto bytes = [](const Span& s) { return row_bytes(s.from, s.n_in) * s.rows; };
    size_t total = 0;
    for (const Span& s : spans) total += (bytes(s) + kAlign - 1) / kAlign * kAlign;
    if (total == 0) return;
    total = (total + kHuge - 1) / kHuge * kHuge;
    void* buf = std::aligned_alloc(kHuge, total);
    SYSLM_CHECK(buf, "cannot allocate ", total >> 20, " MiB for the model's weights");
    madvise(buf, total, MADV_HUGEPAGE);  // advice: without THP the copy still works
    w.copy =
        std::shared_ptr<const void>(buf, [](const void* p) { std::free(const_cast<void*>(p)); });
    w.copy_bytes = total;
    auto* dst = static_cast<uint8_t*>(buf);
    for (const Span& s : spans) {
        if (s.to == s.from)
            std::memcpy(dst, s.src, bytes(s));
        else
            kernels::repack_rows(s.from, s.to, s.src, dst, s.n_in, s.rows);
        if (release_source && s.in_file) release_mapped_pages(s.src, bytes(s));
        s.point_to(dst, s.to);
        dst += (bytes(s) + kAlign - 1) / kAlign * kAlign;
    }
}

}  // namespace

namespace {

// Layer p's attention: the output matrix, Q/K/V (fused or apart, biases), q/k norms and the
// post-norms.
void bind_attention(Binder& b, const io::GGUFFile& f, const HParams& hp, const std::string& p,
                    LayerWeights& l) {
    const ArchSpec& spec = hp.spec();
    const int64_t E = hp.n_embd;
    l.wo = b.matrix(p + "attn_output.weight", hp.q_dim(), E);
    if (spec.linear_biases) l.bo = b.vector(p + "attn_output.bias", E);
    if (spec.fused_qkv) {
        l.wqkv = b.matrix(p + "attn_qkv.weight", E, hp.q_dim() + 2 * hp.kv_dim());
        if (spec.linear_biases)
            l.bqkv = b.vector(p + "attn_qkv.bias", hp.q_dim() + 2 * hp.kv_dim());
    } else {
        l.wq = b.matrix(p + "attn_q.weight", E, hp.q_dim());
        l.wk = b.matrix(p + "attn_k.weight", E, hp.kv_dim());
        l.wv = b.matrix(p + "attn_v.weight", E, hp.kv_dim());
        l.bq = b.vector(p + "attn_q.bias", hp.q_dim(), spec.qkv_bias);
        l.bk = b.vector(p + "attn_k.bias", hp.kv_dim(), spec.qkv_bias);
        l.bv = b.vector(p + "attn_v.bias", hp.kv_dim(), spec.qkv_bias);
    }
    if (hp.conv_kernel > 0) l.attn_conv = b.floats(p + "attn_conv.weight", {E, hp.conv_kernel});
    if (spec.qk_norm) {
        l.attn_q_norm = b.vector(p + "attn_q_norm.weight", hp.head_dim);
        l.attn_k_norm = b.vector(p + "attn_k_norm.weight", hp.head_dim);
    }
    if (spec.post_norms) {
        SYSLM_CHECK(hp.n_expert == 0, f.path(), ": post-norms with experts are not supported");
        l.post_attn_norm = b.vector(p + "post_attention_norm.weight", E);
        l.post_ffn_norm = b.vector(p + "post_ffw_norm.weight", E);
    }
}

// Layer p's FFN: dense (gated, fused gate-up, or with biases), or routed experts (and a shared
// one).
void bind_ffn(Binder& b, const HParams& hp, const std::string& p, LayerWeights& l) {
    const ArchSpec& spec = hp.spec();
    const int64_t E = hp.n_embd;
    if (hp.n_expert == 0 && spec.fused_gate_up) {  // one tensor: the gate's rows, then up's
        const Matrix both = b.matrix(p + "ffn_up.weight", E, 2 * int64_t{hp.n_ff});
        l.ffn_gate = l.ffn_up = both;
        l.ffn_gate.n_out = l.ffn_up.n_out = hp.n_ff;
        l.ffn_up.data = static_cast<const uint8_t*>(both.data) + row_bytes(both.type, E) * hp.n_ff;
        l.ffn_down = b.matrix(p + "ffn_down.weight", hp.n_ff, E);
    } else if (hp.n_expert == 0) {
        if (kernels::ffn_gated(spec.ffn)) l.ffn_gate = b.matrix(p + "ffn_gate.weight", E, hp.n_ff);
        l.ffn_up = b.matrix(p + "ffn_up.weight", E, hp.n_ff);
        l.ffn_down = b.matrix(p + "ffn_down.weight", hp.n_ff, E);
        if (hp.swish_beta) l.ffn_act_beta = b.vector(p + "ffn_act_beta.weight", hp.n_ff);
        if (spec.linear_biases) {
            l.ffn_up_b = b.vector(p + "ffn_up.bias", hp.n_ff);
            l.ffn_down_b = b.vector(p + "ffn_down.bias", E);
        }
    } else {
        const int64_t F = hp.n_ff_exp, X = hp.n_expert;
        l.ffn_gate_inp = b.matrix(p + "ffn_gate_inp.weight", E, X);
        l.gate_exps = b.experts(p + "ffn_gate_exps.weight", E, F, X);
        l.up_exps = b.experts(p + "ffn_up_exps.weight", E, F, X);
        l.down_exps = b.experts(p + "ffn_down_exps.weight", F, E, X);
        if (hp.n_ff_shexp > 0) {
            const int64_t S = hp.n_ff_shexp;
            l.ffn_gate_inp_shexp = b.vector(p + "ffn_gate_inp_shexp.weight", E);
            l.ffn_gate_shexp = b.matrix(p + "ffn_gate_shexp.weight", E, S);
            l.ffn_up_shexp = b.matrix(p + "ffn_up_shexp.weight", E, S);
            l.ffn_down_shexp = b.matrix(p + "ffn_down_shexp.weight", S, E);
        }
    }
}

}  // namespace

void load_rope_factors(const io::GGUFFile& f, HParams& hp) {
    Binder b(f, {});
    const int64_t half = hp.rope.n_rot / 2;
    hp.rope.freq_factors = b.vector("rope_freqs.weight", half, /*required=*/false);
    // LongRoPE (phi3): short factors for contexts up to the original one, long beyond.
    Vector lo = b.vector("rope_factors_long.weight", half, false);
    Vector sh = b.vector("rope_factors_short.weight", half, !lo.empty());
    if (lo.empty()) return;
    SYSLM_CHECK(hp.rope.freq_factors.empty(), f.path(),
                ": both rope_freqs and LongRoPE factors (rope_factors_long / _short)");
    hp.rope.freq_factors = std::move(sh);
    hp.rope_long = hp.rope;
    hp.rope_long->freq_factors = std::move(lo);
}

Weights load_weights(const io::GGUFFile& f, HParams& hp,
                     const std::vector<TensorOverride>& overrides) {
    Binder b(f, overrides);
    Weights w;
    const io::GGUFTensor* embd = f.find_tensor("token_embd.weight");
    SYSLM_CHECK(embd && embd->ne.size() == 2, f.path(), ": missing 2-D tensor 'token_embd.weight'");
    hp.n_vocab = static_cast<int>(embd->ne[1]);
    const int64_t E = hp.n_embd, V = hp.n_vocab;
    w.token_embd = b.matrix("token_embd.weight", E, V);
    w.output_norm = b.vector("output_norm.weight", E);
    w.output = b.matrix("output.weight", E, V, /*required=*/false);
    if (!w.output.data) w.output = w.token_embd;  // tied embeddings
    if (kernels::norm_has_bias(hp.spec().norm)) w.output_norm_b = b.vector("output_norm.bias", E);
    if (hp.spec().position == PositionKind::Learned)
        w.position_embd = b.matrix("position_embd.weight", E, hp.n_ctx_train);
    if (hp.spec().embed_norm) {
        w.token_embd_norm = b.vector("token_embd_norm.weight", E);
        if (kernels::norm_has_bias(hp.spec().norm))
            w.token_embd_norm_b = b.vector("token_embd_norm.bias", E);
    }
    if (hp.has_rope()) {
        load_rope_factors(f, hp);
        w.rope_freqs = b.vector("rope_freqs.weight", hp.rope.n_rot / 2, /*required=*/false);
    }

    const ArchSpec& spec = hp.spec();
    for (int il = 0; il < hp.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        LayerWeights l;
        if (hp.block_of(il) != il) {  // a shared block: bound once, copied below
            w.layers.push_back(std::move(l));
            continue;
        }
        l.attn_norm = b.vector(p + "attn_norm.weight", E);
        l.ffn_norm = b.vector(p + "ffn_norm.weight", E);
        if (kernels::norm_has_bias(spec.norm)) {
            l.attn_norm_b = b.vector(p + "attn_norm.bias", E);
            l.ffn_norm_b = b.vector(p + "ffn_norm.bias", E);
        }
        bind_attention(b, f, hp, p, l);
        bind_ffn(b, hp, p, l);
        w.layers.push_back(std::move(l));
    }
    place_matrices(w, copy_weights(f), repack_weights(), f.mapped(), overrides);
    for (int il = 0; il < hp.n_layer; ++il)  // the same matrices, placed once
        if (hp.block_of(il) != il) w.layers[il] = w.layers[hp.block_of(il)];
    return w;
}

}  // namespace syslm::model
