#include "compress/prune.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <ostream>

#include "compress/imatrix.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "io/gguf.hpp"
#include "kernels/type_traits.hpp"
#include "model/transformer.hpp"

namespace syslm::compress {
namespace {

bool is_float(DType t) {
    return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

// The blocks' weight matrices pruning applies to.
bool is_block_matrix(const io::GGUFTensor& t) {
    if (t.name.rfind("blk.", 0) != 0 || t.ne.size() < 2) return false;
    for (const char* k : {".attn_q.weight", ".attn_k.weight", ".attn_v.weight", ".attn_qkv.weight",
                          ".attn_output.weight", ".ffn_gate.weight", ".ffn_up.weight",
                          ".ffn_down.weight", ".ffn_gate_exps.weight", ".ffn_up_exps.weight",
                          ".ffn_down_exps.weight", ".ffn_gate_shexp.weight", ".ffn_up_shexp.weight",
                          ".ffn_down_shexp.weight"})
        if (t.name.ends_with(k)) return true;
    return false;
}

std::vector<float> to_floats(const io::GGUFTensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    kernels::type_traits(t.type).to_float(t.data, v.data(), t.numel());
    return v;
}

// Floats back into the tensor's own (float) type.
std::vector<uint8_t> from_floats(DType type, const std::vector<float>& v, int64_t n_per_row) {
    const int64_t rows = static_cast<int64_t>(v.size()) / n_per_row;
    std::vector<uint8_t> out(row_bytes(type, n_per_row) * static_cast<size_t>(rows));
    kernels::type_traits(type).from_float(v.data(), out.data(), static_cast<int64_t>(v.size()));
    return out;
}

void copy_metadata(const io::GGUFFile& in, io::GGUFWriter& w) {
    for (const auto& [key, value] : in.metadata()) w.set(key, value);
}

// Per-column importance of a matrix (n_mat vectors of n_in), or a check failure naming it.
std::vector<float> column_importance(const ImportanceMatrix& im, const io::GGUFTensor& t,
                                     int64_t n_mat, const std::string& path) {
    std::vector<float> out;
    for (int64_t m = 0; m < n_mat; ++m) {
        const std::vector<float> v = im.importance(t.name, m, t.ne[0]);
        SYSLM_CHECK(!v.empty() || n_mat > 1, path, ": the importance matrix has no entry for ",
                    t.name, " (of ", t.ne[0], " columns): compute it on this model");
        if (v.empty())
            out.insert(out.end(), static_cast<size_t>(t.ne[0]), 1.0f);  // an unrouted expert
        else
            out.insert(out.end(), v.begin(), v.end());
    }
    return out;
}

}  // namespace

PruneResult prune_unstructured(const std::string& in_path, const std::string& out_path,
                               const PruneOptions& o) {
    const bool pattern = o.pattern_m > 0;
    SYSLM_CHECK(!pattern || (o.pattern_n > 0 && o.pattern_n < o.pattern_m),
                "prune: pattern ", o.pattern_n, ":", o.pattern_m, " must keep 0 < N < M");
    SYSLM_CHECK(pattern || (o.sparsity > 0 && o.sparsity < 1), "prune: sparsity ", o.sparsity,
                " must be in (0, 1)");
    SYSLM_CHECK(o.score == PruneScore::Magnitude || o.imatrix,
                "prune: Wanda scores need an importance matrix (calibration text)");
    const io::GGUFFile in(in_path);
    io::GGUFWriter w;
    copy_metadata(in, w);
    PruneResult r;
    ThreadPool pool(o.threads);
    for (const io::GGUFTensor& t : in.tensors()) {
        r.params_before += t.numel();
        r.params_after += t.numel();
        if (!is_block_matrix(t)) {
            w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
            continue;
        }
        SYSLM_CHECK(is_float(t.type), in_path, ": tensor ", t.name, " is ", dtype_name(t.type),
                    ": prune a float (F32/F16/BF16) model, then quantize it");
        const int64_t n = t.ne[0], rows = t.rows(), n_mat = t.ne.size() >= 3 ? rows / t.ne[1] : 1;
        SYSLM_CHECK(!pattern || n % o.pattern_m == 0, in_path, ": ", t.name, " has ", n,
                    " columns, not a multiple of the pattern's ", o.pattern_m);
        std::vector<float> v = to_floats(t);
        std::vector<float> imp;
        if (o.score == PruneScore::Wanda) {
            imp = column_importance(*o.imatrix, t, n_mat, in_path);
            for (float& x : imp) x = std::sqrt(x);  // ||X_j|| up to a constant per matrix
        }
        const int64_t rows_per_mat = rows / n_mat;
        const int64_t k = pattern ? n / o.pattern_m * (o.pattern_m - o.pattern_n)
                                  : static_cast<int64_t>(std::llround(o.sparsity * n));
        if (o.per_matrix && !pattern) {  // one threshold per matrix (per expert)
            for (int64_t mat = 0; mat < n_mat; ++mat) {
                float* w0 = v.data() + mat * rows_per_mat * n;
                const int64_t cnt = rows_per_mat * n;
                const float* col = imp.empty() ? nullptr : imp.data() + mat * n;
                std::vector<float> score(static_cast<size_t>(cnt));
                for (int64_t i = 0; i < cnt; ++i)
                    score[i] = std::fabs(w0[i]) * (col ? col[i % n] : 1.0f);
                const int64_t kk = static_cast<int64_t>(std::llround(o.sparsity * cnt));
                std::vector<float> sorted = score;
                std::nth_element(sorted.begin(), sorted.begin() + kk, sorted.end());
                const float thr = sorted[kk];
                int64_t zeroed = 0;
                for (int64_t i = 0; i < cnt; ++i)
                    if (score[i] < thr) w0[i] = 0.0f, ++zeroed;
                for (int64_t i = 0; i < cnt && zeroed < kk; ++i)  // ties, in index order
                    if (score[i] == thr) w0[i] = 0.0f, ++zeroed;
            }
            r.pruned_weights += static_cast<int64_t>(std::llround(o.sparsity * rows_per_mat * n)) * n_mat;
            r.total_weights += n * rows;
            w.add_tensor(t.name, t.type, t.ne, from_floats(t.type, v, n));
            continue;
        }
        pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
            std::vector<float> score(static_cast<size_t>(n));
            std::vector<int32_t> idx(static_cast<size_t>(n));
            for (int64_t r0 = b; r0 < e; ++r0) {
                float* row = v.data() + r0 * n;
                const float* col = imp.empty() ? nullptr : imp.data() + (r0 / rows_per_mat) * n;
                for (int64_t j = 0; j < n; ++j) score[j] = std::fabs(row[j]) * (col ? col[j] : 1.0f);
                // Lowest scores first; ties by column so the choice is deterministic.
                auto lower = [&](int32_t a, int32_t c) {
                    return score[a] < score[c] || (score[a] == score[c] && a < c);
                };
                if (pattern) {
                    const int drop = o.pattern_m - o.pattern_n;
                    for (int64_t g = 0; g < n; g += o.pattern_m) {
                        int32_t* gi = idx.data() + g;
                        std::iota(gi, gi + o.pattern_m, static_cast<int32_t>(g));
                        std::partial_sort(gi, gi + drop, gi + o.pattern_m, lower);
                        for (int d = 0; d < drop; ++d) row[gi[d]] = 0.0f;
                    }
                } else {
                    std::iota(idx.begin(), idx.end(), 0);
                    std::nth_element(idx.begin(), idx.begin() + k, idx.end(), lower);
                    for (int64_t d = 0; d < k; ++d) row[idx[d]] = 0.0f;
                }
            }
        });
        r.pruned_weights += k * rows;
        r.total_weights += n * rows;
        w.add_tensor(t.name, t.type, t.ne, from_floats(t.type, v, n));
    }
    w.write(out_path);
    if (o.log) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "pruned %lld of %lld block weights (%.2f%%) by %s%s\n",
                      static_cast<long long>(r.pruned_weights),
                      static_cast<long long>(r.total_weights), 100.0 * r.sparsity(),
                      o.score == PruneScore::Wanda
                          ? (o.per_matrix ? "Wanda |W|*||X|| per matrix" : "Wanda |W|*||X|| per row")
                          : (o.per_matrix ? "magnitude |W| per matrix" : "magnitude |W| per row"),
                      pattern ? cat(", pattern ", o.pattern_n, ":", o.pattern_m).c_str() : "");
        *o.log << buf << "wrote " << out_path << '\n';
    }
    return r;
}

PruneResult prune_structured(const std::string& in_path, const std::string& out_path,
                             const PruneOptions& o) {
    SYSLM_CHECK(o.heads >= 0 && o.heads < 1 && o.ffn >= 0 && o.ffn < 1 && o.layers >= 0 &&
                    (o.heads + o.ffn > 0 || o.layers > 0),
                "prune: structured fractions must be in [0, 1), layers >= 0, not all 0");
    SYSLM_CHECK(o.imatrix || o.heads + o.ffn == 0,
                "prune: head and channel scores need an importance matrix");
    const io::GGUFFile in(in_path);
    const std::string arch = in.get_string("general.architecture");
    const std::string a = arch + ".";
    SYSLM_CHECK(arch != "gpt2" && in.get_u32(a + "expert_count", 0) == 0, in_path,
                ": structured pruning supports dense models with separate Q/K/V (llama, qwen2); ",
                arch, " is not one");
    const uint32_t n_layer = in.get_u32(a + "block_count");
    const uint32_t n_head = in.get_u32(a + "attention.head_count");
    const uint32_t n_head_kv = in.get_u32(a + "attention.head_count_kv", n_head);
    const uint32_t n_embd = in.get_u32(a + "embedding_length");
    const uint32_t head_dim = in.get_u32(a + "attention.key_length", n_embd / n_head);
    const uint32_t n_ff = in.get_u32(a + "feed_forward_length");
    const uint32_t G = n_head / n_head_kv;
    SYSLM_CHECK(o.layers < static_cast<int>(n_layer), "prune: cannot remove ", o.layers,
                " of ", n_layer, " layers");

    PruneResult r;
    r.heads_before = static_cast<int>(n_head);
    r.kv_heads_before = static_cast<int>(n_head_kv);
    r.ffn_before = static_cast<int>(n_ff);
    // KV groups to remove per layer (each takes its G query heads); FFN channels to keep,
    // rounded to a multiple of 32 when the width is one (so quantized block types still fit).
    const uint32_t drop_kv =
        std::min<uint32_t>(n_head_kv - 1, static_cast<uint32_t>(std::llround(o.heads * n_head_kv)));
    uint32_t keep_ff = n_ff - static_cast<uint32_t>(std::llround(o.ffn * n_ff));
    if (n_ff % 32 == 0) keep_ff = std::max<uint32_t>(32, (keep_ff + 16) / 32 * 32);
    keep_ff = std::min(keep_ff, n_ff);
    r.kv_heads_after = static_cast<int>(n_head_kv - drop_kv);
    r.heads_after = static_cast<int>((n_head_kv - drop_kv) * G);
    r.ffn_after = static_cast<int>(keep_ff);

    auto tensor = [&](const std::string& name) -> const io::GGUFTensor& {
        return in.tensor(name);
    };
    // Layers: greedily the one whose bypass raises the calibration loss least.
    std::vector<bool> removed(n_layer, false);
    if (o.layers > 0) {
        const int C = o.calib_ctx;
        const int64_t chunks =
            std::min<int64_t>(o.calib_chunks, static_cast<int64_t>(o.calib_tokens.size()) / C);
        SYSLM_CHECK(chunks > 0, "prune: choosing layers needs calibration text of at least ", C,
                    " tokens (", o.calib_tokens.size(), " given)");
        const model::Model m(in_path);
        model::Context ctx(m, C, o.threads, std::min(C, 512), DType::F32);
        const int V = m.hparams().n_vocab;
        auto loss_with = [&](const std::vector<bool>& skip) {
            ctx.set_skipped_layers(skip);
            double nll = 0;
            int64_t n = 0;
            std::vector<int32_t> chunk(static_cast<size_t>(C));
            for (int64_t c = 0; c < chunks; ++c) {
                std::copy_n(o.calib_tokens.begin() + c * C, C, chunk.begin());
                if (o.calib_bos >= 0) chunk[0] = o.calib_bos;
                ctx.reset();
                const std::span<const float> l = ctx.forward(chunk, true);
                for (int j = 0; j + 1 < C; ++j) {
                    const float* row = l.data() + static_cast<size_t>(j) * V;
                    const float mx = *std::max_element(row, row + V);
                    double sum = 0;
                    for (int v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v] - mx));
                    nll += std::log(sum) - (row[chunk[j + 1]] - mx);
                    ++n;
                }
            }
            return nll / static_cast<double>(n);
        };
        const double base = loss_with(removed);
        for (int k = 0; k < o.layers; ++k) {
            int best = -1;
            double best_loss = 0;
            for (uint32_t il = 0; il < n_layer; ++il) {
                if (removed[il]) continue;
                std::vector<bool> trial = removed;
                trial[il] = true;
                const double l = loss_with(trial);
                if (best < 0 || l < best_loss) {
                    best = static_cast<int>(il);
                    best_loss = l;
                }
            }
            removed[static_cast<size_t>(best)] = true;
            r.removed_layers.push_back(best);
            if (o.log)
                *o.log << "prune: layer " << best << " removed: calibration loss " << base
                       << " -> " << best_loss << '\n';
        }
    }
    std::vector<int> new_index(n_layer, -1);
    for (uint32_t il = 0, j = 0; il < n_layer; ++il)
        if (!removed[il]) new_index[il] = static_cast<int>(j++);

    // Per layer: kept KV heads and kept FFN channels, ascending.
    std::vector<std::vector<uint32_t>> kept_kv(n_layer), kept_ff(n_layer);
    for (uint32_t il = 0; il < n_layer; ++il) {
        if (removed[il] || o.heads + o.ffn == 0) {  // all kept (or the layer goes entirely)
            for (uint32_t g = 0; g < n_head_kv; ++g) kept_kv[il].push_back(g);
            for (uint32_t j = 0; j < n_ff; ++j) kept_ff[il].push_back(j);
            continue;
        }
        const std::string p = cat("blk.", il, ".");
        const io::GGUFTensor& wo = tensor(p + "attn_output.weight");
        const std::vector<float> wov = to_floats(wo);
        const std::vector<float> imp_o = column_importance(*o.imatrix, wo, 1, in_path);
        std::vector<double> col_energy(wo.ne[0], 0.0);
        for (int64_t rr = 0; rr < wo.rows(); ++rr)
            for (int64_t c = 0; c < wo.ne[0]; ++c) {
                const double x = wov[rr * wo.ne[0] + c];
                col_energy[c] += x * x;
            }
        std::vector<std::pair<double, uint32_t>> group(n_head_kv);
        for (uint32_t g = 0; g < n_head_kv; ++g) {
            double s = 0;
            for (uint32_t h = g * G; h < (g + 1) * G; ++h)
                for (uint32_t d = 0; d < head_dim; ++d)
                    s += imp_o[h * head_dim + d] * col_energy[h * head_dim + d];
            group[g] = {s, g};
        }
        std::sort(group.rbegin(), group.rend());
        for (uint32_t i = 0; i < n_head_kv - drop_kv; ++i) kept_kv[il].push_back(group[i].second);
        std::sort(kept_kv[il].begin(), kept_kv[il].end());

        const io::GGUFTensor& down = tensor(p + "ffn_down.weight");
        const std::vector<float> dv = to_floats(down);
        const std::vector<float> imp_d = column_importance(*o.imatrix, down, 1, in_path);
        std::vector<std::pair<double, uint32_t>> ch(n_ff);
        for (uint32_t j = 0; j < n_ff; ++j) ch[j] = {0.0, j};
        for (int64_t rr = 0; rr < down.rows(); ++rr)
            for (uint32_t j = 0; j < n_ff; ++j) {
                const double x = dv[rr * n_ff + j];
                ch[j].first += x * x;
            }
        for (uint32_t j = 0; j < n_ff; ++j) ch[j].first *= imp_d[j];
        std::sort(ch.rbegin(), ch.rend());
        for (uint32_t i = 0; i < keep_ff; ++i) kept_ff[il].push_back(ch[i].second);
        std::sort(kept_ff[il].begin(), kept_ff[il].end());
    }

    // Row or column selections: index lists in units of `unit` rows / columns.
    auto expand = [](const std::vector<uint32_t>& units, uint32_t unit) {
        std::vector<int64_t> out;
        for (uint32_t u : units)
            for (uint32_t i = 0; i < unit; ++i) out.push_back(static_cast<int64_t>(u) * unit + i);
        return out;
    };
    auto q_heads = [&](const std::vector<uint32_t>& kv) {
        std::vector<uint32_t> q;
        for (uint32_t g : kv)
            for (uint32_t h = g * G; h < (g + 1) * G; ++h) q.push_back(h);
        return q;
    };

    io::GGUFWriter w;
    copy_metadata(in, w);
    if (!o.mask_only) {
        w.set(a + "block_count", io::GGUFValue::u32(n_layer - static_cast<uint32_t>(o.layers)));
        w.set(a + "attention.head_count", io::GGUFValue::u32(static_cast<uint32_t>(r.heads_after)));
        w.set(a + "attention.head_count_kv",
              io::GGUFValue::u32(static_cast<uint32_t>(r.kv_heads_after)));
        w.set(a + "attention.key_length", io::GGUFValue::u32(head_dim));
        w.set(a + "attention.value_length", io::GGUFValue::u32(head_dim));
        w.set(a + "feed_forward_length", io::GGUFValue::u32(keep_ff));
    }
    for (const io::GGUFTensor& t : in.tensors()) {
        r.params_before += t.numel();
        int il = -1;
        std::string role, name = t.name;
        if (t.name.rfind("blk.", 0) == 0) {
            il = std::stoi(t.name.substr(4));
            role = t.name.substr(t.name.find('.', 4) + 1);
            if (removed[static_cast<size_t>(il)]) {
                if (!o.mask_only) continue;  // the layer goes
                if (role == "attn_output.weight" || role == "attn_output.bias" ||
                    role == "ffn_down.weight" || role == "ffn_down.bias") {
                    std::vector<uint8_t> zeros(t.nbytes, 0);  // 0 in every float type
                    SYSLM_CHECK(is_float(t.type), in_path, ": tensor ", t.name, " is ",
                                dtype_name(t.type), ": prune a float model, then quantize it");
                    w.add_tensor(t.name, t.type, t.ne, std::move(zeros));
                } else {
                    w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
                }
                r.params_after += t.numel();
                continue;
            }
            if (!o.mask_only) name = cat("blk.", new_index[static_cast<size_t>(il)], ".", role);
        }
        // What to keep: rows (out) or columns (in) of this tensor; empty: unchanged.
        std::vector<int64_t> rows_kept, cols_kept;
        if (il >= 0) {
            const auto& kv = kept_kv[static_cast<size_t>(il)];
            if (role == "attn_q.weight" || role == "attn_q.bias")
                rows_kept = expand(q_heads(kv), head_dim);
            else if (role == "attn_k.weight" || role == "attn_k.bias" || role == "attn_v.weight" ||
                     role == "attn_v.bias")
                rows_kept = expand(kv, head_dim);
            else if (role == "attn_output.weight")
                cols_kept = expand(q_heads(kv), head_dim);
            else if (role == "ffn_gate.weight" || role == "ffn_up.weight" ||
                     role == "ffn_up.bias" || role == "ffn_gate.bias")
                rows_kept = expand(kept_ff[static_cast<size_t>(il)], 1);
            else if (role == "ffn_down.weight")
                cols_kept = expand(kept_ff[static_cast<size_t>(il)], 1);
            else if (role == "attn_qkv.weight")
                fail(in_path, ": fused QKV is not supported by structured pruning");
        }
        if (rows_kept.empty() && cols_kept.empty()) {
            w.add_tensor(name, t.type, t.ne, t.data, t.nbytes);
            r.params_after += t.numel();
            continue;
        }
        SYSLM_CHECK(is_float(t.type), in_path, ": tensor ", t.name, " is ", dtype_name(t.type),
                    ": prune a float (F32/F16/BF16) model, then quantize it");
        const bool is_vector = t.ne.size() == 1 || t.rows() == 1;
        const int64_t n = is_vector ? t.numel() : t.ne[0], rows = is_vector ? 1 : t.rows();
        const std::vector<float> v = to_floats(t);
        std::vector<float> out;
        std::vector<int64_t> ne = t.ne;
        if (o.mask_only) {  // same shape, the removed parts zeroed
            out = v;
            if (is_vector) {
                std::vector<bool> keep(static_cast<size_t>(n), false);
                for (int64_t i : rows_kept) keep[i] = true;
                for (int64_t i = 0; i < n; ++i)
                    if (!keep[i]) out[i] = 0;
            } else if (!rows_kept.empty()) {
                std::vector<bool> keep(static_cast<size_t>(rows), false);
                for (int64_t i : rows_kept) keep[i] = true;
                for (int64_t rr = 0; rr < rows; ++rr)
                    if (!keep[rr]) std::fill_n(out.begin() + rr * n, n, 0.0f);
            } else {
                std::vector<bool> keep(static_cast<size_t>(n), false);
                for (int64_t i : cols_kept) keep[i] = true;
                for (int64_t rr = 0; rr < rows; ++rr)
                    for (int64_t c = 0; c < n; ++c)
                        if (!keep[c]) out[rr * n + c] = 0;
            }
        } else if (is_vector) {
            for (int64_t i : rows_kept) out.push_back(v[i]);
            ne = {static_cast<int64_t>(out.size())};
        } else if (!rows_kept.empty()) {
            for (int64_t rr : rows_kept) out.insert(out.end(), v.begin() + rr * n, v.begin() + (rr + 1) * n);
            ne = {n, static_cast<int64_t>(rows_kept.size())};
        } else {
            for (int64_t rr = 0; rr < rows; ++rr)
                for (int64_t c : cols_kept) out.push_back(v[rr * n + c]);
            ne = {static_cast<int64_t>(cols_kept.size()), rows};
        }
        r.params_after += static_cast<int64_t>(out.size());
        w.add_tensor(name, t.type, ne, from_floats(t.type, out, ne[0]));
    }
    w.write(out_path);
    if (o.log)
        *o.log << "structured pruning: layers " << n_layer << " -> " << n_layer - o.layers
               << ", heads " << r.heads_before << " -> " << r.heads_after
               << " (KV heads " << r.kv_heads_before << " -> " << r.kv_heads_after
               << "), FFN " << r.ffn_before << " -> " << r.ffn_after << " per layer; parameters "
               << r.params_before << " -> " << r.params_after
               << (o.mask_only ? " (masked, same shapes)" : "") << "\nwrote " << out_path << '\n';
    return r;
}

void parse_structured_spec(const std::string& spec, PruneOptions& o, const std::string& what) {
    auto fraction = [&](const std::string& key, const std::string& v) {
        try {
            size_t used = 0;
            const double f = std::stod(v, &used);
            if (used == v.size() && f >= 0 && f < 1) return f;
        } catch (const std::exception&) {
        }
        fail(what, ": ", key, "=", v, " is not a fraction in [0, 1)");
    };
    size_t pos = 0;
    while (pos <= spec.size()) {
        const size_t end = std::min(spec.find(',', pos), spec.size());
        const std::string item = spec.substr(pos, end - pos);
        const size_t eq = item.find('=');
        SYSLM_CHECK(eq != std::string::npos, what, ": '", item,
                    "' is not KEY=VALUE (keys: layers, heads, ffn)");
        const std::string key = item.substr(0, eq), v = item.substr(eq + 1);
        if (key == "layers") {
            SYSLM_CHECK(!v.empty() && v.size() < 6 &&
                            v.find_first_not_of("0123456789") == std::string::npos,
                        what, ": layers=", v, " is not a count of layers");
            o.layers = std::stoi(v);
        } else if (key == "heads")
            o.heads = fraction(key, v);
        else if (key == "ffn")
            o.ffn = fraction(key, v);
        else
            fail(what, ": unknown key '", key, "' (keys: layers, heads, ffn)");
        pos = end + 1;
    }
}

}  // namespace syslm::compress
