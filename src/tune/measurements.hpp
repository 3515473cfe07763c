// What the tuner measured, one point per plan: the file's size, its quality on the held-out text
// against the input model (KL, perplexity, top-1 agreement) and its speed (llama-bench's method).
// Points are appended to a JSON-lines cache as they are measured, so a killed or repeated tune
// measures each plan once; the front is the points no other point beats on both the goal and
// the quality.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tune/decode_cost.hpp"
#include "tune/plan.hpp"

namespace syslm::tune {

struct Point {
    std::string label;  // "tuned 3", "Q4_K_M", "Q4_K_M imatrix"
    Plan plan;
    bool stock = false;           // one of llama-quantize's recipes, for comparison
    uint64_t file_bytes = 0;
    double additive_kl = -1;      // the allocation's sum of per-tensor KLs (tuned points only)
    double predicted_kl = -1;     // that sum corrected by the fit when it was chosen
    double predicted_decode_ts = -1;  // the decode cost model's figure when it was chosen
    double kl = 0, ppl = 0, top1 = 0;
    // Held-out tokens the quality figures are from: successive halving stops a file whose KL is
    // clearly outside the limit after the first quarter of the text (0: not recorded).
    int eval_tokens = 0;
    double decode_ts = 0, prefill_ts = 0;
    // The bytes decode reads per token by type, read from the file when it was measured: the
    // cost model is refitted from these after the file itself is deleted (empty in caches
    // written before they were recorded: then the file is rebuilt to read them).
    BytesByType decode_bytes;
    // Serve goal: generated tokens/s of the load at `streams` streams, and its latency tails.
    int streams = 0;  // 0: not measured serving
    double serve_ts = 0, ttft_p99 = 0, itl_p99 = 0;

    nlohmann::json to_json() const;
    static Point from_json(const nlohmann::json& j);
};

// The JSON-lines file of measured points of one tune (its directory's measurements.jsonl).
class MeasurementCache {
public:
    // Reads the points already there; a line that does not parse (a kill mid-write) is skipped
    // and said so on stderr.
    explicit MeasurementCache(std::string path);
    const Point* find(const std::string& plan_key) const;
    // Appended and flushed at once; a later point of the same plan replaces the earlier one
    // (speed timed again), here and when the file is read back.
    void add(const Point& p);
    const std::vector<Point>& points() const { return points_; }

private:
    void keep(const Point& p);
    std::string path_;
    std::vector<Point> points_;
};

enum class Goal { Decode, Prefill, Size, Serve };
Goal parse_goal(const std::string& name);  // decode | prefill | size | serve; throws otherwise
std::string goal_name(Goal g);
// The figure the goal maximises (sizes are negated, so larger is always better).
double goal_value(const Point& p, Goal g);

// Whether the point has a figure for the goal (the serve goal's are the served points).
bool measures_goal(const Point& p, Goal g);

// The points not dominated in (goal value, KL): no other point has at least the value and at
// most the KL with one of them strictly better. Sorted by KL. Only points that measure the goal.
std::vector<Point> pareto_front(const std::vector<Point>& points, Goal goal);

}  // namespace syslm::tune
