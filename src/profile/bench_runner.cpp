#include "profile/bench_runner.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.hpp"
#include "core/profiler.hpp"

namespace syslm::profile {
namespace {

void mean_stddev(const std::vector<double>& v, double& mean, double& sd) {
    mean = 0;
    for (double x : v) mean += x;
    mean /= static_cast<double>(v.size());
    sd = 0;
    if (v.size() < 2) return;
    for (double x : v) sd += (x - mean) * (x - mean);
    sd = std::sqrt(sd / static_cast<double>(v.size() - 1));
}

}  // namespace

std::string BenchTest::name() const {
    const std::string test =
        n_prompt > 0 ? "pp" + std::to_string(n_prompt) : "tg" + std::to_string(n_gen);
    return n_depth > 0 ? test + " @ d" + std::to_string(n_depth) : test;
}

BenchResult run_bench(const model::Model& m, const BenchTest& test, const BenchOptions& opt) {
    SYSLM_CHECK((test.n_prompt > 0) != (test.n_gen > 0),
                "bench: a test is either prompt processing or generation");
    SYSLM_CHECK(opt.reps > 0, "bench: repetitions must be positive");
    SYSLM_CHECK(test.n_depth >= 0, "bench: negative depth ", test.n_depth);
    const int n_vocab = m.hparams().n_vocab;
    std::mt19937_64 rng(opt.seed);
    std::uniform_int_distribution<int32_t> pick(0, n_vocab - 1);

    const int n_batch = std::min(opt.n_batch, std::max({test.n_prompt, test.n_depth, 1}));
    model::Context ctx(m, std::max(test.n_depth + test.n_tokens(), 1), opt.threads, n_batch,
                       opt.kv_types);
    std::vector<int32_t> tokens(static_cast<size_t>(std::max(test.n_prompt, 1)));

    // The depth's positions: prefilled once, then kept by rolling the test's positions back,
    // where the cache can (rings of windowed layers keep only a short rollback).
    const bool keep_depth = ctx.kv_cache().max_rollback() >= test.n_tokens();
    bool filled = false;
    auto fill_depth = [&] {
        if (filled && keep_depth) {
            ctx.truncate(test.n_depth);
            return;
        }
        ctx.reset();
        if (test.n_depth == 0) return;
        std::vector<int32_t> depth(static_cast<size_t>(test.n_depth));
        for (int32_t& t : depth) t = pick(rng);
        ctx.forward(depth);  // in batches of n_batch
        filled = true;
    };

    // Returns the seconds of one run.
    auto run = [&] {
        fill_depth();
        if (test.n_prompt > 0) {
            for (int32_t& t : tokens) t = pick(rng);
            const int64_t t0 = profiler::now_ns();
            ctx.forward(tokens);
            return profiler::now_ns() - t0;
        }
        int32_t tok = pick(rng);
        const int64_t t0 = profiler::now_ns();
        for (int i = 0; i < test.n_gen; ++i) {
            const std::span<const int32_t> one(&tok, 1);
            ctx.forward(one);
            tok = pick(rng);
        }
        return profiler::now_ns() - t0;
    };

    run();  // warm-up: pages the weights in, settles the clocks
    BenchResult r;
    r.test = test;
    for (int rep = 0; rep < opt.reps; ++rep) {
        if (opt.before_rep) opt.before_rep(rep);
        const double ns = static_cast<double>(run());
        if (opt.after_rep) opt.after_rep(rep);
        r.samples_ns.push_back(ns);
        r.samples_ts.push_back(test.n_tokens() / (ns * 1e-9));
    }
    mean_stddev(r.samples_ns, r.avg_ns, r.stddev_ns);
    mean_stddev(r.samples_ts, r.avg_ts, r.stddev_ts);
    return r;
}

}  // namespace syslm::profile
