#include "compress/quantize_model.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <ostream>
#include <regex>
#include <thread>

#include "compress/awq.hpp"
#include "compress/imatrix.hpp"
#include "core/error.hpp"
#include "io/gguf.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::compress {
namespace {

constexpr DType kTargets[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1,
                              DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q2_K, DType::Q3_K,
                              DType::Q4_K, DType::Q5_K, DType::Q6_K};

// ggml_n_dims: trailing dimensions of size 1 do not count, so a [4096, 1] tensor is 1-D.
int effective_dims(std::span<const int64_t> ne) {
    for (int i = static_cast<int>(ne.size()) - 1; i >= 1; --i)
        if (ne[static_cast<size_t>(i)] > 1) return i + 1;
    return 1;
}

bool contains(std::string_view s, std::string_view part) {
    return s.find(part) != std::string_view::npos;
}

}  // namespace

bool is_quantizable_weight(std::string_view name, std::span<const int64_t> ne) {
    if (!name.ends_with("weight") || effective_dims(ne) < 2) return false;
    static constexpr std::string_view kKeep[] = {"_norm.weight",
                                                 "ffn_gate_inp.weight",
                                                 "ssm_conv1d.weight",
                                                 "attn_conv.weight",  // syslm's conv taps
                                                 "time_mix_first.weight",
                                                 "time_mix_w1.weight",
                                                 "time_mix_w2.weight",
                                                 "time_mix_decay_w1.weight",
                                                 "time_mix_decay_w2.weight",
                                                 "time_mix_lerp_fused.weight",
                                                 "attn_rel_b.weight"};
    for (std::string_view k : kKeep)
        if (contains(name, k)) return false;
    return name != "position_embd.weight" && name != "token_types.weight";
}

namespace {

bool fits(DType t, int64_t n_per_row) {
    return n_per_row % dtype_info(t).block_size == 0;
}

// llama.cpp's replacement when the row length does not fit the chosen type's block.
DType fallback_of(DType t) {
    switch (t) {
        case DType::Q2_K:
        case DType::Q3_K:
            return DType::Q4_0;  // llama.cpp: IQ4_NL (not in syslm), same size
        case DType::Q4_K:
            return DType::Q5_0;
        case DType::Q5_K:
            return DType::Q5_1;
        case DType::Q6_K:
            return DType::Q8_0;
        default:
            return DType::F16;  // llama.cpp stops with an error here
    }
}

std::string shape_str(const std::vector<int64_t>& ne) {
    std::string s = "[";
    for (size_t i = 0; i < ne.size(); ++i) s += cat(i ? ", " : "", ne[i]);
    return s + "]";
}

std::string mib(size_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
    return buf;
}

// llama.cpp's use_more_bits: the first and last eighth of the layers, and every third between.
bool use_more_bits(int i_layer, int n_layer) {
    return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

// The N of "blk.N.", or -1.
int layer_of(std::string_view name) {
    if (name.substr(0, 4) != "blk.") return -1;
    int n = 0;
    size_t i = 4;
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) n = n * 10 + (name[i] - '0');
    return i > 4 && i < name.size() && name[i] == '.' ? n : -1;
}

// The recipe's type for one tensor: llama_tensor_get_type's rules for the mixes (Q2_K, Q3_K_S/M/L,
// Q4_K_S/M, Q5_K_S/M) and its one importance-dependent rule for Q4_0/Q5_0. Layer indices come
// from the tensor name (llama.cpp counts tensors of the kind, the same for these models).
DType recipe_type(std::string_view name, const QuantTarget& target, const ModelFacts& facts,
                  std::string* note) {
    const int il = layer_of(name), nl = static_cast<int>(facts.n_layer);
    const DType base = target.type;
    const KMix mix = target.mix;
    const bool q2 = base == DType::Q2_K;  // Q2_K is always llama.cpp's mix
    const bool q3 = base == DType::Q3_K, q4 = base == DType::Q4_K, q5 = base == DType::Q5_K;
    const bool falcon = facts.architecture == "falcon", moe8 = facts.expert_count == 8;
    const bool more = il >= 0 && use_more_bits(il, nl);
    DType t = base;
    if (contains(name, "attn_v.weight") && il >= 0) {
        const bool gqa4 = facts.n_head_kv > 0 && facts.n_head / facts.n_head_kv >= 4;
        if (q2)
            t = gqa4 ? DType::Q4_K : DType::Q3_K;
        else if (q3 && mix == KMix::M)
            t = il < 2 ? DType::Q5_K : DType::Q4_K;
        else if (q3 && mix == KMix::L)
            t = DType::Q5_K;
        else if ((q4 || q5) && mix == KMix::M && more)
            t = DType::Q6_K;
        else if (q4 && mix == KMix::S && il < 4)
            t = DType::Q5_K;
    } else if (contains(name, "ffn_down") && il >= 0) {
        if (q2)
            t = DType::Q3_K;
        else if (q3 && mix == KMix::M)
            t = il < nl / 16 ? DType::Q5_K : (!falcon || more) ? DType::Q4_K : DType::Q3_K;
        else if (q3 && mix == KMix::L)
            t = falcon ? DType::Q4_K : DType::Q5_K;
        else if (q4 && mix == KMix::M)
            t = falcon ? (il < nl / 16 ? DType::Q6_K
                          : more       ? DType::Q5_K
                                       : DType::Q4_K)
                       : (more ? DType::Q6_K : DType::Q4_K);
        else if (q5 && mix == KMix::M && more)
            t = DType::Q6_K;
        else if (q4 && mix == KMix::S && !falcon && il < nl / 8)
            t = DType::Q5_K;
        else if ((base == DType::Q4_0 || base == DType::Q5_0) && facts.has_imatrix && il < nl / 8)
            t = base == DType::Q4_0 ? DType::Q4_1 : DType::Q5_1;  // llama.cpp's guard for ffn_down
    } else if (contains(name, "attn_output.weight")) {
        if (!falcon && moe8) {
            if (q2 || (q3 && (mix == KMix::S || mix == KMix::M)) ||
                (q4 && (mix == KMix::S || mix == KMix::M)))
                t = DType::Q5_K;
        } else if (!falcon) {
            if (q2)
                t = DType::Q3_K;
            else if (q3 && mix == KMix::M)
                t = DType::Q4_K;
            else if (q3 && mix == KMix::L)
                t = DType::Q5_K;
        } else if (q3 && mix == KMix::L) {
            t = DType::Q4_K;
        }
    } else if (contains(name, "attn_qkv.weight")) {
        if (q3 && (mix == KMix::M || mix == KMix::L))
            t = DType::Q4_K;
        else if (q4 && mix == KMix::M)
            t = DType::Q5_K;
        else if (q5 && mix == KMix::M)
            t = DType::Q6_K;
    }
    if (t != base)
        *note =
            cat(quant_target_name(target),
                t == DType::Q4_1 || t == DType::Q5_1 ? " with an importance matrix" : " recipe");
    return t;
}

// The importance of every matrix of a tensor (n_mat * n_per_row), or empty when the imatrix has
// no entry. An expert that saw no calibration token gets the mean of the others (all equal if
// none did), as it would otherwise have no weights at all.
std::vector<float> importance_of(const ImportanceMatrix& im, const std::string& name,
                                 int64_t n_per_row, int64_t n_mat, const std::string& what) {
    const auto it = im.entries().find(name);
    if (it == im.entries().end()) return {};
    const ImportanceMatrix::Entry& e = it->second;
    SYSLM_CHECK(e.n_in == n_per_row && e.n_mat() == n_mat, what, ": the imatrix entry has ",
                e.n_mat(), " x ", e.n_in, " values, the tensor ", n_mat, " matrices of ", n_per_row,
                " columns (an imatrix of another model?)");
    std::vector<float> out(static_cast<size_t>(n_mat * n_per_row), 0.0f);
    std::vector<double> mean(static_cast<size_t>(n_per_row), 0.0);
    std::vector<bool> missing(static_cast<size_t>(n_mat), false);
    int64_t seen = 0;
    for (int64_t m = 0; m < n_mat; ++m) {
        const std::vector<float> w = im.importance(name, m, n_per_row);
        if (w.empty()) {
            missing[static_cast<size_t>(m)] = true;
            continue;
        }
        std::copy(w.begin(), w.end(), out.begin() + m * n_per_row);
        for (int64_t j = 0; j < n_per_row; ++j)
            mean[static_cast<size_t>(j)] += w[static_cast<size_t>(j)];
        ++seen;
    }
    for (int64_t m = 0; m < n_mat; ++m) {
        if (!missing[static_cast<size_t>(m)]) continue;
        for (int64_t j = 0; j < n_per_row; ++j)
            out[static_cast<size_t>(m * n_per_row + j)] =
                seen ? static_cast<float>(mean[static_cast<size_t>(j)] / static_cast<double>(seen))
                     : 1.0f;
    }
    return out;
}

void log_tensor(std::ostream& log, size_t i, size_t n_tensors, const TensorResult& tr) {
    char head[160];
    std::snprintf(head, sizeof head, "[%4zu/%4zu] %-40s %-18s ", i + 1, n_tensors, tr.name.c_str(),
                  shape_str(tr.ne).c_str());
    log << head;
    char line[96];
    if (tr.converted)
        std::snprintf(line, sizeof line, "%-5s -> %-5s %12s -> %12s",
                      std::string(dtype_name(tr.from)).c_str(),
                      std::string(dtype_name(tr.to)).c_str(), mib(tr.bytes_before).c_str(),
                      mib(tr.bytes_after).c_str());
    else
        std::snprintf(line, sizeof line, "%-5s    copied %12s",
                      std::string(dtype_name(tr.from)).c_str(), mib(tr.bytes_before).c_str());
    log << line;
    if (!tr.note.empty()) log << "  (" << tr.note << ")";
    log << '\n';
}

// W8A8 weights: per-channel int8 (every Q8_0 block of a row with the row's scale), columns
// multiplied by the SmoothQuant scales first.
void convert_rows_per_channel_q8(DType from, const uint8_t* src, uint8_t* dst, int64_t n,
                                 int64_t rows, std::span<const float> col_scale,
                                 std::span<const float> row_scale, const std::string& what) {
    const auto& tr = kernels::type_traits(from);
    const size_t src_rb = row_bytes(from, n), dst_rb = row_bytes(DType::Q8_0, n);
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
        tr.to_float(src + r * src_rb, row.data(), n);
        float amax = 0;
        for (int64_t j = 0; j < n; ++j) {
            SYSLM_CHECK(std::isfinite(row[j]), what, ": value at row ", r, ", column ", j, " is ",
                        row[j]);
            if (!col_scale.empty()) row[j] *= col_scale[j];
            if (!row_scale.empty()) row[j] *= row_scale[r];
            amax = std::max(amax, std::fabs(row[j]));
        }
        kernels::quantize_q8_0_with_scale(row.data(), dst + r * dst_rb, n, amax / 127.0f);
    }
}

}  // namespace

std::optional<QuantTarget> parse_quant_target(std::string_view name) {
    std::string upper(name);
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (upper == "W8A8") return QuantTarget{DType::Q8_0, KMix::None, true};
    for (const auto& [suffix, mix] :
         {std::pair{"_M", KMix::M}, std::pair{"_S", KMix::S}, std::pair{"_L", KMix::L}}) {
        if (upper.ends_with(suffix)) {
            const auto base = dtype_from_name(upper.substr(0, upper.size() - 2));
            if (base == DType::Q3_K ||
                ((base == DType::Q4_K || base == DType::Q5_K) && mix != KMix::L))
                return QuantTarget{*base, mix};
            return std::nullopt;
        }
    }
    const auto t = dtype_from_name(upper);
    if (!t || !is_quantize_target(*t)) return std::nullopt;
    return QuantTarget{*t, KMix::None};
}

std::string quant_target_name(const QuantTarget& t) {
    if (t.w8a8) return "W8A8";
    return cat(dtype_name(t.type), t.mix == KMix::M   ? "_M"
                                   : t.mix == KMix::S ? "_S"
                                   : t.mix == KMix::L ? "_L"
                                                      : "");
}

std::vector<std::string> quant_target_names() {
    std::vector<std::string> names;
    for (DType t : kTargets) names.push_back(std::string(dtype_name(t)));
    for (DType t : {DType::Q3_K, DType::Q4_K, DType::Q5_K})
        for (KMix m : {KMix::S, KMix::M, KMix::L})
            if (t == DType::Q3_K || m != KMix::L) names.push_back(quant_target_name({t, m}));
    names.push_back("W8A8");
    return names;
}

uint32_t llama_ftype_of(const QuantTarget& t) {
    if (t.type == DType::Q3_K && t.mix == KMix::M) return 12;      // MOSTLY_Q3_K_M
    if (t.type == DType::Q3_K && t.mix == KMix::L) return 13;      // MOSTLY_Q3_K_L
    if (t.mix == KMix::M) return t.type == DType::Q4_K ? 15 : 17;  // MOSTLY_Q4_K_M / Q5_K_M
    return llama_ftype_of(t.type);  // _S and plain K types are the _S file types
}

bool is_quantize_target(DType t) {
    return std::find(std::begin(kTargets), std::end(kTargets), t) != std::end(kTargets);
}

std::vector<DType> quantize_targets() {
    return {std::begin(kTargets), std::end(kTargets)};
}

uint32_t llama_ftype_of(DType t) {
    switch (t) {
        case DType::F32:
            return 0;  // LLAMA_FTYPE_ALL_F32
        case DType::F16:
            return 1;  // MOSTLY_F16
        case DType::Q4_0:
            return 2;  // MOSTLY_Q4_0
        case DType::Q4_1:
            return 3;  // MOSTLY_Q4_1
        case DType::Q8_0:
            return 7;  // MOSTLY_Q8_0
        case DType::Q5_0:
            return 8;  // MOSTLY_Q5_0
        case DType::Q5_1:
            return 9;  // MOSTLY_Q5_1
        case DType::Q2_K:
            return 10;  // MOSTLY_Q2_K
        case DType::Q3_K:
            return 11;  // MOSTLY_Q3_K_S
        case DType::Q4_K:
            return 14;  // MOSTLY_Q4_K_S
        case DType::Q5_K:
            return 16;  // MOSTLY_Q5_K_S
        case DType::Q6_K:
            return 18;  // MOSTLY_Q6_K
        case DType::BF16:
            return 32;  // MOSTLY_BF16
        default:
            fail("no llama.cpp file type for tensor type ", dtype_name(t));
    }
}

TypeChoice choose_tensor_type(std::string_view name, DType current, std::span<const int64_t> ne,
                              const QuantTarget& recipe, const ModelFacts& facts) {
    if (!is_quantizable_weight(name, ne)) return {current, false, false, ""};
    const int64_t n_per_row = ne.empty() ? 0 : ne[0];
    const DType target = recipe.type;
    std::string note;
    DType type = recipe_type(name, recipe, facts, &note);
    // The target-independent rules of llama_tensor_get_type apply to quantized targets only.
    if (dtype_info(target).quantized) {
        const bool is_output =
            name == "output.weight" || (!facts.has_output && name == "token_embd.weight");
        if (is_output) {
            if (facts.architecture == "falcon" || !fits(target, n_per_row))
                type = DType::Q8_0;
            else if (target != DType::Q8_0)
                type = DType::Q6_K;
            note = "output tensor";
        } else if (facts.expert_count == 8 &&
                   (contains(name, "attn_v.weight") || contains(name, "attn_k.weight"))) {
            type = DType::Q8_0;
            note = "attention K/V of an 8-expert model";
        }
    }
    bool fallback = false;
    if (!fits(type, n_per_row)) {
        const DType wanted = type;
        type = fallback_of(type);
        if (!fits(type, n_per_row)) type = DType::F16;
        fallback = true;
        note = cat("fallback: ", n_per_row, " columns are not a multiple of the ",
                   dtype_name(wanted), " block of ", dtype_info(wanted).block_size);
    }
    return {type, type != current, fallback, note};
}

void convert_rows(DType from, const void* src, DType to, void* dst, int64_t n_per_row, int64_t rows,
                  int threads, std::string_view what, std::span<const float> importance,
                  int64_t rows_per_matrix, std::span<const float> col_scale,
                  std::span<const float> row_scale) {
    SYSLM_CHECK((col_scale.empty() || static_cast<int64_t>(col_scale.size()) == n_per_row) &&
                    (row_scale.empty() || static_cast<int64_t>(row_scale.size()) == rows),
                what, ": scales do not match the tensor");
    const kernels::FromFloatImatrixFn weighted =
        importance.empty() ? nullptr : kernels::imatrix_quantizer(to);
    SYSLM_CHECK(!weighted || (rows_per_matrix > 0 &&
                              static_cast<int64_t>(importance.size()) ==
                                  (rows + rows_per_matrix - 1) / rows_per_matrix * n_per_row),
                what, ": importance of ", importance.size(), " values does not match ", rows,
                " rows of ", n_per_row, " in matrices of ", rows_per_matrix, " rows");
    const kernels::TypeTraits& src_tr = kernels::type_traits(from);
    const kernels::TypeTraits& dst_tr = kernels::type_traits(to);
    const size_t src_rb = row_bytes(from, n_per_row);
    const size_t dst_rb = row_bytes(to, n_per_row);
    const auto* in = static_cast<const uint8_t*>(src);
    auto* out = static_cast<uint8_t*>(dst);

    auto work = [&](int64_t r0, int64_t r1) {
        std::vector<float> row(static_cast<size_t>(n_per_row));
        for (int64_t r = r0; r < r1; ++r) {
            src_tr.to_float(in + static_cast<size_t>(r) * src_rb, row.data(), n_per_row);
            for (int64_t j = 0; j < n_per_row; ++j)
                if (!std::isfinite(row[static_cast<size_t>(j)]))
                    fail(what, ": value at row ", r, ", column ", j, " is ",
                         row[static_cast<size_t>(j)], " (quantization needs finite values)");
            if (!col_scale.empty())
                for (int64_t j = 0; j < n_per_row; ++j) row[static_cast<size_t>(j)] *= col_scale[j];
            if (!row_scale.empty())
                for (float& v : row) v *= row_scale[r];
            uint8_t* q = out + static_cast<size_t>(r) * dst_rb;
            if (weighted)
                weighted(row.data(), q, n_per_row,
                         importance.data() + r / rows_per_matrix * n_per_row);
            else
                dst_tr.from_float(row.data(), q, n_per_row);
        }
    };

    if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int64_t n_threads = std::clamp<int64_t>(threads, 1, std::max<int64_t>(rows, 1));
    if (n_threads == 1) {
        work(0, rows);
        return;
    }
    // Contiguous row ranges: each thread writes its own part of dst.
    std::vector<std::exception_ptr> errors(static_cast<size_t>(n_threads));
    std::vector<std::thread> pool;
    pool.reserve(static_cast<size_t>(n_threads));
    for (int64_t t = 0; t < n_threads; ++t) {
        const int64_t r0 = rows * t / n_threads, r1 = rows * (t + 1) / n_threads;
        pool.emplace_back([&, t, r0, r1] {
            try {
                work(r0, r1);
            } catch (...) {
                errors[static_cast<size_t>(t)] = std::current_exception();
            }
        });
    }
    for (auto& th : pool) th.join();
    for (const auto& e : errors)
        if (e) std::rethrow_exception(e);
}

std::vector<uint8_t> convert_tensor(const io::GGUFTensor& t, DType to,
                                    const ImportanceMatrix* imatrix, int threads,
                                    std::string_view what) {
    SYSLM_CHECK(kernels::has_type_traits(t.type), what, " has type ", dtype_name(t.type),
                ", which syslm cannot convert");
    SYSLM_CHECK(!t.ne.empty() && fits(to, t.ne[0]), what, ": rows of ", t.ne.empty() ? 0 : t.ne[0],
                " values do not fit the ", dtype_name(to), " block");
    const int64_t n_per_row = t.ne[0], rows = t.rows();
    const int64_t n_mat = t.ne.size() >= 3 ? rows / t.ne[1] : 1;
    std::vector<float> importance;
    if (imatrix && kernels::imatrix_quantizer(to))
        importance = importance_of(*imatrix, t.name, n_per_row, n_mat, std::string(what));
    std::vector<uint8_t> out(row_bytes(to, n_per_row) * static_cast<size_t>(rows));
    convert_rows(t.type, t.data, to, out.data(), n_per_row, rows, threads, what, importance,
                 rows / n_mat);
    return out;
}

TensorTypeRule parse_tensor_type_rule(std::string_view text) {
    const size_t eq = text.rfind('=');
    SYSLM_CHECK(eq != std::string_view::npos && eq > 0 && eq + 1 < text.size(),
                "tensor type rule '", text, "': expected PATTERN=TYPE, e.g. attn_v=q8_0");
    const std::string type_name(text.substr(eq + 1));
    const auto target = parse_quant_target(type_name);
    SYSLM_CHECK(target && target->mix == KMix::None && !target->w8a8, "tensor type rule '", text,
                "': '", type_name,
                "' is not a tensor type (a recipe such as Q4_K_M mixes types; "
                "name one type, e.g. Q4_K)");
    TensorTypeRule rule{std::string(text.substr(0, eq)), target->type};
    try {
        (void)std::regex(rule.pattern);
    } catch (const std::regex_error& e) {
        fail("tensor type rule '", text, "': '", rule.pattern,
             "' is not a valid regex: ", e.what());
    }
    return rule;
}

namespace {

// The recipe's choice, overridden by the first rule whose pattern the name matches.
class TypeRules {
public:
    explicit TypeRules(const std::vector<TensorTypeRule>& rules) {
        for (const TensorTypeRule& r : rules) rules_.emplace_back(std::regex(r.pattern), r);
    }
    TypeChoice choose(const io::GGUFTensor& t, const QuantTarget& target,
                      const ModelFacts& facts) const {
        TypeChoice c = choose_tensor_type(t.name, t.type, t.ne, target, facts);
        if (!is_quantizable_weight(t.name, t.ne)) return c;
        for (const auto& [re, rule] : rules_) {
            if (!std::regex_search(t.name, re)) continue;
            SYSLM_CHECK(fits(rule.type, t.ne[0]), "tensor type rule '", rule.pattern, "=",
                        dtype_name(rule.type), "': tensor ", t.name, " has rows of ", t.ne[0],
                        " values, not a multiple of the ", dtype_name(rule.type), " block of ",
                        dtype_info(rule.type).block_size);
            return {rule.type, rule.type != t.type, false, "rule " + rule.pattern};
        }
        return c;
    }

private:
    std::vector<std::pair<std::regex, TensorTypeRule>> rules_;
};

}  // namespace

namespace {

ModelFacts read_facts(const io::GGUFFile& in, bool has_imatrix) {
    ModelFacts facts;
    facts.architecture = in.get_string("general.architecture", "");
    facts.has_output = in.find_tensor("output.weight") != nullptr;
    if (!facts.architecture.empty()) {
        facts.expert_count = in.get_u32(facts.architecture + ".expert_count", 0);
        facts.n_layer = in.get_u32(facts.architecture + ".block_count", 0);
        facts.n_head = in.get_u32(facts.architecture + ".attention.head_count", 0);
        facts.n_head_kv = in.get_u32(facts.architecture + ".attention.head_count_kv", facts.n_head);
    }
    facts.has_imatrix = has_imatrix;
    return facts;
}

// The input's metadata with the new file type; split and W8A8 keys dropped (a W8A8 input's
// scales do not describe the new file).
void copy_header(const io::GGUFFile& in, const QuantTarget& target, io::GGUFWriter& writer) {
    for (const auto& [key, value] : in.metadata()) writer.set(key, value);
    writer.set("general.quantization_version", io::GGUFValue::u32(2));  // GGML_QNT_VERSION
    writer.set("general.file_type", io::GGUFValue::u32(llama_ftype_of(target)));
    for (const char* key : {"split.no", "split.count", "split.tensors.count", "syslm.w8a8.tensors",
                            "syslm.w8a8.act_scales"})
        writer.remove(key);
}

// SmoothQuant's (W8A8) or AWQ's per-channel scales, when asked for; empty otherwise.
AwqPlan plan_scales(const io::GGUFFile& in, const QuantizeOptions& options, const TypeRules& rules,
                    const ModelFacts& facts) {
    const QuantTarget& target = options.target;
    if (target.w8a8) {
        SYSLM_CHECK(options.imatrix,
                    "W8A8 needs calibration text (--calib) for its activation "
                    "scales");
        bool maxima = false;
        for (const auto& [name, e] : options.imatrix->entries()) maxima |= !e.max_abs.empty();
        SYSLM_CHECK(maxima,
                    "W8A8 needs calibration text (--calib): an imatrix file holds no "
                    "activation maxima");
        return options.smooth_alpha > 0
                   ? plan_smoothquant(in, *options.imatrix, options.smooth_alpha)
                   : AwqPlan{};
    }
    if (!options.awq) return {};
    SYSLM_CHECK(options.imatrix, "AWQ scaling needs an importance matrix (--imatrix)");
    AwqPlan awq = plan_awq(
        in, *options.imatrix,
        [&](const io::GGUFTensor& t) { return rules.choose(t, target, facts).type; },
        options.threads, options.log, 256, options.awq_alphas);
    if (options.log && !awq.skipped.empty()) *options.log << "awq: " << awq.skipped << '\n';
    return awq;
}

std::span<const float> scale_of(const std::map<std::string, std::vector<float>>& m,
                                const std::string& name) {
    const auto it = m.find(name);
    return it == m.end() ? std::span<const float>() : std::span<const float>(it->second);
}

// A norm or bias absorbing AWQ's 1/s: written as F32.
void add_divided_vector(const io::GGUFTensor& t, std::span<const float> vec_scale,
                        io::GGUFWriter& writer, TensorResult& tr) {
    SYSLM_CHECK(static_cast<int64_t>(vec_scale.size()) == t.numel(), t.name,
                ": AWQ scales do not match the tensor");
    std::vector<float> v(static_cast<size_t>(t.numel()));
    kernels::type_traits(t.type).to_float(t.data, v.data(), t.numel());
    for (size_t j = 0; j < v.size(); ++j) v[j] *= vec_scale[j];
    std::vector<uint8_t> bytes(v.size() * sizeof(float));
    std::memcpy(bytes.data(), v.data(), bytes.size());
    writer.add_tensor(t.name, DType::F32, t.ne, std::move(bytes));
    tr.to = DType::F32;
    tr.bytes_after = v.size() * sizeof(float);
    tr.note = "AWQ: divided by the scales";
}

// The W8A8 matrices and their activation scales, written as metadata at the end.
struct W8a8Scales {
    std::vector<std::string> names;
    std::vector<float> scales;
};

// A tensor converted to its chosen type while the file is written (one tensor in memory at a
// time): weighted by the importance matrix where the type's quantizer takes it, AWQ-scaled, or
// per-channel Q8_0 with a calibrated activation scale (W8A8).
void add_converted(const io::GGUFTensor& t, const TypeChoice& choice,
                   std::span<const float> col_scale, std::span<const float> row_scale,
                   const QuantizeOptions& options, const std::string& what, io::GGUFWriter& writer,
                   TensorResult& tr, W8a8Scales& w8a8) {
    SYSLM_CHECK(kernels::has_type_traits(t.type), what, " has type ", dtype_name(t.type),
                ", which syslm cannot convert to ", dtype_name(choice.type));
    const int64_t n_per_row = t.ne[0];
    const int64_t rows = t.rows();
    const int64_t n_mat = t.ne.size() >= 3 ? rows / t.ne[1] : 1;  // experts
    std::vector<float> importance;
    if (options.imatrix && kernels::imatrix_quantizer(choice.type)) {
        importance = importance_of(*options.imatrix, t.name, n_per_row, n_mat, what);
        tr.note += tr.note.empty() ? "" : ", ";
        tr.note += importance.empty() ? "no imatrix entry" : "imatrix";
        // Scaled columns carry activations x_j / s_j: their importance is imp_j / s_j^2.
        if (!importance.empty() && !col_scale.empty())
            for (size_t k = 0; k < importance.size(); ++k)
                importance[k] /= col_scale[k % static_cast<size_t>(n_per_row)] *
                                 col_scale[k % static_cast<size_t>(n_per_row)];
    }
    if (!col_scale.empty() || !row_scale.empty())
        tr.note += tr.note.empty() ? "AWQ-scaled" : ", AWQ-scaled";
    // W8A8: a matrix the forward multiplies, with calibrated input maxima.
    const ImportanceMatrix::Entry* cal = nullptr;
    if (options.target.w8a8 && choice.type == DType::Q8_0 && options.imatrix && n_mat == 1)
        if (const auto it = options.imatrix->entries().find(t.name);
            it != options.imatrix->entries().end() && it->second.n_in == n_per_row &&
            !it->second.max_abs.empty())
            cal = &it->second;
    const size_t nbytes = row_bytes(choice.type, n_per_row) * static_cast<size_t>(rows);
    if (cal) {            // choice.type is Q8_0
        float x_max = 0;  // after smoothing, input j carries x_j / s_j
        for (int64_t j = 0; j < n_per_row; ++j)
            x_max = std::max(x_max, cal->max_abs[j] / (col_scale.empty() ? 1.0f : col_scale[j]));
        SYSLM_CHECK(x_max > 0, what, ": no calibration activation reached it");
        w8a8.names.push_back(t.name);
        w8a8.scales.push_back(x_max / 127.0f);
        tr.note = col_scale.empty() && row_scale.empty() ? "W8A8" : "W8A8, smoothed";
        writer.add_tensor(t.name, DType::Q8_0, t.ne, nbytes,
                          [&t, n_per_row, rows, col_scale, row_scale, what](uint8_t* dst) {
                              convert_rows_per_channel_q8(t.type, t.data, dst, n_per_row, rows,
                                                          col_scale, row_scale, what);
                          });
    } else {
        writer.add_tensor(
            t.name, choice.type, t.ne, nbytes,
            [&t, to = choice.type, n_per_row, rows, what, n_mat, importance = std::move(importance),
             col_scale, row_scale, threads = options.threads](uint8_t* dst) {
                convert_rows(t.type, t.data, to, dst, n_per_row, rows, threads, what, importance,
                             rows / n_mat, col_scale, row_scale);
            });
    }
    tr.bytes_after = nbytes;
    tr.converted = true;
}

void log_summary(std::ostream& log, const QuantizeResult& result, size_t n_tensors,
                 const QuantTarget& target, const std::string& out_path) {
    const double before = static_cast<double>(result.bytes_before);
    log << "quantized " << result.n_converted << " of " << n_tensors << " tensors to "
        << quant_target_name(target);
    if (result.n_fallback) log << " (" << result.n_fallback << " by fallback)";
    char line[128];
    std::snprintf(line, sizeof line, "; tensor data %s -> %s (%.1f%%)\n",
                  mib(result.bytes_before).c_str(), mib(result.bytes_after).c_str(),
                  before > 0 ? 100.0 * static_cast<double>(result.bytes_after) / before : 100.0);
    log << line << "wrote " << out_path << '\n';
}

}  // namespace

QuantizeResult quantize_model(const std::string& in_path, const std::string& out_path,
                              const QuantizeOptions& options) {
    const QuantTarget& target = options.target;
    SYSLM_CHECK(is_quantize_target(target.type), "cannot quantize to ", dtype_name(target.type),
                ": it is not a storage type for weights");
    const io::GGUFFile in(in_path);  // validated; unchanged tensors are written from its map
    const ModelFacts facts = read_facts(in, options.imatrix != nullptr);
    const TypeRules rules(options.tensor_types);
    io::GGUFWriter writer;
    copy_header(in, target, writer);
    const AwqPlan awq = plan_scales(in, options, rules, facts);

    QuantizeResult result;
    const size_t n_tensors = in.tensors().size();
    W8a8Scales w8a8;
    for (size_t i = 0; i < n_tensors; ++i) {
        const io::GGUFTensor& t = in.tensors()[i];
        const TypeChoice choice = rules.choose(t, target, facts);
        TensorResult tr{t.name, t.type, choice.type, t.ne, t.nbytes, t.nbytes, false, choice.note};
        const std::span<const float> col_scale = scale_of(awq.column_scale, t.name);
        const std::span<const float> row_scale = scale_of(awq.row_scale, t.name);
        const std::span<const float> vec_scale = scale_of(awq.vector_scale, t.name);
        if (!vec_scale.empty()) {
            add_divided_vector(t, vec_scale, writer, tr);
        } else if (!choice.quantize && col_scale.empty() && row_scale.empty()) {
            writer.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
        } else {
            add_converted(t, choice, col_scale, row_scale, options,
                          cat(in_path, ": tensor ", t.name), writer, tr, w8a8);
            ++result.n_converted;
            if (choice.fallback) ++result.n_fallback;
        }
        result.bytes_before += tr.bytes_before;
        result.bytes_after += tr.bytes_after;
        if (options.log) log_tensor(*options.log, i, n_tensors, tr);
        result.tensors.push_back(std::move(tr));
    }
    if (target.w8a8) {
        writer.set("syslm.w8a8.tensors", io::GGUFValue::strings(w8a8.names));
        writer.set("syslm.w8a8.act_scales", io::GGUFValue::f32s(w8a8.scales));
    }
    writer.write(out_path);
    if (options.log) log_summary(*options.log, result, n_tensors, target, out_path);
    return result;
}

}  // namespace syslm::compress
