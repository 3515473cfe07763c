// The serving load the serve goal is measured under: N streams, each sending its next request as
// soon as the previous one finishes (a closed loop, as bench/serve/bench_serve.py does over
// HTTP), prompts of mixed lengths cut from the held-out text, a fixed number of generated tokens
// (ignore_eos), greedy. Driven in-process on infer::Engine: what the HTTP layer adds is the same
// for every setting, so the engine's settings are compared without it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "infer/engine.hpp"

namespace syslm::tune {

struct ServeLoad {
    int streams = 16;
    int requests_per_stream = 2;
    int max_tokens = 64;                       // generated per request
    std::vector<std::vector<int32_t>> prompts;  // used round-robin
};

struct ServeMeasurement {
    double tokens_per_s = 0;      // generated tokens / wall time of the whole load
    double ttft_p50 = 0, ttft_p99 = 0;  // seconds, submit to first token
    double itl_p50 = 0, itl_p99 = 0;    // seconds between a request's tokens
    int64_t generated = 0;
    double seconds = 0;
};

// Prompts of mixed lengths (lengths cycle through 1/8, 1/4, 1/2 and 1 of max_len) cut at spread
// offsets from the tokens of the held-out text. Throws Error when the text is shorter than
// max_len tokens.
std::vector<std::vector<int32_t>> cut_prompts(const std::vector<int32_t>& text, int count,
                                             int max_len);

// Runs the load on a fresh engine with these settings. Throws Error when a request is refused
// or fails (a setting that cannot serve the load, e.g. too few KV pages for one sequence).
ServeMeasurement measure_serving(std::shared_ptr<const model::Model> model,
                                 const tokenizer::Tokenizer& tok, const infer::EngineConfig& cfg,
                                 const ServeLoad& load);

}  // namespace syslm::tune
