// Perplexity computed the way llama.cpp's llama-perplexity does by default, so numbers compare:
// the text is tokenized with BOS (when the vocab adds one), cut into floor(n / n_ctx) chunks of
// n_ctx tokens, each chunk's first token is replaced by BOS, and only the predictions of the
// second half of each chunk (positions n_ctx/2 .. n_ctx-2 predicting the next token) are scored.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "model/transformer.hpp"

namespace syslm::compress {

struct PerplexityResult {
    double ppl = 0;
    double ppl_stderr = 0;  // llama.cpp's "+/-" estimate
    int n_chunks = 0;
    int n_scored = 0;               // tokens whose log-likelihood was summed
    std::vector<double> chunk_ppl;  // running estimate after each chunk
};

// tokens: the whole tokenized text (BOS already added if the vocab wants it); bos < 0: no BOS.
// on_chunk(i, running_ppl) is called after each chunk (for progress output).
PerplexityResult perplexity(model::Context& ctx, std::vector<int32_t> tokens, int n_ctx,
                            int32_t bos, int max_chunks = -1,
                            const std::function<void(int, double)>& on_chunk = {});

}  // namespace syslm::compress
