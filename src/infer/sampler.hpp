// Picks the next token from logits. The chain follows llama.cpp's default order:
// repetition/presence/frequency penalties -> top-k -> top-p -> min-p -> temperature -> draw.
// temperature <= 0 means greedy (argmax after penalties). Draws use a seeded mt19937_64 and a
// fixed arithmetic path, so the same seed gives the same tokens on any machine.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <vector>

namespace syslm::infer {

struct SamplingParams {
    float temperature = 0.8f;
    int top_k = 40;               // <= 0: off
    float top_p = 0.95f;          // >= 1: off
    float min_p = 0.05f;          // <= 0: off
    float repeat_penalty = 1.0f;  // 1: off; divides positive / multiplies negative logits
    int repeat_last_n = 64;       // how many recent tokens the penalties look at
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    uint64_t seed = 0;
};

struct TokenProb {
    int32_t id;
    float p;
};

class Sampler {
public:
    explicit Sampler(const SamplingParams& params);

    int32_t sample(std::span<const float> logits);  // draw(distribution(logits))
    void accept(int32_t token);  // records a token for the penalties (prompt and generated)
    const SamplingParams& params() const { return params_; }

    // The distribution sample() draws from, most likely first: after penalties, top-k, top-p,
    // min-p and temperature (greedy: the argmax with p 1). Valid until the next call.
    std::span<const TokenProb> distribution(std::span<const float> logits);
    int32_t draw(std::span<const TokenProb> dist);  // one draw with this sampler's generator
    double uniform();                               // [0, 1) from the same generator
    bool has_penalties() const;

private:
    struct Candidate {
        int32_t id;
        float logit;
        float p;
    };
    void apply_penalties(std::vector<Candidate>& c) const;

    SamplingParams params_;
    std::mt19937_64 rng_;
    std::deque<int32_t> recent_;
    std::vector<Candidate> cand_;
    std::vector<TokenProb> dist_;
};

}  // namespace syslm::infer
