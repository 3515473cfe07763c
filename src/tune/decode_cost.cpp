#include "tune/decode_cost.hpp"

#include <algorithm>
#include <cmath>

#include "compress/quantize_model.hpp"
#include "core/error.hpp"

namespace syslm::tune {
namespace {

// Solves A x = b (n x n, row-major) by Gaussian elimination with partial pivoting; A is
// symmetric positive definite here (normal equations with a ridge), so pivots stay away from 0.
std::vector<double> solve(std::vector<double> A, std::vector<double> b) {
    const size_t n = b.size();
    for (size_t k = 0; k < n; ++k) {
        size_t p = k;
        for (size_t i = k + 1; i < n; ++i)
            if (std::abs(A[i * n + k]) > std::abs(A[p * n + k])) p = i;
        SYSLM_CHECK(std::abs(A[p * n + k]) > 0, "decode cost fit: singular system");
        if (p != k) {
            for (size_t j = 0; j < n; ++j) std::swap(A[k * n + j], A[p * n + j]);
            std::swap(b[k], b[p]);
        }
        for (size_t i = k + 1; i < n; ++i) {
            const double f = A[i * n + k] / A[k * n + k];
            for (size_t j = k; j < n; ++j) A[i * n + j] -= f * A[k * n + j];
            b[i] -= f * b[k];
        }
    }
    std::vector<double> x(n);
    for (size_t k = n; k-- > 0;) {
        double s = b[k];
        for (size_t j = k + 1; j < n; ++j) s -= A[k * n + j] * x[j];
        x[k] = s / A[k * n + k];
    }
    return x;
}

}  // namespace

BytesByType decode_bytes(const io::GGUFFile& file) {
    const bool own_output = file.find_tensor("output.weight") != nullptr;
    BytesByType out;
    for (const io::GGUFTensor& t : file.tensors()) {
        if (!compress::is_quantizable_weight(t.name, t.ne)) continue;
        if (own_output && t.name == "token_embd.weight") continue;
        out[t.type] += static_cast<double>(t.nbytes);
    }
    return out;
}

double DecodeCostModel::seconds_per_byte(DType t) const {
    const auto it = s_per_byte.find(t);
    return it != s_per_byte.end() ? it->second : mean_s_per_byte;
}

double DecodeCostModel::predict(const BytesByType& bytes) const {
    double s = fixed_s;
    for (const auto& [t, b] : bytes) s += b * seconds_per_byte(t);
    return s;
}

DecodeCostModel fit_decode_cost(const std::vector<DecodeTimeSample>& samples, double ridge) {
    SYSLM_CHECK(ridge >= 0, "decode cost fit: ridge ", ridge, " < 0");
    SYSLM_CHECK(samples.size() >= 2, "decode cost fit: needs two timed files, got ",
                samples.size());
    DecodeCostModel m;
    m.samples = static_cast<int>(samples.size());
    // Stage 1: t = f + c * total bytes. Unknowns scaled to seconds (f) and seconds per MB (c).
    {
        std::vector<double> A(4, 0), b(2, 0);
        for (const DecodeTimeSample& s : samples) {
            double total = 0;
            for (const auto& [t, v] : s.bytes) total += v;
            const double w = 1 / (s.seconds_per_token * s.seconds_per_token);
            const double x[2] = {1, total / 1e6};
            for (int i = 0; i < 2; ++i) {
                for (int j = 0; j < 2; ++j) A[i * 2 + j] += w * x[i] * x[j];
                b[i] += w * x[i] * s.seconds_per_token;
            }
        }
        A[3] += 1e-12 * (A[3] + 1);  // keeps identical byte totals solvable
        const std::vector<double> x = solve(A, b);
        m.fixed_s = std::max(0.0, x[0]);
        m.mean_s_per_byte = std::max(1e-15, x[1] / 1e6);
    }
    // Stage 2: a rate per observed type, ridge towards the common rate.
    std::vector<DType> types;
    for (const DecodeTimeSample& s : samples)
        for (const auto& [t, v] : s.bytes)
            if (v > 0 && std::find(types.begin(), types.end(), t) == types.end()) types.push_back(t);
    const size_t n = types.size() + 1;
    std::vector<double> A(n * n, 0), b(n, 0);
    for (const DecodeTimeSample& s : samples) {
        const double w = 1 / (s.seconds_per_token * s.seconds_per_token);
        std::vector<double> x(n, 0);
        x[0] = 1;
        for (size_t k = 0; k < types.size(); ++k) {
            const auto it = s.bytes.find(types[k]);
            x[k + 1] = it == s.bytes.end() ? 0 : it->second / 1e6;
        }
        for (size_t i = 0; i < n; ++i) {
            for (size_t j = 0; j < n; ++j) A[i * n + j] += w * x[i] * x[j];
            b[i] += w * x[i] * s.seconds_per_token;
        }
    }
    // The ridge's strength: a fraction of the average diagonal of the rates' block.
    double diag = 0;
    for (size_t k = 1; k < n; ++k) diag += A[k * n + k];
    const double lambda = ridge * diag / static_cast<double>(std::max<size_t>(1, n - 1));
    for (size_t k = 1; k < n; ++k) {
        A[k * n + k] += lambda;
        b[k] += lambda * m.mean_s_per_byte * 1e6;
    }
    A[0] += 1e-12 * (A[0] + 1);
    const std::vector<double> x = solve(A, b);
    // The fixed time cannot exceed the fastest file's whole time (noise can push it there).
    double fastest = samples[0].seconds_per_token;
    for (const DecodeTimeSample& s : samples) fastest = std::min(fastest, s.seconds_per_token);
    m.fixed_s = std::clamp(x[0], 0.0, 0.95 * fastest);
    for (size_t k = 0; k < types.size(); ++k)
        m.s_per_byte[types[k]] = std::max(0.05 * m.mean_s_per_byte, x[k + 1] / 1e6);
    return m;
}

}  // namespace syslm::tune
