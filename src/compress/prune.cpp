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
    for (const char* k :
         {".attn_q.weight", ".attn_k.weight", ".attn_v.weight", ".attn_qkv.weight",
          ".attn_output.weight", ".ffn_gate.weight", ".ffn_up.weight", ".ffn_down.weight",
          ".ffn_gate_exps.weight", ".ffn_up_exps.weight", ".ffn_down_exps.weight",
          ".ffn_gate_shexp.weight", ".ffn_up_shexp.weight", ".ffn_down_shexp.weight"})
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

// One threshold per matrix (per expert): the lowest `sparsity` of its scores |W| x col go,
// ties in index order.
void prune_per_matrix(std::vector<float>& v, const std::vector<float>& imp, int64_t n,
                      int64_t rows_per_mat, int64_t n_mat, double sparsity) {
    for (int64_t mat = 0; mat < n_mat; ++mat) {
        float* w0 = v.data() + mat * rows_per_mat * n;
        const int64_t cnt = rows_per_mat * n;
        const float* col = imp.empty() ? nullptr : imp.data() + mat * n;
        std::vector<float> score(static_cast<size_t>(cnt));
        for (int64_t i = 0; i < cnt; ++i) score[i] = std::fabs(w0[i]) * (col ? col[i % n] : 1.0f);
        const int64_t kk = static_cast<int64_t>(std::llround(sparsity * cnt));
        std::vector<float> sorted = score;
        std::nth_element(sorted.begin(), sorted.begin() + kk, sorted.end());
        const float thr = sorted[kk];
        int64_t zeroed = 0;
        for (int64_t i = 0; i < cnt; ++i)
            if (score[i] < thr) w0[i] = 0.0f, ++zeroed;
        for (int64_t i = 0; i < cnt && zeroed < kk; ++i)  // ties, in index order
            if (score[i] == thr) w0[i] = 0.0f, ++zeroed;
    }
}

// Per row (Wanda's choice): its k lowest scores go, or M-N of every M consecutive (pattern).
void prune_per_row(std::vector<float>& v, const std::vector<float>& imp, int64_t n, int64_t rows,
                   int64_t rows_per_mat, int64_t k, const PruneOptions& o, ThreadPool& pool) {
    const bool pattern = o.pattern_m > 0;
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
}

void log_unstructured(std::ostream& log, const PruneResult& r, const PruneOptions& o,
                      const std::string& out_path) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "pruned %lld of %lld block weights (%.2f%%) by %s%s\n",
                  static_cast<long long>(r.pruned_weights), static_cast<long long>(r.total_weights),
                  100.0 * r.sparsity(),
                  o.score == PruneScore::Wanda
                      ? (o.per_matrix ? "Wanda |W|*||X|| per matrix" : "Wanda |W|*||X|| per row")
                      : (o.per_matrix ? "magnitude |W| per matrix" : "magnitude |W| per row"),
                  o.pattern_m > 0 ? cat(", pattern ", o.pattern_n, ":", o.pattern_m).c_str() : "");
    log << buf << "wrote " << out_path << '\n';
}

}  // namespace

PruneResult prune_unstructured(const std::string& in_path, const std::string& out_path,
                               const PruneOptions& o) {
    const bool pattern = o.pattern_m > 0;
    SYSLM_CHECK(!pattern || (o.pattern_n > 0 && o.pattern_n < o.pattern_m), "prune: pattern ",
                o.pattern_n, ":", o.pattern_m, " must keep 0 < N < M");
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
        if (o.per_matrix && !pattern) {
            prune_per_matrix(v, imp, n, rows_per_mat, n_mat, o.sparsity);
            r.pruned_weights +=
                static_cast<int64_t>(std::llround(o.sparsity * rows_per_mat * n)) * n_mat;
        } else {
            const int64_t k = pattern ? n / o.pattern_m * (o.pattern_m - o.pattern_n)
                                      : static_cast<int64_t>(std::llround(o.sparsity * n));
            prune_per_row(v, imp, n, rows, rows_per_mat, k, o, pool);
            r.pruned_weights += k * rows;
        }
        r.total_weights += n * rows;
        w.add_tensor(t.name, t.type, t.ne, from_floats(t.type, v, n));
    }
    w.write(out_path);
    if (o.log) log_unstructured(*o.log, r, o, out_path);
    return r;
}

namespace {

// The attention and FFN shape structured pruning reads and rewrites.
struct DenseShape {
    uint32_t n_layer, n_head, n_head_kv, n_embd, head_dim, n_ff, G;  // G: query heads per KV head
};

DenseShape read_dense_shape(const io::GGUFFile& in, const std::string& path) {
    const std::string arch = in.get_string("general.architecture");
    const std::string a = arch + ".";
    SYSLM_CHECK(!model::arch_spec(model::parse_arch(arch, path)).fused_qkv &&
                    in.get_u32(a + "expert_count", 0) == 0,
                path,
                ": structured pruning supports dense models with separate Q/K/V (llama, qwen2); ",
                arch, " is not one");
    SYSLM_CHECK(!in.find(a + "block_source"), path,
                ": structured pruning of a model whose layers share blocks (", a,
                "block_source) is not implemented");
    DenseShape s{};
    s.n_layer = in.get_u32(a + "block_count");
    s.n_head = in.get_u32(a + "attention.head_count");
    s.n_head_kv = in.get_u32(a + "attention.head_count_kv", s.n_head);
    s.n_embd = in.get_u32(a + "embedding_length");
    s.head_dim = in.get_u32(a + "attention.key_length", s.n_embd / s.n_head);
    s.n_ff = in.get_u32(a + "feed_forward_length");
    s.G = s.n_head / s.n_head_kv;
    return s;
}

// Mean next-token loss of the model on the calibration chunks with `skip` layers bypassed.
class CalibrationLoss {
public:
    CalibrationLoss(const std::string& path, const PruneOptions& o)
        : o_(o),
          m_(path),
          ctx_(m_, o.calib_ctx, o.threads, std::min(o.calib_ctx, 512), DType::F32) {
        chunks_ = std::min<int64_t>(o.calib_chunks,
                                    static_cast<int64_t>(o.calib_tokens.size()) / o.calib_ctx);
        SYSLM_CHECK(chunks_ > 0, "prune: choosing layers needs calibration text of at least ",
                    o.calib_ctx, " tokens (", o.calib_tokens.size(), " given)");
    }

    double operator()(const std::vector<bool>& skip) {
        const int C = o_.calib_ctx, V = m_.hparams().n_vocab;
        ctx_.set_skipped_layers(skip);
        double nll = 0;
        int64_t n = 0;
        std::vector<int32_t> chunk(static_cast<size_t>(C));
        for (int64_t c = 0; c < chunks_; ++c) {
            std::copy_n(o_.calib_tokens.begin() + c * C, C, chunk.begin());
            if (o_.calib_bos >= 0) chunk[0] = o_.calib_bos;
            ctx_.reset();
            const std::span<const float> l = ctx_.forward(chunk, true);
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
    }

private:
    const PruneOptions& o_;
    model::Model m_;
    model::Context ctx_;
    int64_t chunks_ = 0;
};

// Layers to remove: greedily the one whose bypass raises the calibration loss least.
std::vector<bool> choose_layers(const std::string& path, uint32_t n_layer, const PruneOptions& o,
                                PruneResult& r) {
    std::vector<bool> removed(n_layer, false);
    if (o.layers == 0) return removed;
    CalibrationLoss loss_with(path, o);
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
            *o.log << "prune: layer " << best << " removed: calibration loss " << base << " -> "
                   << best_loss << '\n';
    }
    return removed;
}

// The `keep` highest of (score, index) pairs, as ascending indices.
std::vector<uint32_t> top_indices(std::vector<std::pair<double, uint32_t>> scored, uint32_t keep) {
    std::sort(scored.rbegin(), scored.rend());
    std::vector<uint32_t> out;
    for (uint32_t i = 0; i < keep; ++i) out.push_back(scored[i].second);
    std::sort(out.begin(), out.end());
    return out;
}

// KV groups of a layer to keep: each scored by the importance-weighted energy of its query
// heads' columns of the output projection.
std::vector<uint32_t> kept_kv_groups(const io::GGUFTensor& wo, const ImportanceMatrix& im,
                                     const DenseShape& s, uint32_t keep, const std::string& path) {
    const std::vector<float> wov = to_floats(wo);
    const std::vector<float> imp = column_importance(im, wo, 1, path);
    std::vector<double> col_energy(wo.ne[0], 0.0);
    for (int64_t rr = 0; rr < wo.rows(); ++rr)
        for (int64_t c = 0; c < wo.ne[0]; ++c) {
            const double x = wov[rr * wo.ne[0] + c];
            col_energy[c] += x * x;
        }
    std::vector<std::pair<double, uint32_t>> group(s.n_head_kv);
    for (uint32_t g = 0; g < s.n_head_kv; ++g) {
        double e = 0;
        for (uint32_t h = g * s.G; h < (g + 1) * s.G; ++h)
            for (uint32_t d = 0; d < s.head_dim; ++d)
                e += imp[h * s.head_dim + d] * col_energy[h * s.head_dim + d];
        group[g] = {e, g};
    }
    return top_indices(std::move(group), keep);
}

// FFN channels of a layer to keep: each scored by its down-projection column's energy times its
// importance.
std::vector<uint32_t> kept_ffn_channels(const io::GGUFTensor& down, const ImportanceMatrix& im,
                                        uint32_t n_ff, uint32_t keep, const std::string& path) {
    const std::vector<float> dv = to_floats(down);
    const std::vector<float> imp = column_importance(im, down, 1, path);
    std::vector<std::pair<double, uint32_t>> ch(n_ff);
    for (uint32_t j = 0; j < n_ff; ++j) ch[j] = {0.0, j};
    for (int64_t rr = 0; rr < down.rows(); ++rr)
        for (uint32_t j = 0; j < n_ff; ++j) {
            const double x = dv[rr * n_ff + j];
            ch[j].first += x * x;
        }
    for (uint32_t j = 0; j < n_ff; ++j) ch[j].first *= imp[j];
    return top_indices(std::move(ch), keep);
}

// What a layer keeps: KV groups and FFN channels, ascending.
struct LayerKeep {
    std::vector<uint32_t> kv, ff;
};

// Rows (out) or columns (in) of a block tensor that pruning keeps; both empty: unchanged.
struct Selection {
    std::vector<int64_t> rows, cols;
};

Selection select(const std::string& role, const LayerKeep& keep, const DenseShape& s,
                 const std::string& path) {
    auto expand = [](const std::vector<uint32_t>& units, uint32_t unit) {
        std::vector<int64_t> out;
        for (uint32_t u : units)
            for (uint32_t i = 0; i < unit; ++i) out.push_back(static_cast<int64_t>(u) * unit + i);
        return out;
    };
    std::vector<uint32_t> q_heads;
    for (uint32_t g : keep.kv)
        for (uint32_t h = g * s.G; h < (g + 1) * s.G; ++h) q_heads.push_back(h);
    Selection sel;
    if (role == "attn_q.weight" || role == "attn_q.bias")
        sel.rows = expand(q_heads, s.head_dim);
    else if (role == "attn_k.weight" || role == "attn_k.bias" || role == "attn_v.weight" ||
             role == "attn_v.bias")
        sel.rows = expand(keep.kv, s.head_dim);
    else if (role == "attn_output.weight")
        sel.cols = expand(q_heads, s.head_dim);
    else if (role == "ffn_gate.weight" || role == "ffn_up.weight" || role == "ffn_up.bias" ||
             role == "ffn_gate.bias")
        sel.rows = expand(keep.ff, 1);
    else if (role == "ffn_down.weight")
        sel.cols = expand(keep.ff, 1);
    else if (role == "attn_qkv.weight")
        fail(path, ": fused QKV is not supported by structured pruning");
    return sel;
}

// The tensor's values with the selection applied: cut out, or (mask_only) zeroed in place.
std::vector<float> apply_selection(const io::GGUFTensor& t, const Selection& sel, bool mask_only,
                                   std::vector<int64_t>& ne) {
    const bool is_vector = t.ne.size() == 1 || t.rows() == 1;
    const int64_t n = is_vector ? t.numel() : t.ne[0], rows = is_vector ? 1 : t.rows();
    const std::vector<float> v = to_floats(t);
    ne = t.ne;
    if (mask_only) {  // same shape, the removed rows (or columns, or vector entries) zeroed
        const bool by_row = !is_vector && !sel.rows.empty();
        std::vector<bool> keep(static_cast<size_t>(by_row ? rows : n), false);
        for (int64_t i : sel.rows.empty() ? sel.cols : sel.rows) keep[i] = true;
        std::vector<float> out = v;
        for (int64_t rr = 0; rr < rows; ++rr)
            for (int64_t c = 0; c < n; ++c)
                if (!keep[by_row ? rr : c]) out[rr * n + c] = 0;
        return out;
    }
    std::vector<float> out;
    if (is_vector) {
        for (int64_t i : sel.rows) out.push_back(v[i]);
        ne = {static_cast<int64_t>(out.size())};
    } else if (!sel.rows.empty()) {
        for (int64_t rr : sel.rows)
            out.insert(out.end(), v.begin() + rr * n, v.begin() + (rr + 1) * n);
        ne = {n, static_cast<int64_t>(sel.rows.size())};
    } else {
        for (int64_t rr = 0; rr < rows; ++rr)
            for (int64_t c : sel.cols) out.push_back(v[rr * n + c]);
        ne = {static_cast<int64_t>(sel.cols.size()), rows};
    }
    return out;
}

// The smaller model's shape in its metadata. Per-layer keys keep the kept layers' entries: the
// local/global pattern and the linear layers as one bool per layer (a period would shift), and
// BigBird's draws keyed by each kept layer's original index (attention.random_layers).
void set_pruned_shape(const io::GGUFFile& in, const DenseShape& s, const PruneResult& r,
                      const std::vector<bool>& removed, io::GGUFWriter& w) {
    const std::string a = in.get_string("general.architecture") + ".";
    const int layers_removed = static_cast<int>(std::count(removed.begin(), removed.end(), true));
    if (layers_removed > 0) {
        const model::HParams hp = model::load_hparams(in);
        std::vector<io::GGUFValue> local, linear;
        std::vector<uint32_t> ids;
        for (uint32_t il = 0; il < s.n_layer; ++il) {
            if (removed[il]) continue;
            if (!hp.local_layers.empty())
                local.push_back(io::GGUFValue::boolean(hp.local_layers[il]));
            if (!hp.linear_layers.empty())
                linear.push_back(io::GGUFValue::boolean(hp.linear_layers[il]));
            ids.push_back(hp.random_layers.empty() ? il : hp.random_layers[il]);
        }
        if (!local.empty())
            w.set(a + "attention.sliding_window_pattern",
                  io::GGUFValue::array(io::GGUFType::BOOL, local));
        if (!linear.empty())
            w.set(a + "attention.linear_pattern", io::GGUFValue::array(io::GGUFType::BOOL, linear));
        if (hp.random_blocks > 0) w.set(a + "attention.random_layers", io::GGUFValue::u32s(ids));
    }
    w.set(a + "block_count", io::GGUFValue::u32(s.n_layer - static_cast<uint32_t>(layers_removed)));
    w.set(a + "attention.head_count", io::GGUFValue::u32(static_cast<uint32_t>(r.heads_after)));
    w.set(a + "attention.head_count_kv",
          io::GGUFValue::u32(static_cast<uint32_t>(r.kv_heads_after)));
    w.set(a + "attention.key_length", io::GGUFValue::u32(s.head_dim));
    w.set(a + "attention.value_length", io::GGUFValue::u32(s.head_dim));
    w.set(a + "feed_forward_length", io::GGUFValue::u32(static_cast<uint32_t>(r.ffn_after)));
}

// One input tensor into the pruned file (cut, masked, renumbered, or as it is; nothing for a
// removed layer's tensor unless masking); returns the parameters written.
int64_t add_pruned_tensor(const io::GGUFTensor& t, const DenseShape& s,
                          const std::vector<bool>& removed, const std::vector<int>& new_index,
                          const std::vector<LayerKeep>& keep, const PruneOptions& o,
                          const std::string& path, io::GGUFWriter& w) {
    if (t.name.rfind("blk.", 0) != 0) {  // embeddings, output, norms outside the blocks
        w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
        return t.numel();
    }
    const int il = std::stoi(t.name.substr(4));
    const std::string role = t.name.substr(t.name.find('.', 4) + 1);
    if (removed[static_cast<size_t>(il)]) {
        if (!o.mask_only) return 0;  // the layer goes
        // Masked: the layer's outputs (attention and FFN out) are zeroed, so it adds nothing.
        const bool output = role == "attn_output.weight" || role == "attn_output.bias" ||
                            role == "ffn_down.weight" || role == "ffn_down.bias";
        SYSLM_CHECK(!output || is_float(t.type), path, ": tensor ", t.name, " is ",
                    dtype_name(t.type), ": prune a float model, then quantize it");
        if (output)
            w.add_tensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.nbytes, 0));
        else
            w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
        return t.numel();
    }
    const std::string name =
        o.mask_only ? t.name : cat("blk.", new_index[static_cast<size_t>(il)], ".", role);
    const Selection sel = select(role, keep[static_cast<size_t>(il)], s, path);
    if (sel.rows.empty() && sel.cols.empty()) {
        w.add_tensor(name, t.type, t.ne, t.data, t.nbytes);
        return t.numel();
    }
    SYSLM_CHECK(is_float(t.type), path, ": tensor ", t.name, " is ", dtype_name(t.type),
                ": prune a float (F32/F16/BF16) model, then quantize it");
    std::vector<int64_t> ne;
    const std::vector<float> out = apply_selection(t, sel, o.mask_only, ne);
    w.add_tensor(name, t.type, ne, from_floats(t.type, out, ne[0]));
    return static_cast<int64_t>(out.size());
}

}  // namespace

PruneResult prune_structured(const std::string& in_path, const std::string& out_path,
                             const PruneOptions& o) {
    SYSLM_CHECK(o.heads >= 0 && o.heads < 1 && o.ffn >= 0 && o.ffn < 1 && o.layers >= 0 &&
                    (o.heads + o.ffn > 0 || o.layers > 0),
                "prune: structured fractions must be in [0, 1), layers >= 0, not all 0");
    SYSLM_CHECK(o.imatrix || o.heads + o.ffn == 0,
                "prune: head and channel scores need an importance matrix");
    const io::GGUFFile in(in_path);
    const DenseShape s = read_dense_shape(in, in_path);
    SYSLM_CHECK(o.layers < static_cast<int>(s.n_layer), "prune: cannot remove ", o.layers, " of ",
                s.n_layer, " layers");

    PruneResult r;
    r.heads_before = static_cast<int>(s.n_head);
    r.kv_heads_before = static_cast<int>(s.n_head_kv);
    r.ffn_before = static_cast<int>(s.n_ff);
    // KV groups to remove per layer (each takes its G query heads); FFN channels to keep,
    // rounded to a multiple of 32 when the width is one (so quantized block types still fit).
    const uint32_t drop_kv = std::min<uint32_t>(
        s.n_head_kv - 1, static_cast<uint32_t>(std::llround(o.heads * s.n_head_kv)));
    uint32_t keep_ff = s.n_ff - static_cast<uint32_t>(std::llround(o.ffn * s.n_ff));
    if (s.n_ff % 32 == 0) keep_ff = std::max<uint32_t>(32, (keep_ff + 16) / 32 * 32);
    keep_ff = std::min(keep_ff, s.n_ff);
    r.kv_heads_after = static_cast<int>(s.n_head_kv - drop_kv);
    r.heads_after = static_cast<int>((s.n_head_kv - drop_kv) * s.G);
    r.ffn_after = static_cast<int>(keep_ff);

    const std::vector<bool> removed = choose_layers(in_path, s.n_layer, o, r);
    std::vector<int> new_index(s.n_layer, -1);
    for (uint32_t il = 0, j = 0; il < s.n_layer; ++il)
        if (!removed[il]) new_index[il] = static_cast<int>(j++);
    std::vector<LayerKeep> keep(s.n_layer);
    for (uint32_t il = 0; il < s.n_layer; ++il) {
        if (removed[il] || o.heads + o.ffn == 0) {  // all kept (or the layer goes entirely)
            for (uint32_t g = 0; g < s.n_head_kv; ++g) keep[il].kv.push_back(g);
            for (uint32_t j = 0; j < s.n_ff; ++j) keep[il].ff.push_back(j);
            continue;
        }
        const std::string p = cat("blk.", il, ".");
        keep[il].kv = kept_kv_groups(in.tensor(p + "attn_output.weight"), *o.imatrix, s,
                                     s.n_head_kv - drop_kv, in_path);
        keep[il].ff = kept_ffn_channels(in.tensor(p + "ffn_down.weight"), *o.imatrix, s.n_ff,
                                        keep_ff, in_path);
    }

    io::GGUFWriter w;
    copy_metadata(in, w);
    if (!o.mask_only) set_pruned_shape(in, s, r, removed, w);
    for (const io::GGUFTensor& t : in.tensors()) {
        r.params_before += t.numel();
        r.params_after += add_pruned_tensor(t, s, removed, new_index, keep, o, in_path, w);
    }
    w.write(out_path);
    if (o.log)
        *o.log << "structured pruning: layers " << s.n_layer << " -> " << s.n_layer - o.layers
               << ", heads " << r.heads_before << " -> " << r.heads_after << " (KV heads "
               << r.kv_heads_before << " -> " << r.kv_heads_after << "), FFN " << r.ffn_before
               << " -> " << r.ffn_after << " per layer; parameters " << r.params_before << " -> "
               << r.params_after << (o.mask_only ? " (masked, same shapes)" : "") << "\nwrote "
               << out_path << '\n';
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
