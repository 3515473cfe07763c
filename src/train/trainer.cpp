#include "train/trainer.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/mapped_file.hpp"
#include "core/profiler.hpp"
#include "data/prepare.hpp"
#include "data/shards.hpp"
#include "kernels/cpu/linear_backward.hpp"
#include "kernels/type_traits.hpp"
#include "train/checkpoint_files.hpp"
#include "train/teacher.hpp"
#include "train/teacher_cache.hpp"

namespace syslm::train {

namespace fs = std::filesystem;

FixedBatch::FixedBatch(std::vector<int32_t> ids, int B, int T) {
    SYSLM_CHECK(B > 0 && T > 0 && ids.size() == static_cast<size_t>(B) * (T + 1),
                "fixed batch: ", ids.size(), " ids for ", B, " sequences of ", T, " + 1");
    for (int b = 0; b < B; ++b) {
        const int32_t* seq = ids.data() + static_cast<size_t>(b) * (T + 1);
        tokens_.insert(tokens_.end(), seq, seq + T);
        targets_.insert(targets_.end(), seq + 1, seq + T + 1);
    }
}

void FixedBatch::next(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
    tokens = tokens_;
    targets = targets_;
}

void FixedBatch::seek(const std::string& position) {
    SYSLM_CHECK(position == "fixed", "checkpoint: data position '", position,
                "' is not a fixed batch's");
}

SyntheticBatches::SyntheticBatches(uint64_t seed, int n_vocab, int B, int T)
    : rng_(seed), n_vocab_(n_vocab), n_(B * T), t_(T) {}

void SyntheticBatches::next(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
    // Sequence by sequence (its tokens, then its targets), so that two batches of B/2 are the
    // batch of B: a step's data does not depend on how it is split into micro-batches.
    std::uniform_int_distribution<int32_t> pick(0, n_vocab_ - 1);
    tokens.resize(static_cast<size_t>(n_));
    targets.resize(static_cast<size_t>(n_));
    for (size_t s = 0; s < tokens.size(); s += static_cast<size_t>(t_)) {
        for (size_t i = s; i < s + static_cast<size_t>(t_); ++i) tokens[i] = pick(rng_);
        for (size_t i = s; i < s + static_cast<size_t>(t_); ++i) targets[i] = pick(rng_);
    }
}

std::string SyntheticBatches::position() const {
    std::ostringstream s;
    s << "synthetic " << rng_;
    return s.str();
}

void SyntheticBatches::seek(const std::string& position) {
    std::istringstream s(position);
    std::string kind;
    s >> kind >> rng_;
    SYSLM_CHECK(kind == "synthetic" && s, "checkpoint: data position is not synthetic data's");
}

ShardBatches::ShardBatches(const std::string& data_dir, uint64_t seed, int n_vocab, int B, int T) {
    data::check_model_vocab(data_dir, data::read_meta(data_dir), static_cast<uint64_t>(n_vocab));
    data::LoaderOptions opt;
    opt.batch = B;
    opt.seq = T;
    opt.seed = seed;
    opt.n_vocab = static_cast<uint64_t>(n_vocab);
    loader_ = std::make_unique<data::BatchLoader>(data::split_shard_paths(data_dir, "train"), opt);
}

void ShardBatches::next(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
    const data::Batch& b = loader_->next();
    tokens.resize(static_cast<size_t>(b.batch) * b.seq);
    targets.resize(tokens.size());
    for (int r = 0; r < b.batch; ++r) {
        const int32_t* row = b.row(r);
        std::copy_n(row, b.seq, tokens.data() + static_cast<size_t>(r) * b.seq);
        std::copy_n(row + 1, b.seq, targets.data() + static_cast<size_t>(r) * b.seq);
    }
    windows_.assign(b.window.begin(), b.window.end());
}

RankSlice::RankSlice(std::unique_ptr<BatchSource> global, int rank, int ranks, int B, int T)
    : global_(std::move(global)), rank_(rank), ranks_(ranks), B_(B), T_(T) {
    SYSLM_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "data parallel: rank ", rank, " of ",
                ranks);
}

void RankSlice::next(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
    global_->next(tokens_, targets_);
    const size_t per = static_cast<size_t>(B_) * T_;
    SYSLM_CHECK(tokens_.size() == per * ranks_ && targets_.size() == tokens_.size(),
                "data parallel: the global batch has ", tokens_.size(), " tokens, expected ",
                ranks_, " x ", B_, " x ", T_);
    const auto at = static_cast<std::ptrdiff_t>(per * rank_);
    tokens.assign(tokens_.begin() + at, tokens_.begin() + at + static_cast<std::ptrdiff_t>(per));
    targets.assign(targets_.begin() + at, targets_.begin() + at + static_cast<std::ptrdiff_t>(per));
    const std::span<const uint64_t> w = global_->windows();
    if (w.empty())
        windows_.clear();
    else
        windows_.assign(w.begin() + rank_ * B_, w.begin() + (rank_ + 1) * B_);
}

std::string ShardBatches::position() const {
    const data::LoaderPosition p = loader_->position();
    return "shards " + std::to_string(loader_->fingerprint()) + " " + std::to_string(p.epoch) +
           " " + std::to_string(p.index);
}

void ShardBatches::seek(const std::string& position) {
    std::istringstream s(position);
    std::string kind;
    uint64_t fingerprint = 0;
    data::LoaderPosition p;
    s >> kind >> fingerprint >> p.epoch >> p.index;
    SYSLM_CHECK(kind == "shards" && s, "checkpoint: data position is not a data directory's");
    SYSLM_CHECK(fingerprint == loader_->fingerprint(),
                "checkpoint: it was saved on other data (or another --seq / --seed); its position "
                "does not apply here");
    loader_->seek(p);
}

double evaluate(TrainModel& model, const std::string& data_dir, int B, int T, int max_batches,
                backend::Backend& be) {
    data::SequentialLoader val(data::split_shard_paths(data_dir, "val"), B, T,
                               static_cast<uint64_t>(model.hparams().n_vocab));
    std::vector<int32_t> rows, tokens(static_cast<size_t>(B) * T), targets(tokens.size());
    struct NoCapacity {  // restored on every exit
        TrainModel& m;
        double factor;
        ~NoCapacity() { m.set_expert_capacity(factor); }
    } no_capacity{model, model.expert_capacity()};
    model.set_expert_capacity(0);
    double sum = 0;
    int n = 0;
    while (max_batches <= 0 || n < max_batches) {
        // Full batches only: every batch then has the same number of targets, so the mean of
        // the batch means is the mean over all of them.
        if (val.next(rows) < B) break;
        for (int r = 0; r < B; ++r) {
            const int32_t* row = rows.data() + static_cast<size_t>(r) * (T + 1);
            std::copy_n(row, T, tokens.data() + static_cast<size_t>(r) * T);
            std::copy_n(row + 1, T, targets.data() + static_cast<size_t>(r) * T);
        }
        sum += model.loss(tokens, targets, B, T, be);
        ++n;
    }
    SYSLM_CHECK(n > 0, data_dir, ": the val split has no full batch of ", B, " x ", T + 1,
                " tokens");
    return sum / n;
}

Trainer::Trainer(TrainModel& model, BatchSource& data, const TrainOptions& opt,
                 backend::Backend& be)
    : model_(model), data_(data), opt_(opt), be_(be), optimizer_(opt.optimizer, model.params()) {
    SYSLM_CHECK(opt.steps > 0 && opt.accum > 0,
                "training: steps and accumulation must be positive");
    SYSLM_CHECK(opt.loss_scale >= 0 && std::isfinite(opt.loss_scale) && opt.scale_window > 0,
                "training: the loss scale must be finite and >= 0, its window positive");
    opt_.schedule.total = opt.steps;
    scale_ = opt.loss_scale;
    SYSLM_CHECK(!opt.teacher || opt.teacher->n_vocab() == model.hparams().n_vocab,
                "distillation: the teacher's vocabulary (",
                opt.teacher ? opt.teacher->n_vocab() : 0, " tokens) differs from the student's (",
                model.hparams().n_vocab, ")");
    SYSLM_CHECK(opt.teacher_layers.size() == model.hidden_layers().size(),
                "distillation: ", opt.teacher_layers.size(), " teacher blocks to match against ",
                model.hidden_layers().size(), " student blocks (TrainModel::match_hidden)");
    SYSLM_CHECK(opt.teacher_layers.empty() || (opt.teacher && !opt.teacher_cache),
                "distillation: hidden-state matching needs the online teacher (the offline cache "
                "keeps logits only)");
    for (const auto& [name, type] : opt.fake_quant) {
        const Param* p = model.params().find(name);
        SYSLM_CHECK(p, "training: no parameter ", name, " to fake-quantize");
        SYSLM_CHECK(dtype_info(type).quantized && kernels::has_type_traits(type) &&
                        p->ne[0] % dtype_info(type).block_size == 0,
                    "training: cannot fake-quantize ", name, " (rows of ", p->ne[0], ") to ",
                    dtype_name(type));
    }
    SYSLM_CHECK(opt.zero >= 0 && opt.zero <= 2, "training: ZeRO stage ", opt.zero, " (0, 1 or 2)");
    if (opt.pipeline && opt.pipeline->size() > 1) {
        SYSLM_CHECK(!opt.teacher && !opt.teacher_cache && opt.fake_quant.empty(),
                    "training: pipeline parallelism with distillation or QAT is not implemented");
        pipeline_ = std::make_unique<Pipeline>(model, *opt.pipeline, opt.pipeline_schedule);
    }
    if (opt.data_parallel && opt.data_parallel->size() > 1) make_buckets();
    if (opt.keep_zeros) {  // runs of zeros, so a 50%-sparse matrix costs far less than a mask
        const float* v = model.params().values();
        for (const Param& p : model.params().params()) {
            if (p.name.rfind("blk.", 0) != 0 || p.ne.size() < 2) continue;
            for (int64_t i = 0; i < p.numel;) {
                const int64_t at = static_cast<int64_t>(p.offset) + i;
                if (v[at] != 0.0f) {
                    ++i;
                    continue;
                }
                int64_t j = i;
                while (j < p.numel && v[p.offset + j] == 0.0f) ++j;
                zero_ranges_.emplace_back(static_cast<size_t>(at),
                                          p.offset + static_cast<size_t>(j));
                i = j;
            }
        }
    }
}

// Maximal runs of parameters with the same owner (block il, or -1 for the rest) in arena order,
// each extended over the alignment padding after it: every float of the arena is in exactly one
// bucket. With tensor parallelism, tensors cut over the ranks and tensors every rank holds whole
// never share a bucket: a compressed message's scales then never mix a rank's slices into the
// whole tensors, which every tensor-parallel rank must update alike.
void Trainer::make_buckets() {
    const ParamStore& ps = model_.params();
    std::vector<const Param*> order;
    for (const Param& p : ps.params()) order.push_back(&p);
    std::sort(order.begin(), order.end(),
              [](const Param* a, const Param* b) { return a->offset < b->offset; });
    auto block = [](const Param& p) {
        if (p.auxiliary || p.name.rfind("blk.", 0) != 0) return -1;
        return std::stoi(p.name.substr(4));
    };
    const bool tp = model_.tensor_parallel() != nullptr;
    auto owner = [&](const Param& p) { return std::pair(block(p), tp && p.slice_dim >= 0); };
    std::vector<parallel::GradientReducer::Bucket> buckets;
    std::vector<std::pair<int, bool>> owners;  // block, sliced
    for (size_t i = 0; i < order.size(); ++i) {
        const auto o = owner(*order[i]);
        const size_t begin = i == 0 ? 0 : order[i]->offset;
        const size_t end = i + 1 < order.size() ? order[i + 1]->offset : ps.size();
        if (!owners.empty() && owners.back() == o)
            buckets.back().end = end;
        else {
            buckets.push_back({begin, end});
            owners.push_back(o);
        }
    }
    block_buckets_.assign(static_cast<size_t>(model_.hparams().n_layer), {});
    for (size_t b = 0; b < owners.size(); ++b) {
        const int il = owners[b].first;
        if (il < 0)
            rest_buckets_.push_back(b);
        else {
            SYSLM_CHECK(il < model_.hparams().n_layer, "data parallel: parameter of block ", il,
                        " in a model of ", model_.hparams().n_layer);
            block_buckets_[static_cast<size_t>(il)].push_back(b);
        }
    }
    const int rank = opt_.data_parallel->rank(), ranks = opt_.data_parallel->size();
    const bool compressed = opt_.grad_compress != parallel::Compression::None;
    if (opt_.zero > 0 || compressed) {  // this rank's block of every bucket: its optimizer state
                                        // and updates
        for (const auto& k : buckets) {
            const auto sh = parallel::GradientReducer::shard_of(k, rank, ranks);
            if (sh.end > sh.begin) shards_.emplace_back(sh.begin, sh.end);
        }
        optimizer_.shard(shards_);
    }
    using Mode = parallel::GradientReducer::Mode;
    const Mode mode = compressed       ? Mode::Compressed
                      : opt_.zero == 2 ? Mode::ReduceScatter
                                       : Mode::AllReduce;
    reducer_ = std::make_unique<parallel::GradientReducer>(
        *opt_.data_parallel, std::move(buckets), mode,
        parallel::Compressor(opt_.grad_compress, opt_.topk_ratio));
}

void Trainer::fake_quantize() {
    ParamStore& ps = model_.params();
    size_t total = 0;
    for (const auto& [name, type] : opt_.fake_quant) total += ps.find(name)->numel;
    qat_master_.resize(total);
    size_t at = 0;
    for (const auto& [name, type] : opt_.fake_quant) {
        const Param& p = *ps.find(name);
        float* v = ps.values() + p.offset;
        std::copy_n(v, p.numel, qat_master_.data() + at);
        at += static_cast<size_t>(p.numel);
        const int64_t n = p.ne[0];
        be_.round_trip(type, v, p.numel / n, n);
    }
}

void Trainer::restore_master() {
    ParamStore& ps = model_.params();
    size_t at = 0;
    for (const auto& [name, type] : opt_.fake_quant) {
        const Param& p = *ps.find(name);
        std::copy_n(qat_master_.data() + at, p.numel, ps.values() + p.offset);
        at += static_cast<size_t>(p.numel);
    }
}

std::vector<float> Trainer::full_state(const std::vector<float>& state) {
    if (shards_.empty()) return state;
    std::vector<float> full(model_.params().size(), 0.0f);
    size_t at = 0;
    for (const auto& [b, e] : optimizer_.state_ranges()) {
        std::copy_n(state.begin() + static_cast<std::ptrdiff_t>(at), e - b,
                    full.begin() + static_cast<std::ptrdiff_t>(b));
        at += e - b;
    }
    gather_shards(full.data());
    return full;
}

// AdamW's sqrt(v) at the end of the exact warm-up, on every rank for every value, as the
// divisors of the compressed gradient shares (GradientReducer::divisors), plus a tenth of their
// bucket's mean: values AdamW has not seen move (v = 0) must not blow up. Measured on the KJV
// benchmark (sign, 800 steps): a tenth +0.67% over the exact run, a hundredth +0.80%, 0.3
// +0.79%; refreshing the divisors every 200 steps +0.64%, not worth its bytes.
void Trainer::take_divisors() {
    std::vector<float> d = full_state(optimizer_.second_moment());
    for (float& x : d) x = std::sqrt(x);
    for (const parallel::GradientReducer::Bucket& k : reducer_->buckets()) {
        double sum = 0;
        for (size_t i = k.begin; i < k.end; ++i) sum += d[i];
        const double mean = k.end > k.begin ? sum / static_cast<double>(k.end - k.begin) : 0.0;
        const float floor = mean > 0 ? static_cast<float>(0.1 * mean) : 1.0f;
        for (size_t i = k.begin; i < k.end; ++i) d[i] += floor;
    }
    reducer_->divisors() = std::move(d);
}

void Trainer::keep_zeros() {
    if (zero_ranges_.empty()) return;
    be_.fill_zero(model_.params().values(), zero_ranges_);
}

void Trainer::gather_shards(float* v) {
    for (const parallel::GradientReducer::Bucket& k : reducer_->buckets())
        opt_.data_parallel->all_gather_in_place(
            v + k.begin, parallel::GradientReducer::shard_counts(k, opt_.data_parallel->size()));
}

void Trainer::swap_master(bool before_update, bool restore_shared) {
    float* v = model_.params().values();
    if (master_.empty()) {
        size_t total = 0;
        for (const auto& [b, e] : shards_) total += e - b;
        master_.resize(total);
        shared_.resize(total);
    }
    size_t at = 0;
    for (const auto& [b, e] : shards_) {
        const auto m = master_.begin() + static_cast<std::ptrdiff_t>(at);
        const auto sh = shared_.begin() + static_cast<std::ptrdiff_t>(at);
        if (before_update) {  // keep the shared weights, give the optimizer the exact ones
            std::copy(v + b, v + e, sh);
            if (master_valid_) std::copy_n(m, e - b, v + b);
        } else {  // the updated exact weights to master_ (and the shared ones back)
            std::copy(v + b, v + e, m);
            if (restore_shared) std::copy_n(sh, e - b, v + b);
        }
        at += e - b;
    }
    if (!before_update) master_valid_ = true;
}

void Trainer::publish_master() {
    if (!master_valid_) return;
    float* v = model_.params().values();
    size_t at = 0;
    for (const auto& [b, e] : shards_) {
        std::copy_n(master_.begin() + static_cast<std::ptrdiff_t>(at), e - b, v + b);
        at += e - b;
    }
    gather_shards(v);
}

double Trainer::micro_batch(float scale) {
    data_.next(tokens_, targets_);
    if (opt_.teacher_cache) {
        const TeacherCache& c = *opt_.teacher_cache;
        const std::span<const uint64_t> win = data_.windows();
        SYSLM_CHECK(static_cast<int>(win.size()) == opt_.B && c.seq() == opt_.T,
                    "offline distillation needs batches of the data directory's windows of ",
                    c.seq(), " tokens");
        const size_t per = static_cast<size_t>(opt_.T) * c.k();
        teacher_ids_.resize(per * opt_.B);
        teacher_logits_.resize(per * opt_.B);
        for (int b = 0; b < opt_.B; ++b) {
            std::copy_n(c.ids(win[b]), per, teacher_ids_.data() + b * per);
            std::copy_n(c.logits(win[b]), per, teacher_logits_.data() + b * per);
        }
        const TrainModel::Distill d{teacher_logits_.data(), opt_.distill_alpha,
                                    opt_.distill_temperature, teacher_ids_.data(), c.k()};
        return model_.forward_backward(tokens_, targets_, opt_.B, opt_.T, be_, scale, &d);
    }
    if (!opt_.teacher)
        return model_.forward_backward(tokens_, targets_, opt_.B, opt_.T, be_, scale);
    const size_t rows = static_cast<size_t>(opt_.B) * opt_.T;
    teacher_logits_.resize(rows * opt_.teacher->n_vocab());
    teacher_hidden_.resize(rows * opt_.teacher->n_embd() * opt_.teacher_layers.size());
    opt_.teacher->logits(tokens_, opt_.B, opt_.T, teacher_logits_.data(), opt_.teacher_layers,
                         teacher_hidden_.data());
    TrainModel::Distill d{teacher_logits_.data(), opt_.distill_alpha, opt_.distill_temperature};
    if (!opt_.teacher_layers.empty()) {
        d.teacher_hidden = teacher_hidden_.data();
        d.hidden_weight = opt_.distill_hidden;
    }
    return model_.forward_backward(tokens_, targets_, opt_.B, opt_.T, be_, scale, &d);
}

double Trainer::accumulate_gradients(float scale) {
    const bool compress =
        opt_.grad_compress != parallel::Compression::None && next_step_ >= opt_.compress_warmup;
    double loss = 0;
    if (pipeline_) {  // every micro-batch through the stages, then the data-parallel reduction
        micro_tokens_.resize(static_cast<size_t>(opt_.accum));
        micro_targets_.resize(static_cast<size_t>(opt_.accum));
        for (int micro = 0; micro < opt_.accum; ++micro)
            data_.next(micro_tokens_[micro], micro_targets_[micro]);
        loss = pipeline_->run(micro_tokens_, micro_targets_, opt_.B, opt_.T, be_, scale);
        if (reducer_) {
            reducer_->start(model_.params().grads(), compress);
            for (size_t b = 0; b < reducer_->buckets().size(); ++b) reducer_->ready(b);
        }
    } else {
        for (int micro = 0; micro < opt_.accum; ++micro) {
            if (reducer_ && micro == opt_.accum - 1) {  // the last backward makes gradients final
                reducer_->start(model_.params().grads(), compress);
                model_.set_gradient_hook([this](int il) {
                    for (size_t b :
                         il < 0 ? rest_buckets_ : block_buckets_[static_cast<size_t>(il)])
                        reducer_->ready(b);
                });
            }
            loss += micro_batch(scale);
        }
    }
    if (!reducer_) return loss;
    model_.set_gradient_hook({});
    reducer_->finish();  // gradients summed over the data-parallel group
    opt_.data_parallel->all_reduce_sum(&loss, 1);
    return loss / opt_.data_parallel->size();
}

// The norm of the whole model's gradient, from the floats each rank holds: with ZeRO or
// compression each data-parallel rank sums its shards; a tensor-parallel rank holds a slice of
// the sliced tensors and the same whole ones as its peers (counted once); each pipeline stage its
// own tensors. In pieces of at most 64 Ki floats, each within one tensor, summed in parallel.
// It is also the step's all-finite check: squares of finite floats summed in double stay finite,
// so the norm is finite exactly when every rank's gradients are.
double Trainer::global_grad_norm(const std::vector<Optimizer::Range>& mine) {
    constexpr size_t kPiece = 1 << 16;
    std::vector<backend::Backend::SquaresPiece>& pieces =
        norm_pieces_;  // the same every step: made once
    if (pieces.empty())
        for (const Param& p : model_.params().params())
            for (const auto& [b0, e0] : mine) {
                const size_t b = std::max(b0, p.offset), e = std::min(e0, p.offset + p.numel);
                for (size_t x = b; x < e; x += kPiece)
                    pieces.push_back({x, std::min(e, x + kPiece), p.slice_dim >= 0 ? 1 : 0});
            }
    const std::array<double, 2> by_class = be_.sum_squares(model_.params().grads(), pieces);
    double sq[2] = {by_class[1], by_class[0]};  // sliced, whole
    if (!shards_.empty()) opt_.data_parallel->all_reduce_sum(sq, 2);
    if (parallel::Communicator* tp = model_.tensor_parallel()) tp->all_reduce_sum(sq, 1);
    double total = sq[0] + sq[1];
    if (pipeline_) opt_.pipeline->all_reduce_sum(&total, 1);
    return std::sqrt(total);
}

void Trainer::apply_update(float lr, float grad_scale) {
    // Compressed updates: the optimizer steps this rank's exact weights of its blocks (master_),
    // which the weights every rank shares follow through compressed updates.
    const bool compressed = reducer_ && opt_.grad_compress != parallel::Compression::None;
    const bool compress_now = compressed && next_step_ >= opt_.compress_warmup;
    if (compressed) swap_master(true);
    optimizer_.step(lr, be_, grad_scale);
    if (compressed) {
        keep_zeros();  // in the exact weights too: no update to carry there
        swap_master(false, compress_now);
    }
    if (compress_now)
        reducer_->all_gather_updates(model_.params().values(), master_.data());
    else if (!shards_.empty())  // every rank's updated shards to every rank (warm-up: exact)
        gather_shards(model_.params().values());
    keep_zeros();  // after compressed updates, whose decoding may have touched the zeros
}

int Trainer::window_at(int64_t step) const {
    uint64_t x = opt_.window_seed ^ (static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;  // splitmix64's finaliser
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    const double u = static_cast<double>(x >> 11) * 0x1.0p-53;  // [0, 1)
    const double lo = std::log(opt_.window_min), hi = std::log(opt_.window_max + 1.0);
    return std::clamp(static_cast<int>(std::exp(lo + u * (hi - lo))), opt_.window_min,
                      opt_.window_max);
}

StepStats Trainer::step() {
    const auto t0 = std::chrono::steady_clock::now();
    // A sampled window for this step only; evaluation between steps sees the model's own.
    struct WindowScope {
        TrainModel& m;
        int own;
        ~WindowScope() {
            if (own > 0) m.set_window(own);
        }
    } window_scope{model_, opt_.window_min > 0 ? model_.hparams().sliding_window : 0};
    if (opt_.window_min > 0) model_.set_window(window_at(next_step_));
    auto seconds = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    // Sign compression only: top-k selecting by |g| / sqrt(v) ended further from the exact run
    // (KJV, 400 steps: +0.72/+0.80/+0.78% on seeds 1-3, against +0.77/+0.70/+0.53% without), and
    // int8 was already within 0.05%.
    if (compressing() && opt_.grad_compress == parallel::Compression::Sign &&
        next_step_ >= opt_.compress_warmup && reducer_->divisors().empty() &&
        !optimizer_.second_moment().empty() && optimizer_.steps() > 0)
        take_divisors();
    model_.params().zero_grads();
    if (!opt_.fake_quant.empty()) fake_quantize();
    const bool scaling = scale_ > 0;
    const float scale = scaling ? scale_ : 1.0f;
    const double loss = accumulate_gradients(scale);
    if (!opt_.fake_quant.empty()) restore_master();  // gradients at Q(W) update W
    const double n = static_cast<double>(model_.params().size());
    SYSLM_PROFILE_SCOPE("optimizer", 12 * n, 20 * n);
    // The mean over micro-batches and ranks (as one batch accum x ranks times larger), unscaled.
    // With ZeRO only this rank's shards are summed over the group, and only they are used.
    const int ranks = reducer_ ? opt_.data_parallel->size() : 1;
    const float inv = 1.0f / (static_cast<float>(opt_.accum) * static_cast<float>(ranks) * scale);
    const std::vector<Optimizer::Range> whole{{0, model_.params().size()}};
    const std::vector<Optimizer::Range>& mine = shards_.empty() ? whole : shards_;
    if (inv != 1.0f) be_.scale(model_.params().grads(), mine, inv);
    const int stratum = data_.stratum();
    float lr = opt_.schedule.at(next_step_);
    if (stratum >= 0 && static_cast<size_t>(stratum) < opt_.stratum_lr.size())
        lr *= opt_.stratum_lr[static_cast<size_t>(stratum)];
    const double norm = global_grad_norm(mine);
    if (scaling && !std::isfinite(norm)) {
        scale_ *= 0.5f;  // overflowed: skip the update, try a smaller scale
        clean_steps_ = 0;
        return {next_step_++, loss / opt_.accum, INFINITY, lr, seconds(), true, scale, stratum};
    }
    // A loss or gradient that is NaN or infinite (divergence, a corrupt batch) must not reach the
    // weights: the step ends here, before the update, so the weights, the optimizer state and the
    // caller's last checkpoint stay good. Loss scaling's overflow skips (above) are the expected
    // exception. Every rank has the same loss and norm (both reduced over the group), so every
    // rank stops at the same step.
    if (!std::isfinite(loss) || !std::isfinite(norm))
        fail("training step ", next_step_ + 1, ": the ",
             std::isfinite(loss) ? "gradient norm" : "loss", " is ",
             std::isfinite(loss) ? norm : loss / opt_.accum,
             ": stopped before the update, so the weights and the last checkpoint are the previous "
             "step's (a lower --lr, a longer --warmup or --clip may help; check the data)");
    apply_update(lr, clip_coefficient(norm, opt_.clip));  // clipping fused into the update
    if (scaling && ++clean_steps_ >= opt_.scale_window) {
        scale_ *= 2.0f;
        clean_steps_ = 0;
    }
    return {next_step_++, loss / opt_.accum,      norm,   lr, seconds(),
            false,        scaling ? scale : 0.0f, stratum};
}

namespace {

constexpr char kStateMagic[4] = {'S', 'Y', 'S', 'T'};
// 2 added the loss scale, 3 the auxiliary parameters (distillation's hidden projections), 4 the
// count of optimizer-state shard files (ZeRO), 5 the size and hash of the model.gguf written with
// it and a checksum of the whole file (checkpoint_files.hpp), 6 the training GEMM engines the run
// used (a resume continues on them); older states still load, unchecked.
constexpr uint32_t kStateVersion = 6;
// Optimizer-state shards and error-feedback residuals: the first magic is followed by a checksum
// at the end of the file, the second (written before checksums) is still read.
constexpr char kShardMagic[4] = {'S', 'Y', 'Z', '2'}, kShardMagicV1[4] = {'S', 'Y', 'S', 'Z'};
constexpr char kResidualMagic[4] = {'S', 'Y', 'R', '2'}, kResidualMagicV1[4] = {'S', 'Y', 'S', 'R'};

// Opens a shard or residual file: checksummed (verified now) under the current magic, unchecked
// under the old one; positioned after the magic.
CheckpointReader open_tagged(const std::string& path, const char (&magic)[4],
                             const char (&magic_v1)[4], const char* what) {
    CheckpointReader probe(path, false);
    char m[4];
    probe.read(m, 4, "magic");
    const bool current = std::memcmp(m, magic, 4) == 0;
    SYSLM_CHECK(current || std::memcmp(m, magic_v1, 4) == 0, path, ": not ", what);
    CheckpointReader r(path, current);
    r.read(m, 4, "magic");
    return r;
}

// Every moment finite (and the second one never negative): a checkpoint of a run whose numbers
// went bad must not be resumed as if it were good.
void check_moments(const std::string& path, const std::vector<float>& m,
                   const std::vector<float>& v) {
    for (size_t i = 0; i < m.size(); ++i)
        SYSLM_CHECK(std::isfinite(m[i]), path, ": the optimizer's first moment holds ", m[i],
                    " at index ", i);
    for (size_t i = 0; i < v.size(); ++i)
        SYSLM_CHECK(std::isfinite(v[i]) && v[i] >= 0, path,
                    ": the optimizer's second moment holds ", v[i], " at index ", i);
}

std::string shard_file(int rank, int ranks) {
    return "optimizer-" + std::to_string(rank) + "-of-" + std::to_string(ranks) + ".bin";
}

}  // namespace

// state.bin: the step, the optimizer's step and moments (none when ZeRO wrote them into shard
// files), the loss scale, the data position, the auxiliary parameters, the shard-file count.
void Trainer::write_state(const std::string& path, std::span<const float> m,
                          std::span<const float> v, uint32_t shards) const {
    ChecksummedWriter w(path);
    w.write(kStateMagic, 4);
    w.write(&kStateVersion, sizeof kStateVersion);
    const int64_t step = next_step_, t = optimizer_.steps();
    w.write(&step, sizeof step);
    w.write(&t, sizeof t);
    w.floats(m);
    w.floats(v);
    w.write(&scale_, sizeof scale_);
    w.write(&clean_steps_, sizeof clean_steps_);
    const std::string pos = data_.position();
    const uint64_t len = pos.size();
    w.write(&len, sizeof len);
    w.write(pos.data(), len);
    std::vector<float> aux;  // not in model.gguf, which holds the model only
    const ParamStore& ps = model_.params();
    for (const Param& p : ps.params())
        if (p.auxiliary)
            aux.insert(aux.end(), ps.values() + p.offset, ps.values() + p.offset + p.numel);
    w.floats(aux);
    w.write(&shards, sizeof shards);
    // The model.gguf beside it, written first: a resume checks that it is the same file.
    const std::string model = (fs::path(path).parent_path() / "model.gguf").string();
    const uint64_t model_bytes = fs::file_size(model), model_hash = file_word_hash(model);
    w.write(&model_bytes, sizeof model_bytes);
    w.write(&model_hash, sizeof model_hash);
    const kernels::TrainGemmChoice& gemms = kernels::train_gemm_choice();
    const uint8_t engines[2] = {static_cast<uint8_t>(gemms.f32), static_cast<uint8_t>(gemms.bf16)};
    w.write(engines, sizeof engines);
    w.commit();
}

void Trainer::save_checkpoint(const std::string& dir,
                              const std::vector<std::pair<std::string, io::GGUFValue>>& metadata,
                              const io::GGUFFile* constants) {
    publish_master();  // compressed updates: the exact weights are saved
    if (model_.tensor_parallel() || pipeline_)
        return save_split_checkpoint(dir, metadata, constants);
    // With data parallelism every rank calls this; rank 0 writes the files, and with ZeRO each
    // rank its optimizer shard.
    parallel::Communicator* group =
        opt_.data_parallel && opt_.data_parallel->size() > 1 ? opt_.data_parallel : nullptr;
    const bool lead = !group || group->rank() == 0, sharded = !shards_.empty();
    const fs::path tmp(dir + ".tmp");
    if (lead) begin_checkpoint(dir);
    if (group) group->barrier();
    if (sharded) {
        ChecksummedWriter w((tmp / shard_file(group->rank(), group->size())).string());
        w.write(kShardMagic, 4);
        const std::vector<Optimizer::Range> ranges = optimizer_.state_ranges();
        const uint64_t n = ranges.size();
        w.write(&n, sizeof n);
        for (const auto& [b, e] : ranges) {
            const uint64_t be[2] = {b, e};
            w.write(be, sizeof be);
        }
        w.floats(optimizer_.first_moment());
        w.floats(optimizer_.second_moment());
        w.commit();
    }
    write_residual(tmp.string());
    if (group) group->barrier();
    if (lead) {
        model_.params().write_gguf((tmp / "model.gguf").string(), metadata, false, constants);
        if (sharded)
            write_state((tmp / "state.bin").string(), {}, {}, static_cast<uint32_t>(group->size()));
        else
            write_state((tmp / "state.bin").string(), optimizer_.first_moment(),
                        optimizer_.second_moment(), 0);
        swap_in_checkpoint(dir);
    }
    if (group) group->barrier();
}

// Tensor / pipeline parallel: the whole model and whole optimizer moments, gathered within each
// stage's tensor-parallel group and then across the stages, written by the one rank that is
// first in every group, in the layout a single process has: any layout (or one process) resumes.
void Trainer::save_split_checkpoint(
    const std::string& dir, const std::vector<std::pair<std::string, io::GGUFValue>>& metadata,
    const io::GGUFFile* constants) {
    SYSLM_CHECK(constants, "checkpoint: a tensor- or pipeline-parallel run needs its model file");
    const ParamStore& ps = model_.params();
    SYSLM_CHECK(ps.auxiliary_size() == 0,
                "checkpoints of tensor- or pipeline-parallel runs with "
                "hidden-state distillation are not implemented");
    parallel::Communicator* tp = model_.tensor_parallel();
    auto whole = [&](const ParamStore& s) {
        std::optional<ParamStore> w;
        if (tp) w = s.gathered(*tp);
        if (pipeline_) w = (w ? *w : s).gathered_stages(*opt_.pipeline, *constants);
        return std::move(*w);
    };
    // ZeRO or compression: the data-parallel ranks' shards of the moments, whole within the
    // stage's tensor-parallel rank first.
    const ParamStore weights = whole(ps);
    const ParamStore m = whole(ps.with_values(full_state(optimizer_.first_moment())));
    std::optional<ParamStore> v;
    if (!optimizer_.second_moment().empty())
        v = whole(ps.with_values(full_state(optimizer_.second_moment())));
    const bool lead = (!tp || tp->rank() == 0) && (!pipeline_ || opt_.pipeline->rank() == 0) &&
                      (!opt_.data_parallel || opt_.data_parallel->rank() == 0);
    const fs::path tmp(dir + ".tmp");
    if (lead) begin_checkpoint(dir);
    if (compressing()) {  // every rank its error-feedback residual, into the lead's directory
        barrier_all();
        write_residual(tmp.string());
        barrier_all();
    }
    if (!lead) return;
    weights.write_gguf((tmp / "model.gguf").string(), metadata, false, constants);
    write_state((tmp / "state.bin").string(), {m.values(), m.size()},
                v ? std::span<const float>(v->values(), v->size()) : std::span<const float>{}, 0);
    swap_in_checkpoint(dir);
}

bool Trainer::compressing() const {
    return reducer_ && opt_.grad_compress != parallel::Compression::None;
}

void Trainer::barrier_all() {
    // A barrier over each axis of the rank grid in turn: every rank has reached the first when
    // any leaves the last.
    if (model_.tensor_parallel()) model_.tensor_parallel()->barrier();
    if (opt_.data_parallel) opt_.data_parallel->barrier();
    if (pipeline_) opt_.pipeline->barrier();
}

// This rank's place in the run's layout: data-parallel rank of size, and so on.
std::string Trainer::residual_file() const {
    auto axis = [](const char* name, const parallel::Communicator* c) {
        return c && c->size() > 1 ? std::string("-") + name + std::to_string(c->rank()) + "of" +
                                        std::to_string(c->size())
                                  : std::string();
    };
    return "residual" + axis("dp", opt_.data_parallel) + axis("tp", model_.tensor_parallel()) +
           axis("pp", pipeline_ ? opt_.pipeline : nullptr) + ".bin";
}

void Trainer::write_residual(const std::string& dir) {
    if (!compressing()) return;
    ChecksummedWriter w((fs::path(dir) / residual_file()).string());
    w.write(kResidualMagic, 4);
    w.floats(reducer_->residual());
    w.floats(reducer_->divisors());
    w.commit();
}

// The error-feedback residual this rank's place in the layout left, when the checkpoint was
// written by the same layout with compression; otherwise what the compression had not yet
// delivered is dropped, and said so.
void Trainer::load_residual(const std::string& dir) {
    if (!compressing()) return;
    const fs::path path = fs::path(dir) / residual_file();
    std::vector<float>& residual = reducer_->residual();
    if (!fs::exists(path)) {  // divisors are taken afresh at the next step
        std::fill(residual.begin(), residual.end(), 0.0f);
        reducer_->divisors().clear();
        for (const auto& e : fs::directory_iterator(dir))
            if (e.path().filename().string().rfind("residual", 0) == 0) {
                std::fprintf(stderr,
                             "note: %s holds gradient-compression residuals of another "
                             "layout of ranks; this run starts without them (what the compression "
                             "had not yet delivered is dropped)\n",
                             dir.c_str());
                break;
            }
        return;
    }
    CheckpointReader r = open_tagged(path.string(), kResidualMagic, kResidualMagicV1,
                                     "a gradient-compression residual");
    std::vector<float> v = r.floats("residual", residual.size());
    SYSLM_CHECK(v.size() == residual.size(), r.path(), ": ", v.size(),
                " residual values for an arena of ", residual.size());
    std::vector<float> d = r.floats("divisors", residual.size());
    SYSLM_CHECK(d.empty() || d.size() == residual.size(), r.path(), ": ", d.size(),
                " divisors for an arena of ", residual.size());
    r.expect_end();
    residual = std::move(v);
    reducer_->divisors() = std::move(d);
}

namespace {

// The version of a state file, from its header (before its checksum can be verified).
uint32_t state_version(const std::string& path) {
    CheckpointReader probe(path, false);
    char magic[4];
    probe.read(magic, 4, "magic");
    SYSLM_CHECK(std::memcmp(magic, kStateMagic, 4) == 0, path, ": not a syslm checkpoint state");
    uint32_t version = 0;
    probe.read(&version, sizeof version, "version");
    SYSLM_CHECK(version >= 1 && version <= kStateVersion, path, ": state version ", version,
                " (expected 1 to ", kStateVersion, ")");
    return version;
}

// State version 6 on: the training GEMM engines the state was written with, pinned for this run.
void pin_checkpoint_engines(CheckpointReader& r) {
    const std::string& path = r.path();
    // Two engines can time alike and a new process pick the other one: the steps would then
    // differ in the last bits from the run that wrote this state.
    uint8_t engines[2] = {0, 0};
    r.read(engines, sizeof engines, "training GEMM engines");
    SYSLM_CHECK(engines[0] <= 4 && engines[1] <= 4, path, ": corrupt training GEMM engines ",
                int{engines[0]}, ", ", int{engines[1]});
    const auto f32 = static_cast<kernels::TrainGemm>(engines[0]);
    const auto bf16 = static_cast<kernels::TrainGemm>(engines[1]);
    if (!kernels::pin_train_gemms(f32, bf16))
        std::fprintf(stderr,
                     "warning: %s was trained with the %s / %s training GEMMs, not all "
                     "available on this CPU; continuing on %s / %s, so the steps may differ "
                     "in the last bits from an uninterrupted run\n",
                     path.c_str(), kernels::train_gemm_name(f32), kernels::train_gemm_name(bf16),
                     kernels::train_gemm_name(kernels::train_gemm_choice().f32),
                     kernels::train_gemm_name(kernels::train_gemm_choice().bf16));
}

// ZeRO: the whole optimizer state (m, and v where the optimizer has one) assembled from every
// rank's shard file, each range checked against the model and every parameter covered.
void assemble_shards(const std::string& dir, uint32_t shards, const ParamStore& ps,
                     std::vector<float>& m, std::vector<float>& v) {
    m.assign(ps.size(), 0.0f);
    std::vector<float> v_full;
    std::vector<char> covered(ps.size(), 0);
    for (uint32_t s = 0; s < shards; ++s) {
        CheckpointReader f = open_tagged(
            (fs::path(dir) / shard_file(static_cast<int>(s), static_cast<int>(shards))).string(),
            kShardMagic, kShardMagicV1, "an optimizer shard");
        uint64_t n = 0;
        f.read(&n, sizeof n, "range count");
        SYSLM_CHECK(n <= ps.size(), f.path(), ": corrupt range count ", n);
        std::vector<uint64_t> be(2 * n);
        f.read(be.data(), be.size() * sizeof(uint64_t), "ranges");
        const std::vector<float> fm = f.floats("first moment", ps.size());
        const std::vector<float> fv = f.floats("second moment", ps.size());
        f.expect_end();
        if (!fv.empty() && v_full.empty()) v_full.assign(ps.size(), 0.0f);
        size_t at = 0;
        for (uint64_t i = 0; i < n; ++i) {
            const uint64_t b = be[2 * i], e = be[2 * i + 1];
            SYSLM_CHECK(b <= e && e <= ps.size() && at + (e - b) <= fm.size() &&
                            (fv.empty() || at + (e - b) <= fv.size()),
                        f.path(), ": range [", b, ", ", e, ") does not fit the model");
            std::copy_n(fm.begin() + static_cast<std::ptrdiff_t>(at), e - b,
                        m.begin() + static_cast<std::ptrdiff_t>(b));
            if (!fv.empty())
                std::copy_n(fv.begin() + static_cast<std::ptrdiff_t>(at), e - b,
                            v_full.begin() + static_cast<std::ptrdiff_t>(b));
            std::fill(covered.begin() + static_cast<std::ptrdiff_t>(b),
                      covered.begin() + static_cast<std::ptrdiff_t>(e), 1);
            at += e - b;
        }
    }
    // Every parameter's state must be present (alignment padding between tensors is not).
    for (const Param& p : ps.params())
        SYSLM_CHECK(std::all_of(covered.begin() + static_cast<std::ptrdiff_t>(p.offset),
                                covered.begin() + static_cast<std::ptrdiff_t>(p.offset + p.numel),
                                [](char c) { return c != 0; }),
                    dir, ": the optimizer shards miss part of ", p.name);
    v = std::move(v_full);
}

}  // namespace

void Trainer::load_state(const std::string& dir) {
    // A tensor- or pipeline-parallel run holds part of the model: the state's whole-model
    // moments are cut to it (their layout: the checkpoint's model.gguf).
    const bool split = model_.tensor_parallel() || pipeline_;
    std::optional<io::GGUFFile> whole_file;
    if (split) whole_file.emplace((fs::path(dir) / "model.gguf").string());
    const std::string path = (fs::path(dir) / "state.bin").string();
    uint32_t version = state_version(path);
    CheckpointReader r(path, version >= 5);  // verifies the checksum
    char magic[4];
    r.read(magic, 4, "magic");
    r.read(&version, sizeof version, "version");
    int64_t step = 0, t = 0;
    r.read(&step, sizeof step, "step");
    r.read(&t, sizeof t, "optimizer step");
    ParamStore& ps = model_.params();
    size_t limit = ps.size();
    if (split) limit = std::max(limit, whole_file->file_size() / sizeof(float));  // F32 tensors
    std::vector<float> m = r.floats("optimizer state", limit);
    std::vector<float> v = r.floats("optimizer state", limit);
    if (version >= 2) {
        float scale = 0;
        int64_t clean = 0;
        r.read(&scale, sizeof scale, "loss scale");
        r.read(&clean, sizeof clean, "loss scale window");
        SYSLM_CHECK(std::isfinite(scale) && scale >= 0 && clean >= 0, path, ": corrupt loss scale ",
                    scale);
        SYSLM_CHECK((scale > 0) == (scale_ > 0), path, ": the checkpoint was written ",
                    scale > 0 ? "with" : "without", " loss scaling, this run is ",
                    scale_ > 0 ? "with" : "without", " (another --precision?)");
        scale_ = scale;
        clean_steps_ = clean;
    }
    uint64_t len = 0;
    r.read(&len, sizeof len, "data position length");
    SYSLM_CHECK(len < (1u << 20), path, ": corrupt data position length ", len);
    std::string pos(len, '\0');
    r.read(pos.data(), len, "data position");
    uint64_t n_aux = 0;
    if (version >= 3) r.read(&n_aux, sizeof n_aux, "auxiliary parameter count");
    SYSLM_CHECK(n_aux == ps.auxiliary_size(), path, ": the checkpoint has ", n_aux,
                " values of auxiliary parameters (hidden-state projections), this run ",
                ps.auxiliary_size(), " (another --distill-hidden-layers or teacher?)");
    for (const Param& p : ps.params())
        if (p.auxiliary)
            r.read(ps.values() + p.offset, static_cast<size_t>(p.numel) * sizeof(float),
                   "auxiliary parameters");
    uint32_t shards = 0;
    if (version >= 4) r.read(&shards, sizeof shards, "optimizer shard count");
    SYSLM_CHECK(shards < (1u << 20), path, ": corrupt optimizer shard count ", shards);
    if (version >= 5) {
        uint64_t model_bytes = 0, model_hash = 0;
        r.read(&model_bytes, sizeof model_bytes, "model size");
        r.read(&model_hash, sizeof model_hash, "model hash");
        const std::string model = (fs::path(dir) / "model.gguf").string();
        SYSLM_CHECK(fs::exists(model) && fs::file_size(model) == model_bytes &&
                        file_word_hash(model) == model_hash,
                    model, ": not the model written with ", path,
                    " (its size or hash differs: the file is corrupt or was replaced)");
    }
    if (version >= 6) pin_checkpoint_engines(r);
    r.expect_end();
    if (shards > 0) assemble_shards(dir, shards, ps, m, v);  // ZeRO: every rank's file
    if (split) {
        SYSLM_CHECK(shards == 0, dir,
                    ": a ZeRO checkpoint cannot resume a tensor- or pipeline-"
                    "parallel run");
        const int tp_rank = model_.tensor_parallel() ? model_.tensor_parallel()->rank() : 0;
        m = ps.local_part(m, *whole_file, tp_rank);
        if (!v.empty()) v = ps.local_part(v, *whole_file, tp_rank);
    }
    check_moments(path, m, v);
    optimizer_.load_full_state(m, v);
    load_residual(dir);
    data_.seek(pos);
    next_step_ = step;
    optimizer_.set_steps(t);
}

}  // namespace syslm::train
