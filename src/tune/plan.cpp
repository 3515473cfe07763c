#include "tune/plan.hpp"

#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "core/mapped_file.hpp"

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

}  // namespace

nlohmann::json Plan::to_json() const {
    nlohmann::json types = nlohmann::json::object();
    for (const auto& [name, type] : tensor_types) types[name] = dtype_name(type);
    return {{"syslm_plan", kVersion},
            {"model", {{"recipe", recipe}, {"imatrix", imatrix}, {"tensor_types", types}}},
            {"runtime", {{"threads", threads}, {"batch", batch}}}};
}

Plan Plan::from_json(const nlohmann::json& j) {
    try {
        SYSLM_CHECK(j.is_object() && j.value("syslm_plan", 0) == kVersion,
                    "not a syslm plan of version ", kVersion, " (key \"syslm_plan\")");
        Plan p;
        const nlohmann::json& m = j.at("model");
        p.recipe = m.value("recipe", "");
        if (!p.recipe.empty())
            SYSLM_CHECK(compress::parse_quant_target(p.recipe), "model.recipe '", p.recipe,
                        "' is not a quantize target");
        p.imatrix = m.value("imatrix", false);
        const nlohmann::json types = m.value("tensor_types", nlohmann::json::object());
        SYSLM_CHECK(types.is_object(), "model.tensor_types must be an object of name: type");
        for (const auto& [name, type] : types.items()) {
            const auto t = compress::parse_quant_target(type.get<std::string>());
            SYSLM_CHECK(t && t->mix == compress::KMix::None && !t->w8a8, "model.tensor_types.",
                        name, ": '", type.get<std::string>(), "' is not a tensor type");
            p.tensor_types[name] = t->type;
        }
        const nlohmann::json r = j.value("runtime", nlohmann::json::object());
        p.threads = r.value("threads", 0);
        p.batch = r.value("batch", 512);
        SYSLM_CHECK(p.threads >= 0 && p.threads <= 4096, "runtime.threads ", p.threads,
                    " is outside [0, 4096]");
        SYSLM_CHECK(p.batch >= 1 && p.batch <= 65536, "runtime.batch ", p.batch,
                    " is outside [1, 65536]");
        return p;
    } catch (const nlohmann::json::exception& e) {
        fail("plan: ", e.what());
    }
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
    const std::string text = plan.to_json().dump(2) + "\n";
    AtomicFileWriter w(path);
    w.write(text.data(), text.size());
    w.commit();
}

compress::QuantizeOptions quantize_options(const Plan& plan, DType input_type) {
    compress::QuantizeOptions o;
    if (!plan.recipe.empty())
        o.target = *compress::parse_quant_target(plan.recipe);
    else
        o.target.type = input_type;  // unlisted matrices keep the input's (float) type
    for (const auto& [name, type] : plan.tensor_types) o.tensor_types.push_back({anchored(name), type});
    return o;
}

}  // namespace syslm::tune
