// The measurements of `syslm bench`, with llama-bench's method: prompt processing "pp<n>" is one
// batch of n random tokens; text generation "tg<n>" is n single-token decode steps; both from an
// empty cache, or after `n_depth` random tokens already cached ("tg128 @ d4096", llama-bench
// -d: the depth is prefilled untimed). One untimed warm-up run precedes the timed repetitions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/transformer.hpp"

namespace syslm::profile {

struct BenchTest {
    int n_prompt = 0;          // pp test when > 0
    int n_gen = 0;             // tg test when > 0 (one of the two)
    int n_depth = 0;           // positions cached before the test
    std::string name() const;  // "pp512" / "tg128" / "tg128 @ d4096"
    int n_tokens() const { return n_prompt + n_gen; }
};

struct BenchOptions {
    int threads = 2;
    int reps = 5;
    int n_batch = 2048;  // prompt tokens per forward call
    model::KvTypes kv_types;
    uint64_t seed = 1234;
    // Called around each timed repetition (rep 0 first), e.g. to switch the profiler on.
    std::function<void(int rep)> before_rep, after_rep;
};

struct BenchResult {
    BenchTest test;
    std::vector<double> samples_ns;  // one per repetition
    std::vector<double> samples_ts;  // tokens/s of each repetition
    double avg_ns = 0, stddev_ns = 0;
    double avg_ts = 0, stddev_ts = 0;  // sample standard deviation, as llama-bench
};

BenchResult run_bench(const model::Model& m, const BenchTest& test, const BenchOptions& opt);

}  // namespace syslm::profile
