#include "tune/serve_search.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <ostream>
#include <tuple>

#include "core/error.hpp"
#include "tune/confirmation.hpp"

namespace syslm::tune {
namespace {

struct Candidate {
    ServeSettings s;
    int threads;
    auto tie() const { return std::tie(s.parallel, s.token_budget, s.page_size, s.kv_pages, s.ctx,
                                       s.cache_type, threads); }
    bool operator<(const Candidate& o) const { return tie() < o.tie(); }
};

// One knob: its values and how a candidate takes one.
struct Knob {
    const char* name;
    std::vector<int64_t> values;
    std::function<void(Candidate&, int64_t)> set;
    std::function<int64_t(const Candidate&)> get;
};

std::vector<Knob> knobs(const ServeSearchOptions& o) {
    std::vector<int64_t> threads;
    for (int t = 1; t < o.max_threads; t *= 2) threads.push_back(t);
    threads.push_back(o.max_threads);
    std::vector<int64_t> parallel;  // more slots than streams never fill
    for (int p : {o.streams / 4, o.streams / 2, o.streams})
        if (p >= 1 && (parallel.empty() || parallel.back() != p)) parallel.push_back(p);
    return {
        {"threads", threads, [](Candidate& c, int64_t v) { c.threads = static_cast<int>(v); },
         [](const Candidate& c) { return int64_t{c.threads}; }},
        {"token_budget", {64, 128, 256, 512, 1024, 2048},
         [](Candidate& c, int64_t v) { c.s.token_budget = v; },
         [](const Candidate& c) { return c.s.token_budget; }},
        {"parallel", parallel, [](Candidate& c, int64_t v) { c.s.parallel = static_cast<int>(v); },
         [](const Candidate& c) { return int64_t{c.s.parallel}; }},
        {"page_size", {8, 16, 32, 64},
         [](Candidate& c, int64_t v) { c.s.page_size = static_cast<int>(v); },
         [](const Candidate& c) { return int64_t{c.s.page_size}; }},
        {"cache_type (0 f16, 1 f32)", {0, 1},
         [](Candidate& c, int64_t v) { c.s.cache_type = v ? "f32" : "f16"; },
         [](const Candidate& c) { return int64_t{c.s.cache_type == "f32"}; }},
    };
}

std::string describe(const Candidate& c) {
    return cat("threads ", c.threads, ", parallel ", c.s.parallel, ", token budget ",
               c.s.token_budget, ", page ", c.s.page_size, ", KV ", c.s.cache_type);
}

bool meets_limits(const ServeMeasurement& m, const ServeSearchOptions& o) {
    return m.ttft_p99 <= o.max_ttft_p99 && m.itl_p99 <= o.max_itl_p99;
}

// The default and the best timed alternately: their medians (and the worst run's latency
// tails) replace the search's single timings, and the best stays only if it still wins.
void confirm(ServeSearchResult& r, const Candidate& base, const Candidate& best,
             const ServeMeasureFn& measure, const ServeSearchOptions& o,
             const std::function<void(const std::string&)>& say) {
    std::vector<ServeTrial> runs[2];
    for (int rep = 0; rep < o.confirm_reps; ++rep)
        for (int i = 0; i < 2; ++i) {
            const Candidate& c = i == 0 ? base : best;
            ServeTrial t;
            t.settings = c.s;
            t.threads = c.threads;
            try {
                t.m = measure(c.s, c.threads, true);
            } catch (const Error& e) {
                t.error = e.what();
            }
            runs[i].push_back(t);
        }
    for (int i = 0; i < 2; ++i) {
        std::vector<double> ts, ttft, itl;
        for (const ServeTrial& t : runs[i]) {
            if (!t.error.empty()) continue;
            ts.push_back(t.m.tokens_per_s);
            ttft.push_back(t.m.ttft_p99);
            itl.push_back(t.m.itl_p99);
        }
        if (ts.empty()) continue;
        ServeTrial& out = i == 0 ? r.baseline : r.best;
        out.m.tokens_per_s = median(ts);
        out.m.ttft_p99 = *std::max_element(ttft.begin(), ttft.end());
        out.m.itl_p99 = *std::max_element(itl.begin(), itl.end());
        out.meets_limits = meets_limits(out.m, o);
    }
    if (!tuned_wins(r.baseline.m.tokens_per_s, r.best.m.tokens_per_s, r.best.meets_limits,
                    o.confirm_reps, say))
        r.best = r.baseline;
}

}  // namespace

ServeSearchResult search_serving(const ServeMeasureFn& measure, const ServeSearchOptions& o) {
    SYSLM_CHECK(o.streams >= 1 && o.max_threads >= 1, "serve search: streams and threads >= 1");
    ServeSearchResult r;
    std::map<Candidate, ServeTrial> seen;
    const std::function<void(const std::string&)> say = [&](const std::string& line) {
        if (o.log) *o.log << "tune: serve: " << line << std::endl;
    };
    auto trial = [&](const Candidate& c) -> const ServeTrial& {
        if (auto it = seen.find(c); it != seen.end()) return it->second;
        ServeTrial t;
        t.settings = c.s;
        t.threads = c.threads;
        try {
            t.m = measure(c.s, c.threads, false);
            t.meets_limits = meets_limits(t.m, o);
            say(cat(describe(c), ": ", t.m.tokens_per_s, " tok/s, TTFT p99 ", t.m.ttft_p99,
                    " s, ITL p99 ", t.m.itl_p99, " s", t.meets_limits ? "" : " (over a limit)"));
        } catch (const Error& e) {
            t.error = e.what();
            say(cat(describe(c), ": ", t.error));
        }
        r.trials.push_back(t);
        return seen.emplace(c, t).first->second;
    };

    const Candidate base{ServeSettings{}, o.max_threads};
    Candidate best = base;
    double best_ts = trial(base).meets_limits ? trial(base).m.tokens_per_s : 0;
    const std::vector<Knob> ks = knobs(o);
    for (int pass = 0; pass < o.passes; ++pass) {
        bool moved = false;
        for (const Knob& k : ks) {
            const Candidate from = best;
            for (int64_t v : k.values) {
                if (v == k.get(from)) continue;
                Candidate c = from;
                k.set(c, v);
                const ServeTrial& t = trial(c);
                if (t.error.empty() && t.meets_limits && t.m.tokens_per_s > best_ts * o.min_gain) {
                    best = c;
                    best_ts = t.m.tokens_per_s;
                    moved = true;
                }
            }
        }
        if (!moved) break;
    }

    // The default and the best timed alternately; their medians are the reported figures.
    r.baseline = seen.at(base);
    r.best = seen.at(best);
    if (best < base || base < best) confirm(r, base, best, measure, o, say);
    return r;
}

}  // namespace syslm::tune
