// The tuner's serve goal: the best file served at the defaults, then the runtime search
// (tuner_phases.hpp).
#include "core/mapped_file.hpp"
#include "tune/tuner_phases.hpp"

namespace syslm::tune::detail {

Tuner::ServeRun Tuner::serve_run() const {
    const model::Model input(o_.model);
    ServeRun run{
        tokenizer::Tokenizer::from_gguf(input.file()), {}, ThreadPool::resolve(o_.threads)};
    run.load.streams = o_.streams;
    run.load.requests_per_stream = o_.serve_requests;
    run.load.max_tokens = o_.serve_max_tokens;
    run.load.prompts = cut_prompts(run.tok.encode(read_whole_file(o_.eval), true, false),
                                   4 * o_.streams, o_.serve_prompt_tokens);
    say(cat("serve: ", o_.streams, " streams x ", o_.serve_requests, " requests of ",
            o_.serve_max_tokens, " tokens, prompts up to ", o_.serve_prompt_tokens, " tokens"));
    return run;
}

// A served point of a file's plan with these settings: from the cache unless `again`.
Point Tuner::serve_point(const ServeRun& run, const Point& file,
                         std::shared_ptr<const model::Model> m, const ServeSettings& s, int threads,
                         bool again, const std::string& label) const {
    Point p = file;
    p.label = label;
    p.plan.threads = threads;
    p.plan.serve = s;
    p.streams = o_.streams;
    if (!again)
        if (const Point* c = cache_.find(p.plan.key())) return *c;
    infer::EngineConfig ec;
    ec.threads = threads;
    ec.parallel = s.parallel;
    ec.token_budget = s.token_budget;
    ec.page_size = s.page_size;
    ec.n_pages = s.kv_pages;
    ec.n_ctx = s.ctx;
    ec.kv_types = model::kv_types_from_name(s.cache_type);
    const ServeMeasurement sm = measure_serving(std::move(m), run.tok, ec, run.load);
    p.serve_ts = sm.tokens_per_s;
    p.ttft_p99 = sm.ttft_p99;
    p.itl_p99 = sm.itl_p99;
    return p;
}

// The fastest-decoding files within the KL limit, served at `syslm serve`'s defaults; the
// one serving fastest within the latency limits, and its model.
std::pair<Point, std::shared_ptr<const model::Model>> Tuner::best_served_file(const ServeRun& run) {
    std::vector<Point> files;
    for (const Point& p : cache_.points())
        if (p.streams == 0 && p.kl <= o_.max_kl) files.push_back(p);
    SYSLM_CHECK(!files.empty(), "tune: no file is within KL ", o_.max_kl, " to serve");
    std::sort(files.begin(), files.end(),
              [](const Point& a, const Point& b) { return a.decode_ts > b.decode_ts; });
    if (files.size() > static_cast<size_t>(o_.serve_files)) files.resize(o_.serve_files);
    std::optional<Point> best_file;
    std::shared_ptr<const model::Model> best_model;
    double best_ts = -1;
    for (const Point& f : files) {
        auto m = std::make_shared<const model::Model>(file_of(f.plan));
        const Point p = serve_point(run, f, m, ServeSettings{}, run.max_threads, false,
                                    f.label + " @ serve defaults");
        if (!cache_.find(p.plan.key())) cache_.add(p);
        say(cat(p.label, ": ", p.serve_ts, " tok/s, TTFT p99 ", p.ttft_p99, " s"));
        if (within_limits(p) && p.serve_ts > best_ts) {
            best_ts = p.serve_ts;
            best_file = f;
            best_model = m;
        }
    }
    SYSLM_CHECK(best_file, "tune: no file within KL ", o_.max_kl,
                " meets the latency limits "
                "at the default serve settings");
    return {*best_file, best_model};
}

// The serve goal's runtime half: the best file at the defaults gets the runtime search;
// every trial is a point (cached: a resumed tune does not repeat it) and the default and
// tuned figures are confirmed by alternating timings.
void Tuner::serve_phase(TuneResult& r) {
    const ServeRun run = serve_run();
    const auto best = best_served_file(run);
    const Point& f = best.first;
    const std::shared_ptr<const model::Model>& model = best.second;
    ServeSearchOptions so;
    so.streams = o_.streams;
    so.max_threads = run.max_threads;
    so.max_ttft_p99 = o_.max_ttft_p99;
    so.max_itl_p99 = o_.max_itl_p99;
    so.log = o_.log;
    auto label = [&](const ServeSettings& s, int threads) {
        return s == ServeSettings{} && threads == run.max_threads
                   ? f.label + " @ serve defaults"
                   : cat(f.label, " @ serve t", threads, " p", s.parallel, " b", s.token_budget,
                         " pg", s.page_size, " ", s.cache_type);
    };
    const ServeSearchResult sr = search_serving(
        [&](const ServeSettings& s, int threads, bool again) {
            const Point p = serve_point(run, f, model, s, threads, again, label(s, threads));
            if (!again && !cache_.find(p.plan.key())) cache_.add(p);
            ServeMeasurement m;
            m.tokens_per_s = p.serve_ts;
            m.ttft_p99 = p.ttft_p99;
            m.itl_p99 = p.itl_p99;
            return m;
        },
        so);
    // The confirmed figures replace the search's first timings (a later line wins).
    for (const ServeTrial* t : {&sr.baseline, &sr.best}) {
        Point p = serve_point(run, f, model, t->settings, t->threads, false,
                              label(t->settings, t->threads));
        p.serve_ts = t->m.tokens_per_s;
        p.ttft_p99 = t->m.ttft_p99;
        p.itl_p99 = t->m.itl_p99;
        cache_.add(p);
        (t == &sr.baseline ? r.serve_default : r.serve_tuned) = p;
    }
    serve_before_after(run, f, model, r);
}

void Tuner::serve_before_after(const ServeRun& run, const Point& file,
                               const std::shared_ptr<const model::Model>& m, TuneResult& r) {
    const auto input = std::make_shared<const model::Model>(o_.model);
    Point in;  // an empty plan: the input file as it is
    in.file_bytes = std::filesystem::file_size(o_.model);
    const Plan& tuned = r.serve_tuned->plan;
    std::vector<double> ts_in, ts_plan;
    Point p_in, p_plan;
    const int reps = ServeSearchOptions{}.confirm_reps;
    for (int rep = 0; rep < reps; ++rep) {
        p_in = serve_point(run, in, input, ServeSettings{}, run.max_threads, true,
                           "input @ serve defaults");
        p_plan = serve_point(run, file, m, *tuned.serve, tuned.threads, true, "tuned plan");
        ts_in.push_back(p_in.serve_ts);
        ts_plan.push_back(p_plan.serve_ts);
    }
    p_in.serve_ts = median(ts_in);
    p_plan.serve_ts = median(ts_plan);
    cache_.add(p_in);
    say(cat("before and after (medians of ", reps,
            " alternating runs): the input at serve's "
            "defaults ",
            p_in.serve_ts, " tok/s, the tuned plan ", p_plan.serve_ts, " tok/s (",
            p_plan.serve_ts / std::max(1e-9, p_in.serve_ts), "x)"));
    r.serve_input = p_in;
    r.serve_plan = p_plan;
}

}  // namespace syslm::tune::detail
