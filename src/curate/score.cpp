#include "curate/score.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace syslm::curate {

PerplexityScorer::PerplexityScorer(const std::string& model_path, int n_ctx, int threads)
    : model_(model_path),
      tok_(tokenizer::Tokenizer::from_gguf(model_.file())),
      n_ctx_(std::min(n_ctx, model_.hparams().n_ctx_train)),
      ctx_(model_, n_ctx_, threads, std::min(n_ctx_, 512), model::KvTypes(DType::F32)) {
    SYSLM_CHECK(n_ctx_ >= 2, "data score: a context of ", n_ctx_, " tokens scores nothing");
}

DocumentScore PerplexityScorer::score(std::string_view text) {
    const std::vector<int32_t> ids = tok_.encode(text, /*add_special=*/true, false);
    const auto V = static_cast<size_t>(model_.hparams().n_vocab);
    DocumentScore s;
    double sum = 0;
    for (size_t w = 0; w + 1 < ids.size(); w += static_cast<size_t>(n_ctx_) - 1) {
        // window [w, end): predicts tokens w + 1 .. end - 1 (consecutive windows share a token)
        const size_t end = std::min(ids.size(), w + static_cast<size_t>(n_ctx_));
        ctx_.reset();
        const std::span<const float> logits =
            ctx_.forward({ids.data() + w, end - w}, /*all_logits=*/true);
        for (size_t t = w; t + 1 < end; ++t) {
            const float* z = logits.data() + (t - w) * V;
            const float m = *std::max_element(z, z + V);
            double e = 0;
            for (size_t v = 0; v < V; ++v) e += std::exp(static_cast<double>(z[v] - m));
            sum += std::log(e) + m - z[static_cast<size_t>(ids[t + 1])];
            ++s.tokens;
        }
        if (end == ids.size()) break;
    }
    s.nll = s.tokens > 0 ? sum / static_cast<double>(s.tokens) : 0;
    return s;
}

}  // namespace syslm::curate
