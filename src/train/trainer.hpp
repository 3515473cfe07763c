// The training loop: micro-batches from a BatchSource, gradient accumulation, global-norm
// clipping, the learning-rate schedule and the optimizer step, one step() at a time so the
// caller runs evaluation, early stopping, logging and checkpoints between steps; and the
// checkpoint itself (save / resume bit-exactly).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "data/loader.hpp"
#include "parallel/communicator.hpp"
#include "parallel/data_parallel.hpp"
#include "train/optimizer.hpp"
#include "train/pipeline.hpp"
#include "train/train_model.hpp"

namespace syslm::train {

class Teacher;       // train/teacher.hpp
class TeacherCache;  // train/teacher_cache.hpp

// Fills one micro-batch: tokens and targets, B x T each. Its position in the data can be saved
// and restored (checkpoints), as an opaque string.
class BatchSource {
public:
    virtual ~BatchSource() = default;
    virtual void next(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) = 0;
    virtual std::string position() const = 0;
    virtual void seek(const std::string& position) = 0;  // throws Error for a foreign position
    virtual double waited_s() const { return 0; }        // time next() waited for data so far
    // The loader's window number of each row of the last batch (data directories only): offline
    // distillation finds its cached soft targets by it.
    virtual std::span<const uint64_t> windows() const { return {}; }
    // The stratum of the last batch (train/strata_batches.hpp); -1 without strata.
    virtual int stratum() const { return -1; }
};

// The same batch every step, from B sequences of T + 1 ids (input, then shifted targets): for
// checking against a reference run and for overfitting tests.
class FixedBatch : public BatchSource {
public:
    FixedBatch(std::vector<int32_t> ids, int B, int T);
    void next(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) override;
    std::string position() const override { return "fixed"; }
    void seek(const std::string& position) override;

private:
    std::vector<int32_t> tokens_, targets_;
};

// Uniformly random tokens from a seeded generator: for speed measurements.
class SyntheticBatches : public BatchSource {
public:
    SyntheticBatches(uint64_t seed, int n_vocab, int B, int T);
    void next(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) override;
    std::string position() const override;
    void seek(const std::string& position) override;

private:
    std::mt19937_64 rng_;
    int n_vocab_, n_, t_;
};

// Shuffled windows of a `syslm data prepare` directory's train split (data/loader.hpp), read
// ahead on a background thread.
class ShardBatches : public BatchSource {
public:
    ShardBatches(const std::string& data_dir, uint64_t seed, int n_vocab, int B, int T);
    void next(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) override;
    std::string position() const override;
    void seek(const std::string& position) override;
    double waited_s() const override { return loader_->waited_s(); }
    std::span<const uint64_t> windows() const override { return windows_; }

private:
    std::unique_ptr<data::BatchLoader> loader_;
    std::vector<uint64_t> windows_;
};

// Data parallel: this rank's rows of a global batch. The source makes ranks x B rows per batch
// (the batch one process with ranks x B rows would see); rank r gets rows r x B .. r x B + B - 1.
// Every rank reads the same global batches, so positions (checkpoints) are the source's.
class RankSlice : public BatchSource {
public:
    RankSlice(std::unique_ptr<BatchSource> global, int rank, int ranks, int B, int T);
    void next(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) override;
    std::string position() const override { return global_->position(); }
    void seek(const std::string& position) override { global_->seek(position); }
    double waited_s() const override { return global_->waited_s(); }
    std::span<const uint64_t> windows() const override { return windows_; }
    int stratum() const override { return global_->stratum(); }

private:
    std::unique_ptr<BatchSource> global_;
    int rank_, ranks_, B_, T_;
    std::vector<int32_t> tokens_, targets_;
    std::vector<uint64_t> windows_;
};

// Mean loss over the full batches of a data directory's val split (at most max_batches; 0 = all),
// routed as inference routes: without an expert capacity.
double evaluate(TrainModel& model, const std::string& data_dir, int B, int T, int max_batches,
                backend::Backend& be);

struct TrainOptions {
    int B = 4, T = 64;
    int64_t steps = 10;
    int accum = 1;      // micro-batches per optimizer step
    double clip = 1.0;  // global gradient norm limit; <= 0: no clipping
    Schedule schedule;  // its `total` is set to `steps`
    OptimizerConfig optimizer;
    // Dynamic loss scaling (FP16; PyTorch GradScaler's rule): the backward computes gradients of
    // scale x loss; a step whose gradients hold an inf or NaN is skipped and halves the scale,
    // `scale_window` finite steps in a row double it. loss_scale 0: off.
    float loss_scale = 0.0f;
    int64_t scale_window = 2000;
    // Pruning recovery: weights of the blocks' matrices that are exactly zero when training
    // starts stay zero after every step (the sparsity pattern of `syslm prune` survives).
    bool keep_zeros = false;
    // Per-stratum learning-rate scales, by the data source's stratum() (train/strata_batches.hpp):
    // a step on stratum i runs at stratum_lr[i] x the schedule's rate. Empty: off.
    std::vector<float> stratum_lr;
    // Windows sampled per step (--window-range): each optimizer step runs the local layers with
    // a window drawn log-uniformly from [window_min, window_max] by (seed, step), the same on
    // every rank and after a resume; evaluation and the saved file keep the model's own. 0: off.
    int window_min = 0, window_max = 0;
    uint64_t window_seed = 0;
    // Quantization-aware training: these parameters are fake-quantized (quantized to the type and
    // back with ggml's reference quantizer) for the forward and backward of every step, and the
    // gradients found there update the float master weights (the straight-through estimator).
    std::vector<std::pair<std::string, DType>> fake_quant;
    // Knowledge distillation: with a teacher, the loss is alpha x tau^2 x KL(teacher || student)
    // at temperature tau plus (1 - alpha) x cross-entropy (kernels::distill_loss_fused).
    Teacher* teacher = nullptr;
    const TeacherCache* teacher_cache = nullptr;  // offline: top-k soft targets per window
    float distill_alpha = 0.5f;
    float distill_temperature = 2.0f;
    // Hidden-state matching (online teacher only): the teacher's block matched with each of the
    // model's hidden_layers() (same order; hidden_layer_map), and the term's weight.
    std::vector<int> teacher_layers;
    float distill_hidden = 0.0f;
    // Data parallel: the group whose ranks each train on their slice of the global batch (B rows
    // each); gradients are summed over it, overlapped with the backward
    // (parallel::GradientReducer), and averaged. nullptr or a group of one: single process.
    parallel::Communicator* data_parallel = nullptr;
    // ZeRO over the data-parallel group: 1 shards the optimizer state (each rank updates its
    // block of every gradient bucket, then the parameters are all-gathered); 2 also reduces the
    // gradients with reduce-scatter (each rank gets only its blocks' sums). 0: off.
    int zero = 0;
    // Compressed data parallelism with error feedback
    // (parallel::GradientReducer::Mode::Compressed): gradients to each block's owner, the owner's
    // updates back; shards the optimizer state as ZeRO does, with or without `zero`. Not combined
    // with tensor or pipeline parallelism.
    parallel::Compression grad_compress = parallel::Compression::None;
    double topk_ratio = 0.15;
    // Steps reduced exactly before compression starts (1-bit Adam's warm-up).
    int64_t compress_warmup = 0;
    // Pipeline parallelism: the group of this replica's stages (the model holds this rank's
    // stage); each step's `accum` micro-batches run through train::Pipeline. nullptr: none.
    parallel::Communicator* pipeline = nullptr;
    PipelineSchedule pipeline_schedule = PipelineSchedule::OneFOneB;
};

struct StepStats {
    int64_t step;      // 0-based
    double loss;       // mean over the step's micro-batches
    double grad_norm;  // before clipping
    float lr;
    double seconds;           // wall time of the whole step
    bool skipped = false;     // loss scaling: non-finite gradients, no update
    float loss_scale = 0.0f;  // the scale the step ran with (0: no scaling)
    int stratum = -1;         // of the step's data (train/strata_batches.hpp); -1 without strata
};

class Trainer {
public:
    // Everything the step computes runs on `be` (backend/backend.hpp).
    Trainer(TrainModel& model, BatchSource& data, const TrainOptions& opt, backend::Backend& be);

    // The next optimizer step. A loss or gradient that is not finite (outside loss scaling's
    // overflow skips) throws before the update: the weights and the state stay the last good ones.
    StepStats step();
    // The window step `step` trains with (window_min > 0).
    int window_at(int64_t step) const;
    // Data parallel: share of the reduction's time hidden behind the backward (0 without).
    double overlap() const { return reducer_ ? reducer_->overlap() : 0; }
    double comm_seconds() const { return reducer_ ? reducer_->comm_seconds() : 0; }
    size_t optimizer_state_bytes() const { return optimizer_.state_bytes(); }
    // Pipeline parallelism: this stage's measured bubble (time waiting for neighbours / time in
    // the schedule), 0 without.
    double bubble() const {
        return pipeline_ && pipeline_->total_seconds() > 0
                   ? pipeline_->wait_seconds() / pipeline_->total_seconds()
                   : 0;
    }
    int64_t next_step() const { return next_step_; }
    bool done() const { return next_step_ >= opt_.steps; }

    // A checkpoint directory: model.gguf (the weights, loadable anywhere) and state.bin
    // (optimizer moments and step, data position, loss scale); with ZeRO the moments are in one
    // file per rank, and a run at any world size loads them. With data parallelism every rank
    // calls it (rank 0 writes, each rank its optimizer shard; with gradient compression the
    // shared weights are made exact first, see publish_master). Written into `<dir>.tmp` and
    // swapped in for `dir` (train/checkpoint_files.hpp), so a kill at any moment leaves a
    // complete checkpoint that a resume recovers; every file carries a checksum.
    void save_checkpoint(const std::string& dir,
                         const std::vector<std::pair<std::string, io::GGUFValue>>& metadata,
                         const io::GGUFFile* constants);
    // Restores state.bin of a checkpoint whose model.gguf `model` was loaded from, after checking
    // the files' checksums, that model.gguf is the one written with it, and that the optimizer
    // moments are finite.
    void load_state(const std::string& dir);
    // Gradient compression: the weights every rank shares trail each owner's exact weights by
    // what the compressed updates have not yet carried; this makes them exact on every rank
    // (one uncompressed all-gather). Call before evaluating or saving. Otherwise a no-op.
    void publish_master();

private:
    TrainModel& model_;
    BatchSource& data_;
    TrainOptions opt_;
    backend::Backend& be_;
    Optimizer optimizer_;
    int64_t next_step_ = 0;
    float scale_ = 0.0f;       // current loss scale (0: off)
    int64_t clean_steps_ = 0;  // finite steps since the scale last changed
    std::vector<int32_t> tokens_, targets_;
    std::vector<backend::Backend::Range> zero_ranges_;  // keep_zeros: value index ranges
    std::vector<float> qat_master_;      // fake_quant: the master values while a step runs
    std::vector<float> teacher_logits_;  // distillation: one micro-batch of the teacher's
    std::vector<int32_t> teacher_ids_;   // offline distillation: its top-k tokens
    std::vector<float> teacher_hidden_;  // hidden-state matching: its residuals
    // Data parallel: the reducer, and which of its buckets hold each block's parameters and the
    // rest (embeddings, head, norms, auxiliary).
    std::unique_ptr<parallel::GradientReducer> reducer_;
    std::vector<std::vector<size_t>> block_buckets_;
    std::vector<size_t> rest_buckets_;
    std::vector<Optimizer::Range> shards_;  // ZeRO: this rank's blocks of the arena
    // Gradient compression: this rank's exact weights of its blocks (shards_ concatenated), and
    // the shared weights of those blocks while the optimizer steps the exact ones.
    std::vector<float> master_, shared_;
    bool master_valid_ = false;
    // Before the optimizer step: shared -> shared_, master_ -> weights (once it holds any);
    // after it: weights -> master_, and shared_ -> weights when restore_shared.
    void swap_master(bool before_update, bool restore_shared = false);
    // Every rank's blocks of `v` (the weights, or an optimizer moment in the arena's layout) to
    // every rank, exact.
    void gather_shards(float* v);
    void keep_zeros();  // keep_zeros: the zeros of the start back in the weights
    // An optimizer moment (this rank's shards) in the arena's layout, whole (every rank's).
    std::vector<float> full_state(const std::vector<float>& state);
    void take_divisors();
    std::unique_ptr<Pipeline> pipeline_;
    std::vector<std::vector<int32_t>> micro_tokens_, micro_targets_;  // pipeline: a step's
    void make_buckets();
    void write_state(const std::string& path, std::span<const float> m, std::span<const float> v,
                     uint32_t shards) const;
    void save_split_checkpoint(const std::string& dir,
                               const std::vector<std::pair<std::string, io::GGUFValue>>& metadata,
                               const io::GGUFFile* constants);
    // Gradient compression's error-feedback residual in checkpoints: one file per rank, named
    // by its place in the layout.
    bool compressing() const;
    void barrier_all();
    std::string residual_file() const;
    void write_residual(const std::string& dir);
    void load_residual(const std::string& dir);
    void fake_quantize();  // master -> qat_master_, values -> Q(values)
    void restore_master();
    // The parts of a step: one micro-batch's forward and backward (with the teacher's targets
    // where distilling); the step's gradients summed over its micro-batches and the group,
    // returning the summed loss; the global gradient norm (non-finite where any rank's gradients
    // are: loss scaling's overflow check); the optimizer update with the clipping coefficient.
    double micro_batch(float scale);
    double accumulate_gradients(float scale);
    double global_grad_norm(const std::vector<Optimizer::Range>& mine);
    // Stretches of one tensor's gradient this rank sums; class 1: a tensor-parallel slice.
    std::vector<backend::Backend::SquaresPiece> norm_pieces_;
    void apply_update(float lr, float grad_scale);
};

}  // namespace syslm::train
