#include "tune/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/error.hpp"
#include "core/html.hpp"

namespace syslm::tune {
std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

namespace {

std::string goal_label(Goal g) {
    switch (g) {
        case Goal::Decode:
            return "decode tokens/s";
        case Goal::Prefill:
            return "prefill tokens/s";
        case Goal::Size:
            return "file size, MB (smaller is better)";
        case Goal::Serve:
            return "serving tokens/s";
    }
    return "";
}

// The goal's figure as shown (sizes positive, in MB).
double shown(const Point& p, Goal g) {
    return g == Goal::Size ? p.file_bytes / 1e6 : goal_value(p, g);
}

bool on_front(const Point& p, const TuneResult& r) {
    for (const Point& f : r.front)
        if (f.plan.key() == p.plan.key()) return true;
    return false;
}

// The draft's timings on the chosen file, one line per setting.
std::string draft_summary(const DraftResult& d) {
    std::string s = cat("draft ", d.draft_path, " on the chosen file (generated tok/s, medians of ",
                        d.rounds, " rounds of ", d.prompts, " held-out prompts x ", d.tokens,
                        " tokens): plain ", fmt("%.1f", d.plain_ts), "\n");
    for (const DraftTrial& t : d.trials)
        s += cat("  speculative, ", t.settings.label(), ": ", fmt("%.1f", t.ts), " (",
                 fmt("%.2f", t.ts / std::max(1e-9, d.plain_ts)), "x), ",
                 fmt("%.1f", 100 * t.acceptance), "% of drafted tokens kept\n");
    s += d.best ? cat("  the plan decodes with the draft, ", d.best->settings.label(), "\n")
                : std::string("  the plan decodes without it (no setting beat plain decoding)\n");
    return s;
}

// Each length knob's table and the policy written into model.gguf.
std::string length_summary(const LengthPolicyResult& p) {
    std::string s = cat(p.knob,
                        " by input length on the chosen file (perplexity on the held-out "
                        "text, tokens/s of its chunks):\n");
    for (const LengthMeasurement& m : p.table)
        s += cat("  length ", m.length, ", ", p.knob, " ", fmt("%g", m.value), ": perplexity ",
                 fmt("%.4f", m.ppl), ", ", fmt("%.0f", m.tokens_per_s), " tok/s (", m.chunks,
                 " chunks)\n");
    s += cat("  policy (the smallest within ", fmt("%.2f", 100 * p.max_increase),
             "% of each length's best):");
    for (size_t i = 0; i < p.lengths.size(); ++i)
        s += cat(i ? "," : "", " up to ", p.lengths[i], i + 1 == p.lengths.size() ? "+" : "",
                 " tokens ", fmt("%g", p.values[i]));
    return s + "\n";
}

// The chosen plan is a measured point's, plus the draft when one won (timed apart).
bool is_chosen(const Point& p, const TuneResult& r) {
    if (!r.chosen) return false;
    Plan plan = r.chosen->plan;
    plan.draft.reset();
    plan.window.clear();  // set after the points were measured (Tuner::length_phase)
    plan.expert_top_p.clear();
    return plan.key() == p.plan.key();
}

}  // namespace

std::string plan_summary(const Plan& p) {
    std::map<std::string, int> n;
    for (const auto& [name, type] : p.tensor_types) ++n[std::string(dtype_name(type))];
    std::vector<std::pair<int, std::string>> by;
    for (const auto& [t, c] : n) by.emplace_back(-c, t);
    std::sort(by.begin(), by.end());
    std::string s = p.recipe.empty() ? "" : p.recipe + (p.imatrix ? " + imatrix" : "");
    for (const auto& [c, t] : by) s += cat(s.empty() ? "" : ", ", t, " ", -c);
    if (p.serve)
        s +=
            cat("; threads ", p.threads, ", parallel ", p.serve->parallel, ", token budget ",
                p.serve->token_budget, ", page ", p.serve->page_size, ", KV ", p.serve->cache_type);
    if (p.draft) s += cat("; draft ", p.draft->label());
    if (!p.window.empty()) s += "; window by input length";
    if (!p.expert_top_p.empty()) s += "; expert top-p by input length";
    return s;
}

std::string report_json(const TuneResult& r, const ReportContext& c) {
    nlohmann::json j = {{"model", c.model},
                        {"goal", goal_name(c.goal)},
                        {"max_kl", c.max_kl},
                        {"analysis", r.analysis},
                        {"seconds", r.seconds},
                        {"points", nlohmann::json::array()},
                        {"front", nlohmann::json::array()},
                        {"chosen", nullptr}};
    for (const Point& p : r.points) j["points"].push_back(p.to_json());
    for (const Point& p : r.front) j["front"].push_back(p.label);
    if (r.chosen) j["chosen"] = r.chosen->to_json();
    if (r.draft) {
        nlohmann::json trials = nlohmann::json::array();
        for (const DraftTrial& t : r.draft->trials)
            trials.push_back({{"setting", t.settings.label()},
                              {"tokens_per_s", t.ts},
                              {"acceptance", t.acceptance}});
        j["draft"] = {{"file", r.draft->draft_path},
                      {"plain_tokens_per_s", r.draft->plain_ts},
                      {"trials", trials},
                      {"rounds", r.draft->rounds},
                      {"prompts", r.draft->prompts},
                      {"tokens", r.draft->tokens},
                      {"chosen", r.draft->best ? r.draft->best->settings.label() : "none"}};
    }
    for (const LengthPolicyResult& p : r.length_policies) {
        nlohmann::json table = nlohmann::json::array();
        for (const LengthMeasurement& m : p.table)
            table.push_back({{"length", m.length},
                             {"value", m.value},
                             {"ppl", m.ppl},
                             {"tokens_per_s", m.tokens_per_s},
                             {"chunks", m.chunks}});
        j["length_policies"].push_back({{"knob", p.knob},
                                        {"max_ppl_increase", p.max_increase},
                                        {"table", table},
                                        {"lengths", p.lengths},
                                        {"values", p.values}});
    }
    return j.dump(2) + "\n";
}

namespace {

// The plot's area and scales: KL on a log axis (points below 1e-6 drawn at 1e-6), the goal's
// figure on a linear one, both spanning every point and the limit.
struct Frame {
    static constexpr double W = 760, H = 440, L = 70, R = 20, T = 30, B = 50;
    double kl_lo = 1e30, kl_hi = 0, y_lo = 1e30, y_hi = -1e30;
    double x(double kl) const {
        return L + (std::log10(std::max(kl, 1e-6)) - std::log10(kl_lo)) /
                       (std::log10(kl_hi) - std::log10(kl_lo)) * (W - L - R);
    }
    double y(double v) const { return H - B - (v - y_lo) / (y_hi - y_lo) * (H - T - B); }
};

Frame frame_of(const TuneResult& r, const ReportContext& c) {
    Frame f;
    for (const Point& p : r.points) {
        if (!measures_goal(p, c.goal)) continue;
        const double kl = std::max(p.kl, 1e-6);
        f.kl_lo = std::min(f.kl_lo, kl);
        f.kl_hi = std::max(f.kl_hi, kl);
        f.y_lo = std::min(f.y_lo, shown(p, c.goal));
        f.y_hi = std::max(f.y_hi, shown(p, c.goal));
    }
    if (f.kl_hi == 0) f.kl_lo = 1e-4, f.kl_hi = 1, f.y_lo = 0, f.y_hi = 1;
    f.kl_lo = std::min(f.kl_lo, c.max_kl) / 1.5;
    f.kl_hi = std::max(f.kl_hi, c.max_kl) * 1.5;
    const double pad = (f.y_hi - f.y_lo) * 0.08 + 1e-9;
    f.y_lo -= pad;
    f.y_hi += pad;
    return f;
}

// The title, the axes with decades of KL and five ticks of the goal, and the limit.
void draw_axes(std::ostream& s, const Frame& f, const ReportContext& c) {
    const double W = Frame::W, H = Frame::H, L = Frame::L, R = Frame::R, T = Frame::T, B = Frame::B;
    s << "<text x='" << L << "' y='18' font-size='13'>" << escape_html(c.model) << ": "
      << goal_label(c.goal) << " against KL on held-out text</text>\n";
    s << "<line x1='" << L << "' y1='" << H - B << "' x2='" << W - R << "' y2='" << H - B
      << "' stroke='black'/><line x1='" << L << "' y1='" << T << "' x2='" << L << "' y2='" << H - B
      << "' stroke='black'/>\n";
    for (int e = static_cast<int>(std::floor(std::log10(f.kl_lo)));
         e <= static_cast<int>(std::ceil(std::log10(f.kl_hi))); ++e) {
        if (e < -6) continue;
        const double x = f.x(std::pow(10.0, e));
        if (x < L || x > W - R) continue;
        s << "<line x1='" << x << "' y1='" << H - B << "' x2='" << x << "' y2='" << H - B + 4
          << "' stroke='black'/><text x='" << x << "' y='" << H - B + 16
          << "' text-anchor='middle'>1e" << e << "</text>\n";
    }
    for (int k = 0; k <= 4; ++k) {
        const double v = f.y_lo + (f.y_hi - f.y_lo) * k / 4, y = f.y(v);
        s << "<text x='" << L - 6 << "' y='" << y + 4 << "' text-anchor='end'>" << fmt("%.4g", v)
          << "</text>\n";
    }
    s << "<text x='" << (L + W - R) / 2 << "' y='" << H - 12
      << "' text-anchor='middle'>mean KL(input || file), nats per token (log scale)</text>\n";
    s << "<text x='14' y='" << (T + H - B) / 2 << "' transform='rotate(-90 14 " << (T + H - B) / 2
      << ")' text-anchor='middle'>" << goal_label(c.goal) << "</text>\n";
    const double xl = f.x(c.max_kl);
    s << "<line x1='" << xl << "' y1='" << T << "' x2='" << xl << "' y2='" << H - B
      << "' stroke='#c00' stroke-dasharray='4 3'/><text x='" << xl + 3 << "' y='" << T + 10
      << "' fill='#c00'>limit " << fmt("%g", c.max_kl) << "</text>\n";
}

// One point: a square for a stock recipe (named once: the same recipe at fewer threads shows
// its name on hover only), a circle for the tuner's (dark on the front, ringed when chosen);
// hovering shows its figures and plan.
void draw_point(std::ostream& s, const Point& p, const Frame& f, const TuneResult& r,
                const ReportContext& c) {
    const double x = f.x(p.kl), y = f.y(shown(p, c.goal));
    const bool chosen = is_chosen(p, r);
    const std::string tip =
        cat(p.label, ": KL ", fmt("%.4g", p.kl),
            p.eval_tokens > 0 ? cat(" (", p.eval_tokens, " held-out tokens)") : "", ", PPL ",
            fmt("%.4g", p.ppl), ", ", fmt("%.1f", p.file_bytes / 1e6), " MB, decode ",
            fmt("%.1f", p.decode_ts), " tok/s",
            p.streams ? cat(", serving ", fmt("%.1f", p.serve_ts), " tok/s at ", p.streams,
                            " streams, TTFT p99 ", fmt("%.3f", p.ttft_p99), " s")
                      : "",
            "; ", plan_summary(p.plan));
    s << "<g><title>" << escape_html(tip) << "</title>";
    const bool fewer_threads = p.label.ends_with(cat(" t", p.plan.threads));
    if (p.stock)
        s << "<rect x='" << x - 4 << "' y='" << y - 4 << "' width='8' height='8' fill='#e80'/>"
          << (fewer_threads ? std::string()
                            : cat("<text x='", x + 6, "' y='", y - 5, "' fill='#a50'>",
                                  escape_html(p.label), "</text>"));
    else
        s << "<circle cx='" << x << "' cy='" << y << "' r='" << (chosen ? 6 : 4) << "' fill='"
          << (on_front(p, r) ? "#36c" : "#9bd") << "'" << (chosen ? " stroke='black'" : "") << "/>";
    s << "</g>\n";
}

}  // namespace

std::string report_svg(const TuneResult& r, const ReportContext& c) {
    const Frame f = frame_of(r, c);
    std::ostringstream s;
    s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << Frame::W << "' height='" << Frame::H
      << "' font-family='sans-serif' font-size='11'>\n<rect width='100%' height='100%' "
         "fill='white'/>\n";
    draw_axes(s, f, c);
    std::string path;  // the front as a line
    for (const Point& p : r.front)
        path += cat(path.empty() ? "M" : " L", f.x(p.kl), " ", f.y(shown(p, c.goal)));
    if (!path.empty())
        s << "<path d='" << path << "' fill='none' stroke='#36c' stroke-width='1.5'/>\n";
    for (const Point& p : r.points)
        if (measures_goal(p, c.goal)) draw_point(s, p, f, r, c);
    s << "<text x='" << Frame::W - Frame::R - 250 << "' y='" << Frame::H - Frame::B - 8
      << "'><tspan fill='#36c'>&#9679; tuned (front dark)</tspan>  <tspan fill='#e80'>&#9632; "
         "llama-quantize recipes</tspan></text>\n</svg>\n";
    return s.str();
}

std::string report_table(const TuneResult& r, const ReportContext& c) {
    std::vector<Point> pts = r.points;
    std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) { return a.kl < b.kl; });
    std::ostringstream s;
    char line[512];
    const bool serve = c.goal == Goal::Serve;
    int w = 22;  // the label column, as wide as the longest label
    for (const Point& p : pts) w = std::max(w, std::min(120, static_cast<int>(p.label.size())));
    std::snprintf(line, sizeof line, "%-*s %9s %10s %10s %8s %7s %7s %10s %10s %10s%s  %s\n", w,
                  "point", "MB", "KL", "predicted", "PPL", "top-1", "tokens", "decode t/s",
                  "predicted", "prefill", serve ? "  serve t/s  TTFT p99" : "", "front");
    s << line;
    for (const Point& p : pts) {
        const std::string served =
            !serve      ? ""
            : p.streams ? fmt(" %10.1f", p.serve_ts) + fmt(" %8.3fs", p.ttft_p99)
                        : cat(" ", std::string(10, ' '), "-", std::string(8, ' '), "-");
        std::snprintf(line, sizeof line,
                      "%-*s %9.2f %10.5f %10s %8.3f %6.1f%% %7s %10.1f %10s %10.1f%s  %s%s\n", w,
                      p.label.c_str(), p.file_bytes / 1e6, p.kl,
                      p.predicted_kl >= 0 ? fmt("%.5f", p.predicted_kl).c_str() : "-", p.ppl,
                      100 * p.top1, p.eval_tokens > 0 ? cat(p.eval_tokens).c_str() : "-",
                      p.decode_ts,
                      p.predicted_decode_ts > 0 ? fmt("%.1f", p.predicted_decode_ts).c_str() : "-",
                      p.prefill_ts, served.c_str(), on_front(p, r) ? "*" : "",
                      is_chosen(p, r) ? " chosen" : "");
        s << line;
    }
    if (r.chosen)
        s << "chosen: " << r.chosen->label << " (" << plan_summary(r.chosen->plan) << "), "
          << goal_name(c.goal) << " " << fmt("%.4g", shown(*r.chosen, c.goal)) << " at KL "
          << fmt("%.4g", r.chosen->kl) << " <= " << c.max_kl << "\n";
    else
        s << "no tuned point is within KL " << c.max_kl << "\n";
    if (r.draft) s << draft_summary(*r.draft);
    for (const LengthPolicyResult& p : r.length_policies) s << length_summary(p);
    return s.str();
}

std::string report_html(const TuneResult& r, const ReportContext& c) {
    std::ostringstream s;
    s << "<!doctype html><html><head><meta charset='utf-8'><title>syslm tune: "
      << escape_html(c.model) << "</title><style>body{font-family:sans-serif;margin:2em}"
      << "table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #ddd;"
         "text-align:right}td:first-child,th:first-child{text-align:left}</style></head><body>\n";
    s << "<h1>syslm tune</h1><p>" << escape_html(r.analysis) << "</p>\n" << report_svg(r, c);
    s << "<p>Every point is measured on the held-out text and timed on this machine; hover a "
         "point for its plan. Limit: KL &le; "
      << c.max_kl
      << ". Quality is measured by successive halving: a file whose KL on the "
         "first quarter of the held-out text is more than two standard errors above the limit is "
         "not measured on the rest (the <i>tokens</i> column: held-out tokens scored).</p>\n<pre>"
      << escape_html(report_table(r, c)) << "</pre></body></html>\n";
    return s.str();
}

}  // namespace syslm::tune
