// Span infilling by a syslm model (T5's span corruption, filled by a causal model). Spans of
// `span` tokens start with probability rate / span, with at least one original token between
// two spans; a span starts and ends at word boundaries and never crosses a newline. Each span gets
// `candidates` samples from the model given the text so far (temperature 1, the 40 likeliest
// tokens, no newline, control or byte tokens; one that would glue onto a word beside it is
// dropped); each is weighed by the likelihood of the next `right` original tokens after it, and one
// is drawn in proportion to that weight: sampling-importance- resampling of p(span | left, right),
// so the right context counts although the model reads left to right. The KV cache is cut back to
// the span's start between candidates. Outside the spans the document's bytes are kept exactly; a
// document the tokenizer does not reproduce byte for byte is left alone.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "curate/augment.hpp"
#include "model/transformer.hpp"
#include "tokenizer/tokenizer.hpp"

namespace syslm::curate {

struct InfillOptions {
    double rate = 0.15;  // expected share of a document's tokens in spans
    int span = 3, candidates = 4, right = 8;
    int n_ctx = 512, threads = 0;
};

class SpanInfiller {
public:
    SpanInfiller(const std::string& model_path, const InfillOptions& o);
    // The edits for one document, drawn from `seed`. `spans` counts the spans filled (an edit
    // only where the new text differs from the old).
    std::vector<Edit> edits(std::string_view text, uint64_t seed, int64_t& spans);

private:
    struct Span {
        size_t first = 0, count = 0;  // token indices
    };
    std::vector<Span> choose_spans(const std::vector<int32_t>& ids, size_t first_content,
                                   std::mt19937_64& rng) const;
    void feed(std::span<const int32_t> tokens);  // appends to the context, keeps the last logits
    void make_room(int n);                       // so that n more positions fit
    int32_t sample(std::span<const float> logits, std::mt19937_64& rng) const;
    // The candidate's tokens and the log-likelihood of `right` after it.
    double try_candidate(std::span<const int32_t> right, std::mt19937_64& rng,
                         std::vector<int32_t>& cand);
    // The tokens for ids[first, first + count) with the context fed up to `first`: a drawn
    // candidate, or the original span when no candidate fits.
    std::vector<int32_t> fill(const std::vector<int32_t>& ids, size_t first, size_t count,
                              std::mt19937_64& rng, int64_t& n_spans);
    std::string text_of(std::span<const int32_t> ids) const;

    InfillOptions o_;
    model::Model model_;
    tokenizer::Tokenizer tok_;
    model::Context ctx_;
    std::vector<bool> allowed_;  // tokens a candidate may use
    std::vector<int32_t> done_;  // the document's tokens so far (the context holds their tail)
    std::vector<float> next_;    // logits after the last token fed
};

}  // namespace syslm::curate
