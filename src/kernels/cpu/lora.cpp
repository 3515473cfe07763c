#include "kernels/cpu/lora.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/isa.hpp"

namespace syslm::kernels {

namespace {

constexpr int64_t G = kLoraRowGroup;

// True when no (output, row) is in two segments (or twice in one): each group's axpys can then
// run beside its dots, with no other thread writing its rows.
bool rows_disjoint(std::span<const LoraSegment> segments) {
    thread_local std::vector<float*> outputs;  // the distinct y of the segments
    thread_local std::vector<uint8_t> seen;
    outputs.clear();
    int64_t max_row = -1;
    for (const LoraSegment& g : segments) {
        for (int64_t j = 0; j < g.n_rows; ++j) max_row = std::max(max_row, g.rows[j]);
        if (std::find(outputs.begin(), outputs.end(), g.y) == outputs.end()) outputs.push_back(g.y);
    }
    const auto width = static_cast<size_t>(max_row + 1);
    seen.assign(outputs.size() * width, 0);
    for (const LoraSegment& g : segments) {
        const auto o =
            static_cast<size_t>(std::find(outputs.begin(), outputs.end(), g.y) - outputs.begin());
        for (int64_t j = 0; j < g.n_rows; ++j)
            if (std::exchange(seen[o * width + static_cast<size_t>(g.rows[j])], uint8_t{1}))
                return false;
    }
    return true;
}

// The axpys of every segment's rows (their A x in mid + at[s]), the pool splitting the columns
// so that rows in several segments need no locks; one row at a time, since a row may repeat.
void axpys_by_columns(std::span<const LoraSegment> segments, const float* mid,
                      const std::vector<int64_t>& at, const LoraKernels& v, ThreadPool& pool) {
    constexpr int64_t kColumns = 64;
    int64_t max_out = 0;
    for (const LoraSegment& g : segments) max_out = std::max(max_out, g.n_out);
    pool.parallel_for((max_out + kColumns - 1) / kColumns, [&](int64_t begin, int64_t end, int) {
        for (size_t s = 0; s < segments.size(); ++s) {
            const LoraSegment& g = segments[s];
            const int64_t c0 = begin * kColumns, c1 = std::min(end * kColumns, g.n_out);
            if (c0 >= c1) continue;
            const void* bt = static_cast<const char*>(g.bt) + c0 * (g.f16 ? 2 : 4);
            for (int64_t j = 0; j < g.n_rows; ++j) {
                float* y = g.y + g.rows[j] * g.n_out + c0;
                v.axpy_rows[g.f16](&y, 1, mid + at[s] + j * g.r, bt, g.n_out, g.r,
                                   static_cast<int>(c1 - c0));
            }
        }
    });
}

}  // namespace

void lora_update(const float* x, int64_t n_in, std::span<const LoraSegment> segments, float* mid,
                 ThreadPool& pool) {
    if (segments.empty()) return;
    const LoraKernels& v = attention_kernels(active_isa()).lora;
    // Items are (segment, group of G rows): a segment's groups are item0[s] .. item0[s + 1],
    // its A x at mid + at[s]. The index vectors are the calling thread's, reused from call to
    // call (decode calls this for every layer of every step); the pool's threads read them
    // through these references.
    thread_local std::vector<int64_t> item0_storage, at_storage;
    std::vector<int64_t>& item0 = item0_storage;
    std::vector<int64_t>& at = at_storage;
    item0.assign(1, 0);
    at.assign(1, 0);
    for (const LoraSegment& g : segments) {
        item0.push_back(item0.back() + (g.n_rows + G - 1) / G);
        at.push_back(at.back() + g.r * g.n_rows);
    }
    const bool disjoint = rows_disjoint(segments);  // the usual case: a request, one adapter
    pool.parallel_for(item0.back(), [&](int64_t begin, int64_t end, int) {
        size_t s = static_cast<size_t>(std::upper_bound(item0.begin(), item0.end(), begin) -
                                       item0.begin() - 1);
        for (int64_t item = begin; item < end; ++item) {
            while (item >= item0[s + 1]) ++s;
            const LoraSegment& g = segments[s];
            const int64_t j0 = (item - item0[s]) * G;
            const int n = static_cast<int>(std::min(G, g.n_rows - j0));
            const float* xs[G];
            float* ys[G];
            for (int j = 0; j < n; ++j) {
                xs[j] = x + g.rows[j0 + j] * n_in;
                ys[j] = g.y + g.rows[j0 + j] * g.n_out;
            }
            float* m = mid + at[s] + j0 * g.r;
            v.down[g.f16](g.a, g.r, static_cast<int>(n_in), xs, n, g.scale, m);
            if (disjoint)
                v.axpy_rows[g.f16](ys, n, m, g.bt, g.n_out, g.r, static_cast<int>(g.n_out));
        }
    });
    if (!disjoint) axpys_by_columns(segments, mid, at, v, pool);
}

}  // namespace syslm::kernels
