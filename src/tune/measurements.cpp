#include "tune/measurements.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "core/error.hpp"

namespace syslm::tune {

nlohmann::json Point::to_json() const {
    nlohmann::json j = {{"label", label},           {"plan", plan.to_json()},   {"stock", stock},
            {"file_bytes", file_bytes}, {"additive_kl", additive_kl}, {"predicted_kl", predicted_kl},
            {"predicted_decode_ts", predicted_decode_ts}, {"kl", kl},
            {"ppl", ppl},               {"top1", top1},             {"eval_tokens", eval_tokens},
            {"decode_ts", decode_ts},
            {"prefill_ts", prefill_ts}, {"streams", streams}, {"serve_ts", serve_ts},
            {"ttft_p99", ttft_p99},     {"itl_p99", itl_p99}};
    for (const auto& [type, bytes] : decode_bytes) j["decode_bytes"][dtype_name(type)] = bytes;
    return j;
}

Point Point::from_json(const nlohmann::json& j) {
    Point p;
    p.label = j.at("label").get<std::string>();
    p.plan = Plan::from_json(j.at("plan"));
    p.stock = j.at("stock").get<bool>();
    p.file_bytes = j.at("file_bytes").get<uint64_t>();
    p.additive_kl = j.at("additive_kl").get<double>();
    p.predicted_kl = j.at("predicted_kl").get<double>();
    p.predicted_decode_ts = j.value("predicted_decode_ts", -1.0);
    p.kl = j.at("kl").get<double>();
    p.ppl = j.at("ppl").get<double>();
    p.top1 = j.at("top1").get<double>();
    p.eval_tokens = j.value("eval_tokens", 0);
    p.decode_ts = j.at("decode_ts").get<double>();
    p.prefill_ts = j.at("prefill_ts").get<double>();
    p.streams = j.value("streams", 0);
    p.serve_ts = j.value("serve_ts", 0.0);
    p.ttft_p99 = j.value("ttft_p99", 0.0);
    p.itl_p99 = j.value("itl_p99", 0.0);
    if (j.contains("decode_bytes"))
        for (const auto& [name, bytes] : j.at("decode_bytes").items()) {
            const auto type = dtype_from_name(name);
            SYSLM_CHECK(type, "unknown type ", name, " in decode_bytes");
            p.decode_bytes[*type] = bytes.get<double>();
        }
    return p;
}

MeasurementCache::MeasurementCache(std::string path) : path_(std::move(path)) {
    std::ifstream in(path_);
    int line_no = 0;
    for (std::string line; std::getline(in, line);) {
        ++line_no;
        if (line.empty()) continue;
        try {
            keep(Point::from_json(nlohmann::json::parse(line)));
        } catch (const std::exception& e) {
            std::fprintf(stderr, "note: %s:%d: skipped a line that does not parse (%s)\n",
                         path_.c_str(), line_no, e.what());
        }
    }
}

const Point* MeasurementCache::find(const std::string& plan_key) const {
    for (const Point& p : points_)
        if (p.plan.key() == plan_key) return &p;
    return nullptr;
}

void MeasurementCache::add(const Point& p) {
    std::ofstream out(path_, std::ios::app);
    SYSLM_CHECK(out, path_, ": cannot append a measurement");
    out << p.to_json().dump() << '\n';
    out.flush();
    SYSLM_CHECK(out, path_, ": writing a measurement failed");
    keep(p);
}

void MeasurementCache::keep(const Point& p) {
    for (Point& q : points_)
        if (q.plan.key() == p.plan.key()) {
            q = p;
            return;
        }
    points_.push_back(p);
}

Goal parse_goal(const std::string& name) {
    if (name == "decode") return Goal::Decode;
    if (name == "prefill") return Goal::Prefill;
    if (name == "size") return Goal::Size;
    if (name == "serve") return Goal::Serve;
    fail("unknown goal '", name, "' (decode, prefill, size or serve)");
}

std::string goal_name(Goal g) {
    switch (g) {
        case Goal::Decode: return "decode";
        case Goal::Prefill: return "prefill";
        case Goal::Size: return "size";
        case Goal::Serve: return "serve";
    }
    return "?";
}

double goal_value(const Point& p, Goal g) {
    switch (g) {
        case Goal::Decode: return p.decode_ts;
        case Goal::Prefill: return p.prefill_ts;
        case Goal::Size: return -static_cast<double>(p.file_bytes);
        case Goal::Serve: return p.serve_ts;
    }
    return 0;
}

bool measures_goal(const Point& p, Goal g) {
    return g == Goal::Serve ? p.streams > 0 : p.streams == 0;
}

std::vector<Point> pareto_front(const std::vector<Point>& points, Goal goal) {
    std::vector<Point> front;
    for (const Point& p : points) {
        if (!measures_goal(p, goal)) continue;
        bool dominated = false;
        for (const Point& q : points) {
            if (!measures_goal(q, goal)) continue;
            const bool no_worse = goal_value(q, goal) >= goal_value(p, goal) && q.kl <= p.kl;
            const bool better = goal_value(q, goal) > goal_value(p, goal) || q.kl < p.kl;
            if (no_worse && better) {
                dominated = true;
                break;
            }
        }
        if (!dominated) front.push_back(p);
    }
    std::sort(front.begin(), front.end(), [](const Point& a, const Point& b) { return a.kl < b.kl; });
    return front;
}

}  // namespace syslm::tune
