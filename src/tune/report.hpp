// The tuner's report: pareto.json (every measured point, predicted beside measured), an SVG of
// the front the project draws itself (no scripts, no network; a point's plan shows on hover), an
// HTML page around it with the table, and a terminal table.
#pragma once

#include <string>

#include "tune/tuner.hpp"

namespace syslm::tune {

struct ReportContext {
    Goal goal = Goal::Decode;
    double max_kl = 0.02;
    std::string model;
};

std::string report_json(const TuneResult& r, const ReportContext& c);
std::string report_svg(const TuneResult& r, const ReportContext& c);
std::string report_html(const TuneResult& r, const ReportContext& c);
std::string report_table(const TuneResult& r, const ReportContext& c);

// One number printed with a printf format ("%.4g"), for the reports' text.
std::string fmt(const char* format, double v);

// The share of each type in a plan's listed matrices, e.g. "Q4_K 21, Q6_K 7, Q8_0 2".
std::string plan_summary(const Plan& p);

}  // namespace syslm::tune
