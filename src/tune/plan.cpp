#include "tune/plan.hpp"

#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <set>
#include <sstream>
#include <string_view>

#include "core/error.hpp"
#include "core/mapped_file.hpp"
#include "model/kv_cache.hpp"

namespace syslm::tune {
namespace {

constexpr int kVersion = 1;

// A regex matching exactly this name.
std::string anchored(const std::string& name) {
    std::string out = "^";
    for (char c : name) {
        if (std::string_view(".^$|()[]{}*+?\\").find(c) != std::string_view::npos) out += '\\';
        out += c;
    }
    return out + "$";
}

// A section's keys must be among the known ones: a misspelt setting is an error, not ignored.
void check_keys(const nlohmann::json& j, const char* section,
                std::initializer_list<std::string_view> known) {
    SYSLM_CHECK(j.is_object(), section, " must be an object");
    for (const auto& item : j.items())
        SYSLM_CHECK(std::find(known.begin(), known.end(), item.key()) != known.end(), section, ".",
                    item.key(), " is not a setting of the plan");
}

template <typename T>
T in_range(const nlohmann::json& j, const char* section, const char* key, T fallback, T lo, T hi) {
    const T v = j.value(key, fallback);
    SYSLM_CHECK(v >= lo && v <= hi, section, ".", key, " ", v, " is outside [", lo, ", ", hi, "]");
    return v;
}

std::string one_of(const nlohmann::json& j, const char* section, const char* key,
                   const std::string& fallback, std::initializer_list<std::string_view> allowed) {
    const std::string v = j.value(key, fallback);
    SYSLM_CHECK(std::find(allowed.begin(), allowed.end(), v) != allowed.end(), section, ".", key,
                " '", v, "' is not one of the allowed values");
    return v;
}

// The plan's model section: the recipe, the per-tensor types and the structure.
void read_model(const nlohmann::json& m, Plan& p) {
    p.recipe = m.value("recipe", "");
    if (!p.recipe.empty())
        SYSLM_CHECK(compress::parse_quant_target(p.recipe), "model.recipe '", p.recipe,
                    "' is not a quantize target");
    p.imatrix = m.value("imatrix", false);
    const nlohmann::json types = m.value("tensor_types", nlohmann::json::object());
    SYSLM_CHECK(types.is_object(), "model.tensor_types must be an object of name: type");
    for (const auto& [name, type] : types.items()) {
        const auto t = compress::parse_quant_target(type.get<std::string>());
        SYSLM_CHECK(t && t->mix == compress::KMix::None && !t->w8a8, "model.tensor_types.", name,
                    ": '", type.get<std::string>(), "' is not a tensor type");
        p.tensor_types[name] = t->type;
    }
    check_keys(m, "model", {"recipe", "imatrix", "tensor_types", "prune"});
    if (!m.contains("prune")) return;
    const nlohmann::json& q = m["prune"];
    check_keys(
        q, "model.prune",
        {"ffn", "heads", "layers", "recover_steps", "recover_lr", "n_layer", "n_head", "n_ff"});
    PruneSettings d;
    d.ffn = in_range(q, "model.prune", "ffn", 0.0, 0.0, 0.99);
    d.heads = in_range(q, "model.prune", "heads", 0.0, 0.0, 0.99);
    d.layers = in_range(q, "model.prune", "layers", 0, 0, 1 << 16);
    d.recover_steps = in_range(q, "model.prune", "recover_steps", 0, 0, 1 << 24);
    d.recover_lr = in_range(q, "model.prune", "recover_lr", d.recover_lr, 0.0, 1.0);
    d.n_layer = in_range(q, "model.prune", "n_layer", 0, 1, 1 << 16);
    d.n_head = in_range(q, "model.prune", "n_head", 0, 1, 1 << 16);
    d.n_ff = in_range(q, "model.prune", "n_ff", 0, 1, 1 << 24);
    p.prune = d;
}

}  // namespace

nlohmann::json Plan::to_json() const {
    nlohmann::json types = nlohmann::json::object();
    for (const auto& [name, type] : tensor_types) types[name] = dtype_name(type);
    nlohmann::json j = {
        {"syslm_plan", kVersion},
        {"model", {{"recipe", recipe}, {"imatrix", imatrix}, {"tensor_types", types}}},
        {"runtime", {{"threads", threads}, {"batch", batch}}}};
    if (!window.empty()) j["runtime"]["window"] = window;
    if (!expert_top_p.empty()) j["runtime"]["expert_top_p"] = expert_top_p;
    if (prune)
        j["model"]["prune"] = {{"ffn", prune->ffn},
                               {"heads", prune->heads},
                               {"layers", prune->layers},
                               {"recover_steps", prune->recover_steps},
                               {"recover_lr", prune->recover_lr},
                               {"n_layer", prune->n_layer},
                               {"n_head", prune->n_head},
                               {"n_ff", prune->n_ff}};
    if (serve)
        j["serve"] = {{"parallel", serve->parallel},
                      {"token_budget", serve->token_budget},
                      {"page_size", serve->page_size},
                      {"kv_pages", serve->kv_pages},
                      {"ctx", serve->ctx},
                      {"cache_type", serve->cache_type}};
    if (train)
        j["train"] = {{"micro_batch", train->micro_batch},
                      {"accum", train->accum},
                      {"recompute", train->recompute},
                      {"precision", train->precision}};
    if (draft)
        j["draft"] = {{"file", draft->file},
                      {"k", draft->k},
                      {"adaptive", draft->adaptive},
                      {"k_min", draft->k_min},
                      {"k_max", draft->k_max}};
    if (edge) j["edge"] = {{"split_at", edge->split_at}, {"wire", edge->wire}};
    return j;
}

Plan Plan::from_json(const nlohmann::json& j) {
    try {
        SYSLM_CHECK(j.is_object() && j.value("syslm_plan", 0) == kVersion,
                    "not a syslm plan of version ", kVersion, " (key \"syslm_plan\")");
        Plan p;
        check_keys(j, "the plan",
                   {"syslm_plan", "model", "runtime", "serve", "train", "draft", "edge"});
        read_model(j.at("model"), p);
        const nlohmann::json r = j.value("runtime", nlohmann::json::object());
        check_keys(r, "runtime", {"threads", "batch", "window", "expert_top_p"});
        p.threads = in_range(r, "runtime", "threads", 0, 0, 4096);
        p.batch = in_range(r, "runtime", "batch", 512, 1, 65536);
        p.window = one_of(r, "runtime", "window", "", {"", "auto"});
        p.expert_top_p = one_of(r, "runtime", "expert_top_p", "", {"", "auto"});
        if (j.contains("serve")) {
            const nlohmann::json& s = j["serve"];
            check_keys(s, "serve",
                       {"parallel", "token_budget", "page_size", "kv_pages", "ctx", "cache_type"});
            ServeSettings d;
            d.parallel = in_range(s, "serve", "parallel", d.parallel, 1, 4096);
            d.token_budget =
                in_range<int64_t>(s, "serve", "token_budget", d.token_budget, 1, 1 << 20);
            d.page_size = in_range(s, "serve", "page_size", d.page_size, 1, 4096);
            d.kv_pages = in_range(s, "serve", "kv_pages", d.kv_pages, 0, 1 << 24);
            d.ctx = in_range(s, "serve", "ctx", d.ctx, 1, 1 << 24);
            if (s.contains("cache_type")) {
                SYSLM_CHECK(s["cache_type"].is_string(), "plan: serve.cache_type must be a string");
                d.cache_type = s["cache_type"].get<std::string>();
                model::kv_types_from_name(d.cache_type);  // throws naming the accepted types
            }
            p.serve = d;
        }
        if (j.contains("train")) {
            const nlohmann::json& t = j["train"];
            check_keys(t, "train", {"micro_batch", "accum", "recompute", "precision"});
            TrainSettings d;
            d.micro_batch = in_range(t, "train", "micro_batch", d.micro_batch, 1, 1 << 16);
            d.accum = in_range(t, "train", "accum", d.accum, 1, 1 << 16);
            d.recompute =
                one_of(t, "train", "recompute", d.recompute, {"none", "selective", "full"});
            d.precision = one_of(t, "train", "precision", d.precision, {"f32", "bf16", "f16"});
            p.train = d;
        }
        if (j.contains("draft")) {
            const nlohmann::json& t = j["draft"];
            check_keys(t, "draft", {"file", "k", "adaptive", "k_min", "k_max"});
            DraftSettings d;
            d.file = t.value("file", d.file);
            SYSLM_CHECK(!d.file.empty(), "draft.file is empty");
            d.adaptive = t.value("adaptive", d.adaptive);
            d.k_min = in_range(t, "draft", "k_min", d.k_min, 1, 256);
            d.k_max = in_range(t, "draft", "k_max", d.k_max, d.k_min, 256);
            d.k = in_range(t, "draft", "k", d.k, 1, 256);
            p.draft = d;
        }
        if (j.contains("edge")) {
            const nlohmann::json& t = j["edge"];
            check_keys(t, "edge", {"split_at", "wire"});
            EdgeSettings d;
            d.split_at = in_range(t, "edge", "split_at", d.split_at, 0, 1 << 16);
            d.wire = one_of(t, "edge", "wire", d.wire, {"f16", "int8", "f32"});
            p.edge = d;
        }
        return p;
    } catch (const nlohmann::json::exception& e) {
        fail("plan: ", e.what());
    }
}

std::string DraftSettings::label() const {
    return adaptive ? cat("adaptive k (from ", k, ", ", k_min, "-", k_max, ")") : cat("k = ", k);
}

Plan load_plan(const std::string& path) {
    std::ifstream in(path);
    SYSLM_CHECK(in, path, ": cannot open the plan");
    std::stringstream ss;
    ss << in.rdbuf();
    try {
        return Plan::from_json(nlohmann::json::parse(ss.str()));
    } catch (const nlohmann::json::exception& e) {
        fail(path, ": not JSON: ", e.what());
    } catch (const Error& e) {
        fail(path, ": ", e.what());
    }
}

void save_plan(const Plan& plan, const std::string& path) {
    write_file_atomically(path, plan.to_json().dump(2) + "\n");
}

DType matrices_type(const io::GGUFFile& file) {
    std::set<DType> types;
    for (const io::GGUFTensor& t : file.tensors())
        if (compress::is_quantizable_weight(t.name, t.ne)) types.insert(t.type);
    return types.size() == 1 ? *types.begin() : DType::F32;
}

compress::QuantizeOptions quantize_options(const Plan& plan, DType input_type) {
    compress::QuantizeOptions o;
    if (!plan.recipe.empty())
        o.target = *compress::parse_quant_target(plan.recipe);
    else
        o.target.type = input_type;  // unlisted matrices keep the input's (float) type
    for (const auto& [name, type] : plan.tensor_types)
        o.tensor_types.push_back({anchored(name), type});
    return o;
}

}  // namespace syslm::tune
