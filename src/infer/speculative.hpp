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
// per second, (1 - a^(k+1)) / ((1 - a) (k d + v(k + 1))) (or, with spare_target, the longest within
// that fraction of it). k = 0 is plain decoding: chosen when the target is compute-bound
// (verifying k + 1 tokens costs about k + 1 steps), so a draft never makes generation much slower;
// every 16th round tries the other regime to keep the estimates fresh.
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
    int k = 4;      // initial (and, when !adaptive, fixed) draft length
    int k_min = 1;  // smallest length when drafting (adaptive may also turn drafting off)
    int k_max = 16;
    bool adaptive = true;
    // Adaptive: the longest draft length (the fewest target calls per token) whose predicted
    // tokens/s is within this fraction of the fastest. 0: the fastest. A target across a link
    // (a shared cloud) is worth sparing at a small cost in speed.
    double spare_target = 0;
};

struct SpeculativeStats {
    int rounds = 0;    // target verify calls
    int drafted = 0;   // draft tokens proposed
    int accepted = 0;  // of them kept
    double draft_seconds = 0, target_seconds = 0;
    double acceptance() const { return drafted ? static_cast<double>(accepted) / drafted : 0; }
};

// One round's decision, exposed for tests: given the target's distribution p and the draft's q
// at a position and the drafted token d, returns d if kept, else a token drawn from the
// residual. `u_accept` and `u_draw` are uniforms in [0, 1).
int32_t speculative_verify(std::span<const TokenProb> p, std::span<const TokenProb> q, int32_t d,
                           double u_accept, double u_draw, bool* kept);

// The target's half of the rounds: the model whose distribution the output follows, here in a
// local context (LocalTarget) or across a link in a cloud's session (serve/remote_target).
class SpeculativeTarget {
public:
    virtual ~SpeculativeTarget() = default;
    // Takes the prompt but its last token, which stays pending: the next verify feeds it first.
    virtual void start(std::span<const int32_t> prompt) = 0;
    // One call: the pending token and the drafts, each drawn from its q. `emitted` gets the kept
    // drafts, then the target's own token (the correction at the first rejection, or one more
    // when every draft was kept), which becomes the pending one. Returns the drafts kept.
    virtual int verify(std::span<const int32_t> drafts, std::span<const std::vector<TokenProb>> q,
                       std::vector<int32_t>& emitted) = 0;
    virtual int n_past() const = 0;  // positions held, the pending token not counted
    virtual int n_ctx() const = 0;
};

// The target in a context of this process, sampling with `sampler` (its seed decides the
// accept / reject draws).
class LocalTarget final : public SpeculativeTarget {
public:
    LocalTarget(model::Context& ctx, Sampler& sampler) : ctx_(ctx), sampler_(sampler) {}
    void start(std::span<const int32_t> prompt) override;
    int verify(std::span<const int32_t> drafts, std::span<const std::vector<TokenProb>> q,
               std::vector<int32_t>& emitted) override {
        return verify_after({}, drafts, q, emitted);
    }
    // verify, with `context` (tokens decided elsewhere: an edge's own, in a cascade) taken after
    // the pending token and before the drafts, in the same forward pass.
    int verify_after(std::span<const int32_t> context, std::span<const int32_t> drafts,
                     std::span<const std::vector<TokenProb>> q, std::vector<int32_t>& emitted);
    // verify_after in two halves, for a caller that runs the forward pass itself (a cloud's
    // batch of sessions): the rows of the call (pending, context, drafts), then, once the context
    // has taken them, the outcome from every row's logits (the context rolled back to what was
    // kept).
    const std::vector<int32_t>& call_rows(std::span<const int32_t> context,
                                          std::span<const int32_t> drafts);
    int take(std::span<const float> all_logits, int n_context, std::span<const int32_t> drafts,
             std::span<const std::vector<TokenProb>> q, std::vector<int32_t>& emitted);
    int n_past() const override { return ctx_.n_past(); }
    int n_ctx() const override { return ctx_.n_ctx(); }
    model::Context& context() { return ctx_; }

private:
    model::Context& ctx_;
    Sampler& sampler_;
    int32_t pending_ = -1;
    std::vector<int32_t> batch_;
};

// Refuses what speculative decoding cannot follow exactly: an empty prompt, a vocabulary that
// differs, repetition penalties (they depend on the history at every drafted position), draft
// lengths the draft's sliding-window ring cannot take back.
void check_speculative_draft(const model::Context& draft, int target_vocab,
                             std::span<const int32_t> prompt, const Sampler& sampler,
                             const SpeculativeOptions& options);

// The draft's forward passes run by someone else (an edge batching its requests' drafts:
// infer/context_batcher): the last row's logits of these tokens appended to the context.
using DraftForward = std::function<std::vector<float>(model::Context&, std::span<const int32_t>)>;

// The rounds, token by token: the prompt goes to both sides, then drafting and verification
// until n_predict tokens, an end-of-generation token (unless ignore_eos; it is not passed on),
// the target's context is full, or on_token returns false. The draft uses a copy of `sampler`'s
// parameters with its own generator; the draft context must be empty. draft_forward: null, the
// draft context's own forward.
GenerateStats speculative_tokens(SpeculativeTarget& target, model::Context& draft,
                                 const tokenizer::Tokenizer& tok, std::span<const int32_t> prompt,
                                 int n_predict, const Sampler& sampler, bool ignore_eos,
                                 const std::function<bool(int32_t)>& on_token,
                                 const SpeculativeOptions& options, SpeculativeStats* stats,
                                 const DraftForward* draft_forward = nullptr);

// Like generate(), with the target in a local context: text as it is produced. `sampler`
// samples for the target; both contexts must be empty and share the vocabulary.
GenerateStats speculative_generate(model::Context& target, model::Context& draft,
                                   const tokenizer::Tokenizer& tok, std::span<const int32_t> prompt,
                                   int n_predict, Sampler& sampler, bool ignore_eos,
                                   const std::function<void(std::string_view)>& on_text,
                                   const SpeculativeOptions& options, SpeculativeStats* stats);

}  // namespace syslm::infer
