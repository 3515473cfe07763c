// Document scores under a syslm model, CCNet's method (Wenzek et al. 2020): the perplexity of
// each document's tokens, the first excepted (with the tokenizer's BOS before them when it adds
// one), a long document in windows of at most n_ctx tokens, each scored from its second token.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "model/transformer.hpp"
#include "tokenizer/tokenizer.hpp"

namespace syslm::curate {

struct DocumentScore {
    int64_t tokens = 0;  // scored (predicted) tokens
    double nll = 0;      // their mean negative log-likelihood, nats
    double ppl() const { return tokens > 0 ? std::exp(nll) : 0; }
};

class PerplexityScorer {
public:
    PerplexityScorer(const std::string& model_path, int n_ctx, int threads);
    DocumentScore score(std::string_view text);

private:
    model::Model model_;
    tokenizer::Tokenizer tok_;
    int n_ctx_;
    model::Context ctx_;
};

}  // namespace syslm::curate
