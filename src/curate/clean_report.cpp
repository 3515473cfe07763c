#include "curate/clean_report.hpp"

#include <algorithm>
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
    row("seconds", std::to_string(r.seconds));
    h << "</table>\n<h2>Removed, by reason</h2>\n";
    std::vector<std::pair<std::string, int64_t>> rows(r.filtered.begin(), r.filtered.end());
    rows.emplace_back("exact duplicate", r.exact_duplicates);
    rows.emplace_back("near duplicate", r.near_duplicates);
    rows.emplace_back("emptied by substring dedup", r.emptied);
    bars(h, rows);
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
