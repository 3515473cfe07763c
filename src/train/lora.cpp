#include "train/lora.hpp"

#include <cmath>
#include <map>
#include <random>

#include "core/error.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::train {

std::vector<model::LoraTarget> parse_lora_targets(const std::string& list) {
    static const std::map<std::string, model::LoraTarget> names = {
        {"q", model::LoraTarget::Q},   {"k", model::LoraTarget::K},
        {"v", model::LoraTarget::V},   {"qkv", model::LoraTarget::QKV},
        {"o", model::LoraTarget::O},   {"gate", model::LoraTarget::Gate},
        {"up", model::LoraTarget::Up}, {"down", model::LoraTarget::Down}};
    std::vector<model::LoraTarget> out;
    size_t begin = 0;
    while (begin <= list.size()) {
        const size_t end = std::min(list.find(',', begin), list.size());
        const std::string name = list.substr(begin, end - begin);
        const auto it = names.find(name);
        SYSLM_CHECK(it != names.end(), "--lora-targets: unknown target '", name,
                    "' (known: q, k, v, qkv, o, gate, up, down)");
        SYSLM_CHECK(std::find(out.begin(), out.end(), it->second) == out.end(), "--lora-targets: '",
                    name, "' is named twice");
        out.push_back(it->second);
        begin = end + 1;
    }
    return out;
}

namespace {

std::vector<float> to_floats(const io::GGUFTensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    kernels::type_traits(t.type).to_float(t.data, v.data(), t.numel());
    return v;
}

// A new adapter: a pair for each target matrix, in the base file's tensor order.
ParamStore new_adapter(const io::GGUFFile& base, const LoraSpec& spec) {
    SYSLM_CHECK(spec.rank > 0, "train --lora: the rank must be positive, not ", spec.rank);
    ParamStore ps;
    std::mt19937_64 rng(spec.seed);
    std::vector<bool> found(model::kLoraTargets, false);
    const int64_t r = spec.rank;
    for (const io::GGUFTensor& t : base.tensors()) {
        int il = 0;
        model::LoraTarget target{};
        if (!model::lora_block_target(t.name, il, target) ||
            (!spec.targets.empty() &&
             std::find(spec.targets.begin(), spec.targets.end(), target) == spec.targets.end()))
            continue;
        SYSLM_CHECK(t.ne.size() == 2, base.path(), ": '", t.name, "' is not a matrix");
        const int64_t n_in = t.ne[0], n_out = t.ne[1];
        std::uniform_real_distribution<float> u(-1.0f / std::sqrt(static_cast<float>(n_in)),
                                                1.0f / std::sqrt(static_cast<float>(n_in)));
        std::vector<float> a(static_cast<size_t>(r * n_in));
        for (float& x : a) x = u(rng);
        ps.add(t.name + ".lora_a", {n_in, r}, a, false);
        ps.add(t.name + ".lora_b", {r, n_out}, std::vector<float>(static_cast<size_t>(n_out * r)),
               false);
        found[static_cast<size_t>(target)] = true;
    }
    for (model::LoraTarget target : spec.targets)
        SYSLM_CHECK(found[static_cast<size_t>(target)], base.path(), ": --lora-targets names ",
                    model::lora_target_name(target), ", which no block of this model has",
                    target == model::LoraTarget::Q || target == model::LoraTarget::K ||
                            target == model::LoraTarget::V
                        ? " (a fused attn_qkv is the target qkv)"
                        : "");
    SYSLM_CHECK(!ps.params().empty(), base.path(), ": no matrix for LoRA in this model");
    return ps;
}

// The pairs of an adapter file, checked against the base.
ParamStore adapter_from_file(const io::GGUFFile& base, const std::string& path, float& alpha) {
    const io::GGUFFile f(path);
    ParamStore ps;
    for (const model::AdapterPair& p :
         model::read_adapter_pairs(f, base.get_string("general.architecture", ""), alpha)) {
        int il = 0;
        model::LoraTarget target{};
        const io::GGUFTensor* w = base.find_tensor(p.name);
        SYSLM_CHECK(model::lora_block_target(p.name, il, target) && w && w->ne.size() == 2, path,
                    ": LoRA on '", p.name,
                    "', which is not an attn_q/k/v/qkv/output or ffn_gate/up/down matrix of ",
                    base.path());
        SYSLM_CHECK(p.a->ne[0] == w->ne[0] && p.b->ne[1] == w->ne[1], path, ": '", p.name, "' is ",
                    w->ne[0], " x ", w->ne[1], " (ggml [n_in, n_out]) in ", base.path(),
                    " but the adapter's pair is for ", p.a->ne[0], " x ", p.b->ne[1]);
        ps.add(p.name + ".lora_a", p.a->ne, to_floats(*p.a), false);
        ps.add(p.name + ".lora_b", p.b->ne, to_floats(*p.b), false);
    }
    SYSLM_CHECK(!ps.params().empty(), path, ": the adapter has no tensors");
    return ps;
}

}  // namespace

ParamStore lora_params(const io::GGUFFile& base, const LoraSpec& spec, float& alpha) {
    if (!spec.init.empty()) return adapter_from_file(base, spec.init, alpha);
    alpha = spec.alpha;
    SYSLM_CHECK(std::isfinite(alpha) && alpha > 0,
                "train --lora: --lora-alpha must be positive, not ", alpha);
    return new_adapter(base, spec);
}

std::vector<std::pair<std::string, io::GGUFValue>> lora_metadata(const io::GGUFFile& base,
                                                                 float alpha) {
    return {{"general.architecture",
             io::GGUFValue::string(base.get_string("general.architecture", ""))},
            {"general.type", io::GGUFValue::string("adapter")},
            {"adapter.type", io::GGUFValue::string("lora")},
            {"adapter.lora.alpha", io::GGUFValue::f32(alpha)}};
}

}  // namespace syslm::train
