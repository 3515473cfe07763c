// Speculative decoding (Leviathan et al. 2023; Chen et al. 2023): a small draft model proposes k
// tokens one at a time, the target scores all of them in one forward call, and each draft is
// kept with probability min(1, p(d)/q(d)); the first rejected position draws from the residual
// max(0, p - q) (normalised), and when all k are kept the target's next distribution gives one
// more token. The tokens produced are distributed exactly as the target's own sampler would
// produce them (greedy: identical tokens). p and q are the full sampling distributions of
// infer::Sampler (top-k, top-p, min-p, temperature), so repetition penalties, which depend on
// the history at each draft position, are refused.
//
// k adapts: after every round the acceptance rate a (per draft token, running average), the
// draft's time per token d and a running fit of the target call's time against the tokens it
// verifies, v(n) = v0 + v1 n, pick the k in {0} u [k_min, k_max] with the most expected tokens
// per second, (1 - a^(k+1)) / ((1 - a) (k d + v(k + 1))). k = 0 is plain decoding: chosen when the
// target is compute-bound (verifying k + 1 tokens costs about k + 1 steps), so a draft never makes
// generation much slower; every 16th round tries the other regime to keep the estimates fresh.
#pragma once

#include <functional>
#include <span>
#include <string_view>

#include "infer/generate.hpp"
#include "infer/sampler.hpp"
#include "model/transformer.hpp"
#include "tokenizer/tokenizer.hpp"

namespace syslm::infer {

struct SpeculativeOptions {
    int k = 4;         // initial (and, when !adaptive, fixed) draft length
    int k_min = 1;     // smallest length when drafting (adaptive may also turn drafting off)
    int k_max = 16;
    bool adaptive = true;
};

struct SpeculativeStats {
    int rounds = 0;         // target verify calls
    int drafted = 0;        // draft tokens proposed
    int accepted = 0;       // of them kept
    double draft_seconds = 0, target_seconds = 0;
    double acceptance() const { return drafted ? static_cast<double>(accepted) / drafted : 0; }
};

// One round's decision, exposed for tests: given the target's distribution p and the draft's q
// at a position and the drafted token d, returns d if kept, else a token drawn from the
// residual. `u_accept` and `u_draw` are uniforms in [0, 1).
int32_t speculative_verify(std::span<const TokenProb> p, std::span<const TokenProb> q, int32_t d,
                           double u_accept, double u_draw, bool* kept);

// Like generate(): the prompt goes through both models, then rounds of drafting and
// verification until n_predict tokens, an end-of-generation token (unless ignore_eos) or the
// target's context is full. `sampler` samples for the target; the draft uses a copy of its
// parameters with its own generator. Both contexts must be empty and share the vocabulary.
GenerateStats speculative_generate(model::Context& target, model::Context& draft,
                                   const tokenizer::Tokenizer& tok,
                                   std::span<const int32_t> prompt, int n_predict,
                                   Sampler& sampler, bool ignore_eos,
                                   const std::function<void(std::string_view)>& on_text,
                                   const SpeculativeOptions& options, SpeculativeStats* stats);

}  // namespace syslm::infer
