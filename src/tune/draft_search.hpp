// The speculative-decoding knob of the decode goal: a draft model the user gives (same
// vocabulary) and its draft length, measured on the chosen file. Greedy speculative decoding
// produces the file's own tokens, so the quality figures stand; only the speed is measured.
// Plain decoding and every draft setting generate from the same held-out prompts, round-robin
// (a slow stretch of the machine hits them alike), and the medians decide: the draft enters the
// plan only when its median beats plain decoding's.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tune/plan.hpp"

namespace syslm::tune {

struct DraftTrial {
    DraftSettings settings;
    double ts = 0;          // generated tokens/s, median over the rounds
    double acceptance = 0;  // drafted tokens kept, over every round
};

struct DraftResult {
    std::string draft_path;  // the draft as given
    double plain_ts = 0;     // the file alone, generated tokens/s, median
    std::vector<DraftTrial> trials;
    std::optional<DraftTrial> best;  // the fastest trial, when it beats plain decoding
    int rounds = 0, prompts = 0, tokens = 0;  // per generation: `tokens` after each prompt
};

struct DraftSearchOptions {
    std::string target, draft;  // GGUF files
    std::vector<std::vector<int32_t>> prompts;  // token ids, from the held-out text
    int n_predict = 64;
    int threads = 0;
    int rounds = 3;
    std::vector<DraftSettings> settings;  // empty: default_draft_settings()
};

// Adaptive length (k from 4, within [1, 16]) and fixed lengths 2, 4 and 8.
std::vector<DraftSettings> default_draft_settings();

// Throws Error when the draft does not load or its vocabulary differs from the target's.
DraftResult search_draft(const DraftSearchOptions& o,
                         const std::function<void(const std::string&)>& say);

}  // namespace syslm::tune
