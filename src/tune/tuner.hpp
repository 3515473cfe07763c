// `syslm tune` for a model file (decode, prefill or size goal): analyse, measure each weight
// matrix's sensitivity, allocate types along the hull, build and measure candidates round by
// round with the additive model corrected by what was measured, measure llama-quantize's stock
// recipes the same way, and return every measured point, the front and the chosen plan.
// Design: docs/design/tune.md.
#pragma once

#include <iosfwd>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "tune/draft_search.hpp"
#include "tune/length_policy.hpp"
#include "tune/measurements.hpp"

namespace syslm::tune {

struct TuneOptions {
    std::string model, calib, eval, out_dir;
    Goal goal = Goal::Decode;
    double max_kl = 0.02;  // mean KL(input || candidate) on the held-out text, nats per token
    double budget_s = 1800;
    int threads = 0;      // <= 0: all cores
    int n_ctx = 256;      // tokens per chunk, held-out and calibration
    int eval_chunks = 8;  // held-out chunks measured (< 0: all)
    int sensitivity_chunks = 2;
    // "measured": every (tensor, type) KL is run; "proxy": one type per tensor is run and the
    // rest scaled by importance-weighted error (tune/sensitivity.hpp); "auto": proxy for models
    // of more than 100M weights in their matrices.
    std::string sensitivity_mode = "auto";
    int decode_tokens = 64, prefill_tokens = 128, speed_reps = 3;
    std::vector<DType> types;  // candidate types; empty: the defaults (see the .cpp)
    bool stock = true;         // measure the stock recipes too
    int max_rounds = 4;
    // Structure (tune/structure.hpp): "auto" tries default_prune_levels, "off" none, otherwise
    // each entry is a level ("ffn=0.25,heads=0.125,layers=1"); each base is recovered by
    // distillation for recover_steps steps and quantized with the fastest plans within the limit.
    std::vector<std::string> prune = {"auto"};
    int recover_steps = -1;  // -1: default_recover_steps (tune/structure.hpp); 0: no recovery
    // Serve goal: the load (tune/serve_load.hpp) and the latency limits it must meet.
    int streams = 16;
    int serve_requests = 4;         // per stream, per trial
    int serve_max_tokens = 96;      // generated per request
    int serve_prompt_tokens = 128;  // longest prompt (the lengths are mixed)
    double max_ttft_p99 = std::numeric_limits<double>::infinity();  // seconds
    double max_itl_p99 = std::numeric_limits<double>::infinity();
    int serve_files = 3;  // files within the limit tried at the default settings
    // Decode goal: a draft model for speculative decoding (tune/draft_search.hpp), timed on the
    // chosen file with `draft_prompts` held-out prompts of 32 tokens; empty: no draft; "auto":
    // one distilled on the spot from the input (a quarter of its layers), within the budget.
    std::string draft;
    int draft_prompts = 4;
    // Keep every candidate file in candidates/ (each is a quantized copy of the model: L1B's 66
    // filled 54 GB). By default a file is deleted once no later phase may time it again, and
    // all of them when the tune ends; pareto.json holds every point's plan to rebuild it from.
    bool keep_candidates = false;
    // The length knobs on the chosen file (tune/length_policy.hpp): per input length, the
    // smallest window (local attention) or top-p (top-p MoE) whose held-out perplexity is within
    // this fraction of that length's best; 0 < x. Negative: not tuned.
    double length_max_ppl_increase = 0.01;
    std::ostream* log = nullptr;
};

// A setting chosen by input length on the chosen file: the measured table and the policy that
// model.gguf now holds (the plan runs it: runtime window / expert_top_p "auto").
struct LengthPolicyResult {
    std::string knob;  // LengthKnob::name
    std::vector<LengthMeasurement> table;
    std::vector<int> lengths;
    std::vector<double> values;  // chosen, per length
    double max_increase = 0;
};

struct TuneResult {
    std::string analysis;       // the bottleneck, in a sentence
    std::vector<Point> points;  // every measured point (stock recipes included)
    std::vector<Point> front;
    std::optional<Point> chosen;  // best goal value within the limit (a stock recipe if it wins)
    // Serve goal: the chosen file at `syslm serve`'s defaults and with the tuned runtime (their
    // confirmed figures; also among `points`).
    std::optional<Point> serve_default, serve_tuned;
    // The input file at `syslm serve`'s defaults and the tuned plan (file and runtime), timed
    // alternately with each other: what tuning changed for the user.
    std::optional<Point> serve_input, serve_plan;
    std::optional<DraftResult> draft;  // decode goal with a draft: its timings on the chosen file
    std::vector<LengthPolicyResult> length_policies;
    double seconds = 0;
};

// Writes into out_dir: measurements.jsonl (the cache: a rerun continues), sensitivity.json,
// candidates/ (the pruned bases, and while the tune runs or with keep_candidates the files), and
// for the chosen point plan.json and model.gguf (and draft.gguf when the draft beat plain decoding
// on it). Throws Error naming what is wrong (unreadable files, texts shorter than a chunk, nothing
// within the limit is not an error: `chosen` is empty then).
TuneResult run_tune(const TuneOptions& options);

}  // namespace syslm::tune
