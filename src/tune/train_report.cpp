#include "tune/train_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.hpp"
#include "core/html.hpp"
#include "tune/report.hpp"

namespace syslm::tune {
namespace {

std::string settings(const TrainTrial& t) {
    return cat("micro-batch ", t.settings.micro_batch, " x ", t.settings.accum, ", recompute ",
               t.settings.recompute, ", ", t.settings.precision, ", ", t.threads, " threads");
}

std::string status(const TrainTrial& t) {
    return !t.error.empty() ? "failed" : !t.fits ? "over the memory limit"
                                       : !t.same_curve ? "another loss curve" : "counts";
}

bool same(const TrainTrial& a, const TrainTrial& b) {
    return a.settings == b.settings && a.threads == b.threads;
}

std::string scatter(const TrainSearchResult& r, const TrainSearchOptions& o) {
    const double W = 760, H = 420, L = 70, R = 20, T = 20, B = 50;
    double x_hi = std::isfinite(o.memory_limit_mib) ? o.memory_limit_mib : 0, y_hi = 0;
    for (const TrainTrial& t : r.trials)
        if (t.error.empty()) {
            x_hi = std::max(x_hi, t.m.peak_rss_mib);
            y_hi = std::max(y_hi, t.m.tokens_per_s);
        }
    x_hi = x_hi > 0 ? x_hi * 1.1 : 1;
    y_hi = y_hi > 0 ? y_hi * 1.1 : 1;
    auto x_of = [&](double v) { return L + v / x_hi * (W - L - R); };
    auto y_of = [&](double v) { return H - B - v / y_hi * (H - T - B); };
    std::ostringstream s;
    s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
      << "' font-family='sans-serif' font-size='11'>\n<rect width='100%' height='100%' "
         "fill='white'/>\n<line x1='" << L << "' y1='" << H - B << "' x2='" << W - R << "' y2='"
      << H - B << "' stroke='black'/><line x1='" << L << "' y1='" << T << "' x2='" << L
      << "' y2='" << H - B << "' stroke='black'/>\n";
    for (int k = 0; k <= 4; ++k) {
        const double xv = x_hi * k / 4, yv = y_hi * k / 4;
        s << "<text x='" << x_of(xv) << "' y='" << H - B + 16 << "' text-anchor='middle'>"
          << fmt("%.0f", xv) << "</text><text x='" << L - 6 << "' y='" << y_of(yv) + 4
          << "' text-anchor='end'>" << fmt("%.0f", yv) << "</text>\n";
    }
    s << "<text x='" << (L + W - R) / 2 << "' y='" << H - 12
      << "' text-anchor='middle'>peak memory, MiB</text><text x='14' y='" << (T + H - B) / 2
      << "' transform='rotate(-90 14 " << (T + H - B) / 2
      << ")' text-anchor='middle'>training tokens/s</text>\n";
    if (std::isfinite(o.memory_limit_mib)) {
        const double x = x_of(o.memory_limit_mib);
        s << "<line x1='" << x << "' y1='" << T << "' x2='" << x << "' y2='" << H - B
          << "' stroke='#c00' stroke-dasharray='4 3'/><text x='" << x - 4 << "' y='" << T + 10
          << "' fill='#c00' text-anchor='end'>memory limit</text>\n";
    }
    for (const TrainTrial& t : r.trials) {
        if (!t.error.empty()) continue;
        const double x = x_of(t.m.peak_rss_mib), y = y_of(t.m.tokens_per_s);
        const bool tuned = same(t, r.best), command = same(t, r.baseline);
        const char* fill = t.counts() ? "#36c" : !t.fits ? "#e80" : "#aaa";
        s << "<g><title>" << escape_html(cat(settings(t), ": ", fmt("%.1f", t.m.tokens_per_s),
                                             " tok/s, peak ", fmt("%.0f", t.m.peak_rss_mib),
                                             " MiB; ", status(t)))
          << "</title>";
        if (command)
            s << "<rect x='" << x - 5 << "' y='" << y - 5 << "' width='10' height='10' fill='"
              << fill << "' stroke='black'/><text x='" << x + 8 << "' y='" << y + 4
              << "'>the command</text>";
        else
            s << "<circle cx='" << x << "' cy='" << y << "' r='" << (tuned ? 6 : 4) << "' fill='"
              << fill << "'" << (tuned ? " stroke='black'" : "") << "/>"
              << (tuned ? cat("<text x='", x + 8, "' y='", y + 4, "'>tuned</text>") : "");
        s << "</g>\n";
    }
    s << "<text x='" << W - R - 330 << "' y='" << T + 24 << "'><tspan fill='#36c'>&#9679; "
         "counts</tspan>  <tspan fill='#aaa'>&#9679; another loss curve</tspan>  <tspan "
         "fill='#e80'>&#9679; over the memory limit</tspan></text>\n</svg>\n";
    return s.str();
}

}  // namespace

std::string train_report_html(const TrainSearchResult& r, const TrainSearchOptions& o,
                              const std::vector<std::string>& command) {
    std::ostringstream s;
    std::string cmd = "syslm train";
    for (const std::string& a : command) cmd += " " + a;
    s << "<!doctype html><html><head><meta charset='utf-8'><title>syslm tune train</title>"
         "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
         "td:first-child,th:first-child{text-align:left}</style></head><body>\n"
      << "<h1>syslm tune train</h1>\n<p><code>" << escape_html(cmd) << "</code></p>\n<p>"
      << "The command's settings: " << escape_html(settings(r.baseline)) << ", "
      << fmt("%.1f", r.baseline.m.tokens_per_s) << " tok/s, peak "
      << fmt("%.0f", r.baseline.m.peak_rss_mib) << " MiB. Tuned: " << escape_html(settings(r.best))
      << ", " << fmt("%.1f", r.best.m.tokens_per_s) << " tok/s, peak "
      << fmt("%.0f", r.best.m.peak_rss_mib) << " MiB ("
      << fmt("%.2f", r.best.m.tokens_per_s / std::max(r.baseline.m.tokens_per_s, 1e-9))
      << "x; both the medians of " << o.confirm_reps << " alternating runs). A trial counts when "
      << "its peak memory fits the limit"
      << (std::isfinite(o.memory_limit_mib) ? cat(" (", fmt("%.0f", o.memory_limit_mib), " MiB)")
                                            : std::string(" (none given)"))
      << " and every step's loss is the command's within " << fmt("%.3g", o.loss_rtol)
      << " (relative)"
      << (o.precision_rtol > 0 ? cat(", or within ", fmt("%.3g", o.precision_rtol),
                                     " in another precision")
                               : std::string())
      << ".</p>\n"
      << scatter(r, o)
      << "<table><tr><th>micro-batch</th><th>accum</th><th>recompute</th><th>precision</th>"
         "<th>threads</th><th>tokens/s</th><th>peak MiB</th><th>status</th></tr>\n";
    for (const TrainTrial& t : r.trials)
        s << "<tr><td>" << t.settings.micro_batch << "</td><td>" << t.settings.accum << "</td><td>"
          << escape_html(t.settings.recompute) << "</td><td>" << escape_html(t.settings.precision)
          << "</td><td>" << t.threads << "</td><td>" << fmt("%.1f", t.m.tokens_per_s)
          << "</td><td>" << fmt("%.0f", t.m.peak_rss_mib) << "</td><td>"
          << escape_html(t.error.empty() ? status(t) : "failed: " + t.error) << "</td></tr>\n";
    s << "</table>\n</body></html>\n";
    return s.str();
}

}  // namespace syslm::tune
