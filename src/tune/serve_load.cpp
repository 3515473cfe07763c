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

ServeMeasurement measure_serving(std::shared_ptr<const model::Model> model,
                                 const tokenizer::Tokenizer& tok, const infer::EngineConfig& cfg,
                                 const ServeLoad& load) {
    SYSLM_CHECK(load.streams >= 1 && load.requests_per_stream >= 1 && !load.prompts.empty(),
                "serve load: needs streams, requests and prompts");
    infer::Engine engine(std::move(model), tok, cfg);
    infer::GenerationParams params;
    params.max_tokens = load.max_tokens;
    params.ignore_eos = true;
    params.sampling.temperature = 0;  // greedy: every setting generates the same tokens

    struct Stream {
        int sent = 0;
        Clock::time_point submitted, last;
        bool first = true;
    };
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Stream> streams(static_cast<size_t>(load.streams));
    std::vector<int> finished;  // streams whose request ended, to send their next one
    std::vector<double> ttft, itl;
    std::string failure;
    int64_t generated = 0;
    int active = 0;
    size_t next_prompt = 0;

    auto submit = [&](int s) {  // under mu
        Stream& st = streams[static_cast<size_t>(s)];
        st.sent++;
        st.first = true;
        st.submitted = Clock::now();
        const std::vector<int32_t>& prompt = load.prompts[next_prompt++ % load.prompts.size()];
        infer::Refusal refused;
        int64_t id = 0;
        const bool ok = engine.submit(
            prompt, params,
            [&, s](const infer::Event& e) {
                const auto now = Clock::now();
                std::lock_guard<std::mutex> lock(mu);
                Stream& me = streams[static_cast<size_t>(s)];
                if (e.done) {
                    if (e.finish_reason == infer::FinishReason::Error ||
                        e.finish_reason == infer::FinishReason::Cancelled)
                        failure = e.error.message.empty() ? finish_reason_name(e.finish_reason)
                                                          : e.error.message;
                    generated += e.n_generated;
                    finished.push_back(s);
                    cv.notify_one();
                    return true;
                }
                (me.first ? ttft : itl).push_back(seconds_between(me.first ? me.submitted : me.last, now));
                me.first = false;
                me.last = now;
                return true;
            },
            &id, &refused);
        SYSLM_CHECK(ok, "serve load: the engine refused a request: ", refused.message);
        active++;
    };

    const auto t0 = Clock::now();
    {
        std::unique_lock<std::mutex> lock(mu);
        for (int s = 0; s < load.streams; ++s) submit(s);
        while (active > 0) {
            cv.wait(lock, [&] { return !finished.empty(); });
            SYSLM_CHECK(failure.empty(), "serve load: a request failed: ", failure);
            for (int s : std::exchange(finished, {})) {
                active--;
                if (streams[static_cast<size_t>(s)].sent < load.requests_per_stream) submit(s);
            }
        }
    }
    ServeMeasurement m;
    m.seconds = seconds_between(t0, Clock::now());
    m.generated = generated;
    m.tokens_per_s = static_cast<double>(generated) / m.seconds;
    m.ttft_p50 = quantile(ttft, 0.5);
    m.ttft_p99 = quantile(ttft, 0.99);
    m.itl_p50 = quantile(itl, 0.5);
    m.itl_p99 = quantile(itl, 0.99);
    engine.drain();
    return m;
}

}  // namespace syslm::tune
