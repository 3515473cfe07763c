#include "model/lora.hpp"

#include <cstdio>
#include <cstring>
#include <map>

#include "core/error.hpp"
#include "kernels/type_traits.hpp"
#include "model/transformer.hpp"

namespace syslm::model {

namespace {

constexpr std::array<const char*, kLoraTargets> kNames = {
    "attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};

// The base matrix a target names in layer il (data == nullptr when the model has none), in
// LoraTarget's order.
constexpr std::array<Matrix LayerWeights::*, kLoraTargets> kMatrices = {
    &LayerWeights::wq, &LayerWeights::wk,       &LayerWeights::wv,     &LayerWeights::wqkv,
    &LayerWeights::wo, &LayerWeights::ffn_gate, &LayerWeights::ffn_up, &LayerWeights::ffn_down};

const Matrix& base_matrix(const LayerWeights& l, LoraTarget t) {
    return l.*kMatrices[static_cast<size_t>(t)];
}

// "blk.<il>.<what>.weight" -> il and the target it names (false for anything else, biases too).
bool block_target(const std::string& name, int& il, size_t& target) {
    char what[64] = {0};
    int end = 0;
    if (std::sscanf(name.c_str(), "blk.%d.%63[a-z_].weight%n", &il, what, &end) != 2 ||
        static_cast<size_t>(end) != name.size())
        return false;
    for (target = 0; target < kLoraTargets; ++target)
        if (std::string(kNames[target]) == what) return true;
    return false;
}

std::string shape_of(const io::GGUFTensor& t) {
    std::string s = "[";
    for (size_t i = 0; i < t.ne.size(); ++i) s += (i ? ", " : "") + std::to_string(t.ne[i]);
    return s + "]";
}

}  // namespace

const char* lora_target_name(LoraTarget t) {
    return kNames[static_cast<size_t>(t)];
}

std::vector<AdapterPair> read_adapter_pairs(const io::GGUFFile& f, const std::string& arch,
                                            float& alpha) {
    const std::string& path = f.path();
    const std::string type = f.get_string("general.type", "");
    SYSLM_CHECK(type == "adapter", path, ": general.type is '", type,
                "', not 'adapter': not a LoRA adapter file (llama.cpp's adapter GGUF)");
    const std::string kind = f.get_string("adapter.type", "");
    SYSLM_CHECK(kind == "lora", path, ": adapter.type is '", kind, "', not 'lora'");
    const std::string file_arch = f.get_string("general.architecture", "");
    SYSLM_CHECK(file_arch == arch, path, ": an adapter for '", file_arch,
                "' models, but the base model is '", arch, "'");
    alpha = f.get_f32("adapter.lora.alpha", 0.0f);
    SYSLM_CHECK(std::isfinite(alpha) && alpha >= 0, path, ": adapter.lora.alpha is ", alpha);
    // In the file's order (a training checkpoint's optimizer state follows it).
    std::vector<AdapterPair> out;
    std::map<std::string, size_t> index;
    for (const io::GGUFTensor& t : f.tensors()) {
        const auto ends = [&](const std::string& s) {
            return t.name.size() > s.size() &&
                   t.name.compare(t.name.size() - s.size(), s.size(), s) == 0;
        };
        SYSLM_CHECK(ends(".lora_a") || ends(".lora_b"), path, ": tensor '", t.name,
                    "' is neither a .lora_a nor a .lora_b");
        const std::string name = t.name.substr(0, t.name.size() - 7);
        const auto [it, added] = index.emplace(name, out.size());
        if (added) out.push_back({name, nullptr, nullptr});
        (ends(".lora_a") ? out[it->second].a : out[it->second].b) = &t;
    }
    for (const AdapterPair& p : out) {
        const std::string& name = p.name;
        SYSLM_CHECK(p.a && p.b, path, ": tensor '", name, "' has a ",
                    p.a ? ".lora_a without its .lora_b" : ".lora_b without its .lora_a");
        const io::GGUFTensor &a = *p.a, &b = *p.b;
        SYSLM_CHECK(a.ne.size() == 2 && b.ne.size() == 2, path, ": '", name, "': .lora_a is ",
                    shape_of(a), " and .lora_b ", shape_of(b),
                    " (expected 2-D [n_in, r], [r, n_out])");
        SYSLM_CHECK(a.ne[1] == b.ne[0] && a.ne[1] > 0, path, ": '", name, "': .lora_a has rank ",
                    a.ne[1], " but .lora_b ", b.ne[0],
                    " (is lora_a transposed? adapters of llama.cpp's old finetune are not read)");
        for (const io::GGUFTensor* x : {&a, &b})
            SYSLM_CHECK(
                kernels::has_type_traits(x->type) && x->ne[0] % dtype_info(x->type).block_size == 0,
                path, ": tensor '", x->name, "' has type ", dtype_name(x->type),
                " which syslm cannot compute with at this shape");
    }
    return out;
}

bool lora_block_target(const std::string& name, int& il, LoraTarget& target) {
    size_t t = 0;
    if (!block_target(name, il, t)) return false;
    target = static_cast<LoraTarget>(t);
    return true;
}

LoraAdapter::LoraAdapter(const std::string& path, const Model& base) : path_(path) {
    const io::GGUFFile f(path);
    const std::vector<AdapterPair> pairs = read_adapter_pairs(f, base.hparams().arch_name, alpha_);
    const int n_layer = base.hparams().n_layer;
    layers_.resize(static_cast<size_t>(n_layer));
    for (const AdapterPair& ap : pairs) {
        const std::string& name = ap.name;
        int il = -1;
        size_t t = 0;
        SYSLM_CHECK(block_target(name, il, t) && il >= 0 && il < n_layer, path, ": LoRA on '", name,
                    "' is not supported: syslm adapts the attn_q/k/v/qkv/output and "
                    "ffn_gate/up/down weights of this ",
                    n_layer, "-layer model");
        const Matrix& w =
            base_matrix(base.weights().layers[static_cast<size_t>(il)], static_cast<LoraTarget>(t));
        SYSLM_CHECK(w.data, path, ": '", name, "' is not in the base model");
        SYSLM_CHECK(
            !(static_cast<LoraTarget>(t) == LoraTarget::Up && base.hparams().spec().fused_gate_up),
            path, ": LoRA on a fused gate-up tensor ('", name, "') is not supported");
        const io::GGUFTensor &a = *ap.a, &b = *ap.b;
        SYSLM_CHECK(a.ne[0] == w.n_in && b.ne[1] == w.n_out, path, ": '", name, "' is ", w.n_in,
                    " x ", w.n_out, " (ggml [n_in, n_out]) but its ", ".lora_a is ", shape_of(a),
                    " and .lora_b ", shape_of(b), " (expected [", w.n_in, ", r] and [r, ", w.n_out,
                    "])");
        const int64_t r = a.ne[1];
        Pair& pr = layers_[static_cast<size_t>(il)][t];
        pr.r = static_cast<int>(r);
        pr.n_in = w.n_in;
        pr.n_out = w.n_out;
        pr.scale = alpha_ > 0 ? alpha_ / static_cast<float>(r) : 1.0f;
        pr.type = a.type == DType::F16 && b.type == DType::F16 ? DType::F16 : DType::F32;
        const size_t es = pr.type == DType::F16 ? 2 : 4;
        std::vector<uint8_t> b_rows;  // B as stored: n_out rows of r, kept transposed
        for (auto [t, m] : {std::pair{&a, &pr.a}, std::pair{&b, &b_rows}}) {
            m->resize(static_cast<size_t>(t->numel()) * es);
            if (pr.type == DType::F16)
                std::memcpy(m->data(), t->data, m->size());
            else
                kernels::type_traits(t->type).to_float(t->data, reinterpret_cast<float*>(m->data()),
                                                       t->numel());
        }
        pr.bt.resize(b_rows.size());
        for (int64_t o = 0; o < w.n_out; ++o)
            for (int64_t k = 0; k < r; ++k)
                std::memcpy(pr.bt.data() + (k * w.n_out + o) * es, b_rows.data() + (o * r + k) * es,
                            es);
        ++n_pairs_;
    }
    SYSLM_CHECK(n_pairs_ > 0, path, ": the adapter has no tensors");
}

std::vector<float> LoraAdapter::Pair::floats(const std::vector<uint8_t>& m) const {
    const size_t n = m.size() / (type == DType::F16 ? 2 : 4);
    std::vector<float> out(n);
    kernels::type_traits(type).to_float(m.data(), out.data(), static_cast<int64_t>(n));
    return out;
}

void add_lora_delta(const LoraAdapter::Pair& p, float scale, float* w) {
    const float s = scale * p.scale;
    const std::vector<float> a = p.floats(p.a), bt = p.floats(p.bt);
    for (int64_t o = 0; o < p.n_out; ++o) {
        float* wo = w + o * p.n_in;
        for (int k = 0; k < p.r; ++k) {
            const float bk = s * bt[static_cast<size_t>(k * p.n_out + o)];
            const float* ak = a.data() + k * p.n_in;
            for (int64_t i = 0; i < p.n_in; ++i) wo[i] += bk * ak[i];
        }
    }
}

int merge_lora(const Model& base, const std::vector<LoraUse>& uses, const std::string& out) {
    const io::GGUFFile& f = base.file();
    io::GGUFWriter w;
    for (const auto& [k, v] : f.metadata()) w.set(k, v);
    int merged = 0;
    for (const io::GGUFTensor& t : f.tensors()) {
        int il = -1;
        size_t k = 0;
        std::vector<const LoraUse*> mine;
        if (block_target(t.name, il, k))
            for (const LoraUse& u : uses)
                if (u.adapter->pair(il, static_cast<LoraTarget>(k))) mine.push_back(&u);
        if (mine.empty()) {
            w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
            continue;
        }
        const kernels::TypeTraits& tt = kernels::type_traits(t.type);
        SYSLM_CHECK(tt.from_float, "lora merge: ", t.name, " has type ", dtype_name(t.type),
                    ", which syslm cannot write back");
        std::vector<float> x(static_cast<size_t>(t.numel()));
        tt.to_float(t.data, x.data(), t.numel());
        for (const LoraUse* u : mine)
            add_lora_delta(*u->adapter->pair(il, static_cast<LoraTarget>(k)), u->scale, x.data());
        std::vector<uint8_t> bytes(t.nbytes);
        const size_t row = row_bytes(t.type, t.ne[0]);
        for (int64_t r = 0; r < t.rows(); ++r)
            tt.from_float(x.data() + r * t.ne[0], bytes.data() + r * row, t.ne[0]);
        w.add_tensor(t.name, t.type, t.ne, std::move(bytes));
        ++merged;
    }
    w.write(out);
    return merged;
}

}  // namespace syslm::model
