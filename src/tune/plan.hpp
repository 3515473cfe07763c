// A plan: the knob settings the tuner chose or measured, as data. `tune` writes plans;
// `quantize --plan` builds the plan's file (a type per tensor: an ordinary llama.cpp GGUF), and
// the runtime settings are what `bench` / `serve` use. The JSON is canonical (sorted keys, no
// spaces), so it is also the key of the measurement cache.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "compress/quantize_model.hpp"
#include "core/dtype.hpp"
#include "io/gguf.hpp"

namespace syslm::tune {

// `serve --plan`: the engine's settings (infer::EngineConfig; defaults are `syslm serve`'s).
struct ServeSettings {
    int parallel = 16;           // sequences per step
    int64_t token_budget = 512;  // tokens per step (decode + prefill chunks)
    int page_size = 16;          // positions per KV page
    int kv_pages = 0;            // 0: enough for parallel x ctx
    int ctx = 4096;              // positions per sequence
    // The KV cache's types as model::KvTypes::name() gives them ("q8_0/q4_0": K, then V).
    std::string cache_type = "f16";
    bool operator==(const ServeSettings&) const = default;
};

// `train --plan`: how a step's sequences are computed (the global batch is the run's own).
struct TrainSettings {
    int micro_batch = 8;             // sequences per forward/backward
    int accum = 1;                   // micro-batches per optimizer step
    std::string recompute = "none";  // none | selective | full
    std::string precision = "f32";   // f32 | bf16 | f16
    bool operator==(const TrainSettings&) const = default;
};

// The structure half of a plan: whole FFN channels / attention heads / layers removed
// (compress::prune_structured, scored on the calibration text), then a recovery distillation
// from the input model on that text. The file is quantized from the recovered float model,
// `syslm tune` leaves it beside the plan as base.gguf. The shape after pruning is recorded so
// that `quantize --plan` can tell the base from the input.
struct PruneSettings {
    double ffn = 0, heads = 0;  // fractions removed
    int layers = 0;             // whole layers removed
    int recover_steps = 0;      // distillation steps of 8 sequences (0: none)
    double recover_lr = 3e-4;
    int n_layer = 0, n_head = 0, n_ff = 0;  // the pruned model's shape
    bool operator==(const PruneSettings&) const = default;
};

// `generate --plan`: speculative decoding with a draft model (infer::SpeculativeOptions). The
// file is the draft's path relative to the plan's directory (`syslm tune` copies it there).
struct DraftSettings {
    std::string file = "draft.gguf";
    int k = 4;             // the draft length (the initial one when adaptive)
    bool adaptive = true;  // k adapts to the measured acceptance, within [k_min, k_max]
    int k_min = 1, k_max = 16;
    std::string label() const;  // "adaptive k (from 4, 1-16)", "k = 2"
    bool operator==(const DraftSettings&) const = default;
};

// `serve --role edge --plan`: a model split between an edge and its cloud (`syslm tune edge`).
// The plan's model.gguf is the edge's file; the cloud serves the input with --split-at.
struct EdgeSettings {
    int split_at = 1;          // the edge runs layers [0, split_at)
    std::string wire = "f16";  // the residual rows' format on the link
    bool operator==(const EdgeSettings&) const = default;
};

struct Plan {
    // The weight matrices' types; those absent keep the recipe's choice (`recipe`, a
    // quantize target name such as "Q4_K_M"; empty: every listed matrix as given, the rest as in
    // the input file, i.e. recipe F32/F16/... of the input).
    std::string recipe;
    bool imatrix = false;  // weighted quantizers with the calibration text's importance matrix
    std::map<std::string, DType> tensor_types;
    std::optional<PruneSettings> prune;  // the structure: quantized from a pruned, recovered base
    // Runtime: threads (0: all cores) and prompt tokens per forward call.
    int threads = 0;
    int batch = 512;
    // "auto": the local layers' window / the experts' top-p by the input's length, the policy
    // the tune wrote into the model (model::LengthPolicy); empty: the file's own setting.
    std::string window, expert_top_p;
    // Present only in plans tuned for that goal.
    std::optional<ServeSettings> serve;
    std::optional<TrainSettings> train;
    std::optional<DraftSettings> draft;
    std::optional<EdgeSettings> edge;

    nlohmann::json to_json() const;
    static Plan from_json(const nlohmann::json& j);  // throws Error naming what is wrong
    std::string key() const { return to_json().dump(); }
    // The model half only (what the file is): plans differing in runtime settings share a file.
    std::string model_key() const { return to_json().at("model").dump(); }
};

Plan load_plan(const std::string& path);  // throws Error naming the file and the key
void save_plan(const Plan& plan, const std::string& path);  // atomically

// The type of a file's weight matrices (F32 when they differ): what an empty recipe keeps.
DType matrices_type(const io::GGUFFile& file);

// The quantize options that build the plan's file: its recipe (F32 when empty and the input is
// F32; see the .cpp) and one anchored rule per listed tensor.
compress::QuantizeOptions quantize_options(const Plan& plan, DType input_type);

}  // namespace syslm::tune
