#include "curate/infill.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "tokenizer/utf8.hpp"

namespace syslm::curate {

namespace {

constexpr int kTopK = 40;

bool letter(char c) {  // bytes >= 0x80 count as letters (of another script)
    return std::isalnum(static_cast<unsigned char>(c)) || static_cast<unsigned char>(c) >= 0x80;
}

// Text that may stand between `left` and `right` (their last and first bytes) without gluing
// onto a word on either side; the empty string stands for the document's edge.
bool fits_between(const std::string& text, const std::string& left, const std::string& right) {
    return !text.empty() && !(!left.empty() && letter(left.back()) && letter(text.front())) &&
           !(!right.empty() && letter(text.back()) && letter(right.front()));
}

double log_softmax_at(std::span<const float> z, int32_t t) {
    const float m = *std::max_element(z.begin(), z.end());
    double e = 0;
    for (const float v : z) e += std::exp(static_cast<double>(v - m));
    return static_cast<double>(z[static_cast<size_t>(t)] - m) - std::log(e);
}

}  // namespace

SpanInfiller::SpanInfiller(const std::string& model_path, const InfillOptions& o)
    : o_(o),
      model_(model_path),
      tok_(tokenizer::Tokenizer::from_gguf(model_.file())),
      ctx_(model_, std::min(o.n_ctx, model_.hparams().n_ctx_train), o.threads,
           std::min(std::min(o.n_ctx, model_.hparams().n_ctx_train), 512)) {
    SYSLM_CHECK(o.span >= 1 && o.candidates >= 1 && o.right >= 0,
                "data augment: --span and "
                "--candidates must be at least 1, --right at least 0");
    SYSLM_CHECK(ctx_.n_ctx() >= 4 * (o.span + o.right + 2), "data augment: a context of ",
                ctx_.n_ctx(), " tokens is too short for spans of ", o.span, " and ", o.right,
                " tokens of right context");
    const int32_t n = std::min(tok_.n_vocab(), model_.hparams().n_vocab);
    allowed_.assign(static_cast<size_t>(n), false);
    for (int32_t t = 0; t < n; ++t) {
        const std::string& piece = tok_.token_to_piece(t);
        allowed_[static_cast<size_t>(t)] = tok_.token_type(t) == tokenizer::TokenType::NORMAL &&
                                           !tok_.is_eog(t) && !piece.empty() &&
                                           piece.find_first_of("\n\r") == std::string::npos;
    }
}

std::string SpanInfiller::text_of(std::span<const int32_t> ids) const {
    std::string s;
    for (const int32_t t : ids) s += tok_.token_to_piece(t);
    return s;
}

void SpanInfiller::make_room(int n) {
    if (ctx_.n_past() + n <= ctx_.n_ctx()) return;
    const size_t keep = std::min(done_.size(), static_cast<size_t>(ctx_.n_ctx() / 2));
    ctx_.reset();
    const auto logits = ctx_.forward({done_.data() + done_.size() - keep, keep});
    next_.assign(logits.end() - model_.hparams().n_vocab, logits.end());
}

void SpanInfiller::feed(std::span<const int32_t> tokens) {
    const size_t step = static_cast<size_t>(ctx_.n_ctx() / 4);
    for (size_t b = 0; b < tokens.size(); b += step) {
        const auto part = tokens.subspan(b, std::min(step, tokens.size() - b));
        make_room(static_cast<int>(part.size()));
        const auto logits = ctx_.forward(part);
        next_.assign(logits.end() - model_.hparams().n_vocab, logits.end());
        done_.insert(done_.end(), part.begin(), part.end());
    }
}

int32_t SpanInfiller::sample(std::span<const float> logits, std::mt19937_64& rng) const {
    std::vector<std::pair<float, int32_t>> top;
    for (size_t t = 0; t < allowed_.size(); ++t)
        if (allowed_[t]) top.emplace_back(logits[t], static_cast<int32_t>(t));
    SYSLM_CHECK(!top.empty(), "data augment: the model's vocabulary has no token a span may use");
    const size_t k = std::min(top.size(), static_cast<size_t>(kTopK));
    std::partial_sort(top.begin(), top.begin() + static_cast<std::ptrdiff_t>(k), top.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<double> p(k);
    for (size_t i = 0; i < k; ++i)
        p[i] = std::exp(static_cast<double>(top[i].first - top[0].first));
    return top[std::discrete_distribution<size_t>(p.begin(), p.end())(rng)].second;
}

double SpanInfiller::try_candidate(std::span<const int32_t> right, std::mt19937_64& rng,
                                   std::vector<int32_t>& cand) {
    const size_t V = static_cast<size_t>(model_.hparams().n_vocab);
    std::vector<float> z = next_;
    cand.clear();
    for (int j = 0; j < o_.span; ++j) {
        cand.push_back(sample(z, rng));
        if (j + 1 == o_.span) break;
        const auto logits = ctx_.forward({&cand.back(), 1});
        z.assign(logits.end() - static_cast<std::ptrdiff_t>(V), logits.end());
    }
    if (right.empty()) return 0;
    std::vector<int32_t> tail{cand.back()};
    tail.insert(tail.end(), right.begin(), right.end());
    const auto logits = ctx_.forward(tail, /*all_logits=*/true);
    double ll = 0;
    for (size_t r = 0; r < right.size(); ++r)
        ll += log_softmax_at(logits.subspan(r * V, V), right[r]);
    return ll;
}

std::vector<SpanInfiller::Span> SpanInfiller::choose_spans(const std::vector<int32_t>& ids,
                                                           size_t first_content,
                                                           std::mt19937_64& rng) const {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    const auto L = static_cast<size_t>(o_.span);
    // Is there a word boundary before token j?
    auto boundary = [&](size_t j) {
        if (j == ids.size()) return true;
        const std::string& a = tok_.token_to_piece(ids[j - 1]);
        const std::string& b = tok_.token_to_piece(ids[j]);
        return a.empty() || b.empty() || !letter(a.back()) || !letter(b.front());
    };
    std::vector<Span> spans;
    for (size_t i = first_content + 1; i + L <= ids.size();) {
        if (u(rng) >= o_.rate / static_cast<double>(L)) {
            ++i;
            continue;
        }
        const std::string old = text_of({ids.data() + i, L});
        if (!boundary(i) || !boundary(i + L) || old.find_first_of("\n\r") != std::string::npos ||
            !tokenizer::utf8_valid(old)) {
            ++i;
            continue;
        }
        spans.push_back({i, L});
        i += L + 1;
    }
    return spans;
}

std::vector<int32_t> SpanInfiller::fill(const std::vector<int32_t>& ids, size_t first, size_t count,
                                        std::mt19937_64& rng, int64_t& n_spans) {
    const size_t r_end = std::min(ids.size(), first + count + static_cast<size_t>(o_.right));
    const std::span<const int32_t> right(ids.data() + first + count, r_end - first - count);
    make_room(o_.span + o_.right + 1);
    const int base = ctx_.n_past();
    const std::string left = tok_.token_to_piece(ids[first - 1]);
    const std::string after = right.empty() ? std::string() : tok_.token_to_piece(right[0]);
    std::vector<std::vector<int32_t>> cands;
    std::vector<double> weight;
    std::vector<int32_t> cand;
    for (int k = 0; k < o_.candidates; ++k) {
        ctx_.truncate(base);
        const double ll = try_candidate(right, rng, cand);
        const std::string t = text_of(cand);
        // whole characters, and no word glued to the text on either side
        if (!tokenizer::utf8_valid(t) || !fits_between(t, left, after)) continue;
        cands.push_back(cand);
        weight.push_back(ll);
    }
    ctx_.truncate(base);
    if (cands.empty())
        return {ids.begin() + static_cast<std::ptrdiff_t>(first),
                ids.begin() + static_cast<std::ptrdiff_t>(first + count)};
    const double m = *std::max_element(weight.begin(), weight.end());
    for (double& w : weight) w = std::exp(w - m);
    ++n_spans;
    return cands[std::discrete_distribution<size_t>(weight.begin(), weight.end())(rng)];
}

std::vector<Edit> SpanInfiller::edits(std::string_view text, uint64_t seed, int64_t& n_spans) {
    const std::vector<int32_t> ids = tok_.encode(text, /*add_special=*/true, false);
    const size_t first = (!ids.empty() && ids[0] == tok_.bos() && tok_.add_bos()) ? 1 : 0;
    // Byte offsets of the tokens in `text`; the tokenizer must give the text back exactly
    // (less SentencePiece's added leading space).
    std::vector<size_t> offset(ids.size() + 1, 0);
    std::string joined;
    for (size_t i = first; i < ids.size(); ++i) {
        offset[i] = joined.size();
        joined += tok_.token_to_piece(ids[i]);
    }
    const size_t lead = joined.size() == text.size() + 1 && joined[0] == ' ' ? 1 : 0;
    if (joined.compare(lead, std::string::npos, text) != 0) return {};
    std::mt19937_64 rng(seed);
    const std::vector<Span> spans = choose_spans(ids, first, rng);
    std::vector<Edit> out;
    ctx_.reset();
    done_.clear();
    size_t pos = 0;
    for (const Span& s : spans) {
        feed({ids.data() + pos, s.first - pos});
        const std::vector<int32_t> chosen = fill(ids, s.first, s.count, rng, n_spans);
        feed(chosen);
        pos = s.first + s.count;
        const std::string from = text_of({ids.data() + s.first, s.count}), to = text_of(chosen);
        // The first content token may carry SentencePiece's leading space; spans start later.
        if (from != to) out.push_back({offset[s.first] - lead, from, to});
    }
    return out;
}

}  // namespace syslm::curate
