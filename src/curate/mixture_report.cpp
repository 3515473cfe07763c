#include "curate/mixture_report.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/html.hpp"
#include "core/mapped_file.hpp"

namespace syslm::curate {

namespace {

// The weights as bars, one group per stratum: chosen, natural (token shares), uniform.
void weight_bars(std::ostream& h, const std::vector<Stratum>& strata,
                 const std::vector<double>& natural) {
    const char* colour[] = {"#4a7bd0", "#9bb7e8", "#cccccc"};
    const double uniform = 1.0 / static_cast<double>(strata.size());
    h << "<svg width=\"640\" height=\"" << 66 * strata.size() + 30 << "\">\n";
    for (size_t i = 0; i < strata.size(); ++i) {
        const double w[] = {strata[i].weight, natural[i], uniform};
        const size_t y = 66 * i + 4;
        h << "<text x=\"0\" y=\"" << y + 30 << "\" font-size=\"13\">" << escape_html(strata[i].name)
          << "</text>\n";
        for (int k = 0; k < 3; ++k)
            h << "<rect x=\"200\" y=\"" << y + 20 * k << "\" width=\"" << 360 * w[k]
              << "\" height=\"18\" fill=\"" << colour[k] << "\"/><text x=\"" << 206 + 360 * w[k]
              << "\" y=\"" << y + 20 * k + 14 << "\" font-size=\"12\">" << fixed_decimals(w[k], 3)
              << "</text>\n";
    }
    h << "<text x=\"200\" y=\"" << 66 * strata.size() + 20
      << "\" font-size=\"12\">dark: the mixture; mid: natural (token shares); light: "
         "uniform</text></svg>\n";
}

// Predicted against measured val loss of the proxy runs, the diagonal drawn.
void scatter(std::ostream& h, const MixResult& r) {
    double lo = 1e300, hi = -1e300;
    for (const SearchRun& run : r.runs) {
        const double p = r.fit.predict(run.weights);
        lo = std::min({lo, p, run.val_loss});
        hi = std::max({hi, p, run.val_loss});
    }
    hi = std::max(hi, lo + 1e-9);
    auto at = [&](double v) { return 40 + 320 * (v - lo) / (hi - lo); };
    h << "<svg width=\"420\" height=\"420\">\n<line x1=\"40\" y1=\"380\" x2=\"360\" y2=\"60\" "
         "stroke=\"#999\"/>\n";
    for (size_t i = 0; i < r.runs.size(); ++i) {
        const double m = r.runs[i].val_loss, p = r.fit.predict(r.runs[i].weights);
        h << "<circle cx=\"" << at(m) << "\" cy=\"" << 420 - at(p)
          << "\" r=\"4\" fill=\"#4a7bd0\"><title>run " << i << ": measured " << fixed_decimals(m, 4)
          << ", fit " << fixed_decimals(p, 4) << "</title></circle>\n";
    }
    h << "<text x=\"40\" y=\"405\" font-size=\"12\">measured " << fixed_decimals(lo, 3) << " .. "
      << fixed_decimals(hi, 3) << "</text><text x=\"4\" y=\"30\" font-size=\"12\">predicted by the "
      << "fit</text></svg>\n";
}

void search_section(std::ostream& h, const MixOptions& o, const MixResult& r) {
    const ProxySpec& p = o.proxy;
    h << "<h2>Mixture search (RegMix)</h2>\n<p>" << r.runs.size() << " proxy runs: " << p.layers
      << " layers, dim " << p.dim << ", " << p.heads << " heads, " << p.steps << " steps of "
      << p.batch << " x " << p.seq << " tokens, lr " << p.lr
      << "; each trained from scratch on its mixture, val loss on the mixed val.</p>\n"
      << "<p>Fit: val loss ~ the weights and log(w + 0.01), ridge; R&sup2; "
      << fixed_decimals(r.fit.r2, 3) << " on the runs, leave-one-out RMSE "
      << fixed_decimals(r.fit.loo_rmse, 4) << ".</p>\n";
    scatter(h, r);
    h << "<table>\n<tr><th>mixture</th><th>predicted val loss</th></tr>\n<tr><td>chosen</td><td>"
      << fixed_decimals(r.predicted_chosen, 4) << "</td></tr>\n<tr><td>uniform</td><td>"
      << fixed_decimals(r.predicted_uniform, 4) << "</td></tr>\n<tr><td>natural</td><td>"
      << fixed_decimals(r.predicted_natural, 4)
      << "</td></tr>\n</table>\n<h3>Runs</h3>\n<table>\n<tr>"
      << "<th>run</th>";
    for (const Stratum& s : r.strata) h << "<th>" << escape_html(s.name) << "</th>";
    h << "<th>val loss</th><th>fit</th></tr>\n";
    for (size_t i = 0; i < r.runs.size(); ++i) {
        h << "<tr><td>" << i << "</td>";
        for (const double w : r.runs[i].weights) h << "<td>" << fixed_decimals(w, 3) << "</td>";
        h << "<td>" << fixed_decimals(r.runs[i].val_loss, 4) << "</td><td>"
          << fixed_decimals(r.fit.predict(r.runs[i].weights), 4) << "</td></tr>\n";
    }
    h << "</table>\n";
}

}  // namespace

void write_mixture_report(const MixOptions& o, const MixResult& r, const std::string& path) {
    std::ostringstream h;
    h << "<!doctype html><html><head><meta charset=\"utf-8\"><title>syslm data mix</title>"
         "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}td,th{padding:2px "
         "8px;text-align:right}</style></head><body>\n<h1>syslm data mix: "
      << escape_html(o.data.out_dir) << "</h1>\n<p>" << r.meta.train_tokens
      << " train tokens in the mixture; its val is every stratum's val (" << r.meta.val_tokens
      << " tokens), the same whatever the weights.</p>\n<h2>Strata</h2>\n<table>\n<tr><th>"
         "stratum</th><th>docs</th><th>train tokens</th><th>val tokens</th><th>weight</th><th>in "
         "mixture</th><th>repeats</th>"
      << (o.levels > 0 ? "<th>perplexity</th>" : "") << "</tr>\n";
    double total = 0;
    for (const Stratum& s : r.strata) total += static_cast<double>(s.train_tokens);
    std::vector<double> natural;
    for (const Stratum& s : r.strata) {
        natural.push_back(static_cast<double>(s.train_tokens) / std::max(total, 1.0));
        h << "<tr><td>" << escape_html(s.name) << "</td><td>" << s.docs << "</td><td>"
          << s.train_tokens << "</td><td>" << s.val_tokens << "</td><td>"
          << fixed_decimals(s.weight, 4) << "</td><td>" << s.mixed_tokens << "</td><td>"
          << fixed_decimals(s.repeats(), 2) << "</td>";
        if (o.levels > 0)
            h << "<td>" << fixed_decimals(s.ppl_min, 2) << " - " << fixed_decimals(s.ppl_max, 2)
              << "</td>";
        h << "</tr>\n";
    }
    h << "</table>\n<h2>Weights</h2>\n";
    weight_bars(h, r.strata, natural);
    if (!r.runs.empty()) search_section(h, o, r);
    h << "</body></html>\n";
    write_file_atomically(path, h.str());
}

}  // namespace syslm::curate
