#include "serve/edge_generator.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/error.hpp"
#include "infer/stop_text.hpp"
#include "serve/metrics.hpp"
#include "serve/remote_target.hpp"

namespace syslm::serve {

namespace {

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

}  // namespace

struct EdgeGenerator::Job {
    int64_t id = 0;
    std::vector<int32_t> prompt;
    infer::GenerationParams params;
    Callback cb;
    std::atomic<bool> cancelled{false};
    double t_submit = 0, t_last = 0;
    int64_t n_generated = 0;
};

struct EdgeGenerator::Slot {
    std::unique_ptr<model::Context> ctx;  // the draft model's
    std::unique_ptr<CloudLink> link;
};

EdgeGenerator::EdgeGenerator(std::shared_ptr<const model::Model> draft, tokenizer::Tokenizer tok,
                             const EdgeConfig& cfg)
    : model_(std::move(draft)), tok_(std::move(tok)), cfg_(cfg), batcher_(*model_, cfg.threads) {
    SYSLM_CHECK(cfg_.slots >= 1, "an edge needs at least one slot");
    SYSLM_CHECK(cfg_.mode != EdgeMode::Split ||
                    (cfg_.split_at >= 0 && cfg_.split_at <= model_->hparams().n_layer),
                "--split-at ", cfg_.split_at, ": the model has ", model_->hparams().n_layer,
                " layers");
    const infer::SpeculativeOptions& o = cfg_.speculative;
    SYSLM_CHECK(o.k_min >= 1 && o.k_max >= o.k_min && o.k >= 1, "draft lengths must be >= 1");
    for (int i = 0; i < cfg_.slots; ++i) {
        auto s = std::make_unique<Slot>();
        s->ctx = std::make_unique<model::Context>(*model_, cfg_.n_ctx, cfg_.threads);
        SYSLM_CHECK(o.k_max + 1 <= s->ctx->kv_cache().max_rollback(), "a draft length of ", o.k_max,
                    " is more than the draft's sliding-window KV ring can take back (",
                    s->ctx->kv_cache().max_rollback() - 1, "); use a smaller --draft-max");
        s->link = std::make_unique<CloudLink>(cfg_.cloud_url, cfg_.link, cfg_.api_key,
                                              cfg_.call_timeout_s);
        slots_.push_back(std::move(s));
    }
    for (auto& s : slots_) threads_.emplace_back([this, &s] { worker(*s); });
}

EdgeGenerator::~EdgeGenerator() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
        accepting_ = false;
        for (Job* j : running_) j->cancelled = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    for (auto& j : waiting_) {  // never started
        infer::Event e;
        e.done = true;
        e.finish_reason = infer::FinishReason::Cancelled;
        j->cb(e);
    }
}

// Why a request cannot run here; empty when it can. What the cloud would not follow (it decides
// tokens without the request's grammar, logprobs or penalties) is refused, not dropped.
std::string EdgeGenerator::why_refused(const std::vector<int32_t>& prompt,
                                       const infer::GenerationParams& params) const {
    if (prompt.empty()) return "the prompt is empty";
    const int V = model_->hparams().n_vocab;
    for (int32_t t : prompt)
        if (t < 0 || t >= V) return "token id " + std::to_string(t) + " is outside the vocabulary";
    if (params.max_tokens < 1) return "max_tokens must be at least 1";
    if (static_cast<int64_t>(prompt.size()) >= cfg_.n_ctx)
        return "the prompt has " + std::to_string(prompt.size()) + " tokens; the context size is " +
               std::to_string(cfg_.n_ctx);
    const std::string here = " are not available on an edge: its cloud decides tokens without them";
    if (params.grammar)
        return "constrained output (grammar, json_schema, response_format, tools)" + here;
    if (params.logprobs >= 0) return "logprobs" + here;
    if (!params.lora.empty()) return "this edge serves no LoRA adapters";
    try {
        // A split model's cloud samples with the whole history; drafts and deferrals cannot.
        if (infer::Sampler(params.sampling).has_penalties() && cfg_.mode != EdgeMode::Split)
            return "repetition / presence / frequency penalties" + here;
    } catch (const Error& e) {
        return e.what();
    }
    return {};
}

bool EdgeGenerator::submit(std::vector<int32_t> prompt, const infer::GenerationParams& params,
                           Callback cb, int64_t* id, infer::Refusal* refused) {
    auto refuse = [&](std::string why, infer::Failure kind = infer::Failure::InvalidRequest) {
        if (refused) *refused = {kind, std::move(why)};
        return false;
    };
    if (std::string why = why_refused(prompt, params); !why.empty()) return refuse(why);
    auto job = std::make_unique<Job>();
    job->prompt = std::move(prompt);
    job->params = params;
    job->cb = std::move(cb);
    job->t_submit = now_s();
    {
        std::lock_guard lk(mu_);
        if (!accepting_) return refuse("the server is shutting down", infer::Failure::ShuttingDown);
        if (static_cast<int>(waiting_.size()) >= cfg_.max_waiting)
            return refuse("queue full", infer::Failure::QueueFull);
        job->id = next_id_++;
        if (id) *id = job->id;
        ++stats_.requests;
        stats_.prompt_tokens += static_cast<int64_t>(job->prompt.size());
        // Lower priority values first, then in order of arrival.
        auto at = std::find_if(waiting_.begin(), waiting_.end(), [&](const auto& w) {
            return w->params.priority > job->params.priority;
        });
        waiting_.insert(at, std::move(job));
    }
    cv_.notify_one();
    return true;
}

void EdgeGenerator::cancel(int64_t id) {
    std::unique_ptr<Job> queued;
    {
        std::lock_guard lk(mu_);
        for (Job* j : running_)
            if (j->id == id) j->cancelled = true;
        auto it = std::find_if(waiting_.begin(), waiting_.end(),
                               [&](const auto& w) { return w->id == id; });
        if (it != waiting_.end()) {
            queued = std::move(*it);
            waiting_.erase(it);
        }
    }
    if (queued) {
        infer::Event e;
        e.done = true;
        e.finish_reason = infer::FinishReason::Cancelled;
        queued->cb(e);
    }
    idle_cv_.notify_all();
}

void EdgeGenerator::drain() {
    std::unique_lock lk(mu_);
    accepting_ = false;
    idle_cv_.wait(lk, [&] { return waiting_.empty() && running_.empty(); });
    stop_ = true;
    lk.unlock();
    cv_.notify_all();
    for (std::thread& t : threads_)
        if (t.joinable()) t.join();
}

void EdgeGenerator::worker(Slot& slot) {
    while (true) {
        std::unique_ptr<Job> job;
        {
            std::unique_lock lk(mu_);
            cv_.wait(lk, [&] { return stop_ || !waiting_.empty(); });
            if (stop_) return;
            job = std::move(waiting_.front());
            waiting_.pop_front();
            running_.push_back(job.get());
        }
        run(slot, *job);
        {
            std::lock_guard lk(mu_);
            running_.erase(std::find(running_.begin(), running_.end(), job.get()));
        }
        idle_cv_.notify_all();
    }
}

void EdgeGenerator::record_token(Job& job) {
    const double t = now_s();
    std::lock_guard lk(mu_);
    if (job.n_generated == 0)
        stats_.ttft.add(t - job.t_submit);
    else
        stats_.itl.add(t - job.t_last);
    job.t_last = t;
    ++job.n_generated;
    ++stats_.generated_tokens;
    rate_.emplace_back(t, stats_.generated_tokens);
    while (rate_.size() > 2 && t - rate_.front().first > 5) rate_.pop_front();
}

// One request's state while it runs.
struct EdgeGenerator::Run {
    explicit Run(Job& j) : job(j), out(j.params.stop), tokens(j.prompt) {}
    Job& job;
    infer::StopText out;
    std::vector<int32_t> tokens;  // prompt and answer so far
    bool stopped = false, cancelled = false, eog = false;
    std::string fallback;                   // why the cloud could not help, when it could not
    std::function<bool(int32_t)> on_token;  // one token of the answer on; false: it ends
    bool ended() const { return stopped || cancelled || eog; }
    int64_t left() const { return job.params.max_tokens - job.n_generated; }
};

void EdgeGenerator::run(Slot& slot, Job& job) {
    Run r(job);
    r.on_token = [&](int32_t t) {
        r.tokens.push_back(t);
        record_token(job);
        infer::Event e;
        e.token = t;
        e.text = r.out.push(tok_.token_to_piece(t), &r.stopped);
        if (job.cancelled || !job.cb(e)) {
            r.cancelled = true;
            return false;
        }
        return !r.stopped;
    };
    infer::Event done;
    done.done = true;
    try {
        slot.ctx->reset();
        if (cfg_.mode == EdgeMode::Speculative)
            speculative(slot, r);
        else if (cfg_.mode == EdgeMode::Cascade)
            cascade(slot, r);
        else
            split(slot, r);
        if (!r.fallback.empty()) {
            std::lock_guard lk(mu_);
            ++fallbacks_;
        }
        if (!r.fallback.empty() && !r.ended()) alone(slot, r);
        if (r.eog) record_token(job);  // counted as generated, as the engine counts it
        done.finish_reason = r.cancelled          ? infer::FinishReason::Cancelled
                             : r.stopped || r.eog ? infer::FinishReason::Stop
                                                  : infer::FinishReason::Length;
        if (!r.cancelled) done.text = r.out.finish();
        done.fallback = r.fallback;
    } catch (const CloudError& e) {  // a split request cannot go on without its cloud
        done.finish_reason = infer::FinishReason::Error;
        done.error = {infer::Failure::Upstream, "the cloud at " + cfg_.cloud_url +
                                                    " failed, and a split model cannot answer "
                                                    "without it: " +
                                                    e.what()};
    } catch (const std::exception& e) {
        done.finish_reason = infer::FinishReason::Error;
        done.error = {infer::Failure::StepFailed,
                      std::string("edge generation failed: ") + e.what()};
    }
    done.n_prompt = static_cast<int64_t>(job.prompt.size());
    done.n_generated = job.n_generated;
    job.cb(done);
}

void EdgeGenerator::speculative(Slot& slot, Run& r) {
    const infer::GenerationParams& p = r.job.params;
    const int need = static_cast<int>(std::min<int64_t>(
        cfg_.n_ctx,
        static_cast<int64_t>(r.job.prompt.size()) + p.max_tokens + cfg_.speculative.k_max + 1));
    infer::SpeculativeStats st;
    try {
        RemoteTarget target(*slot.link, p.sampling, need, model_->hparams().n_vocab);
        // The slots' drafts run together (the batcher's passes).
        const infer::DraftForward draft_forward = [this](model::Context& ctx,
                                                         std::span<const int32_t> tokens) {
            return logits_of(ctx, tokens);
        };
        const infer::Sampler sampler(p.sampling);
        r.eog = infer::speculative_tokens(target, *slot.ctx, tok_, r.job.prompt, p.max_tokens,
                                          sampler, p.ignore_eos, r.on_token, cfg_.speculative, &st,
                                          &draft_forward)
                    .stopped_at_eog;
    } catch (const CloudError& e) {
        r.fallback = std::string("cloud unavailable: ") + e.what();
    }
    std::lock_guard lk(mu_);
    spec_.rounds += st.rounds;
    spec_.drafted += st.drafted;
    spec_.accepted += st.accepted;
    spec_.draft_seconds += st.draft_seconds;
    spec_.target_seconds += st.target_seconds;
}

namespace {

// The edge model's confidence in its next token: the top probability of its softmax.
double top_probability(std::span<const float> logits) {
    const float mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float l : logits) sum += std::exp(static_cast<double>(l - mx));
    return 1.0 / sum;
}

}  // namespace

// The next rows of a request's context, batched with the other slots' waiting rows: the last
// row's logits, or (a split) every row's residual stream entering the cloud's layers.
std::vector<float> EdgeGenerator::logits_of(model::Context& ctx, std::span<const int32_t> tokens) {
    model::ContextBatch::Item it;
    it.ctx = &ctx;
    it.tokens = tokens;
    return batcher_.run(it);
}

std::vector<float> EdgeGenerator::residual_of(model::Context& ctx,
                                              std::span<const int32_t> tokens) {
    model::ContextBatch::Item it;
    it.ctx = &ctx;
    it.tokens = tokens;
    it.end_layer = cfg_.split_at;
    return batcher_.run(it);
}

void EdgeGenerator::cascade(Slot& slot, Run& r) {
    const infer::GenerationParams& p = r.job.params;
    model::Context& ctx = *slot.ctx;
    infer::Sampler sampler(p.sampling);
    std::unique_ptr<RemoteTarget> cloud;  // opened at the first deferral
    std::vector<int32_t> since;           // the edge's tokens the cloud has not seen
    std::vector<float> logits = logits_of(ctx, r.tokens);
    int64_t deferred = 0, own = 0;
    while (r.left() > 0 && static_cast<int>(r.tokens.size()) < ctx.n_ctx()) {
        int32_t t = -1;
        if (r.fallback.empty() && top_probability(logits) < cfg_.defer_below) {
            if (cfg_.defer_request) {
                cloud_finishes(slot, r);
                if (r.fallback.empty()) break;
            } else {
                try {
                    if (!cloud) {
                        const int need = static_cast<int>(std::min<int64_t>(
                            cfg_.n_ctx, static_cast<int64_t>(r.tokens.size()) + r.left() + 1));
                        cloud = std::make_unique<RemoteTarget>(*slot.link, p.sampling, need,
                                                               model_->hparams().n_vocab);
                        cloud->start(r.tokens);
                        since.clear();
                    }
                    t = cloud->defer(since);
                    since.clear();
                    ++deferred;
                } catch (const CloudError& e) {
                    r.fallback = std::string("cloud unavailable: ") + e.what();
                }
            }
        }
        if (t < 0) {
            t = sampler.sample(logits);
            if (cloud) since.push_back(t);
            ++own;
        }
        if (!p.ignore_eos && tok_.is_eog(t)) {
            r.eog = true;
            break;
        }
        if (!r.on_token(t)) break;
        logits = logits_of(ctx, std::span<const int32_t>(&t, 1));
    }
    std::lock_guard lk(mu_);
    deferred_ += deferred;
    edge_tokens_ += own;
}

// --defer request: the cloud's engine writes the rest of the answer (its /v1/completions, the
// prompt and the answer so far as token ids, the request's sampling and stop strings).
void EdgeGenerator::cloud_finishes(Slot& slot, Run& r) {
    const infer::GenerationParams& p = r.job.params;
    nlohmann::ordered_json body = {{"prompt", r.tokens},
                                   {"max_tokens", r.left()},
                                   {"temperature", p.sampling.temperature},
                                   {"top_k", p.sampling.top_k},
                                   {"top_p", p.sampling.top_p},
                                   {"min_p", p.sampling.min_p},
                                   {"seed", p.sampling.seed & 0x7fffffffffffffffull},
                                   {"ignore_eos", p.ignore_eos}};
    if (!p.stop.empty()) body["stop"] = p.stop;
    try {
        const nlohmann::ordered_json a = call_cloud(*slot.link, "/v1/completions", body);
        const auto& c = a.at("choices").at(0);
        const int64_t n = a.at("usage").at("completion_tokens").get<int64_t>();
        for (int64_t i = 0; i < n; ++i) record_token(r.job);
        infer::Event e;
        e.text = r.out.push(c.at("text").get<std::string>(), &r.stopped);
        if (r.job.cancelled || !r.job.cb(e)) r.cancelled = true;
        // a stop string or the end of generation (its token already in the cloud's count)
        if (c.at("finish_reason") == "stop") r.stopped = true;
        std::lock_guard lk(mu_);
        ++requests_deferred_;
        deferred_ += n;
    } catch (const CloudError& e) {
        r.fallback = std::string("cloud unavailable: ") + e.what();
    } catch (const nlohmann::json::exception& e) {
        r.fallback = std::string("cloud unavailable: its completion is malformed: ") + e.what();
    }
}

void EdgeGenerator::split(Slot& slot, Run& r) {
    const infer::GenerationParams& p = r.job.params;
    model::Context& ctx = *slot.ctx;
    const int V = model_->hparams().n_vocab;
    const int64_t E = model_->hparams().n_embd;
    const int need = static_cast<int>(
        std::min<int64_t>(cfg_.n_ctx, static_cast<int64_t>(r.tokens.size()) + p.max_tokens + 1));
    RemoteSplit cloud(*slot.link, p.sampling, cfg_.split_at, need, V);
    double cloud_seconds = 0;
    int64_t sent = 0;
    // The prompt in chunks the cloud takes in one call; the last one's row gives the first token.
    const std::span<const int32_t> prompt(r.tokens);
    int32_t t = -1;
    for (size_t at = 0; at < prompt.size(); at += 512) {
        const auto chunk = prompt.subspan(at, std::min<size_t>(512, prompt.size() - at));
        const bool last = at + chunk.size() == prompt.size();
        t = cloud.call(chunk, residual_of(ctx, chunk), E, cfg_.wire, last, V, &cloud_seconds);
        sent += static_cast<int64_t>(chunk.size());
    }
    while (true) {
        if (!p.ignore_eos && tok_.is_eog(t)) {
            r.eog = true;
            break;
        }
        if (!r.on_token(t) || r.left() <= 0 || static_cast<int>(r.tokens.size()) >= need) break;
        const std::span<const int32_t> one(&r.tokens.back(), 1);
        t = cloud.call(one, residual_of(ctx, one), E, cfg_.wire, true, V, &cloud_seconds);
        ++sent;
    }
    std::lock_guard lk(mu_);
    split_tokens_ += sent;
    split_cloud_seconds_ += cloud_seconds;
}

void EdgeGenerator::alone(Slot& slot, Run& r) {
    // The context may hold drafts past what was taken: back to the last token taken.
    model::Context& ctx = *slot.ctx;
    ctx.truncate(std::min(ctx.n_past(), static_cast<int>(r.tokens.size()) - 1));
    infer::Sampler sampler(r.job.params.sampling);
    while (r.left() > 0 && static_cast<int>(r.tokens.size()) < ctx.n_ctx()) {
        const std::span<const int32_t> feed(r.tokens.data() + ctx.n_past(),
                                            r.tokens.size() - static_cast<size_t>(ctx.n_past()));
        const int32_t t = sampler.sample(logits_of(ctx, feed));
        if (!r.job.params.ignore_eos && tok_.is_eog(t)) {
            r.eog = true;
            return;
        }
        if (!r.on_token(t)) return;
    }
}

infer::EngineStats EdgeGenerator::stats() {
    std::lock_guard lk(mu_);
    infer::EngineStats s = stats_;
    s.running = static_cast<int>(running_.size());
    s.waiting = static_cast<int>(waiting_.size());
    if (rate_.size() >= 2 && rate_.back().first > rate_.front().first)
        s.tokens_per_s = static_cast<double>(rate_.back().second - rate_.front().second) /
                         (rate_.back().first - rate_.front().first);
    return s;
}

std::string EdgeGenerator::extra_metrics() {
    LinkStats l;
    for (const auto& s : slots_) {
        const LinkStats x = s->link->stats();
        l.calls += x.calls;
        l.failures += x.failures;
        l.bytes_up += x.bytes_up;
        l.bytes_down += x.bytes_down;
        l.seconds += x.seconds;
        l.simulated_seconds += x.simulated_seconds;
    }
    infer::SpeculativeStats sp;
    int64_t fallbacks = 0, deferred = 0, own = 0, requests_deferred = 0, split_rows = 0;
    double split_cloud_seconds = 0;
    {
        std::lock_guard lk(mu_);
        sp = spec_;
        fallbacks = fallbacks_;
        deferred = deferred_;
        own = edge_tokens_;
        requests_deferred = requests_deferred_;
        split_rows = split_tokens_;
        split_cloud_seconds = split_cloud_seconds_;
    }
    std::ostringstream o;
    prometheus_metric(o, "edge_link_calls_total", "counter", "Calls to the cloud",
                      static_cast<double>(l.calls));
    prometheus_metric(o, "edge_link_failures_total", "counter", "Calls to the cloud that failed",
                      static_cast<double>(l.failures));
    prometheus_metric(o, "edge_link_bytes_up_total", "counter",
                      "Bytes of request bodies sent to the cloud", static_cast<double>(l.bytes_up));
    prometheus_metric(o, "edge_link_bytes_down_total", "counter", "Bytes of answers from the cloud",
                      static_cast<double>(l.bytes_down));
    prometheus_metric(o, "edge_link_seconds_total", "counter",
                      "Wall time of the calls to the cloud", l.seconds);
    prometheus_metric(o, "edge_link_simulated_seconds_total", "counter",
                      "Time the link simulator added", l.simulated_seconds);
    prometheus_metric(o, "edge_verify_rounds_total", "counter",
                      "Speculative rounds verified by the cloud", static_cast<double>(sp.rounds));
    prometheus_metric(o, "edge_drafted_tokens_total", "counter", "Tokens drafted at the edge",
                      static_cast<double>(sp.drafted));
    prometheus_metric(o, "edge_accepted_tokens_total", "counter", "Drafted tokens the cloud kept",
                      static_cast<double>(sp.accepted));
    prometheus_metric(o, "edge_draft_seconds_total", "counter", "Time spent drafting",
                      sp.draft_seconds);
    prometheus_metric(o, "edge_fallbacks_total", "counter",
                      "Requests finished by the edge alone (cloud failed)",
                      static_cast<double>(fallbacks));
    prometheus_metric(o, "edge_split_rows_total", "counter",
                      "Split: residual rows sent to the cloud (one per token)",
                      static_cast<double>(split_rows));
    prometheus_metric(o, "edge_split_cloud_seconds_total", "counter",
                      "Split: the cloud's own compute time; the link's added latency is "
                      "edge_link_seconds_total minus this",
                      split_cloud_seconds);
    const infer::BatcherStats b = batcher_.stats();
    prometheus_metric(o, "edge_batches_total", "counter",
                      "Forward passes over the slots' waiting rows (cascade, split)",
                      static_cast<double>(b.passes));
    prometheus_metric(o, "edge_batched_calls_total", "counter",
                      "The slots' calls those passes ran (divided by the passes: calls per pass)",
                      static_cast<double>(b.calls));
    prometheus_metric(o, "edge_cascade_cloud_tokens_total", "counter",
                      "Cascade: tokens the cloud decided (deferred)",
                      static_cast<double>(deferred));
    prometheus_metric(o, "edge_cascade_edge_tokens_total", "counter",
                      "Cascade: tokens the edge decided itself", static_cast<double>(own));
    prometheus_metric(o, "edge_cascade_requests_deferred_total", "counter",
                      "Cascade (--defer request): requests the cloud finished",
                      static_cast<double>(requests_deferred));
    return o.str();
}

}  // namespace syslm::serve
