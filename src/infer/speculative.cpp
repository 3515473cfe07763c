#include "infer/speculative.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "kernels/cpu/matmul.hpp"
#include "tokenizer/utf8.hpp"

namespace syslm::infer {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

double prob_of(std::span<const TokenProb> dist, int32_t id) {
    for (const TokenProb& t : dist)
        if (t.id == id) return t.p;
    return 0.0;
}

// Running least-squares fit of a target call's time against the tokens it verifies,
// t(n) = v0 + v1 * n, with older rounds decaying: bandwidth-bound targets show v1 ~ 0 (a call
// costs the same for 1 or 8 tokens), compute-bound ones v1 ~ v0.
struct VerifyCost {
    double s0 = 0, s1 = 0, s2 = 0, t0 = 0, t1 = 0;
    void add(int n, double t) {
        constexpr double kDecay = 0.95;
        s0 = kDecay * s0 + 1;
        s1 = kDecay * s1 + n;
        s2 = kDecay * s2 + static_cast<double>(n) * n;
        t0 = kDecay * t0 + t;
        t1 = kDecay * t1 + n * t;
    }
    // Until two call sizes have been seen the slope is unknown: take it as 0 (bandwidth-bound).
    double at(int n) const {
        if (s0 <= 0) return 0;
        const double det = s0 * s2 - s1 * s1;
        double v1 = det > 1e-9 * s0 * s2 ? (s0 * t1 - s1 * t0) / det : 0.0;
        v1 = std::max(v1, 0.0);
        const double v0 = std::max((t0 - v1 * s1) / s0, 0.0);
        return v0 + v1 * n;
    }
};

// The draft length with the most expected tokens per second: a round of k drafts yields
// (1 - a^(k+1)) / (1 - a) tokens and costs k draft steps plus one target call of k + 1 tokens;
// k = 0 is plain decoding (one token per call of one).
int best_k(double a, double draft_step, const VerifyCost& verify, int lo, int hi,
           double spare_target) {
    a = std::clamp(a, 0.0, 0.999);
    std::vector<std::pair<int, double>> rates = {{0, 1.0 / std::max(verify.at(1), 1e-12)}};
    for (int k = lo; k <= hi; ++k) {
        const double tokens = (1 - std::pow(a, k + 1)) / (1 - a);
        rates.emplace_back(k, tokens / std::max(k * draft_step + verify.at(k + 1), 1e-12));
    }
    double best_rate = 0;
    for (const auto& [k, rate] : rates) best_rate = std::max(best_rate, rate);
    // The longest drafts (the fewest target calls per token) within spare_target of the fastest.
    int best = 0;
    for (const auto& [k, rate] : rates)
        if (rate >= (1 - spare_target) * best_rate) best = std::max(best, k);
    return best;
}

}  // namespace

int32_t speculative_verify(std::span<const TokenProb> p, std::span<const TokenProb> q, int32_t d,
                           double u_accept, double u_draw, bool* kept) {
    const double pd = prob_of(p, d), qd = prob_of(q, d);
    if (qd > 0 && u_accept * qd < pd) {
        *kept = true;
        return d;
    }
    *kept = false;
    // Residual max(0, p - q), normalised; p's support holds all of it. q is looked up by id once
    // (both can span the whole vocabulary when top-k is off).
    std::unordered_map<int32_t, double> q_of;
    q_of.reserve(q.size());
    for (const TokenProb& t : q) q_of.emplace(t.id, t.p);
    auto residual = [&](const TokenProb& t) {
        const auto it = q_of.find(t.id);
        return std::max(0.0, t.p - (it == q_of.end() ? 0.0 : it->second));
    };
    double total = 0;
    for (const TokenProb& t : p) total += residual(t);
    if (total <= 0) {  // p == q on its support (not reachable after a rejection): draw from p
        double cum = 0;
        for (const TokenProb& t : p)
            if (u_draw < (cum += t.p)) return t.id;
        return p.back().id;
    }
    const double target = u_draw * total;
    double cum = 0;
    int32_t last = p.front().id;
    for (const TokenProb& t : p) {
        const double r = residual(t);
        if (r <= 0) continue;
        last = t.id;
        if (target < (cum += r)) return t.id;
    }
    return last;
}

void LocalTarget::start(std::span<const int32_t> prompt) {
    SYSLM_CHECK(!prompt.empty(), "the prompt is empty (no tokens to start from)");
    pending_ = prompt.back();
    if (prompt.size() > 1) ctx_.forward(prompt.first(prompt.size() - 1));
}

const std::vector<int32_t>& LocalTarget::call_rows(std::span<const int32_t> context,
                                                   std::span<const int32_t> drafts) {
    SYSLM_CHECK(pending_ >= 0, "speculative target: verify before start");
    batch_.assign(1, pending_);
    batch_.insert(batch_.end(), context.begin(), context.end());
    batch_.insert(batch_.end(), drafts.begin(), drafts.end());
    return batch_;
}

int LocalTarget::verify_after(std::span<const int32_t> context, std::span<const int32_t> drafts,
                              std::span<const std::vector<TokenProb>> q,
                              std::vector<int32_t>& emitted) {
    const std::vector<int32_t>& rows = call_rows(context, drafts);
    const std::span<const float> all = [&] {
        // Each position's logits exactly as plain decoding computes them.
        const kernels::ExactSmallBatches exact;
        return ctx_.forward(rows, /*all_logits=*/true);
    }();
    return take(all, static_cast<int>(context.size()), drafts, q, emitted);
}

int LocalTarget::take(std::span<const float> all, int m, std::span<const int32_t> drafts,
                      std::span<const std::vector<TokenProb>> q, std::vector<int32_t>& emitted) {
    SYSLM_CHECK(q.size() == drafts.size(), "speculative target: ", drafts.size(), " drafts but ",
                q.size(), " draft distributions");
    const int kk = static_cast<int>(drafts.size());
    const int base = ctx_.n_past() - (1 + m + kk);  // before the call's rows
    const int V = ctx_.model().hparams().n_vocab;
    SYSLM_CHECK(base >= 0 && all.size() == static_cast<size_t>(1 + m + kk) * V,
                "speculative target: the call's logits are not its rows'");
    const std::span<const float> rows = all.subspan(static_cast<size_t>(m) * V);  // after context
    int a = 0;
    emitted.clear();
    for (int i = 0; i <= kk; ++i) {
        const std::span<const TokenProb> p =
            sampler_.distribution(rows.subspan(static_cast<size_t>(i) * V, V));
        bool kept = false;
        int32_t next;
        if (i < kk) {
            const double u1 = sampler_.uniform(), u2 = sampler_.uniform();
            next = speculative_verify(p, q[i], drafts[i], u1, u2, &kept);
            if (kept) ++a;
        } else {
            next = sampler_.draw(p);  // every draft kept: one more from the target
        }
        emitted.push_back(next);
        if (i < kk && !kept) break;
    }
    ctx_.truncate(base + 1 + m + a);  // pending, context and kept drafts
    pending_ = emitted.back();
    return a;
}

void check_speculative_draft(const model::Context& draft, int target_vocab,
                             std::span<const int32_t> prompt, const Sampler& sampler,
                             const SpeculativeOptions& o) {
    SYSLM_CHECK(!prompt.empty(), "the prompt is empty (no tokens to start from)");
    SYSLM_CHECK(draft.n_past() == 0, "speculative decoding starts from an empty draft context");
    SYSLM_CHECK(target_vocab == draft.model().hparams().n_vocab, "the draft model's vocabulary (",
                draft.model().hparams().n_vocab, " tokens) differs from the target's (",
                target_vocab, ")");
    SYSLM_CHECK(!sampler.has_penalties(),
                "repetition / presence / frequency penalties are not supported with a draft "
                "model (they depend on the history at every drafted position)");
    SYSLM_CHECK(o.k_min >= 1 && o.k_max >= o.k_min && o.k >= 1, "draft lengths must be >= 1");
    // A round rolls the draft back by up to k_max + 1 positions; windowed layers keep rings
    // sized for a bounded rollback (model/kv_cache.hpp).
    SYSLM_CHECK(o.k_max + 1 <= draft.kv_cache().max_rollback(), "a draft length of ", o.k_max,
                " is more than the sliding-window KV ring of the draft can take back (",
                draft.kv_cache().max_rollback() - 1, "); use a smaller --draft-max");
}

namespace {

// The draft length of a trial round while drafting is off (see planned_length).
constexpr int kExplore = 4;

// One generation: rounds of drafting k tokens, verifying them in one target call, passing on
// what was kept, and (adaptive) choosing the next k from the measured acceptance and costs.
class SpeculativeDecoder {
public:
    SpeculativeDecoder(SpeculativeTarget& target, model::Context& draft,
                       const tokenizer::Tokenizer& tok, const Sampler& sampler, bool ignore_eos,
                       const std::function<bool(int32_t)>& on_token, const SpeculativeOptions& o,
                       SpeculativeStats& st, GenerateStats& gs, const DraftForward* draft_forward)
        : target_(target),
          draft_(draft),
          draft_forward_(draft_forward),
          tok_(tok),
          draft_sampler_(draft_params(sampler)),
          ignore_eos_(ignore_eos),
          on_token_(on_token),
          o_(o),
          st_(st),
          gs_(gs),
          k_(std::clamp(o.k, o.k_min, o.k_max)) {}

    // Both sides take the prompt but its last token (fed with the first round's drafts).
    void prefill(std::span<const int32_t> prompt) {
        tokens_.assign(prompt.begin(), prompt.end());
        const auto t0 = Clock::now();
        target_.start(prompt);
        if (prompt.size() > 1) draft_logits(prompt.first(prompt.size() - 1));
        gs_.prompt_seconds = seconds(t0);
    }

    void generate(int n_predict) {
        const auto t0 = Clock::now();
        for (bool done = false; !done;) {
            if (target_.n_past() + 1 > target_.n_ctx()) break;
            const int kk = planned_length(n_predict);
            const auto td = Clock::now();
            draft_tokens(kk);
            const double t_draft = seconds(td);
            const auto tv = Clock::now();
            const int base = target_.n_past();
            const int a = target_.verify(drafts_, q_, emitted_);
            const double t_verify = seconds(tv);
            ++st_.rounds;
            st_.drafted += kk;
            st_.accepted += a;
            st_.draft_seconds += t_draft;
            st_.target_seconds += t_verify;
            draft_.truncate(std::min(draft_.n_past(), base + 1 + a));
            done = emit(n_predict);
            if (o_.adaptive) adapt(kk, a, a < kk, t_draft, t_verify);
        }
        gs_.generate_seconds = seconds(t0);
    }

private:
    std::span<const float> draft_logits(std::span<const int32_t> tokens) {
        if (!draft_forward_) return draft_.forward(tokens);
        draft_out_ = (*draft_forward_)(draft_, tokens);
        return draft_out_;
    }

    static SamplingParams draft_params(const Sampler& sampler) {
        SamplingParams dp = sampler.params();
        dp.seed = sampler.params().seed ^ 0x9e3779b97f4a7c15ull;
        return dp;
    }

    // This round's draft length. Adaptive: every 16th round tries the other regime (drafting
    // when it is off, plain decoding when on), so both the acceptance and the cost of small
    // calls stay measured. Room: the target takes pending + k drafts; the draft the catch-up
    // + k - 1.
    int planned_length(int n_predict) {
        int planned = k_;
        // Off, the trial drafts kExplore: a call of k_min + 1 tokens costs about what a call of
        // one does, so the slope fitted from those two sizes is mostly noise; a wider one fits it.
        if (o_.adaptive && ++round_ % 16 == 0)
            planned = k_ == 0 ? std::clamp(kExplore, o_.k_min, o_.k_max) : 0;
        const int kk = std::min({planned, n_predict - gs_.n_generated - 1,
                                 target_.n_ctx() - target_.n_past() - 1,
                                 draft_.n_ctx() - static_cast<int>(tokens_.size())});
        return std::max(kk, 0);
    }

    // kk tokens from the draft, with the distributions they were drawn from.
    void draft_tokens(int kk) {
        q_.clear();
        drafts_.clear();
        if (kk == 0) return;
        std::span<const int32_t> feed(tokens_.data() + draft_.n_past(),
                                      tokens_.size() - static_cast<size_t>(draft_.n_past()));
        for (int i = 0; i < kk; ++i) {
            const std::span<const float> logits = draft_logits(feed);
            const std::span<const TokenProb> dist = draft_sampler_.distribution(logits);
            q_.emplace_back(dist.begin(), dist.end());
            drafts_.push_back(draft_sampler_.draw(q_.back()));
            feed = std::span<const int32_t>(&drafts_.back(), 1);
            if (i + 1 == kk) break;  // the last draft is not fed (the target checks it)
        }
    }

    // The round's tokens to the caller; true when generation ends (end of generation,
    // n_predict tokens, or the caller's stop).
    bool emit(int n_predict) {
        for (int32_t t : emitted_) {
            tokens_.push_back(t);
            ++gs_.n_generated;
            if (!ignore_eos_ && tok_.is_eog(t)) {
                gs_.stopped_at_eog = true;
                return true;
            }
            if (!on_token_(t)) return true;
            if (gs_.n_generated >= n_predict) return true;
        }
        return false;
    }

    // The acceptance (decayed), the draft's seconds per token and the verify cost by length,
    // then the k they predict fastest.
    void adapt(int kk, int a, bool rejected, double t_draft, double t_verify) {
        verify_cost_.add(kk + 1, t_verify);
        if (kk > 0) {
            acc_sum_ = 0.9 * acc_sum_ + a;
            trials_ = 0.9 * trials_ + a + (rejected ? 1 : 0);
            const double per_draft = t_draft / kk;
            draft_step_ = draft_step_ > 0 ? 0.8 * draft_step_ + 0.2 * per_draft : per_draft;
        }
        if (draft_step_ > 0)
            k_ = best_k(acc_sum_ / trials_, draft_step_, verify_cost_, o_.k_min, o_.k_max,
                        o_.spare_target);
    }

    SpeculativeTarget& target_;
    model::Context& draft_;
    const DraftForward* draft_forward_;
    std::vector<float> draft_out_;
    const tokenizer::Tokenizer& tok_;
    Sampler draft_sampler_;
    const bool ignore_eos_;
    const std::function<bool(int32_t)>& on_token_;
    const SpeculativeOptions& o_;
    SpeculativeStats& st_;
    GenerateStats& gs_;
    int k_;
    double acc_sum_ = 1, trials_ = 2;  // acceptance prior 0.5
    double draft_step_ = 0;            // running seconds per draft token
    VerifyCost verify_cost_;
    int64_t round_ = 0;
    std::vector<int32_t> tokens_, drafts_, emitted_;
    std::vector<std::vector<TokenProb>> q_;
};

}  // namespace

GenerateStats speculative_tokens(SpeculativeTarget& target, model::Context& draft,
                                 const tokenizer::Tokenizer& tok, std::span<const int32_t> prompt,
                                 int n_predict, const Sampler& sampler, bool ignore_eos,
                                 const std::function<bool(int32_t)>& on_token,
                                 const SpeculativeOptions& o, SpeculativeStats* stats,
                                 const DraftForward* draft_forward) {
    SpeculativeStats local;
    GenerateStats gs;
    gs.n_prompt = static_cast<int>(prompt.size());
    SpeculativeDecoder d(target, draft, tok, sampler, ignore_eos, on_token, o,
                         stats ? *stats : local, gs, draft_forward);
    d.prefill(prompt);
    d.generate(n_predict);
    return gs;
}

GenerateStats speculative_generate(model::Context& target, model::Context& draft,
                                   const tokenizer::Tokenizer& tok, std::span<const int32_t> prompt,
                                   int n_predict, Sampler& sampler, bool ignore_eos,
                                   const std::function<void(std::string_view)>& on_text,
                                   const SpeculativeOptions& o, SpeculativeStats* stats) {
    check_speculative_draft(draft, target.model().hparams().n_vocab, prompt, sampler, o);
    SYSLM_CHECK(target.n_past() == 0, "speculative decoding starts from an empty target context");
    SYSLM_CHECK(o.k_max + 1 <= target.kv_cache().max_rollback(), "a draft length of ", o.k_max,
                " is more than the sliding-window KV ring of the model can take back (",
                target.kv_cache().max_rollback() - 1, "); use a smaller --draft-max");
    LocalTarget local(target, sampler);
    tokenizer::Utf8StreamBuffer stream;
    const std::function<bool(int32_t)> on_token = [&](int32_t t) {
        if (std::string text = stream.push(tok.token_to_piece(t)); !text.empty()) on_text(text);
        return true;
    };
    GenerateStats gs = speculative_tokens(local, draft, tok, prompt, n_predict, sampler, ignore_eos,
                                          on_token, o, stats);
    if (std::string rest = stream.flush(); !rest.empty()) on_text(rest);
    return gs;
}

}  // namespace syslm::infer
