#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "core/mapped_file.hpp"
#include "core/profiler.hpp"
#include "data/prepare.hpp"
#include "data/shards.hpp"
#include "kernels/type_traits.hpp"
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
    : rng_(seed), n_vocab_(n_vocab), n_(B * T) {}

void SyntheticBatches::next(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
    std::uniform_int_distribution<int32_t> pick(0, n_vocab_ - 1);
    tokens.resize(static_cast<size_t>(n_));
    targets.resize(static_cast<size_t>(n_));
    for (auto& t : tokens) t = pick(rng_);
    for (auto& t : targets) t = pick(rng_);
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
                ThreadPool& pool) {
    data::SequentialLoader val(data::split_shard_paths(data_dir, "val"), B, T,
                               static_cast<uint64_t>(model.hparams().n_vocab));
    std::vector<int32_t> rows, tokens(static_cast<size_t>(B) * T), targets(tokens.size());
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
        sum += model.loss(tokens, targets, B, T, pool);
        ++n;
    }
    SYSLM_CHECK(n > 0, data_dir, ": the val split has no full batch of ", B, " x ", T + 1,
                " tokens");
    return sum / n;
}

Trainer::Trainer(TrainModel& model, BatchSource& data, const TrainOptions& opt, ThreadPool& pool)
    : model_(model),
      data_(data),
      opt_(opt),
      pool_(pool),
      optimizer_(opt.optimizer, model.params()) {
    SYSLM_CHECK(opt.steps > 0 && opt.accum > 0,
                "training: steps and accumulation must be positive");
    SYSLM_CHECK(opt.loss_scale >= 0 && std::isfinite(opt.loss_scale) && opt.scale_window > 0,
                "training: the loss scale must be finite and >= 0, its window positive");
    opt_.schedule.total = opt.steps;
    scale_ = opt.loss_scale;
    SYSLM_CHECK(!opt.teacher || opt.teacher->n_vocab() == model.hparams().n_vocab,
                "distillation: the teacher's vocabulary (", opt.teacher ? opt.teacher->n_vocab() : 0,
                " tokens) differs from the student's (", model.hparams().n_vocab, ")");
    for (const auto& [name, type] : opt.fake_quant) {
        const Param* p = model.params().find(name);
        SYSLM_CHECK(p, "training: no parameter ", name, " to fake-quantize");
        SYSLM_CHECK(dtype_info(type).quantized && kernels::has_type_traits(type) &&
                        p->ne[0] % dtype_info(type).block_size == 0,
                    "training: cannot fake-quantize ", name, " (rows of ", p->ne[0], ") to ",
                    dtype_name(type));
    }
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
                zero_ranges_.push_back(at);
                zero_ranges_.push_back(static_cast<int64_t>(p.offset) + j);
                i = j;
            }
        }
    }
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
        const int64_t n = p.ne[0], rows = p.numel / n;
        const kernels::TypeTraits& tr = kernels::type_traits(type);
        const size_t rb = row_bytes(type, n);
        pool_.parallel_for(rows, [&](int64_t b, int64_t e, int) {
            std::vector<uint8_t> q(rb);
            for (int64_t r = b; r < e; ++r) {
                tr.from_float(v + r * n, q.data(), n);
                tr.to_float(q.data(), v + r * n, n);
            }
        });
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

StepStats Trainer::step() {
    const auto t0 = std::chrono::steady_clock::now();
    model_.params().zero_grads();
    if (!opt_.fake_quant.empty()) fake_quantize();
    const bool scaling = scale_ > 0;
    const float scale = scaling ? scale_ : 1.0f;
    double loss = 0;
    for (int micro = 0; micro < opt_.accum; ++micro) {
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
            loss += model_.forward_backward(tokens_, targets_, opt_.B, opt_.T, pool_, scale, &d);
        } else if (opt_.teacher) {
            teacher_logits_.resize(static_cast<size_t>(opt_.B) * opt_.T * opt_.teacher->n_vocab());
            opt_.teacher->logits(tokens_, opt_.B, opt_.T, teacher_logits_.data());
            const TrainModel::Distill d{teacher_logits_.data(), opt_.distill_alpha,
                                        opt_.distill_temperature};
            loss += model_.forward_backward(tokens_, targets_, opt_.B, opt_.T, pool_, scale, &d);
        } else {
            loss += model_.forward_backward(tokens_, targets_, opt_.B, opt_.T, pool_, scale);
        }
    }
    if (!opt_.fake_quant.empty()) restore_master();  // gradients at Q(W) update W
    const double n = static_cast<double>(model_.params().size());
    SYSLM_PROFILE_SCOPE("optimizer", 12 * n, 20 * n);
    float* g = model_.params().grads();
    const size_t size = model_.params().size();
    // The mean over micro-batches (as one batch accum times larger), unscaled.
    const float inv = 1.0f / (static_cast<float>(opt_.accum) * scale);
    if (inv != 1.0f)
        pool_.parallel_for(static_cast<int64_t>(size), [&](int64_t b, int64_t e, int) {
            for (int64_t i = b; i < e; ++i) g[i] *= inv;
        });
    const float lr = opt_.schedule.at(next_step_);
    if (scaling) {
        std::vector<char> finite(static_cast<size_t>(pool_.size()), 1);
        pool_.parallel_for(static_cast<int64_t>(size), [&](int64_t b, int64_t e, int w) {
            bool ok = true;
            for (int64_t i = b; i < e; ++i) ok &= std::isfinite(g[i]);
            if (!ok) finite[static_cast<size_t>(w)] = 0;
        });
        if (std::find(finite.begin(), finite.end(), 0) != finite.end()) {
            scale_ *= 0.5f;  // overflowed: skip the update, try a smaller scale
            clean_steps_ = 0;
            const double seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            return {next_step_++, loss / opt_.accum, INFINITY, lr, seconds, true, scale};
        }
    }
    const double norm = clip_grad_norm(model_.params(), opt_.clip, pool_);
    optimizer_.step(lr, pool_);
    if (!zero_ranges_.empty()) {
        float* v = model_.params().values();
        pool_.parallel_for(static_cast<int64_t>(zero_ranges_.size() / 2),
                           [&](int64_t b, int64_t e, int) {
                               for (int64_t r = b; r < e; ++r)
                                   std::fill(v + zero_ranges_[2 * r], v + zero_ranges_[2 * r + 1],
                                             0.0f);
                           });
    }
    if (scaling && ++clean_steps_ >= opt_.scale_window) {
        scale_ *= 2.0f;
        clean_steps_ = 0;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return {next_step_++, loss / opt_.accum, norm, lr, seconds, false, scaling ? scale : 0.0f};
}

namespace {

constexpr char kStateMagic[4] = {'S', 'Y', 'S', 'T'};
constexpr uint32_t kStateVersion = 2;  // 2 added the loss scale; 1 still loads

void put_floats(AtomicFileWriter& w, const std::vector<float>& v) {
    const uint64_t n = v.size();
    w.write(&n, sizeof n);
    w.write(v.data(), n * sizeof(float));
}

}  // namespace

void Trainer::save_checkpoint(const std::string& dir,
                              const std::vector<std::pair<std::string, io::GGUFValue>>& metadata,
                              const io::GGUFFile* constants) const {
    const fs::path final_dir(dir), tmp(dir + ".tmp"), old(dir + ".old");
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    model_.params().write_gguf((tmp / "model.gguf").string(), metadata, false, constants);
    {
        AtomicFileWriter w((tmp / "state.bin").string());
        w.write(kStateMagic, 4);
        w.write(&kStateVersion, sizeof kStateVersion);
        const int64_t step = next_step_, t = optimizer_.steps();
        w.write(&step, sizeof step);
        w.write(&t, sizeof t);
        put_floats(w, optimizer_.first_moment());
        put_floats(w, optimizer_.second_moment());
        w.write(&scale_, sizeof scale_);
        w.write(&clean_steps_, sizeof clean_steps_);
        const std::string pos = data_.position();
        const uint64_t len = pos.size();
        w.write(&len, sizeof len);
        w.write(pos.data(), len);
        w.commit();
    }
    // Swap in the new directory: the old one is kept until the new one is in place.
    fs::remove_all(old);
    if (fs::exists(final_dir)) fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    fs::remove_all(old);
}

void Trainer::load_state(const std::string& dir) {
    const std::string path = (fs::path(dir) / "state.bin").string();
    std::ifstream in(path, std::ios::binary);
    SYSLM_CHECK(in, path, ": cannot open the checkpoint state");
    auto read = [&](void* p, size_t n, const char* what) {
        in.read(static_cast<char*>(p), static_cast<std::streamsize>(n));
        SYSLM_CHECK(in && static_cast<size_t>(in.gcount()) == n, path, ": truncated at the ", what);
    };
    char magic[4];
    uint32_t version = 0;
    read(magic, 4, "magic");
    SYSLM_CHECK(std::memcmp(magic, kStateMagic, 4) == 0, path, ": not a syslm checkpoint state");
    read(&version, sizeof version, "version");
    SYSLM_CHECK(version == 1 || version == kStateVersion, path, ": state version ", version,
                " (expected 1 or ", kStateVersion, ")");
    int64_t step = 0, t = 0;
    read(&step, sizeof step, "step");
    read(&t, sizeof t, "optimizer step");
    for (std::vector<float>* v : {&optimizer_.first_moment(), &optimizer_.second_moment()}) {
        uint64_t n = 0;
        read(&n, sizeof n, "optimizer state size");
        SYSLM_CHECK(n == v->size(), path, ": optimizer state of ", n, " values for ", v->size(),
                    " (another model or optimizer?)");
        read(v->data(), n * sizeof(float), "optimizer state");
    }
    if (version >= 2) {
        float scale = 0;
        int64_t clean = 0;
        read(&scale, sizeof scale, "loss scale");
        read(&clean, sizeof clean, "loss scale window");
        SYSLM_CHECK(std::isfinite(scale) && scale >= 0 && clean >= 0, path,
                    ": corrupt loss scale ", scale);
        SYSLM_CHECK((scale > 0) == (scale_ > 0), path, ": the checkpoint was written ",
                    scale > 0 ? "with" : "without", " loss scaling, this run is ",
                    scale_ > 0 ? "with" : "without", " (another --precision?)");
        scale_ = scale;
        clean_steps_ = clean;
    }
    uint64_t len = 0;
    read(&len, sizeof len, "data position length");
    SYSLM_CHECK(len < (1u << 20), path, ": corrupt data position length ", len);
    std::string pos(len, '\0');
    read(pos.data(), len, "data position");
    data_.seek(pos);
    next_step_ = step;
    optimizer_.set_steps(t);
}

}  // namespace syslm::train
