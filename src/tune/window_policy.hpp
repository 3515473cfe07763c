// The local attention window as a knob chosen by input length (seed 000 §4: adjust the local
// window to the input): for a model trained with a range of windows (`syslm train
// --window-range`), each (input length, window) pair's perplexity and speed are measured on the
// user's held-out text, and for each length the smallest window whose perplexity stays within
// a limit of that length's best becomes the policy (HParams::window_for_length), written into
// the model as attention.window_policy.lengths / .windows.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/gguf.hpp"

namespace syslm::tune {

struct WindowMeasurement {
    int length = 0, window = 0;
    double ppl = 0;           // llama.cpp's perplexity of chunks of `length` tokens
    double tokens_per_s = 0;  // the chunks' forward (prefill) over the scoring run
    int chunks = 0;
};

struct WindowSearch {
    std::vector<int> lengths, windows;  // increasing
    int threads = 0;
    int max_chunks = -1;  // per length (-1: every whole chunk of the text)
};

// Every (length, window) pair over `tokens` (the text with BOS where the vocabulary adds one);
// on_point reports each as it is measured.
std::vector<WindowMeasurement> measure_windows(
    const std::string& model_path, const std::vector<int32_t>& tokens, int32_t bos,
    const WindowSearch& search, const std::function<void(const WindowMeasurement&)>& on_point = {});

// For each length, the smallest window whose perplexity is at most (1 + max_increase) times the
// length's lowest (smaller windows: less attention work and a smaller KV ring).
std::vector<int> choose_windows(const std::vector<WindowMeasurement>& table,
                                const std::vector<int>& lengths, double max_increase);

// A copy of `src` with the policy's keys (replacing any earlier policy).
void write_window_policy(const io::GGUFFile& src, const std::vector<int>& lengths,
                         const std::vector<int>& windows, const std::string& out);

}  // namespace syslm::tune
