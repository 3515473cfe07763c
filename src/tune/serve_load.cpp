#include "tune/serve_load.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "core/error.hpp"

namespace syslm::tune {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

// The q-quantile (nearest rank) of unsorted samples; 0 when there are none.
double quantile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
    return v[std::min(i, v.size() - 1)];
}

}  // namespace

std::vector<std::vector<int32_t>> cut_prompts(const std::vector<int32_t>& text, int count,
                                             int max_len) {
    SYSLM_CHECK(max_len >= 8, "serve load: prompts of at most ", max_len, " tokens are too short");
    SYSLM_CHECK(text.size() > static_cast<size_t>(max_len), "serve load: the held-out text has ",
                text.size(), " tokens, fewer than one prompt of ", max_len);
    std::vector<std::vector<int32_t>> out;
    const size_t span = text.size() - static_cast<size_t>(max_len);
    for (int i = 0; i < count; ++i) {
        const int len = std::max(4, max_len >> (3 - i % 4));  // max/8, max/4, max/2, max
        const size_t at = (static_cast<size_t>(i) * 7919 * 131) % (span + 1);
        out.emplace_back(text.begin() + static_cast<std::ptrdiff_t>(at),
                         text.begin() + static_cast<std::ptrdiff_t>(at) + len);
    }
    return out;
}

namespace {

// N closed-loop streams on one engine: each sends its next request when the last one ended.
class ClosedLoop {
public:
    ClosedLoop(std::shared_ptr<const model::Model> model, const tokenizer::Tokenizer& tok,
               const infer::EngineConfig& cfg, const ServeLoad& load)
        : load_(load), engine_(std::move(model), tok, cfg),
          streams_(static_cast<size_t>(load.streams)) {
        params_.max_tokens = load.max_tokens;
        params_.ignore_eos = true;
        params_.sampling.temperature = 0;  // greedy: every setting generates the same tokens
    }

    ServeMeasurement run() {
        const auto t0 = Clock::now();
        {
            std::unique_lock<std::mutex> lock(mu_);
            for (int s = 0; s < load_.streams; ++s) submit(s);
            while (active_ > 0) {
                cv_.wait(lock, [&] { return !finished_.empty(); });
                SYSLM_CHECK(failure_.empty(), "serve load: a request failed: ", failure_);
                for (int s : std::exchange(finished_, {})) {
                    active_--;
                    if (streams_[static_cast<size_t>(s)].sent < load_.requests_per_stream) submit(s);
                }
            }
        }
        ServeMeasurement m;
        m.seconds = seconds_between(t0, Clock::now());
        m.generated = generated_;
        m.tokens_per_s = static_cast<double>(generated_) / m.seconds;
        m.ttft_p50 = quantile(ttft_, 0.5);
        m.ttft_p99 = quantile(ttft_, 0.99);
        m.itl_p50 = quantile(itl_, 0.5);
        m.itl_p99 = quantile(itl_, 0.99);
        engine_.drain();
        return m;
    }

private:
    struct Stream {
        int sent = 0;
        Clock::time_point submitted, last;
        bool first = true;
    };

    void submit(int s) {  // under mu_
        Stream& st = streams_[static_cast<size_t>(s)];
        st.sent++;
        st.first = true;
        st.submitted = Clock::now();
        const std::vector<int32_t>& prompt = load_.prompts[next_prompt_++ % load_.prompts.size()];
        infer::Refusal refused;
        int64_t id = 0;
        const bool ok = engine_.submit(
            prompt, params_, [this, s](const infer::Event& e) { return on_event(s, e); }, &id,
            &refused);
        SYSLM_CHECK(ok, "serve load: the engine refused a request: ", refused.message);
        active_++;
    }

    // The engine's thread: a token's arrival time (TTFT or the gap since the last), or the end.
    bool on_event(int s, const infer::Event& e) {
        const auto now = Clock::now();
        std::lock_guard<std::mutex> lock(mu_);
        Stream& me = streams_[static_cast<size_t>(s)];
        if (e.done) {
            if (e.finish_reason == infer::FinishReason::Error ||
                e.finish_reason == infer::FinishReason::Cancelled)
                failure_ = e.error.message.empty() ? finish_reason_name(e.finish_reason)
                                                   : e.error.message;
            generated_ += e.n_generated;
            finished_.push_back(s);
            cv_.notify_one();
            return true;
        }
        (me.first ? ttft_ : itl_).push_back(seconds_between(me.first ? me.submitted : me.last, now));
        me.first = false;
        me.last = now;
        return true;
    }

    const ServeLoad& load_;
    infer::Engine engine_;
    infer::GenerationParams params_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<Stream> streams_;
    std::vector<int> finished_;  // streams whose request ended, to send their next one
    std::vector<double> ttft_, itl_;
    std::string failure_;
    int64_t generated_ = 0;
    int active_ = 0;
    size_t next_prompt_ = 0;
};

}  // namespace

ServeMeasurement measure_serving(std::shared_ptr<const model::Model> model,
                                 const tokenizer::Tokenizer& tok, const infer::EngineConfig& cfg,
                                 const ServeLoad& load) {
    SYSLM_CHECK(load.streams >= 1 && load.requests_per_stream >= 1 && !load.prompts.empty(),
                "serve load: needs streams, requests and prompts");
    return ClosedLoop(std::move(model), tok, cfg, load).run();
}

}  // namespace syslm::tune
