#include "compress/perplexity.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace syslm::compress {
namespace {

// -log softmax(logits)[target], in double for the sum.
double nll_of(std::span<const float> logits, int32_t target) {
    const float mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float l : logits) sum += std::exp(static_cast<double>(l - mx));
    return std::log(sum) - static_cast<double>(logits[target] - mx);
}

}  // namespace

PerplexityResult perplexity(model::Context& ctx, std::vector<int32_t> tokens, int n_ctx,
                            int32_t bos, int max_chunks,
                            const std::function<void(int, double)>& on_chunk) {
    SYSLM_CHECK(n_ctx >= 8, "perplexity: context size ", n_ctx, " is too small (minimum 8)");
    SYSLM_CHECK(n_ctx <= ctx.n_ctx(), "perplexity: context size ", n_ctx,
                " exceeds the model context allocated (", ctx.n_ctx(), ")");
    SYSLM_CHECK(static_cast<int64_t>(tokens.size()) >= 2 * static_cast<int64_t>(n_ctx),
                "perplexity: the text has ", tokens.size(), " tokens; at least ", 2 * n_ctx,
                " are needed for a context of ", n_ctx, " (as llama-perplexity requires)");
    const int n_vocab = ctx.model().hparams().n_vocab;
    int n_chunks = static_cast<int>(tokens.size() / static_cast<size_t>(n_ctx));
    if (max_chunks > 0) n_chunks = std::min(n_chunks, max_chunks);
    const int first = n_ctx / 2;

    PerplexityResult r;
    double nll = 0, nll2 = 0;
    std::vector<int32_t> chunk(static_cast<size_t>(n_ctx));
    for (int c = 0; c < n_chunks; ++c) {
        const size_t start = static_cast<size_t>(c) * n_ctx;
        std::copy_n(tokens.begin() + static_cast<std::ptrdiff_t>(start), n_ctx, chunk.begin());
        if (bos >= 0) chunk[0] = bos;
        ctx.reset();
        std::span<const float> logits = ctx.forward(chunk, /*all_logits=*/true);
        for (int j = first; j < n_ctx - 1; ++j) {
            const double v = nll_of(logits.subspan(static_cast<size_t>(j) * n_vocab, n_vocab),
                                    tokens[start + j + 1]);
            SYSLM_CHECK(std::isfinite(v), "perplexity: chunk ", c + 1, ", position ", j,
                        ": the log-likelihood is ", v,
                        " (the model's logits are not finite numbers): no perplexity");
            nll += v;
            nll2 += v * v;
            ++r.n_scored;
        }
        r.chunk_ppl.push_back(std::exp(nll / r.n_scored));
        if (on_chunk) on_chunk(c, r.chunk_ppl.back());
    }
    r.n_chunks = n_chunks;
    const double mean = nll / r.n_scored;
    r.ppl = std::exp(mean);
    SYSLM_CHECK(std::isfinite(r.ppl), "perplexity: the mean negative log-likelihood ", mean,
                " overflows: no finite perplexity");
    const double var = nll2 / r.n_scored - mean * mean;
    r.ppl_stderr = var > 0 && r.n_scored > 1 ? std::sqrt(var / (r.n_scored - 1)) * r.ppl : 0;
    return r;
}

}  // namespace syslm::compress
