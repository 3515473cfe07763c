// How far two runs of the same training may drift apart when they differ only in the order of
// their floating-point sums: one process against data-, tensor- or pipeline-parallel ranks, a
// run resumed at another world size, ZeRO's reduce-scatter against an all-reduce, on any ISA
// tier and any CPU.
//
// The derivation. Summing n terms in another order changes the result by about sqrt(n) * u
// relative, u = 2^-24 the unit roundoff of f32: the n - 1 additions round independently, to
// either side, so their errors add up like a random walk (Higham, "Accuracy and Stability of
// Numerical Algorithms", 2nd ed., section 4.2; the worst case, n * u, needs adversarial data).
// Every quantity of a training step is such a sum over at most n terms, where n is the longest
// reduction of the model: the softmax denominator over the vocabulary (32000 for the tests'
// models) is longer than any hidden size or batch. So one step's loss and gradients differ by
// ~sqrt(n) * u relative between the two runs. AdamW divides by sqrt(v), which turns a relative
// change of a gradient into the same relative change of its update, and each step's weights
// carry the differences of all the steps before: after s steps the runs differ by about
// s * sqrt(n) * u relative, in the loss and in how far the weights have moved.
//
// Near zero AdamW amplifies: a coordinate whose gradient is within rounding of zero moves by up
// to a full step of lr, one way or the other, as rounding decides. Such coordinates are few, so
// the weights are compared in the L2 norm, relative to how far training moved them: a largest
// single difference says nothing about the arithmetic (it measured 1.0e-5 to 2.0e-5 after 20
// steps of tensor parallelism at lr 3e-3 on three ISA tiers), while a broken reduction (a missing
// all-reduce, a rank's gradient counted twice) moves the weights by O(1) relative.
//
// The bound is a factor 2 above the estimate (in norm: the loss and the weights are each a sum of
// such per-step differences that do not all have the same sign, so the estimate is already an
// upper end); measured relative drifts sit 10x to 100x below it.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace syslm::testing {

inline constexpr double kUnitRoundoff = 0x1p-24;  // f32

// Relative difference two runs may have after `steps` steps (the loss of step s: s + 1 steps of
// arithmetic) whose longest reduction has `longest_sum` terms.
inline double rounding_drift_bound(int steps, int64_t longest_sum) {
    return 2.0 * steps * std::sqrt(static_cast<double>(longest_sum)) * kUnitRoundoff;
}

// ||a - b|| / ||reference - start|| over pairs of aligned parameter vectors: how far two runs
// disagree, relative to how far training moved the weights.
class WeightDrift {
public:
    void add(const float* a, const float* b, const float* reference, const float* start,
             size_t n) {
        for (size_t i = 0; i < n; ++i) {
            const double d = static_cast<double>(a[i]) - b[i];
            const double moved = static_cast<double>(reference[i]) - start[i];
            diff2_ += d * d;
            moved2_ += moved * moved;
        }
    }
    double relative() const { return moved2_ > 0 ? std::sqrt(diff2_ / moved2_) : INFINITY; }

private:
    double diff2_ = 0, moved2_ = 0;
};

// The compressed run keeps at least half of the progress the exact run made: a correct
// compression with error feedback reaches the exact run's loss to within a few percent of that
// progress (bench/parallel/bench_grad_compress.py measures it on real text), while the gap of one
// short run is chaotic (the same int8 case measured 0.13% to 1.0% of the loss on different ISA
// tiers and CPUs), so nothing finer is a property of the arithmetic.
inline void expect_follows(const std::vector<double>& compressed, const std::vector<double>& exact,
                    const std::string& what) {
    const double progress = exact.front() - exact.back();
    ASSERT_GT(progress, 0.0) << what;
    EXPECT_LE(std::fabs(compressed.back() - exact.back()), progress / 2)
        << what << ": final loss " << compressed.back() << ", exact " << exact.back()
        << " (from " << exact.front() << ")";
}

}  // namespace syslm::testing
