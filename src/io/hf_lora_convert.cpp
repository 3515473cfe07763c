#include "io/hf_lora_convert.hpp"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "io/gguf.hpp"
#include "io/hf_config.hpp"
#include "io/hf_convert.hpp"
#include "io/hf_tensor_names.hpp"
#include "io/safetensors.hpp"

namespace syslm::io {
namespace {

using json = nlohmann::json;

struct AdapterConfig {
    int r = 0;
    float alpha = 0;
};

AdapterConfig read_adapter_config(const std::string& dir) {
    const std::string path = (std::filesystem::path(dir) / "adapter_config.json").string();
    std::ifstream in(path);
    SYSLM_CHECK(in, path, ": cannot open (a PEFT adapter folder has adapter_config.json)");
    std::stringstream ss;
    ss << in.rdbuf();
    const json c = json::parse(ss.str(), nullptr, false);
    SYSLM_CHECK(c.is_object(), path, ": not a JSON object");
    SYSLM_CHECK(c.value("peft_type", "LORA") == "LORA", path, ": peft_type is ",
                c.value("peft_type", ""), ", not LORA");
    SYSLM_CHECK(!c.value("use_dora", false), path, ": DoRA adapters are not supported");
    SYSLM_CHECK(c.value("bias", "none") == "none", path, ": bias '", c.value("bias", ""),
                "': adapters that train biases are not supported");
    const json mts = c.value("modules_to_save", json(nullptr));
    SYSLM_CHECK(mts.is_null() || mts.empty(), path,
                ": modules_to_save (whole trained modules) are not supported");
    SYSLM_CHECK(c.contains("r") && c["r"].is_number_integer() && c["r"].get<int>() > 0, path,
                ": 'r' must be a positive integer");
    AdapterConfig a;
    a.r = c["r"].get<int>();
    a.alpha = c.value("lora_alpha", static_cast<float>(a.r));
    SYSLM_CHECK(std::isfinite(a.alpha) && a.alpha > 0, path, ": lora_alpha is ", a.alpha);
    // rank_pattern / alpha_pattern give some modules their own r or alpha: one alpha per file
    // cannot say that.
    for (const char* k : {"rank_pattern", "alpha_pattern"})
        SYSLM_CHECK(c.value(k, json::object()).empty(), path, ": ", k,
                    " (per-module ranks or alphas) is not supported");
    if (c.value("use_rslora", false)) a.alpha *= std::sqrt(static_cast<float>(a.r));
    return a;
}

}  // namespace

HFLoraConvertResult convert_hf_lora(const HFLoraConvertOptions& opt) {
    hf_file_type(opt.out_type);  // F32, F16 or BF16 only
    const AdapterConfig cfg = read_adapter_config(opt.adapter_dir);
    const HFModelSpec spec = read_hf_config(opt.base_dir);
    const SafetensorsModel base(opt.base_dir);
    HFShapes shapes;
    for (const auto& n : base.names()) shapes[n] = base.tensor(n).shape;
    const std::vector<HFTensorPlan> plans = plan_hf_tensors(spec, shapes, opt.base_dir);
    const std::string file =
        (std::filesystem::path(opt.adapter_dir) / "adapter_model.safetensors").string();
    const SafetensorsFile st(file);

    GGUFWriter w;
    w.set("general.architecture", GGUFValue::string(spec.arch));
    w.set("general.type", GGUFValue::string("adapter"));
    w.set("general.name",
          GGUFValue::string(std::filesystem::path(opt.adapter_dir).filename().string()));
    w.set("adapter.type", GGUFValue::string("lora"));
    w.set("adapter.lora.alpha", GGUFValue::f32(cfg.alpha));
    std::set<std::string> used;
    HFLoraConvertResult res{spec.arch, cfg.r, cfg.alpha, 0};
    for (const HFTensorPlan& p : plans) {
        if (p.sources.size() != 1 || p.ne.size() != 2 || !p.sources[0].ends_with(".weight"))
            continue;
        const std::string module =
            "base_model.model." + p.sources[0].substr(0, p.sources[0].size() - 7);
        const STTensor* a = st.find(module + ".lora_A.weight");
        const STTensor* b = st.find(module + ".lora_B.weight");
        if (!a && !b) continue;
        SYSLM_CHECK(a && b, file, ": ", module, " has only one of lora_A and lora_B");
        const int64_t n_in = p.ne[0], n_out = p.ne[1];
        SYSLM_CHECK(a->shape == std::vector<int64_t>({cfg.r, n_in}) &&
                        b->shape == std::vector<int64_t>({n_out, cfg.r}),
                    file, ": ", module, " has lora_A ", a->shape_str(), " and lora_B ",
                    b->shape_str(), "; expected [", cfg.r, ", ", n_in, "] and [", n_out, ", ",
                    cfg.r, "] for r = ", cfg.r);
        used.insert(a->name);
        used.insert(b->name);
        const DType t = opt.out_type;
        w.add_tensor(p.name + ".lora_a", t, {n_in, cfg.r}, encode_floats(st_to_f32(*a), t));
        w.add_tensor(
            p.name + ".lora_b", t, {cfg.r, n_out},
            encode_floats(reorder_hf_rows(st_to_f32(*b), n_out, cfg.r, p.transform, spec), t));
        ++res.n_pairs;
    }
    for (const STTensor& t : st.tensors())
        SYSLM_CHECK(used.count(t.name), file, ": tensor '", t.name,
                    "' adapts nothing syslm can map (LoRA on embeddings, the output head or "
                    "experts is not supported)");
    SYSLM_CHECK(res.n_pairs > 0, file, ": no LoRA tensors");
    w.write(opt.output);
    return res;
}

}  // namespace syslm::io
