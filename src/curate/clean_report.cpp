#include "curate/clean_report.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "core/html.hpp"
#include "core/mapped_file.hpp"

namespace syslm::curate {

namespace {

// Removals by reason as horizontal bars (inline SVG).
void bars(std::ostream& h, const std::vector<std::pair<std::string, int64_t>>& rows) {
    int64_t top = 1;
    for (const auto& [name, n] : rows) top = std::max(top, n);
    h << "<svg width=\"640\" height=\"" << 24 * rows.size() + 8 << "\">\n";
    for (size_t i = 0; i < rows.size(); ++i) {
        const double w = 400.0 * static_cast<double>(rows[i].second) / static_cast<double>(top);
        const size_t y = 24 * i + 4;
        h << "<text x=\"0\" y=\"" << y + 15 << "\" font-size=\"13\">" << escape_html(rows[i].first)
          << "</text><rect x=\"200\" y=\"" << y << "\" width=\"" << w
          << "\" height=\"18\" fill=\"#4a7bd0\"/><text x=\"" << 206 + w << "\" y=\"" << y + 15
          << "\" font-size=\"13\">" << rows[i].second << "</text>\n";
    }
    h << "</svg>\n";
}

// Perplexities as a histogram of log10(ppl) in 40 bins (inline SVG), the cut marked.
void histogram(std::ostream& h, const std::vector<double>& ppl, double cut) {
    std::vector<double> x;
    for (double p : ppl)
        if (p > 0) x.push_back(std::log10(p));
    if (x.empty()) return;
    const auto [lo_it, hi_it] = std::minmax_element(x.begin(), x.end());
    const double lo = *lo_it, hi = std::max(*hi_it, lo + 1e-9);
    constexpr int kBins = 40;
    std::vector<int64_t> count(kBins, 0);
    for (double v : x) ++count[std::min(kBins - 1, static_cast<int>((v - lo) / (hi - lo) * kBins))];
    const int64_t top = *std::max_element(count.begin(), count.end());
    h << "<svg width=\"640\" height=\"190\">\n";
    for (int b = 0; b < kBins; ++b) {
        const double bh = 150.0 * static_cast<double>(count[b]) / static_cast<double>(top);
        h << "<rect x=\"" << 20 + 15 * b << "\" y=\"" << 160 - bh << "\" width=\"13\" height=\""
          << bh << "\" fill=\"#4a7bd0\"><title>" << count[b] << "</title></rect>\n";
    }
    if (cut > 0) {
        const double cx = 20 + 600 * (std::log10(cut) - lo) / (hi - lo);
        h << "<line x1=\"" << cx << "\" y1=\"0\" x2=\"" << cx
          << "\" y2=\"160\" stroke=\"#d04a4a\" stroke-width=\"2\"/>\n";
    }
    h << "<text x=\"20\" y=\"180\" font-size=\"13\">" << std::pow(10.0, lo)
      << "</text><text x=\"560\" y=\"180\" font-size=\"13\">" << std::pow(10.0, hi)
      << "</text></svg>\n";
}

}  // namespace

void write_report(const CleanOptions& o, const CleanReport& r) {
    std::ostringstream h;
    h << "<!doctype html><html><head><meta charset=\"utf-8\"><title>syslm data clean</title>"
         "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}td,th{padding:2px "
         "8px;text-align:left}pre{white-space:pre-wrap;background:#f4f4f4;padding:6px}"
         "</style></head><body>\n<h1>syslm data clean: "
      << escape_html(o.out_dir) << "</h1>\n<table>\n";
    auto row = [&](const std::string& k, const std::string& v) {
        h << "<tr><th>" << escape_html(k) << "</th><td>" << escape_html(v) << "</td></tr>\n";
    };
    row("documents read", std::to_string(r.documents));
    row("documents kept", std::to_string(r.kept));
    row("bytes in / out", std::to_string(r.bytes_in) + " / " + std::to_string(r.bytes_out));
    row("words of repeated spans cut", std::to_string(r.substring_words) + " (" +
                                           std::to_string(r.emptied) + " documents emptied)");
    row("MinHash", std::to_string(o.minhash.perm) + " permutations, " +
                       std::to_string(o.minhash.bands) + " x " + std::to_string(o.minhash.rows) +
                       " bands, " + std::to_string(o.minhash.shingle) +
                       "-word shingles, verified at " + std::to_string(o.minhash.threshold));
    if (!r.skipped.empty()) row("bad input", r.skipped);
    row("seconds", std::to_string(r.seconds));
    h << "</table>\n<h2>Removed, by reason</h2>\n";
    std::vector<std::pair<std::string, int64_t>> rows(r.filtered.begin(), r.filtered.end());
    rows.emplace_back("exact duplicate", r.exact_duplicates);
    rows.emplace_back("near duplicate", r.near_duplicates);
    rows.emplace_back("emptied by substring dedup", r.emptied);
    bars(h, rows);
    if (!r.ppl.empty()) {
        h << "<h2>Perplexity under the scoring model (log scale; documents above the red line "
             "dropped)</h2>\n";
        histogram(h, r.ppl, o.max_ppl);
    }
    if (!r.largest_clusters.empty()) {
        h << "<h2>Largest near-duplicate clusters (documents each)</h2>\n<p>";
        for (const int64_t n : r.largest_clusters) h << n << " ";
        h << "</p>\n";
    }
    h << "<h2>Examples</h2>\n";
    for (const auto& [why, list] : r.examples) {
        h << "<h3>" << escape_html(why) << "</h3>\n";
        for (const auto& e : list) {
            h << "<p>document " << e.id << ":</p><pre>" << escape_html(e.text) << "</pre>\n";
            if (!e.kept.empty())
                h << "<p>duplicates the kept document:</p><pre>" << escape_html(e.kept)
                  << "</pre>\n";
        }
    }
    h << "</body></html>\n";
    write_file_atomically(o.report, h.str());
}

}  // namespace syslm::curate
