#include "compress/awq.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <ostream>

#include "compress/imatrix.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "kernels/type_traits.hpp"
#include "model/hparams.hpp"

namespace syslm::compress {
namespace {

// A matrix of the group, read as floats (a subset of its rows) with its target type.
struct Sample {
    std::string name;
    DType type;
    int64_t n_in = 0, rows = 0;
    std::vector<float> w;  // rows x n_in
};

Sample read_sample(const io::GGUFTensor& t, DType type, int search_rows) {
    Sample s{t.name, type, t.ne[0], 0, {}};
    const int64_t total = t.rows();
    s.rows = std::min<int64_t>(total, search_rows);
    s.w.resize(static_cast<size_t>(s.rows * s.n_in));
    const auto& tr = kernels::type_traits(t.type);
    const size_t rb = row_bytes(t.type, s.n_in);
    for (int64_t i = 0; i < s.rows; ++i) {
        const int64_t r = i * total / s.rows;  // evenly spread over the matrix
        tr.to_float(t.data + static_cast<size_t>(r) * rb, s.w.data() + i * s.n_in, s.n_in);
    }
    return s;
}

// sum_j imp_j (W_ij - Q(W s)_ij / s_j)^2 over the sample's rows, with the file's quantizer.
double weighted_error(const Sample& m, const std::vector<float>& imp, const std::vector<float>& s,
                      ThreadPool& pool) {
    const int64_t n = m.n_in;
    std::vector<float> imp_scaled(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) imp_scaled[j] = imp[j] / (s[j] * s[j]);
    const kernels::FromFloatImatrixFn weighted = kernels::imatrix_quantizer(m.type);
    const auto& tr = kernels::type_traits(m.type);
    std::vector<double> partial(static_cast<size_t>(pool.size()), 0.0);
    pool.parallel_for(m.rows, [&](int64_t b, int64_t e, int tid) {
        std::vector<float> row(static_cast<size_t>(n)), back(static_cast<size_t>(n));
        std::vector<uint8_t> q(row_bytes(m.type, n));
        double err = 0;
        for (int64_t r = b; r < e; ++r) {
            const float* w = m.w.data() + r * n;
            for (int64_t j = 0; j < n; ++j) row[j] = w[j] * s[j];
            if (weighted)
                weighted(row.data(), q.data(), n, imp_scaled.data());
            else
                tr.from_float(row.data(), q.data(), n);
            tr.to_float(q.data(), back.data(), n);
            for (int64_t j = 0; j < n; ++j) {
                const double d = static_cast<double>(w[j]) - back[j] / s[j];
                err += imp[j] * d * d;
            }
        }
        partial[static_cast<size_t>(tid)] += err;
    });
    double total = 0;
    for (double p : partial) total += p;
    return total;
}

// s_j = imp_j^(alpha/2), normalised by sqrt(max * min); tiny importances are floored so no
// scale explodes.
std::vector<float> scales_for(const std::vector<float>& imp, double alpha) {
    const float mx = *std::max_element(imp.begin(), imp.end());
    const float floor = std::max(mx * 1e-6f, 1e-30f);
    std::vector<float> s(imp.size());
    float lo = 1e30f, hi = 0;
    for (size_t j = 0; j < imp.size(); ++j) {
        s[j] = static_cast<float>(std::pow(std::max(imp[j], floor), alpha / 2));
        lo = std::min(lo, s[j]);
        hi = std::max(hi, s[j]);
    }
    const float norm = std::sqrt(lo * hi);
    for (float& v : s) v /= norm;
    return s;
}

// AWQ's search over the groups of one file: for each group of matrices reading one input, the
// column scales (importance^alpha over a grid of alphas) that minimise the importance-weighted
// quantization error, recorded in the plan with where their inverse is folded.
class AwqPlanner {
public:
    AwqPlanner(const io::GGUFFile& in, const ImportanceMatrix& im, const TypeOfTensor& type_of,
               int threads, std::ostream* log, int search_rows, std::vector<double> alphas,
               AwqPlan& plan)
        : in_(in),
          im_(im),
          type_of_(type_of),
          pool_(threads),
          log_(log),
          search_rows_(search_rows),
          alphas_(std::move(alphas)),
          plan_(plan) {}

    // Norm-fed groups: the norm must be a plain (bias-free) RMSNorm weight.
    void norm_group(const std::string& norm, const std::vector<std::string>& names) {
        const io::GGUFTensor* nt = find(norm);
        if (!nt || find(norm.substr(0, norm.size() - 6) + "bias")) return;
        std::vector<const io::GGUFTensor*> mats;
        for (const std::string& n : names) {
            const io::GGUFTensor* t = find(n);
            if (!t) return;
            mats.push_back(t);
        }
        const std::vector<float> imp = im_.importance(names[0], 0, mats[0]->ne[0]);
        if (imp.empty() || nt->numel() != mats[0]->ne[0]) return;
        AwqGroup g;
        g.input = names[0];
        g.mats = names;
        g.folded_into = norm;
        search(
            g, mats, imp, [&](double a) { return scales_for(imp, a); },
            [&](const std::vector<float>& s) {
                for (const std::string& n : names) plan_.column_scale[n] = s;
                scale_vector(norm, s);
            });
    }

    // ffn_down <- rows of ffn_up (layer prefix p, "blk.N.").
    void down_group(const std::string& p) {
        const io::GGUFTensor *down = find(p + "ffn_down.weight"), *up = find(p + "ffn_up.weight");
        if (!down || !up || up->rows() != down->ne[0]) return;
        const std::vector<float> imp = im_.importance(down->name, 0, down->ne[0]);
        if (imp.empty()) return;
        AwqGroup g{down->name, {down->name}, up->name};
        search(
            g, {down}, imp, [&](double a) { return scales_for(imp, a); },
            [&](const std::vector<float>& s) {
                plan_.column_scale[down->name] = s;
                scale_rows(up->name, p + "ffn_up.bias", s);
            });
    }

    // attn_output <- rows of attn_v; query heads sharing a KV head share its scales.
    void output_group(const std::string& p, uint32_t n_head_kv) {
        const io::GGUFTensor *wo = find(p + "attn_output.weight"), *wv = find(p + "attn_v.weight");
        if (!wo || !wv || n_head_kv == 0 || wv->rows() % n_head_kv != 0 ||
            wo->ne[0] % wv->rows() != 0)
            return;
        const std::vector<float> imp = im_.importance(wo->name, 0, wo->ne[0]);
        if (imp.empty()) return;
        const int64_t kv = wv->rows(), hd = kv / n_head_kv, G = wo->ne[0] / kv;
        auto kv_channel = [&](int64_t col) {  // column of wo -> row of wv
            const int64_t h = col / hd, d = col % hd;
            return (h / G) * hd + d;
        };
        std::vector<float> imp_kv(static_cast<size_t>(kv), 0.0f);
        for (int64_t c = 0; c < wo->ne[0]; ++c)
            imp_kv[static_cast<size_t>(kv_channel(c))] += imp[c] / static_cast<float>(G);
        auto expand = [&](const std::vector<float>& s_kv) {
            std::vector<float> s(static_cast<size_t>(wo->ne[0]));
            for (int64_t c = 0; c < wo->ne[0]; ++c) s[c] = s_kv[kv_channel(c)];
            return s;
        };
        AwqGroup g{wo->name, {wo->name}, wv->name};
        search(
            g, {wo}, imp, [&](double a) { return expand(scales_for(imp_kv, a)); },
            [&](const std::vector<float>& s) {
                plan_.column_scale[wo->name] = s;
                std::vector<float> s_kv(static_cast<size_t>(kv));
                for (int64_t c = 0; c < wo->ne[0]; ++c) s_kv[kv_channel(c)] = s[c];
                scale_rows(wv->name, p + "attn_v.bias", s_kv);
            });
    }

    const io::GGUFTensor* find(const std::string& n) const { return in_.find_tensor(n); }

private:
    // One group: `mats` read input `input`; `col_imp` the per-column importance used for the
    // error, `s_of(alpha)` the column scales; `apply(s)` records the folding.
    void search(AwqGroup g, const std::vector<const io::GGUFTensor*>& mats,
                const std::vector<float>& col_imp,
                const std::function<std::vector<float>(double)>& s_of,
                const std::function<void(const std::vector<float>&)>& apply) {
        std::vector<Sample> samples;
        for (const io::GGUFTensor* t : mats) {
            const DType type = type_of_(*t);
            // A float type has nothing to protect; only a grid without 0 (forced) scales it.
            if (!dtype_info(type).quantized &&
                std::find(alphas_.begin(), alphas_.end(), 0.0) != alphas_.end())
                return;
            samples.push_back(read_sample(*t, type, search_rows_));
        }
        double best = -1, best_alpha = 0, base = 0;
        std::vector<float> best_s;
        const std::vector<float> ones(col_imp.size(), 1.0f);
        for (const Sample& m : samples) base += weighted_error(m, col_imp, ones, pool_);
        for (double a : alphas_) {
            const std::vector<float> s = s_of(a);
            double err = 0;
            if (a == 0)
                err = base;
            else
                for (const Sample& m : samples) err += weighted_error(m, col_imp, s, pool_);
            if (best < 0 || err < best) {
                best = err;
                best_alpha = a;
                best_s = s;
            }
        }
        g.alpha = best_alpha;
        g.error_before = base;
        g.error_after = best;
        if (best_alpha > 0) apply(best_s);  // the grid's best (a grid without 0 forces scaling)
        if (log_) {
            char buf[256];
            std::snprintf(buf, sizeof buf,
                          "awq: %-28s alpha %.1f  weighted error %.4g -> %.4g (%+.1f%%)\n",
                          g.input.c_str(), g.alpha, base, best,
                          base > 0 ? 100.0 * (best - base) / base : 0.0);
            *log_ << buf << std::flush;
        }
        plan_.groups.push_back(std::move(g));
    }

    void scale_vector(const std::string& name, const std::vector<float>& s) {
        std::vector<float> inv(s.size());
        for (size_t j = 0; j < s.size(); ++j) inv[j] = 1.0f / s[j];
        plan_.vector_scale[name] = inv;
    }

    void scale_rows(const std::string& matrix, const std::string& bias,
                    const std::vector<float>& s_rows) {
        std::vector<float> inv(s_rows.size());
        for (size_t j = 0; j < s_rows.size(); ++j) inv[j] = 1.0f / s_rows[j];
        plan_.row_scale[matrix] = inv;
        if (find(bias)) plan_.vector_scale[bias] = inv;
    }

    const io::GGUFFile& in_;
    const ImportanceMatrix& im_;
    const TypeOfTensor& type_of_;
    ThreadPool pool_;
    std::ostream* log_;
    int search_rows_;
    std::vector<double> alphas_;
    AwqPlan& plan_;
};

}  // namespace

AwqPlan plan_awq(const io::GGUFFile& in, const ImportanceMatrix& im, const TypeOfTensor& type_of,
                 int threads, std::ostream* log, int search_rows, std::vector<double> alphas) {
    if (alphas.empty())
        for (int i = 0; i <= 10; ++i) alphas.push_back(0.1 * i);
    AwqPlan plan;
    const std::string arch = in.get_string("general.architecture", "");
    const uint32_t n_layer = in.get_u32(arch + ".block_count", 0);
    const uint32_t n_head = in.get_u32(arch + ".attention.head_count", 0);
    const uint32_t n_head_kv = in.get_u32(arch + ".attention.head_count_kv", n_head);
    if (model::arch_spec(model::parse_arch(arch, in.path())).fused_qkv ||
        in.get_u32(arch + ".expert_count", 0) > 0) {
        plan.skipped = cat(arch, ": LayerNorm with bias / fused QKV or MoE experts: not scaled");
        return plan;
    }
    if (in.find(arch + ".block_source")) {
        plan.skipped = cat(arch, ": layers share blocks (block_source): not scaled");
        return plan;
    }
    AwqPlanner planner(in, im, type_of, threads, log, search_rows, std::move(alphas), plan);
    for (uint32_t il = 0; il < n_layer; ++il) {
        const std::string p = cat("blk.", il, ".");
        if (!planner.find(p + "attn_qkv.weight"))
            planner.norm_group(p + "attn_norm.weight",
                               {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"});
        planner.norm_group(p + "ffn_norm.weight", {p + "ffn_gate.weight", p + "ffn_up.weight"});
        planner.down_group(p);
        planner.output_group(p, n_head_kv);
    }
    if (planner.find("output.weight")) planner.norm_group("output_norm.weight", {"output.weight"});
    return plan;
}

AwqPlan plan_smoothquant(const io::GGUFFile& in, const ImportanceMatrix& im, double alpha) {
    AwqPlan plan;
    SYSLM_CHECK(alpha > 0 && alpha < 1, "SmoothQuant: alpha ", alpha, " must be in (0, 1)");
    const std::string arch = in.get_string("general.architecture", "");
    const uint32_t n_layer = in.get_u32(arch + ".block_count", 0);
    // `norm`: a norm weight (1/s folded into it) or, with rows_of, the matrix whose rows produce
    // the input (ffn_up for ffn_down: its rows and bias divided by s).
    auto group = [&](const std::string& norm, const std::vector<std::string>& names,
                     bool rows_of = false) {
        const io::GGUFTensor* nt = in.find_tensor(norm);
        if (!nt || (!rows_of && in.find_tensor(norm.substr(0, norm.size() - 6) + "bias"))) return;
        const auto it = im.entries().find(names[0]);
        if (it == im.entries().end() || it->second.max_abs.empty()) return;
        const int64_t n = it->second.n_in;
        if ((rows_of ? nt->rows() : nt->numel()) != n) return;
        std::vector<float> w_max(static_cast<size_t>(n), 0.0f);
        for (const std::string& name : names) {
            const io::GGUFTensor* t = in.find_tensor(name);
            if (!t || t->ne[0] != n) return;
            std::vector<float> row(static_cast<size_t>(n));
            const size_t rb = row_bytes(t->type, n);
            for (int64_t r = 0; r < t->rows(); ++r) {
                kernels::type_traits(t->type).to_float(t->data + r * rb, row.data(), n);
                for (int64_t j = 0; j < n; ++j) w_max[j] = std::max(w_max[j], std::fabs(row[j]));
            }
        }
        const std::vector<float>& x_max = it->second.max_abs;
        std::vector<float> s(static_cast<size_t>(n)), inv(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) {
            const double v = x_max[j] > 0 && w_max[j] > 0
                                 ? std::pow(x_max[j], alpha) / std::pow(w_max[j], 1 - alpha)
                                 : 1.0;
            s[j] = static_cast<float>(std::clamp(v, 1e-5, 1e5));
            inv[j] = 1.0f / s[j];
        }
        for (const std::string& name : names) plan.column_scale[name] = s;
        if (rows_of) {
            plan.row_scale[norm] = inv;
            const std::string bias = norm.substr(0, norm.size() - 6) + "bias";
            if (in.find_tensor(bias)) plan.vector_scale[bias] = inv;
        } else {
            plan.vector_scale[norm] = inv;
        }
        AwqGroup g;
        g.input = names[0];
        g.mats = names;
        g.folded_into = norm;
        g.alpha = alpha;
        plan.groups.push_back(std::move(g));
    };
    for (uint32_t il = 0; il < n_layer; ++il) {
        const std::string p = cat("blk.", il, ".");
        if (!in.find_tensor(p + "attn_qkv.weight"))
            group(p + "attn_norm.weight",
                  {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"});
        group(p + "ffn_norm.weight", {p + "ffn_gate.weight", p + "ffn_up.weight"});
        group(p + "ffn_up.weight", {p + "ffn_down.weight"}, /*rows_of=*/true);
    }
    if (in.find_tensor("output.weight")) group("output_norm.weight", {"output.weight"});
    return plan;
}

}  // namespace syslm::compress
