// The HTML page of `syslm eval --report`: one self-contained file (inline CSS and SVG, no scripts,
// nothing fetched), so it opens from disk on an offline machine.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>

#include "compress/evaluate.hpp"
#include "core/html.hpp"

namespace syslm::compress {
namespace {

std::string base(const std::string& path) {
    return std::filesystem::path(path).filename().string();
}

struct Point {
    double x, y;
    std::string label;  // the point's number in the table (short: crowded points stay legible)
    std::string name;   // the file, for the tooltip
};

// A scatter plot with labelled points and ticks at "nice" steps.
std::string scatter(const std::vector<Point>& pts, const std::string& title,
                    const std::string& xlabel, const std::string& ylabel) {
    constexpr double W = 460, H = 320, L = 64, R = 16, T = 30, B = 46;
    double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
    for (const Point& p : pts) {
        x0 = std::min(x0, p.x), x1 = std::max(x1, p.x);
        y0 = std::min(y0, p.y), y1 = std::max(y1, p.y);
    }
    auto pad = [](double& a, double& b) {
        const double span = b - a > 0 ? b - a : std::max(std::fabs(a), 1.0) * 0.1;
        a -= 0.08 * span;
        b += 0.08 * span;
    };
    pad(x0, x1);
    pad(y0, y1);
    auto sx = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
    auto sy = [&](double y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B); };
    auto step = [](double span) {
        const double raw = span / 5, mag = std::pow(10.0, std::floor(std::log10(raw)));
        for (double m : {1.0, 2.0, 5.0, 10.0})
            if (raw <= m * mag) return m * mag;
        return 10 * mag;
    };
    std::ostringstream s;
    s << "<svg width='" << W << "' height='" << H << "' viewBox='0 0 " << W << ' ' << H
      << "' role='img'><title>" << escape_html(title) << "</title>"
      << "<text x='" << W / 2 << "' y='18' text-anchor='middle' class='t'>" << escape_html(title)
      << "</text><rect x='" << L << "' y='" << T << "' width='" << W - L - R << "' height='"
      << H - T - B << "' class='frame'/>";
    const double xs = step(x1 - x0), ys = step(y1 - y0);
    const int xd = xs >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(xs)));
    const int yd = ys >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(ys)));
    for (double x = std::ceil(x0 / xs) * xs; x <= x1; x += xs)
        s << "<line x1='" << sx(x) << "' x2='" << sx(x) << "' y1='" << T << "' y2='" << H - B
          << "' class='grid'/><text x='" << sx(x) << "' y='" << H - B + 16
          << "' text-anchor='middle'>" << fixed_decimals(x, xd) << "</text>";
    for (double y = std::ceil(y0 / ys) * ys; y <= y1; y += ys)
        s << "<line x1='" << L << "' x2='" << W - R << "' y1='" << sy(y) << "' y2='" << sy(y)
          << "' class='grid'/><text x='" << L - 6 << "' y='" << sy(y) + 4 << "' text-anchor='end'>"
          << fixed_decimals(y, yd) << "</text>";
    s << "<text x='" << (L + W - R) / 2 << "' y='" << H - 8 << "' text-anchor='middle'>"
      << escape_html(xlabel) << "</text><text transform='translate(14," << (T + H - B) / 2
      << ") rotate(-90)' text-anchor='middle'>" << escape_html(ylabel) << "</text>";
    for (size_t i = 0; i < pts.size(); ++i) {
        const Point& p = pts[i];
        s << "<circle cx='" << sx(p.x) << "' cy='" << sy(p.y) << "' r='4' class='p" << i % 6
          << "'><title>" << escape_html(p.label) << " " << escape_html(p.name) << ": "
          << fixed_decimals(p.x, 3) << ", " << fixed_decimals(p.y, 4)
          << "</title></circle><text x='" << sx(p.x) + 6 << "' y='" << sy(p.y) - 6
          << "' class='lbl'>" << escape_html(p.label) << "</text>";
    }
    s << "</svg>";
    return s.str();
}

}  // namespace

std::string eval_html(const EvalReport& r) {
    std::ostringstream h;
    h << "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>syslm eval</title>"
         "<style>body{font:14px system-ui,sans-serif;margin:24px;color:#222}"
         "table{border-collapse:collapse;margin:12px 0}td,th{border:1px solid #ccc;padding:4px "
         "8px;text-align:right}td:first-child,th:first-child{text-align:left}"
         "svg{margin:8px 16px 8px 0;font-size:11px}.t{font-size:13px;font-weight:600}"
         ".frame{fill:none;stroke:#888}.grid{stroke:#eee}.lbl{fill:#333}"
         ".p0{fill:#1f77b4}.p1{fill:#d62728}.p2{fill:#2ca02c}.p3{fill:#9467bd}.p4{fill:#ff7f0e}"
         ".p5{fill:#8c564b}</style></head><body><h1>syslm eval</h1><p>Reference: <b>"
      << escape_html(r.models.empty() ? "" : eval_label(r, r.models[0]))
      << "</b>. Perplexity as llama-perplexity computes it (chunks of " << r.n_ctx
      << " tokens, second half scored); KL is KL(reference&nbsp;||&nbsp;model) of the "
         "next-token distributions in nats per token, top-1 the share of positions where both "
         "predict the same token; speeds with llama-bench's method.</p>";
    h << "<table><tr><th>#</th><th>model</th><th>size MiB</th><th>bits/weight</th><th>tensor "
         "types</th>"
         "<th>prefill tok/s</th><th>decode tok/s</th>";
    for (const std::string& t : r.texts)
        h << "<th>PPL " << escape_html(base(t)) << "</th><th>KL</th><th>top-1</th>";
    h << "</tr>";
    for (size_t i = 0; i < r.models.size(); ++i) {
        const ModelEval& m = r.models[i];
        h << "<tr><td>" << i + 1 << "</td><td>" << escape_html(eval_label(r, m)) << "</td><td>"
          << fixed_decimals(static_cast<double>(m.file_bytes) / (1024.0 * 1024.0), 2) << "</td><td>"
          << fixed_decimals(m.bits_per_weight, 2) << "</td><td>" << escape_html(m.types)
          << "</td><td>" << (m.split.empty() ? fixed_decimals(m.prefill_ts, 1) : "-")
          << "</td><td>" << (m.split.empty() ? fixed_decimals(m.decode_ts, 1) : "-") << "</td>";
        for (const TextEval& e : m.texts)
            h << "<td>" << fixed_decimals(e.ppl, 3) << " ± " << fixed_decimals(e.ppl_stderr, 3)
              << "</td><td>" << fixed_decimals(e.kl, 5) << "</td><td>"
              << fixed_decimals(100 * e.top1, 1) << "%</td>";
        h << "</tr>";
    }
    h << "</table>";
    for (size_t t = 0; t < r.texts.size(); ++t) {
        std::vector<Point> by_size, by_speed;
        for (size_t i = 0; i < r.models.size(); ++i) {
            const ModelEval& m = r.models[i];
            const double ppl = m.texts[t].ppl;
            const std::string number = std::to_string(i + 1);
            by_size.push_back({static_cast<double>(m.file_bytes) / (1024.0 * 1024.0), ppl, number,
                               eval_label(r, m)});
            if (m.decode_ts > 0) by_speed.push_back({m.decode_ts, ppl, number, eval_label(r, m)});
        }
        h << "<h2>" << escape_html(base(r.texts[t])) << "</h2>"
          << scatter(by_size, "Perplexity vs size", "file size (MiB)", "perplexity");
        if (!by_speed.empty())
            h << scatter(by_speed, "Perplexity vs decode speed", "decode tokens/s", "perplexity");
    }
    h << "</body></html>\n";
    return h.str();
}

}  // namespace syslm::compress
