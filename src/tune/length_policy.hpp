// A model setting chosen by input length (seed 000: adjust the local attention window, and the
// number of active experts, to the input). Each (input length, value) pair's perplexity and
// speed are measured on the user's held-out text; for each length the smallest value whose
// perplexity stays within a limit of that length's best becomes the policy (smaller is cheaper
// for both knobs: a window of fewer positions, a top-p that takes fewer experts), written into
// the model as <prefix>lengths / <prefix><values> (model::LengthPolicy).
//   window: attention.window_policy.lengths / .windows (`syslm tune window`, --window auto)
//   experts: expert_policy.lengths / .top_p (`syslm tune experts`, --expert-top-p auto)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/gguf.hpp"
#include "model/transformer.hpp"

namespace syslm::tune {

struct LengthKnob {
    std::string name;         // "window", "experts": errors and reports
    std::string prefix;       // after "<arch>.": "attention.window_policy."
    std::string values_name;  // "windows", "top_p"
    bool integer = true;      // written as u32 (else f32)
    // Sets the value on a freshly loaded model (throws Error for one it cannot take).
    std::function<void(model::Model&, double)> apply;
};
const LengthKnob& window_knob();
const LengthKnob& experts_knob();

struct LengthMeasurement {
    int length = 0;
    double value = 0;
    double ppl = 0;           // llama.cpp's perplexity of chunks of `length` tokens
    double tokens_per_s = 0;  // the chunks' forward (prefill) over the scoring run
    int chunks = 0;
};

struct LengthSearch {
    std::vector<int> lengths;    // increasing
    std::vector<double> values;  // increasing
    int threads = 0;
    int max_chunks = -1;  // per length (-1: every whole chunk of the text)
};

// Every (length, value) pair over `tokens` (the text with BOS where the vocabulary adds one);
// on_point reports each as it is measured.
std::vector<LengthMeasurement> measure_by_length(
    const LengthKnob& knob, const std::string& model_path, const std::vector<int32_t>& tokens,
    int32_t bos, const LengthSearch& search,
    const std::function<void(const LengthMeasurement&)>& on_point = {});

// For each length, the smallest value whose perplexity is at most (1 + max_increase) times the
// length's lowest.
std::vector<double> choose_by_length(const LengthKnob& knob,
                                     const std::vector<LengthMeasurement>& table,
                                     const std::vector<int>& lengths, double max_increase);

// A copy of `src` with the policy's keys (replacing any earlier policy of the knob).
void write_length_policy(const LengthKnob& knob, const io::GGUFFile& src,
                         const std::vector<int>& lengths, const std::vector<double>& values,
                         const std::string& out);

}  // namespace syslm::tune
