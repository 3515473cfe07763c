// A plan: the knob settings the tuner chose or measured, as data. `tune` writes plans;
// `quantize --plan` builds the plan's file (a type per tensor: an ordinary llama.cpp GGUF), and
// the runtime settings are what `bench` / `serve` use. The JSON is canonical (sorted keys, no
// spaces), so it is also the key of the measurement cache.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compress/quantize_model.hpp"
#include "core/dtype.hpp"

namespace syslm::tune {

struct Plan {
    // The weight matrices' types; those absent keep the recipe's choice (`recipe`, a
    // quantize target name such as "Q4_K_M"; empty: every listed matrix as given, the rest as in
    // the input file, i.e. recipe F32/F16/... of the input).
    std::string recipe;
    bool imatrix = false;  // weighted quantizers with the calibration text's importance matrix
    std::map<std::string, DType> tensor_types;
    // Runtime: threads (0: all cores) and prompt tokens per forward call.
    int threads = 0;
    int batch = 512;

    nlohmann::json to_json() const;
    static Plan from_json(const nlohmann::json& j);  // throws Error naming what is wrong
    std::string key() const { return to_json().dump(); }
};

Plan load_plan(const std::string& path);  // throws Error naming the file
void save_plan(const Plan& plan, const std::string& path);  // atomically

// The quantize options that build the plan's file: its recipe (F32 when empty and the input is
// F32; see the .cpp) and one anchored rule per listed tensor.
compress::QuantizeOptions quantize_options(const Plan& plan, DType input_type);

}  // namespace syslm::tune
