#include "kernels/cpu/matmul.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/cpu_features.hpp"
#include "core/error.hpp"
#include "kernels/cpu/decode_streams.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/timing_inputs.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::kernels {

namespace {

thread_local bool exact_small_batches = false;  // ExactSmallBatches

// Rows [r0, r1) of a one-token product, read as `streams` streams (rows from the range's parts in
// turn). Runs of >= 1 KiB keep each stream long enough for the L2 streamer.
void decode_rows(const WeightView& w, const TypeTraits& tt, const uint8_t* xb, size_t x_row,
                 float* y, const float* bias, int64_t r0, int64_t r1, int64_t streams) {
    const size_t w_row = row_bytes(w.type, w.n_in);
    const auto* w_bytes = static_cast<const uint8_t*>(w.data);
    const int64_t run = std::max<int64_t>(1, 1024 / static_cast<int64_t>(w_row));
    const int64_t part = (r1 - r0 + streams - 1) / streams;
    for (int64_t k = 0; k < part; k += run)
        for (int64_t s = 0; s < streams; ++s) {
            const int64_t a = r0 + s * part + k;
            const int64_t z = std::min({a + run, r0 + (s + 1) * part, r1});
            if (a >= z) continue;
            vec_dot_tokens(tt, w.n_in, static_cast<int>(z - a), w_bytes + a * w_row, w_row, 1, xb,
                           x_row, y + a, static_cast<size_t>(w.n_out));
            if (bias)
                for (int64_t o = a; o < z; ++o) y[o] += bias[o];
        }
}

// Decode (one token): each thread takes an even share of the rows (in whole tiles of tile_rows)
// and reads its slice as one stream, or as two with rows from the slice's two halves in turn,
// whichever measured faster on this CPU (decode_streams.hpp).
void vec_dot_decode(const WeightView& w, const TypeTraits& tt, const uint8_t* xb, size_t x_row,
                    float* y, ThreadPool& pool, const float* bias, int64_t tile_rows) {
    const DecodeStreamsCall call(w.type, w.data, row_bytes(w.type, w.n_in) * w.n_out);
    const int64_t streams = call.streams();
    pool.parallel_for((w.n_out + tile_rows - 1) / tile_rows, [&](int64_t b, int64_t e, int) {
        decode_rows(w, tt, xb, x_row, y, bias, b * tile_rows, std::min(w.n_out, e * tile_rows),
                    streams);
    });
}

// Tiled vec_dot_tokens over activations already in the partner type (rows x_row bytes).
void vec_dot_tiles(const WeightView& w, const TypeTraits& tt, const uint8_t* xb, size_t x_row,
                   int64_t n_tokens, float* y, ThreadPool& pool, const float* bias) {
    // Output tiles of kTileRows weight rows x kTileTokens tokens: the tile's activation rows stay
    // in L2 while its weight rows stream through L1 once per token block. Tiles are ordered
    // token-block-major so threads working at the same time share the activation block.
    constexpr int64_t kTileRows = 16, kTileTokens = 64;
    if (n_tokens == 1) return vec_dot_decode(w, tt, xb, x_row, y, pool, bias, kTileRows);
    const bool amx = !exact_small_batches && w.act_scale <= 0 && batch_dot_choice(w.type).amx;
    const size_t w_row = row_bytes(w.type, w.n_in);
    const auto* w_bytes = static_cast<const uint8_t*>(w.data);
    const int64_t row_tiles = (w.n_out + kTileRows - 1) / kTileRows;
    const int64_t tok_tiles = (n_tokens + kTileTokens - 1) / kTileTokens;
    pool.parallel_for(row_tiles * tok_tiles, [&](int64_t b, int64_t e, int) {
        for (int64_t tile = b; tile < e; ++tile) {
            const int64_t r0 = (tile % row_tiles) * kTileRows,
                          r1 = std::min(w.n_out, r0 + kTileRows);
            const int64_t t0 = (tile / row_tiles) * kTileTokens;
            const int64_t t1 = std::min(n_tokens, t0 + kTileTokens);
            const int nr = static_cast<int>(r1 - r0), nt = static_cast<int>(t1 - t0);
            float* out = y + t0 * w.n_out + r0;
            if (amx)
                x86::dot_tokens_amx_int8(w.type, w.n_in, nr, w_bytes + r0 * w_row, w_row, nt,
                                         xb + t0 * x_row, x_row, out, static_cast<size_t>(w.n_out));
            else
                vec_dot_tokens(tt, w.n_in, nr, w_bytes + r0 * w_row, w_row, nt, xb + t0 * x_row,
                               x_row, out, static_cast<size_t>(w.n_out));
            if (bias)
                for (int64_t t = t0; t < t1; ++t)
                    for (int64_t o = r0; o < r1; ++o) y[t * w.n_out + o] += bias[o];
        }
    });
}

}  // namespace

void SharedActivations::reset(const float* x, int64_t n_tokens, int64_t n_in) {
    x_ = x;
    n_tokens_ = n_tokens;
    n_in_ = n_in;
    for (Converted& c : converted_) c.valid = false;
}

SharedActivations::Converted& SharedActivations::slot(DType type, float scale) {
    for (Converted& c : converted_)
        if (c.valid && c.type == type && c.scale == scale) return c;
    for (Converted& c : converted_)
        if (!c.valid) return c;
    return converted_.emplace_back();  // moving the others keeps their buffers where they are
}

const uint8_t* SharedActivations::rows(DType partner, ThreadPool& pool, size_t& row_stride) {
    if (partner == DType::F32) {
        row_stride = static_cast<size_t>(n_in_) * sizeof(float);
        return reinterpret_cast<const uint8_t*>(x_);
    }
    row_stride = row_bytes(partner, n_in_);
    Converted& c = slot(partner, 0.0f);
    if (c.valid) return c.bytes.data();
    const TypeTraits& pt = type_traits(partner);
    c.bytes.resize(row_stride * static_cast<size_t>(n_tokens_));
    uint8_t* dst = c.bytes.data();
    const size_t stride = row_stride;
    pool.parallel_for(n_tokens_, [&](int64_t b, int64_t e, int) {
        for (int64_t t = b; t < e; ++t) pt.from_float_fast(x_ + t * n_in_, dst + t * stride, n_in_);
    });
    c.type = partner;
    c.scale = 0.0f;
    c.valid = true;
    return dst;
}

const uint8_t* SharedActivations::rows_static_q8_0(float scale, ThreadPool& pool,
                                                   size_t& row_stride) {
    row_stride = row_bytes(DType::Q8_0, n_in_);
    Converted& c = slot(DType::Q8_0, scale);
    if (c.valid) return c.bytes.data();
    c.bytes.resize(row_stride * static_cast<size_t>(n_tokens_));
    uint8_t* dst = c.bytes.data();
    const size_t stride = row_stride;
    pool.parallel_for(n_tokens_, [&](int64_t b, int64_t e, int) {
        for (int64_t t = b; t < e; ++t)
            quantize_q8_0_with_scale(x_ + t * n_in_, dst + t * stride, n_in_, scale);
    });
    c.type = DType::Q8_0;
    c.scale = scale;
    c.valid = true;
    return dst;
}

void matmul_vec_dot(const WeightView& w, const float* x, int64_t n_tokens, float* y,
                    ThreadPool& pool, const float* bias) {
    thread_local SharedActivations act;
    act.reset(x, n_tokens, w.n_in);
    const TypeTraits& tt = type_traits(w.type);
    size_t x_row = 0;
    SYSLM_CHECK(w.act_scale <= 0 || w.type == DType::Q8_0, "matmul: a static activation scale "
                "needs Q8_0 weights, not ", dtype_name(w.type));
    const uint8_t* xb = w.act_scale > 0 ? act.rows_static_q8_0(w.act_scale, pool, x_row)
                                        : act.rows(tt.vec_dot_type, pool, x_row);
    vec_dot_tiles(w, tt, xb, x_row, n_tokens, y, pool, bias);
}

void matmul(const WeightView& w, SharedActivations& x, float* y, ThreadPool& pool,
            const float* bias) {
    SYSLM_CHECK(x.n_in() == w.n_in, "matmul: activations of ", x.n_in(),
                " elements for a matrix with rows of ", w.n_in);
    // W8A8 matrices always take the int8 dot path with their static activation scale.
    const GemmPanel panel =
        w.act_scale > 0 ? GemmPanel::None : matmul_gemm_panel(w.type, x.n_tokens());
    if (panel != GemmPanel::None) {
        gemm(w, x.floats(), x.n_tokens(), y, pool, bias, active_isa(), panel);
        return;
    }
    const TypeTraits& tt = type_traits(w.type);
    size_t x_row = 0;
    const uint8_t* xb = w.act_scale > 0 ? x.rows_static_q8_0(w.act_scale, pool, x_row)
                                        : x.rows(tt.vec_dot_type, pool, x_row);
    vec_dot_tiles(w, tt, xb, x_row, x.n_tokens(), y, pool, bias);
}

bool fused_matmuls(std::initializer_list<MatmulOutput> outs, int64_t n_tokens) {
    if (n_tokens != 1 || outs.size() < 2) return false;
    for (const MatmulOutput& o : outs)
        if (o.w.act_scale > 0 || matmul_gemm_panel(o.w.type, 1) != GemmPanel::None ||
            row_bytes(o.w.type, o.w.n_in) * static_cast<size_t>(o.w.n_out) >=
                kDecodeStreamsMinBytes)
            return false;
    return true;
}

void matmul(std::initializer_list<MatmulOutput> outs, SharedActivations& x, ThreadPool& pool) {
    if (!fused_matmuls(outs, x.n_tokens())) {
        for (const MatmulOutput& o : outs) matmul(o.w, x, o.y, pool, o.bias);
        return;
    }
    // The matrices' row tiles laid end to end; each thread takes an even share of them. Each row
    // is the same vec_dot as in vec_dot_decode, so the results are too.
    constexpr int64_t kTileRows = 16, kMaxOutputs = 8;
    SYSLM_CHECK(static_cast<int64_t>(outs.size()) <= kMaxOutputs, "matmul: ", outs.size(),
                " products over one input; at most ", kMaxOutputs, " are fused");
    struct Part {
        const MatmulOutput* o;
        const TypeTraits* tt;
        const uint8_t* xb;
        size_t x_row;
        int64_t tile0, tile1, streams;
    };
    std::array<Part, kMaxOutputs> parts;
    int64_t n_parts = 0, tiles = 0;
    for (const MatmulOutput& o : outs) {
        SYSLM_CHECK(x.n_in() == o.w.n_in, "matmul: activations of ", x.n_in(),
                    " elements for a matrix with rows of ", o.w.n_in);
        Part& p = parts[n_parts++];
        p.o = &o;
        p.tt = &type_traits(o.w.type);
        p.xb = x.rows(p.tt->vec_dot_type, pool, p.x_row);
        p.tile0 = tiles;
        tiles += (o.w.n_out + kTileRows - 1) / kTileRows;
        p.tile1 = tiles;
        // Small calls are never timed: this is the type's chosen (or default) way of reading.
        p.streams = DecodeStreamsCall(o.w.type, o.w.data, 0).streams();
    }
    pool.parallel_for(tiles, [&](int64_t b, int64_t e, int) {
        for (int64_t i = 0; i < n_parts; ++i) {
            const Part& p = parts[i];
            const int64_t t0 = std::max(b, p.tile0), t1 = std::min(e, p.tile1);
            if (t0 >= t1) continue;
            const WeightView& w = p.o->w;
            decode_rows(w, *p.tt, p.xb, p.x_row, p.o->y, p.o->bias, (t0 - p.tile0) * kTileRows,
                        std::min(w.n_out, (t1 - p.tile0) * kTileRows), p.streams);
        }
    });
}

namespace {

// The SYSLM_GEMM_MIN_TOKENS override, 0 when unset.
int64_t env_min_tokens() {
    static const int64_t n = [] {
        const char* env = std::getenv("SYSLM_GEMM_MIN_TOKENS");
        if (!env) return int64_t{0};
        char* end = nullptr;
        const long long v = std::strtoll(env, &end, 10);
        if (end == env || *end != '\0' || v < 1)
            fail("SYSLM_GEMM_MIN_TOKENS='", env, "': expected a positive number of tokens");
        return static_cast<int64_t>(v);
    }();
    return n;
}

bool float_type(DType t) {
    return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

// rows x K timing values (fill_timing_values, times scale) quantized row by row with tt: the
// matrices the one-time kernel timings below run on.
std::vector<uint8_t> timing_rows(const TypeTraits& tt, int64_t rows, int64_t K, uint64_t& state,
                                 float scale = 1.0f) {
    std::vector<float> f(static_cast<size_t>(rows * K));
    fill_timing_values(f, state, scale);
    const size_t rb = row_bytes(tt.type, K);
    std::vector<uint8_t> q(rb * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) tt.from_float(f.data() + r * K, q.data() + r * rb, K);
    return q;
}

// Times both paths on one thread for batches of 2..48 tokens (best of three each, tens of ms in
// all) and keeps the smallest batch from which the GEMM wins at every size tried, 48 at the
// latest: the vec_dot's four-tokens-per-block K-quant dots beat the GEMM at 32 tokens on Zen 4
// (L110M Q4_K_M pp32 +17%), but where this small timing still had the vec_dot ahead at 48 (Q6_K)
// the model's larger matrices on two threads ran pp48 13% faster on the GEMM. Only where the
// vec_dot is clearly ahead at 48 (by the margin) are larger batches timed, up to 512, and the
// switch may move past 48 or away ("never"): on an AVX2-only AMD EPYC (Zen 3) the int8 Q4_0_G8
// dots beat the f32 GEMM at every size (L110M Q4_0 pp512 704-781 against 453-640 t/s).
constexpr int64_t kMaxCrossoverTokens = 48;
constexpr int64_t kMaxExtendedTokens = 512;
constexpr int64_t kNeverGemm = std::numeric_limits<int32_t>::max();

GemmCrossover measure_crossover(DType type) {
    GemmCrossover c;
    const TypeTraits& tt = type_traits(type);
    if (float_type(type) || !tt.from_float || gemm_panel(type, active_isa()) == GemmPanel::None)
        return c;
    constexpr int64_t K = 2048, N = 256, kMaxTokens = kMaxExtendedTokens;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    const std::vector<uint8_t> wq = timing_rows(tt, N, K, s, 0.02f);
    std::vector<float> x(static_cast<size_t>(kMaxTokens * K));
    fill_timing_values(x, s);
    const WeightView w{type, K, N, wq.data()};
    std::vector<float> y(static_cast<size_t>(kMaxTokens * N));
    ThreadPool pool(1);
    const GemmPanel panel = gemm_panel(type, active_isa());
    auto best_of_3 = [&](auto&& run) {
        double best = 1e30;
        for (int rep = 0; rep < 3; ++rep) {
            const auto t0 = std::chrono::steady_clock::now();
            run();
            best = std::min(best, std::chrono::duration<double>(
                                      std::chrono::steady_clock::now() - t0).count());
        }
        return best;
    };
    for (int64_t n : {2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256, 512}) {
        if (n > kMaxCrossoverTokens &&
            c.timings.back().vec_dot_s * kGemmCrossoverMargin >= c.timings.back().gemm_s)
            break;  // the vec_dot is not clearly ahead at the last size: no larger ones timed
        const double v = best_of_3([&] { matmul_vec_dot(w, x.data(), n, y.data(), pool); });
        const double g = best_of_3(
            [&] { gemm(w, x.data(), n, y.data(), pool, nullptr, active_isa(), panel); });
        c.timings.push_back({n, v, g});
    }
    // The smallest tried size from which the GEMM is clearly faster (kGemmCrossoverMargin) at
    // every larger one; when it is not there either, 48, or never where the vec_dot is still
    // clearly ahead at 512. A batch's logits differ in their last bits between the paths, so a
    // near tie must not move the switch from run to run.
    const GemmCrossover::Timing& last = c.timings.back();
    const bool vec_dot_ahead = last.vec_dot_s * kGemmCrossoverMargin < last.gemm_s;
    c.min_tokens = last.tokens > kMaxCrossoverTokens && vec_dot_ahead ? kNeverGemm : last.tokens;
    for (auto it = c.timings.rbegin();
         it != c.timings.rend() && it->gemm_s * kGemmCrossoverMargin < it->vec_dot_s; ++it)
        c.min_tokens = it->tokens;
    c.record.value = c.min_tokens == kNeverGemm ? "never" : std::to_string(c.min_tokens);
    char line[96];
    for (const auto& t : c.timings) {
        std::snprintf(line, sizeof line, "%s%lld: %.0f/%.0f us", c.record.timings.empty() ? "" : ", ",
                      static_cast<long long>(t.tokens), t.vec_dot_s * 1e6, t.gemm_s * 1e6);
        c.record.timings += line;
    }
    c.record.timings += " (tokens: vec_dot/GEMM, 1 thread, 2048 x 256 matrix)";
    return c;
}

// measure_crossover's result, remembered for the machine (kernels/kernel_choices.hpp).
GemmCrossover remembered_crossover(DType type) {
    if (float_type(type) || !type_traits(type).from_float ||
        gemm_panel(type, active_isa()) == GemmPanel::None)
        return {};
    GemmCrossover c;
    c.record = remembered_kernel_choice(
        // v2: since batches past 48 may be timed (2026-12-05); choices made before are re-timed.
        std::string("gemm-crossover-v2-") + std::string(dtype_name(type)),
        [&] {
            c = measure_crossover(type);
            return c.record;
        },
        [](const std::string& v) {
            return v == "never" ||
                   (v.find_first_not_of("0123456789") == std::string::npos && v.size() <= 3 &&
                    std::stoi(v) >= 2 && std::stoi(v) <= kMaxExtendedTokens);
        });
    c.min_tokens = c.record.value == "never" ? kNeverGemm : std::stoi(c.record.value);
    return c;
}

}  // namespace

bool amx_int8_available() {
    return isa_supported(Isa::Avx512) && cpu_features().avx512bw && cpu_features().amx_int8 &&
           amx_tiles_permitted();
}

namespace {

// Times the VNNI dots and the AMX int8 tiles on 16 tokens x 256 rows x 2048 of `type`.
BatchDotChoice measure_batch_dot(DType type) {
    BatchDotChoice c;
    constexpr int64_t K = 2048, N = 256, T = 16, kRows = 16;
    const TypeTraits& tt = type_traits(type);
    const TypeTraits& at = type_traits(tt.vec_dot_type);
    uint64_t seed = 0x2545F4914F6CDD1Dull;
    const std::vector<uint8_t> wq = timing_rows(tt, N, K, seed, 0.02f);
    const std::vector<uint8_t> xq = timing_rows(at, T, K, seed);
    const size_t rb = row_bytes(type, K), xr = row_bytes(tt.vec_dot_type, K);
    std::vector<float> y(static_cast<size_t>(T * N));
    double best[2] = {1e30, 1e30};
    for (int rep = 0; rep < 3; ++rep)
        for (int amx : {0, 1}) {
            const auto t0 = std::chrono::steady_clock::now();
            for (int64_t r = 0; r < N; r += kRows) {
                if (amx)
                    x86::dot_tokens_amx_int8(type, K, kRows, wq.data() + r * rb, rb, T, xq.data(),
                                             xr, y.data() + r, N);
                else
                    vec_dot_tokens(tt, K, kRows, wq.data() + r * rb, rb, T, xq.data(), xr,
                                   y.data() + r, N);
            }
            best[amx] = std::min(best[amx], std::chrono::duration<double>(
                                                std::chrono::steady_clock::now() - t0).count());
        }
    c.vnni_ms = best[0] * 1e3;
    c.amx_ms = best[1] * 1e3;
    c.amx = best[1] < best[0];
    return c;
}

}  // namespace

const BatchDotChoice& batch_dot_choice(DType type) {
    static const BatchDotChoice none;
    if (type != DType::Q4_0_G8 && type != DType::Q8_0_G8W) return none;
    static const std::string env = [] {
        const char* e = std::getenv("SYSLM_BATCH_DOT");
        return std::string(e ? e : "");
    }();
    SYSLM_CHECK(env.empty() || env == "vnni" || env == "amx-int8", "SYSLM_BATCH_DOT='", env,
                "': expected vnni or amx-int8");
    SYSLM_CHECK(env != "amx-int8" || amx_int8_available(),
                "SYSLM_BATCH_DOT=amx-int8: this CPU has no AMX int8 tiles granted");
    static std::mutex mu;
    static std::map<DType, BatchDotChoice> table;
    const std::lock_guard<std::mutex> lock(mu);
    auto it = table.find(type);
    if (it == table.end()) {
        BatchDotChoice c;
        if (!env.empty()) {
            c.amx = env == "amx-int8";
        } else if (amx_int8_available()) {
            c.record = remembered_kernel_choice(
                std::string("batch-dot-") + std::string(dtype_name(type)),
                [&] {
                    c = measure_batch_dot(type);
                    KernelChoice m;
                    m.value = c.amx ? "amx-int8" : "vnni";
                    char line[128];
                    std::snprintf(line, sizeof line,
                                  "vnni %.2f ms, amx-int8 %.2f ms (1 thread, 16 tokens x 256 x 2048)",
                                  c.vnni_ms, c.amx_ms);
                    m.timings = line;
                    return m;
                },
                [](const std::string& v) { return v == "vnni" || v == "amx-int8"; });
            c.amx = c.record.value == "amx-int8";
        }
        it = table.emplace(type, c).first;
    }
    return it->second;
}

int64_t gemm_min_tokens() {
    const int64_t env = env_min_tokens();
    return env > 0 ? env : kGemmMinTokens;
}

const GemmCrossover& gemm_crossover(DType type) {
    // Measured under the lock the first time a type is asked (std::map keeps references valid).
    static std::mutex mu;
    static std::map<DType, GemmCrossover> table;
    const std::lock_guard<std::mutex> lock(mu);
    auto it = table.find(type);
    if (it == table.end())
        it = table.emplace(type, env_min_tokens() > 0 ? GemmCrossover{} : remembered_crossover(type))
                 .first;
    return it->second;
}

ExactSmallBatches::ExactSmallBatches() : previous_(exact_small_batches) {
    exact_small_batches = true;
}

ExactSmallBatches::~ExactSmallBatches() {
    exact_small_batches = previous_;
}

int64_t gemm_min_tokens(DType type) {
    if (const int64_t env = env_min_tokens(); env > 0) return env;
    if (float_type(type)) return kGemmMinTokens;
    // ExactSmallBatches keeps every batch below kGemmMinTokens on the vec_dot path.
    const int64_t measured = gemm_crossover(type).min_tokens;
    return exact_small_batches ? std::max(kGemmMinTokens, measured) : measured;
}

GemmPanel matmul_gemm_panel(DType type, int64_t n_tokens) {
    if (n_tokens < 2 || n_tokens < gemm_min_tokens(type)) return GemmPanel::None;
    return gemm_panel(type, active_isa());
}

void matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
            const float* bias) {
    const GemmPanel panel =
        w.act_scale > 0 ? GemmPanel::None : matmul_gemm_panel(w.type, n_tokens);
    if (panel != GemmPanel::None) {
        gemm(w, x, n_tokens, y, pool, bias, active_isa(), panel);
        return;
    }
    matmul_vec_dot(w, x, n_tokens, y, pool, bias);
}

}  // namespace syslm::kernels
