#include "infer/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include "core/error.hpp"
#include "infer/stop_text.hpp"
#include "tokenizer/utf8.hpp"

namespace syslm::infer {

namespace {

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

int ceil_div(int64_t a, int64_t b) {
    return static_cast<int>((a + b - 1) / b);
}

// The sliding-window layers whose pages can be a ring: not linear attention (its prefix sums read
// every position) and no BigBird random blocks (they read pages before the window).
void ring_config(const model::HParams& hp, const EngineConfig& c, KvPagesConfig& k) {
    if (!c.kv_ring || hp.sliding_window <= 0 || hp.random_blocks > 0) return;
    for (int il = 0; il < hp.n_layer; ++il)
        k.ring_layers.push_back(hp.window(il) > 0 && !hp.linear_attention(il));
    if (std::find(k.ring_layers.begin(), k.ring_layers.end(), true) == k.ring_layers.end()) {
        k.ring_layers.clear();
        return;
    }
    k.window = hp.sliding_window;
    k.keep_pages = ceil_div(hp.global_tokens, c.page_size);
}

}  // namespace

KvPagesConfig kv_pages_config(const model::Model& m, const EngineConfig& c) {
    const model::HParams& hp = m.hparams();
    KvPagesConfig k;
    k.n_layer = hp.n_layer;
    k.kv_dim = hp.kv_dim();
    k.conv_dim = hp.conv_kernel > 1 ? hp.n_embd : 0;
    k.page_size = c.page_size;
    k.types = c.kv_types;
    k.tiers = c.prefix_tiers;
    k.prefix_cache = c.prefix_cache;
    model::check_kv_types(hp, c.kv_types);
    SYSLM_CHECK(c.page_size > 0 && c.parallel > 0 && c.n_ctx > 0 && c.token_budget > 0,
                "engine: page size, parallel, context and token budget must be positive");
    ring_config(hp, c, k);
    const int per_sequence = ceil_div(c.n_ctx, c.page_size);
    if (k.groups() == 1) {
        if (c.n_pages > 0)
            k.n_pages = c.n_pages;
        else if (c.kv_memory > 0)
            k.n_pages = KvPages::pages_for_bytes(k, c.kv_memory);
        else
            k.n_pages = c.parallel * per_sequence;
        return k;
    }
    // Local and global layers: the ring group holds, per sequence, at most its kept pages, the
    // window's and its chunk of the step (every chunk together within the token budget), plus
    // one window more per sequence for cached prefix pages. It never needs more pages than the
    // global group, and at least what one sequence needs alone.
    int w = hp.sliding_window;
    if (c.window_auto)
        for (double v : hp.window_policy.values) w = std::max(w, static_cast<int>(v));
    const int window_pages = ceil_div(w - 1, c.page_size);
    const int ring_pages =
        c.parallel * (k.keep_pages + 2 * window_pages + 3) + ceil_div(c.token_budget, c.page_size);
    const int ring_alone = k.keep_pages + window_pages + ceil_div(c.token_budget, c.page_size) + 2;
    k.n_pages = c.n_pages > 0 ? c.n_pages : c.parallel * per_sequence;
    k.ring_pages = ring_pages;
    if (c.n_pages == 0 && c.kv_memory > 0) {  // both groups scaled to the budget together
        const double f = static_cast<double>(c.kv_memory) / static_cast<double>(k.bytes());
        k.n_pages = static_cast<int>(std::min(f * k.n_pages, double{1 << 30}));
        k.ring_pages =
            std::min(k.n_pages, std::max(static_cast<int>(f * k.ring_pages), ring_alone));
        SYSLM_CHECK(k.n_pages > 0 && k.bytes() <= c.kv_memory, "KV pages: ", c.kv_memory,
                    " bytes hold too few pages for one sequence: ", k.n_pages,
                    " of the global "
                    "layers and ",
                    ring_alone, " of the windowed layers' ring take ", k.bytes());
    }
    k.ring_pages = std::min(k.n_pages, k.ring_pages);
    return k;
}

struct Engine::Active {
    Sequence seq;
    GenerationParams params;
    Callback cb;
    Sampler sampler;
    std::optional<grammar::Matcher> matcher;  // with GenerationParams::grammar
    bool grammar_on = false;                  // false: a lazy grammar waiting for its trigger
    std::string untriggered;                  // the latest output bytes, searched for the trigger
    StopText out;
    int64_t n_generated = 0;
    bool finished = false;
    double t_submit = 0, t_last = 0;

    Active(const GenerationParams& p, Callback c)
        : params(p), cb(std::move(c)), sampler(p.sampling), out(p.stop) {}
};

Engine::Engine(std::shared_ptr<const model::Model> model, tokenizer::Tokenizer tok,
               const EngineConfig& cfg)
    : model_(std::move(model)),
      tok_(std::move(tok)),
      cfg_(cfg),
      pages_(kv_pages_config(*model_, cfg)),
      scheduler_({cfg.token_budget, cfg.parallel, cfg.max_waiting}, pages_),
      forward_(*model_, static_cast<int>(cfg.token_budget), cfg.threads, cfg.n_ctx),
      rows_(pages_) {
    if (model_->hparams().spec().position == model::PositionKind::Learned)
        cfg_.n_ctx = std::min(cfg_.n_ctx, model_->hparams().n_ctx_train);
    logits_.resize(static_cast<size_t>(cfg.parallel) * model_->hparams().n_vocab);
    if (cfg.window_auto) model_->hparams().window_for_length(1);  // throws without a policy
    if (cfg.expert_auto) model_->hparams().top_p_for_length(1);
    stats_.kv_pages_total = pages_.total_pages();
    stats_.kv_bytes_total = static_cast<int64_t>(pages_.config().bytes());
    thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::Stop:
            return "stop";
        case FinishReason::Length:
            return "length";
        case FinishReason::Cancelled:
            return "cancelled";
        case FinishReason::Error:
            return "error";
    }
    return "?";
}

bool Engine::submit(std::vector<int32_t> prompt, const GenerationParams& params, Callback cb,
                    int64_t* id, Refusal* refused) {
    auto refuse = [&](std::string why, Failure kind = Failure::InvalidRequest) {
        if (refused) *refused = {kind, std::move(why)};
        return false;
    };
    if (prompt.empty()) return refuse("the prompt is empty");
    const int V = model_->hparams().n_vocab;
    for (int32_t t : prompt)
        if (t < 0 || t >= V)
            return refuse("token id " + std::to_string(t) + " is outside the vocabulary");
    if (params.max_tokens < 1) return refuse("max_tokens must be at least 1");
    if (static_cast<int64_t>(prompt.size()) >= cfg_.n_ctx)
        return refuse("the prompt has " + std::to_string(prompt.size()) +
                      " tokens; the context size is " + std::to_string(cfg_.n_ctx));
    std::unique_ptr<Active> a;
    try {
        a = std::make_unique<Active>(params, std::move(cb));  // the sampler checks its params
    } catch (const Error& e) {
        return refuse(e.what());
    }
    std::vector<std::pair<int, float>> lora;
    for (const GenerationParams::LoraChoice& c : params.lora) {
        if (c.adapter < 0 || c.adapter >= static_cast<int>(cfg_.loras.size()))
            return refuse("LoRA adapter id " + std::to_string(c.adapter) + ": the server has " +
                          std::to_string(cfg_.loras.size()) + " (ids from 0)");
        if (!std::isfinite(c.scale)) return refuse("a LoRA adapter's scale must be finite");
        if (c.scale != 0) lora.push_back({c.adapter, c.scale});
    }
    std::sort(lora.begin(), lora.end());
    a->params.lora.clear();
    for (const auto& [id, scale] : lora) a->params.lora.push_back({id, scale});
    if (params.grammar) a->matcher.emplace(params.grammar);
    a->grammar_on = params.grammar_trigger.empty();
    a->seq.n_prompt = static_cast<int64_t>(prompt.size());
    a->seq.priority = params.priority;
    const int64_t length = std::min<int64_t>(cfg_.n_ctx, a->seq.n_prompt + params.max_tokens);
    if (cfg_.window_auto) a->seq.window = model_->hparams().window_for_length(length);
    if (cfg_.expert_auto) a->seq.expert_top_p = model_->hparams().top_p_for_length(length);
    for (int32_t t : prompt) a->sampler.accept(t);
    a->seq.tokens = std::move(prompt);
    a->t_submit = now_s();
    {
        std::lock_guard lk(mu_);
        if (!accepting_) return refuse("the server is shutting down", Failure::ShuttingDown);
        if (static_cast<int>(incoming_.size()) + stats_.waiting >= cfg_.max_waiting)
            return refuse("queue full", Failure::QueueFull);
        a->seq.id = next_id_++;
        if (!lora.empty())  // numbered from 1 in order of first use
            a->seq.lora_variant =
                lora_variants_.emplace(lora, static_cast<uint32_t>(lora_variants_.size() + 1))
                    .first->second;
        if (id) *id = a->seq.id;
        ++stats_.requests;
        stats_.prompt_tokens += a->seq.n_prompt;
        incoming_.push_back(std::move(a));
    }
    cv_.notify_all();
    return true;
}

void Engine::cancel(int64_t id) {
    {
        std::lock_guard lk(mu_);
        cancels_.push_back(id);
    }
    cv_.notify_all();
}

void Engine::drain() {
    std::unique_lock lk(mu_);
    accepting_ = false;
    idle_cv_.wait(lk, [&] { return incoming_.empty() && idle_; });
    stop_ = true;
    lk.unlock();
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void LatencyHistogram::add(double seconds) {
    for (size_t i = 0; i < std::size(kBounds); ++i)
        if (seconds <= kBounds[i]) ++buckets[i];
    ++count;
    sum += seconds;
}

EngineStats Engine::stats() {
    std::lock_guard lk(mu_);
    return stats_;
}

bool Engine::emit(Active& a, const Event& e) {
    return a.cb(e);
}

void Engine::finish(Active& a, FinishReason reason, Refusal error) {
    if (a.finished) return;
    a.finished = true;
    scheduler_.remove(&a.seq);
    Event e;
    e.done = true;
    e.finish_reason = reason;
    e.error = std::move(error);
    e.n_prompt = a.seq.n_prompt;
    e.n_generated = a.n_generated;
    if (reason == FinishReason::Stop || reason == FinishReason::Length) e.text = a.out.finish();
    emit(a, e);
}

void Engine::sample(Active& a, std::span<const float> row) {
    const bool constrained = a.matcher && a.grammar_on;
    // A complete grammar ends the answer even under ignore_eos (e.g. the empty regex "" at once).
    if (constrained && a.matcher->finished()) return finish(a, FinishReason::Stop);
    if (constrained && !mask_logits(a, row)) {
        if (a.matcher->can_end()) return finish(a, FinishReason::Stop);  // only EOG was left
        return finish(a, FinishReason::Error,
                      {Failure::StepFailed, "the grammar allows no further token"});
    }
    const int32_t token = a.sampler.sample(constrained ? std::span<const float>(masked_) : row);
    a.sampler.accept(token);
    if (constrained && !tok_.is_eog(token))  // the mask let only allowed pieces through
        SYSLM_CHECK(a.matcher->accept(tok_.token_to_piece(token)), "grammar: token ", token,
                    " passed the mask but not the matcher");
    else if (a.matcher && !tok_.is_eog(token))
        watch_trigger(a, tok_.token_to_piece(token));
    on_token(a, token, row);
    if (a.matcher && a.grammar_on && !a.finished && a.matcher->finished())
        finish(a, FinishReason::Stop);  // nothing may follow
}

void Engine::watch_trigger(Active& a, const std::string& piece) {
    const std::string& trigger = a.params.grammar_trigger;
    a.untriggered += piece;
    const size_t at = a.untriggered.find(trigger);
    if (at == std::string::npos) {  // keep what could still be the trigger's start
        const size_t keep = std::min(a.untriggered.size(), trigger.size() - 1);
        a.untriggered.erase(0, a.untriggered.size() - keep);
        return;
    }
    a.grammar_on = true;
    // The grammar describes what follows the trigger; bytes of the same token after it must keep
    // to it, or the answer stays free text.
    if (!a.matcher->accept(std::string_view(a.untriggered).substr(at + trigger.size())))
        a.matcher.reset();
    a.untriggered.clear();
}

bool Engine::mask_logits(Active& a, std::span<const float> row) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!trie_) {
        std::vector<std::string> pieces(static_cast<size_t>(tok_.n_vocab()));
        for (int32_t t = 0; t < tok_.n_vocab(); ++t) {
            const tokenizer::TokenType type = tok_.token_type(t);
            if (type != tokenizer::TokenType::CONTROL && type != tokenizer::TokenType::UNKNOWN &&
                type != tokenizer::TokenType::UNUSED && !tok_.is_eog(t))
                pieces[static_cast<size_t>(t)] = tok_.token_to_piece(t);
        }
        trie_ = std::make_unique<grammar::VocabTrie>(pieces, tok_.eog_ids());
        // About 64 MiB of cached masks, whatever the vocabulary's size.
        const size_t mask_bytes = (static_cast<size_t>(tok_.n_vocab()) + 63) / 64 * 8;
        masks_ = std::make_unique<grammar::MaskCache>(
            *trie_, std::max<size_t>(64, (size_t{64} << 20) / mask_bytes));
    }
    const int64_t hits = masks_->hits();
    const grammar::TokenMask& mask = masks_->mask(*a.matcher);
    masked_.assign(row.begin(), row.end());
    bool any = false;
    for (size_t t = 0; t < masked_.size(); ++t) {
        const bool ok = grammar::allowed(mask, static_cast<int32_t>(t)) &&
                        !(a.params.ignore_eos && tok_.is_eog(static_cast<int32_t>(t)));
        if (!ok) masked_[t] = -std::numeric_limits<float>::infinity();
        any |= ok;
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard lk(mu_);
    ++stats_.grammar_masks;
    stats_.grammar_mask_cache_hits += masks_->hits() - hits;
    stats_.grammar_mask_seconds += dt;
    return any;
}

void Engine::on_token(Active& a, int32_t token, std::span<const float> logits) {
    const double t = now_s();
    {
        std::lock_guard lk(mu_);
        if (a.n_generated == 0)
            stats_.ttft.add(t - a.t_submit);
        else
            stats_.itl.add(t - a.t_last);
        ++stats_.generated_tokens;
    }
    a.t_last = t;
    ++a.n_generated;
    if (!a.params.ignore_eos && tok_.is_eog(token)) return finish(a, FinishReason::Stop);
    a.seq.tokens.push_back(token);

    Event e;
    e.token = token;
    if (a.params.logprobs >= 0) {  // the model's distribution, before sampling's changes
        const float mx = *std::max_element(logits.begin(), logits.end());
        double sum = 0;
        for (float l : logits) sum += std::exp(static_cast<double>(l - mx));
        const float lse = mx + static_cast<float>(std::log(sum));
        e.logprob = logits[static_cast<size_t>(token)] - lse;
        const size_t k = std::min<size_t>(static_cast<size_t>(a.params.logprobs), logits.size());
        std::vector<int32_t> ids(logits.size());
        for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
        std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                          [&](int32_t x, int32_t y) { return logits[x] > logits[y]; });
        for (size_t i = 0; i < k; ++i) e.top.push_back({ids[i], logits[ids[i]] - lse});
    }
    bool stopped = false;
    e.text = a.out.push(tok_.token_to_piece(token), &stopped);
    if (stopped) {
        if (!emit(a, e)) return finish(a, FinishReason::Cancelled);
        return finish(a, FinishReason::Stop);
    }
    if (!emit(a, e)) return finish(a, FinishReason::Cancelled);
    if (a.n_generated >= a.params.max_tokens ||
        static_cast<int64_t>(a.seq.tokens.size()) >= cfg_.n_ctx)
        finish(a, FinishReason::Length);
}

std::vector<model::LoraUse> Engine::lora_uses(const std::vector<ScheduledWork>& work) const {
    std::vector<model::LoraUse> uses;
    int64_t row = 0;
    for (const ScheduledWork& w : work) {
        for (const GenerationParams::LoraChoice& c : active_.at(w.seq->id)->params.lora) {
            const model::LoraAdapter* a = cfg_.loras[static_cast<size_t>(c.adapter)].adapter.get();
            auto it = std::find_if(uses.begin(), uses.end(), [&](const model::LoraUse& u) {
                return u.adapter == a && u.scale == c.scale;
            });
            if (it == uses.end()) it = uses.insert(uses.end(), {a, c.scale, {}});
            for (int64_t r = row; r < row + w.n; ++r) it->rows.push_back(r);
        }
        row += w.n;
    }
    return uses;
}

void Engine::step() {
    std::vector<ScheduledWork> work = scheduler_.schedule();
    for (Sequence* s : scheduler_.take_rejected())
        finish(*active_.at(s->id), FinishReason::Error,
               {Failure::KvPoolTooSmall,
                "the request needs more KV memory than the whole pool holds (" +
                    std::to_string(pages_.config().n_pages) + " pages of " +
                    std::to_string(pages_.config().page_size) + " positions)"});
    if (!work.empty()) {
        std::vector<int32_t> batch;
        std::vector<int64_t> logit_rows;
        std::vector<Sequence*> sampled;
        rows_.clear();
        for (const ScheduledWork& w : work) {
            Sequence& s = *w.seq;
            s.linear.resize(static_cast<size_t>(model_->hparams().n_layer));
            rows_.add(
                s.table, s.computed, w.n,
                {.window = s.window, .expert_top_p = s.expert_top_p, .linear = s.linear.data()});
            batch.insert(batch.end(), s.tokens.begin() + s.computed,
                         s.tokens.begin() + s.computed + w.n);
            if (s.computed + w.n == static_cast<int64_t>(s.tokens.size())) {
                logit_rows.push_back(static_cast<int64_t>(batch.size()) - 1);
                sampled.push_back(&s);
            }
        }
        forward_.set_loras(lora_uses(work));
        forward_.run(batch, rows_, logit_rows, logits_.data());
        scheduler_.completed(work);
        // The prompt's full pages computed so far, for later requests with its prefix: published
        // before a ring gives them back, they stay cached for a match until the pool needs them.
        for (const ScheduledWork& w : work) {
            const Sequence& s = *w.seq;
            if (s.computed - w.n < s.n_prompt)
                pages_.publish(s.table, std::span(s.tokens).first(static_cast<size_t>(s.n_prompt)),
                               s.window, s.variant());
        }
        const size_t V = static_cast<size_t>(model_->hparams().n_vocab);
        for (size_t i = 0; i < sampled.size(); ++i)
            sample(*active_.at(sampled[i]->id), std::span<const float>(logits_.data() + i * V, V));
        // A ring's positions before a sequence's window are read by no layer of it again.
        const int window = pages_.config().window;
        for (Sequence* s : scheduler_.running())
            pages_.drop_before(s->table, s->computed - (s->window > 0 ? s->window : window) + 1);
    }
    for (auto it = active_.begin(); it != active_.end();)
        it = it->second->finished ? active_.erase(it) : std::next(it);

    std::lock_guard lk(mu_);
    ++stats_.steps;
    stats_.running = static_cast<int>(scheduler_.running().size());
    stats_.waiting = static_cast<int>(scheduler_.waiting().size());
    stats_.kv_pages_used = pages_.used_pages();
    stats_.kv_pages_cached = pages_.cached_pages();
    stats_.kv_bytes_used = pages_.used_bytes();
    stats_.kv_positions = 0;
    for (const Sequence* s : scheduler_.running()) stats_.kv_positions += pages_.held(s->table);
    stats_.preemptions = scheduler_.preemptions();
    stats_.prefix_hit_tokens = scheduler_.prefix_hit_tokens();
    stats_.prefix_pages = pages_.prefix_lookups();
    stats_.prefix_tiers = pages_.tier_stats();
    const double t = now_s();
    rate_.emplace_back(t, stats_.generated_tokens);
    while (rate_.size() > 2 && rate_.front().first < t - 5.0) rate_.erase(rate_.begin());
    const double span = rate_.back().first - rate_.front().first;
    stats_.tokens_per_s =
        span > 0 ? static_cast<double>(rate_.back().second - rate_.front().second) / span : 0.0;
}

void Engine::loop() {
    while (true) {
        std::vector<std::unique_ptr<Active>> arrived;
        std::vector<int64_t> cancels;
        {
            std::unique_lock lk(mu_);
            idle_ = active_.empty() && incoming_.empty();
            if (idle_) {
                stats_.running = stats_.waiting = 0;
                stats_.kv_pages_used = pages_.used_pages();
                stats_.kv_pages_cached = pages_.cached_pages();
                stats_.kv_bytes_used = pages_.used_bytes();
                stats_.kv_positions = 0;
                stats_.tokens_per_s = 0;  // idle: no rate to report
                rate_.clear();
                idle_cv_.notify_all();
            }
            cv_.wait(lk, [&] {
                return stop_ || !incoming_.empty() || !cancels_.empty() || !active_.empty();
            });
            if (stop_) break;
            idle_ = false;
            arrived.swap(incoming_);
            cancels.swap(cancels_);
            stats_.waiting += static_cast<int>(arrived.size());
        }
        // Callbacks run with no engine lock held (a server thread may hold its own lock and
        // call cancel()).
        for (auto& a : arrived) {
            Active* p = a.get();
            active_[p->seq.id] = std::move(a);
            if (!scheduler_.submit(&p->seq))
                finish(*p, FinishReason::Error, {Failure::QueueFull, "queue full"});
        }
        for (int64_t id : cancels)
            if (auto it = active_.find(id); it != active_.end())
                finish(*it->second, FinishReason::Cancelled);
        try {
            step();
        } catch (const std::exception& e) {  // a failed step ends its requests, not the server
            for (auto& [id, a] : active_)
                finish(*a, FinishReason::Error, {Failure::StepFailed, e.what()});
            active_.clear();
        }
    }
    for (auto& [id, a] : active_) finish(*a, FinishReason::Cancelled);
    active_.clear();
    std::vector<std::unique_ptr<Active>> left;
    {
        std::lock_guard lk(mu_);
        left.swap(incoming_);
    }
    for (auto& a : left) {
        Event e;
        e.done = true;
        e.finish_reason = FinishReason::Cancelled;
        a->cb(e);
    }
    std::lock_guard lk(mu_);
    idle_ = true;
    idle_cv_.notify_all();
}

}  // namespace syslm::infer
