#include "curate/mixture_search.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "core/error.hpp"

namespace syslm::curate {

ProxySpec parse_proxy(const std::string& spec) {
    ProxySpec p;
    for (size_t at = 0; at < spec.size();) {
        const size_t comma = std::min(spec.find(',', at), spec.size());
        const std::string item = spec.substr(at, comma - at);
        at = comma + 1;
        const size_t eq = item.find('=');
        SYSLM_CHECK(eq != std::string::npos, "--proxy '", item, "': expected KEY=VALUE");
        const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        SYSLM_CHECK(
            !value.empty() && end == value.c_str() + value.size() && v > 0 && std::isfinite(v),
            "--proxy '", item, "': the value is not a positive number");
        int* field = key == "layers"  ? &p.layers
                     : key == "dim"   ? &p.dim
                     : key == "heads" ? &p.heads
                     : key == "steps" ? &p.steps
                     : key == "seq"   ? &p.seq
                     : key == "batch" ? &p.batch
                                      : nullptr;
        if (key == "lr")
            p.lr = v;
        else if (field)
            *field = static_cast<int>(v);
        else
            fail("--proxy: unknown key '", key, "' (layers, dim, heads, steps, seq, batch, lr)");
    }
    SYSLM_CHECK(p.dim % p.heads == 0, "--proxy: dim ", p.dim, " is not a multiple of heads ",
                p.heads);
    return p;
}

std::vector<double> MixtureModel::features(const std::vector<double>& w) {
    std::vector<double> f(w);
    for (const double x : w) f.push_back(std::log(x + kLogFloor));
    return f;
}

double MixtureModel::predict(const std::vector<double>& w) const {
    const std::vector<double> f = features(w);
    return std::inner_product(f.begin(), f.end(), coef.begin(), 0.0);
}

namespace {

// Solves (X^T X + lambda I) c = X^T y by Gaussian elimination with partial pivoting (a few
// dozen features at most).
std::vector<double> ridge(const std::vector<std::vector<double>>& x, const std::vector<double>& y,
                          double lambda) {
    const size_t n = x.front().size();
    std::vector<std::vector<double>> a(n, std::vector<double>(n + 1, 0.0));
    for (size_t r = 0; r < x.size(); ++r)
        for (size_t i = 0; i < n; ++i) {
            for (size_t j = 0; j < n; ++j) a[i][j] += x[r][i] * x[r][j];
            a[i][n] += x[r][i] * y[r];
        }
    for (size_t i = 0; i < n; ++i) a[i][i] += lambda;
    for (size_t c = 0; c < n; ++c) {
        size_t p = c;
        for (size_t r = c + 1; r < n; ++r)
            if (std::fabs(a[r][c]) > std::fabs(a[p][c])) p = r;
        std::swap(a[c], a[p]);
        for (size_t r = 0; r < n; ++r) {
            if (r == c || a[r][c] == 0) continue;
            const double f = a[r][c] / a[c][c];
            for (size_t j = c; j <= n; ++j) a[r][j] -= f * a[c][j];
        }
    }
    std::vector<double> coef(n);
    for (size_t i = 0; i < n; ++i) coef[i] = a[i][n] / a[i][i];
    return coef;
}

MixtureModel fit_on(const std::vector<SearchRun>& runs, size_t skip) {
    std::vector<std::vector<double>> x;
    std::vector<double> y;
    for (size_t i = 0; i < runs.size(); ++i)
        if (i != skip) {
            x.push_back(MixtureModel::features(runs[i].weights));
            y.push_back(runs[i].val_loss);
        }
    // Standardized features and a centred loss: the ridge (1e-3 per run) then shrinks every
    // feature alike and never the level, which returns through the weights (they sum to 1).
    const size_t n = x.size(), f = x.front().size();
    std::vector<double> mean(f, 0.0), sd(f, 0.0);
    for (const auto& row : x)
        for (size_t j = 0; j < f; ++j) mean[j] += row[j] / static_cast<double>(n);
    for (const auto& row : x)
        for (size_t j = 0; j < f; ++j) sd[j] += (row[j] - mean[j]) * (row[j] - mean[j]);
    for (double& v : sd) v = std::max(std::sqrt(v / static_cast<double>(n)), 1e-12);
    for (auto& row : x)
        for (size_t j = 0; j < f; ++j) row[j] = (row[j] - mean[j]) / sd[j];
    const double level = std::accumulate(y.begin(), y.end(), 0.0) / static_cast<double>(n);
    for (double& v : y) v -= level;
    MixtureModel m;
    m.k = static_cast<int>(runs.front().weights.size());
    m.coef = ridge(x, y, 1e-3 * static_cast<double>(n));
    double intercept = level;
    for (size_t j = 0; j < f; ++j) {
        m.coef[j] /= sd[j];
        intercept -= m.coef[j] * mean[j];
    }
    for (int i = 0; i < m.k; ++i) m.coef[static_cast<size_t>(i)] += intercept;
    return m;
}

}  // namespace

MixtureModel fit_mixture_model(const std::vector<SearchRun>& runs) {
    SYSLM_CHECK(runs.size() >= 3, "mixture search: ", runs.size(),
                " runs are too few to fit (at least 3)");
    MixtureModel m = fit_on(runs, runs.size());
    double mean = 0;
    for (const SearchRun& r : runs) mean += r.val_loss;
    mean /= static_cast<double>(runs.size());
    double ss_res = 0, ss_tot = 0, loo = 0;
    for (size_t i = 0; i < runs.size(); ++i) {
        const double e = runs[i].val_loss - m.predict(runs[i].weights);
        ss_res += e * e;
        ss_tot += (runs[i].val_loss - mean) * (runs[i].val_loss - mean);
        const double l = runs[i].val_loss - fit_on(runs, i).predict(runs[i].weights);
        loo += l * l;
    }
    m.r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : 0;
    m.loo_rmse = std::sqrt(loo / static_cast<double>(runs.size()));
    return m;
}

double Dirichlet::uniform() {
    uint64_t x = (state_ += 0x9E3779B97F4A7C15ull);  // splitmix64
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    return (static_cast<double>(x >> 11) + 0.5) * 0x1.0p-53;
}

double Dirichlet::normal() {  // Box-Muller, one of the pair
    const double u = uniform(), v = uniform();
    return std::sqrt(-2 * std::log(u)) * std::cos(2 * M_PI * v);
}

double Dirichlet::gamma(double shape) {
    if (shape < 1) return gamma(shape + 1) * std::pow(uniform(), 1 / shape);
    const double d = shape - 1.0 / 3, c = 1 / std::sqrt(9 * d);
    for (;;) {
        double x, v;
        do {
            x = normal();
            v = 1 + c * x;
        } while (v <= 0);
        v = v * v * v;
        const double u = uniform();
        if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
    }
}

std::vector<double> Dirichlet::draw(const std::vector<double>& alpha) {
    std::vector<double> w(alpha.size());
    double sum = 0;
    for (size_t i = 0; i < alpha.size(); ++i) sum += (w[i] = gamma(alpha[i]));
    for (double& v : w) v /= sum;
    return w;
}

std::vector<double> run_weights(const std::vector<double>& prior, int run, uint64_t seed) {
    static constexpr double kScale[3] = {0.5, 1, 2};
    std::vector<double> alpha(prior);
    for (double& a : alpha)
        a = std::max(a * static_cast<double>(prior.size()) * kScale[run % 3], 1e-3);
    Dirichlet d(seed * 0x100000001b3ull + static_cast<uint64_t>(run));
    return d.draw(alpha);
}

std::vector<double> best_mixture(const MixtureModel& m, const std::vector<double>& prior,
                                 uint64_t seed, int candidates, int top) {
    std::vector<std::pair<double, std::vector<double>>> scored;
    for (int i = 0; i < candidates; ++i) {
        std::vector<double> w = run_weights(prior, i, seed ^ 0x5eed);
        scored.push_back({m.predict(w), std::move(w)});
    }
    const auto n = static_cast<size_t>(std::min(top, candidates));
    std::partial_sort(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(n), scored.end(),
                      [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<double> mean(prior.size(), 0.0);
    for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < mean.size(); ++j) mean[j] += scored[i].second[j] / double(n);
    return mean;
}

}  // namespace syslm::curate
