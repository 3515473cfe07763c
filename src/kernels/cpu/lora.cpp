#include "kernels/cpu/lora.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/isa.hpp"

namespace syslm::kernels {

void lora_update(const float* x, int64_t n_in, float* y, int64_t n_out,
                 std::span<const LoraSegment> segments, float* mid, ThreadPool& pool) {
    if (segments.empty()) return;
    const LoraKernels& v = attention_kernels(active_isa()).lora;
    // Items are (segment, row) pairs, a segment's rows in a run: item0[s] .. item0[s + 1], their
    // A x at mid + r x item. The index vectors are the calling thread's, reused from call to call
    // (decode calls this for every adapted matrix of every step); the pool's threads read them
    // through these references.
    thread_local std::vector<int64_t> item0_storage, at_storage;
    thread_local std::vector<uint8_t> seen_storage;
    std::vector<int64_t>& item0 = item0_storage;
    std::vector<int64_t>& at = at_storage;
    item0.assign(1, 0);
    at.assign(1, 0);
    int64_t max_row = -1;
    for (const LoraSegment& g : segments) {
        item0.push_back(item0.back() + g.n_rows);
        for (int64_t j = 0; j < g.n_rows; ++j) max_row = std::max(max_row, g.rows[j]);
    }
    for (const LoraSegment& g : segments) at.push_back(at.back() + g.r * g.n_rows);
    // Rows in one segment each (the usual case: a request has one adapter): one pass on the
    // pool, each thread taking whole items, so a segment's rows run one after the other on one
    // thread and its adapter comes from memory once, then from the cache.
    std::vector<uint8_t>& seen = seen_storage;
    seen.assign(static_cast<size_t>(max_row + 1), 0);
    bool disjoint = true;
    for (const LoraSegment& g : segments)
        for (int64_t j = 0; j < g.n_rows && disjoint; ++j)
            disjoint = !std::exchange(seen[static_cast<size_t>(g.rows[j])], uint8_t{1});
    pool.parallel_for(item0.back(), [&](int64_t begin, int64_t end, int) {
        size_t s = static_cast<size_t>(std::upper_bound(item0.begin(), item0.end(), begin) -
                                       item0.begin() - 1);
        for (int64_t item = begin; item < end; ++item) {
            while (item >= item0[s + 1]) ++s;
            const LoraSegment& g = segments[s];
            const int64_t j = item - item0[s], row = g.rows[j];
            float* m = mid + at[s] + j * g.r;
            v.down[g.f16](g.a, g.r, static_cast<int>(n_in), x + row * n_in, g.scale, m);
            if (disjoint)
                v.axpy_rows[g.f16](y + row * n_out, m, g.bt, n_out, g.r, static_cast<int>(n_out));
        }
    });
    if (disjoint) return;
    // A row in several segments: the axpys with the pool splitting the columns instead.
    constexpr int64_t kColumns = 64;  // lora_axpy_rows's step
    pool.parallel_for((n_out + kColumns - 1) / kColumns, [&](int64_t begin, int64_t end, int) {
        const int64_t c0 = begin * kColumns, n = std::min(end * kColumns, n_out) - c0;
        for (size_t s = 0; s < segments.size(); ++s) {
            const LoraSegment& g = segments[s];
            const void* bt = static_cast<const char*>(g.bt) + c0 * (g.f16 ? 2 : 4);
            for (int64_t j = 0; j < g.n_rows; ++j)
                v.axpy_rows[g.f16](y + g.rows[j] * n_out + c0, mid + at[s] + j * g.r, bt, n_out,
                                   g.r, static_cast<int>(n));
        }
    });
}

}  // namespace syslm::kernels
