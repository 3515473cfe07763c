#include "train/params.hpp"

#include <algorithm>
#include <cstdint>

#include "core/error.hpp"
#include "core/mapped_file.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::train {
namespace {

// RoPE's frequency factors: constants of the model, not trained (kept as the file has them).
bool constant_tensor(const std::string& name) {
    return name == "rope_freqs.weight" || name == "rope_factors_long.weight" ||
           name == "rope_factors_short.weight";
}

}  // namespace

ParamStore ParamStore::from_gguf(const io::GGUFFile& file, const Slicer& slicer) {
    ParamStore s;
    size_t total = 0;
    std::vector<TensorSlice> slices;
    for (const io::GGUFTensor& t : file.tensors()) {
        if (constant_tensor(t.name)) continue;
        SYSLM_CHECK(kernels::has_type_traits(t.type), file.path(), ": tensor '", t.name,
                    "' has type ", dtype_name(t.type), ", which syslm cannot convert to f32");
        // 16-float alignment: every tensor starts on a cache line of the arena.
        total = (total + 15) / 16 * 16;
        const TensorSlice sl = slicer ? slicer(t.name, t.ne) : TensorSlice{};
        if (sl.skip) continue;
        Param p{t.name, t.ne, total, t.numel()};
        if (sl.dim >= 0) {
            SYSLM_CHECK(
                sl.dim < 2 && static_cast<size_t>(sl.dim) < t.ne.size() && t.ne.size() <= 2 &&
                    0 <= sl.begin && sl.begin < sl.end && sl.end <= t.ne[sl.dim],
                file.path(), ": cannot slice tensor '", t.name, "' along dimension ", sl.dim);
            p.slice_dim = sl.dim;
            p.full_len = t.ne[sl.dim];
            p.ne[sl.dim] = sl.end - sl.begin;
            p.numel = p.numel / t.ne[sl.dim] * (sl.end - sl.begin);
        }
        s.params_.push_back(p);
        slices.push_back(sl);
        total += static_cast<size_t>(p.numel);
    }
    try {
        s.values_.assign(total, 0.0f);
        s.grads_.assign(total, 0.0f);
    } catch (const std::bad_alloc&) {
        fail(file.path(), ": cannot allocate ", 2 * total * sizeof(float) >> 20,
             " MiB for the f32 parameters and their gradients");
    }
    std::vector<float> row;
    for (size_t i = 0; i < s.params_.size(); ++i) {
        const Param& p = s.params_[i];
        const TensorSlice& sl = slices[i];
        const io::GGUFTensor& t = file.tensor(p.name);
        const auto& tt = kernels::type_traits(t.type);
        const int64_t rows = t.rows(), n0 = t.ne[0];
        const size_t rb = row_bytes(t.type, n0);
        float* out = s.values_.data() + p.offset;
        if (sl.dim < 0) {
            for (int64_t r = 0; r < rows; ++r) tt.to_float(t.data + r * rb, out + r * n0, n0);
        } else if (sl.dim == 1) {  // rows begin .. end
            for (int64_t r = sl.begin; r < sl.end; ++r)
                tt.to_float(t.data + r * rb, out + (r - sl.begin) * n0, n0);
        } else {  // columns begin .. end of every row
            row.resize(static_cast<size_t>(n0));
            const int64_t w = sl.end - sl.begin;
            for (int64_t r = 0; r < rows; ++r) {
                tt.to_float(t.data + r * rb, row.data(), n0);
                std::copy_n(row.data() + sl.begin, w, out + r * w);
            }
        }
        if (file.mapped()) release_mapped_pages(t.data, t.nbytes);  // the f32 copy trains
    }
    return s;
}

ParamStore ParamStore::gathered_stages(parallel::Communicator& stages,
                                       const io::GGUFFile& file) const {
    // Who holds each tensor: every stage says which it has (1 + rank, summed over the group).
    std::vector<const io::GGUFTensor*> tensors;
    for (const io::GGUFTensor& t : file.tensors())
        if (!constant_tensor(t.name)) tensors.push_back(&t);
    std::vector<double> owner(tensors.size(), 0.0);
    for (size_t i = 0; i < tensors.size(); ++i)
        if (find(tensors[i]->name)) owner[i] = 1.0 + stages.rank();
    stages.all_reduce_sum(owner.data(), owner.size());
    const bool lead = stages.rank() == 0;
    ParamStore full;
    size_t total = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
        SYSLM_CHECK(owner[i] >= 1 && owner[i] <= stages.size(), "pipeline: tensor '",
                    tensors[i]->name, "' is held by no stage or by several");
        total = (total + 15) / 16 * 16;
        full.params_.push_back({tensors[i]->name, tensors[i]->ne, total, tensors[i]->numel()});
        total += static_cast<size_t>(tensors[i]->numel());
    }
    if (lead) full.values_.assign(total, 0.0f);
    for (size_t i = 0; i < tensors.size(); ++i) {
        const int from = static_cast<int>(owner[i]) - 1;
        const Param& q = full.params_[i];
        const size_t bytes = static_cast<size_t>(q.numel) * sizeof(float);
        if (from == stages.rank()) {
            const Param* p = find(q.name);
            if (lead)
                std::copy_n(values_.data() + p->offset, q.numel, full.values_.data() + q.offset);
            else
                stages.send(values_.data() + p->offset, bytes, 0, 21);
        } else if (lead) {
            stages.recv(full.values_.data() + q.offset, bytes, from, 21);
        }
    }
    if (!lead) full.params_.clear();
    return full;
}

ParamStore ParamStore::with_values(const std::vector<float>& values) const {
    SYSLM_CHECK(values.size() == values_.size(), "parameter store: ", values.size(),
                " values for a layout of ", values_.size());
    ParamStore s;
    s.params_ = params_;
    s.ties_ = ties_;
    s.values_ = values;
    return s;
}

std::vector<float> ParamStore::local_part(const std::vector<float>& whole, const io::GGUFFile& file,
                                          int tp_rank) const {
    // The whole model's layout: from_gguf's, without a slicer.
    std::vector<std::pair<std::string, size_t>> offsets;
    size_t total = 0;
    for (const io::GGUFTensor& t : file.tensors()) {
        if (constant_tensor(t.name)) continue;
        total = (total + 15) / 16 * 16;
        offsets.emplace_back(t.name, total);
        total += static_cast<size_t>(t.numel());
    }
    SYSLM_CHECK(whole.size() == total, file.path(), ": a whole-model array of ", whole.size(),
                " values for a model of ", total);
    std::vector<float> out(values_.size(), 0.0f);
    for (const Param& p : params_) {
        if (p.auxiliary) continue;
        size_t at = SIZE_MAX;
        for (const auto& [name, off] : offsets)
            if (name == p.name) at = off;
        SYSLM_CHECK(at != SIZE_MAX, file.path(), ": no tensor '", p.name, "'");
        const float* src = whole.data() + at;
        float* dst = out.data() + p.offset;
        if (p.slice_dim < 0) {
            std::copy_n(src, p.numel, dst);
        } else if (p.slice_dim == 1) {  // rows tp_rank x n .. (tp_rank + 1) x n
            std::copy_n(src + static_cast<int64_t>(tp_rank) * p.numel, p.numel, dst);
        } else {  // columns of every row
            const int64_t w = p.ne[0], rows = p.numel / w;
            for (int64_t r = 0; r < rows; ++r)
                std::copy_n(src + r * p.full_len + static_cast<int64_t>(tp_rank) * w, w,
                            dst + r * w);
        }
    }
    return out;
}

ParamStore ParamStore::gathered(parallel::Communicator& group) const {
    ParamStore full;
    full.ties_ = ties_;
    size_t total = 0;
    for (const Param& p : params_) {
        total = (total + 15) / 16 * 16;
        Param q = p;
        q.offset = total;
        if (p.slice_dim >= 0) {
            q.ne[p.slice_dim] = p.full_len;
            q.numel = p.numel / p.ne[p.slice_dim] * p.full_len;
            q.slice_dim = -1;
        }
        full.params_.push_back(q);
        total += static_cast<size_t>(q.numel);
    }
    full.values_.assign(total, 0.0f);
    std::vector<float> blocks;
    for (size_t i = 0; i < params_.size(); ++i) {
        const Param& p = params_[i];
        const Param& q = full.params_[i];
        const float* mine = values_.data() + p.offset;
        float* out = full.values_.data() + q.offset;
        if (p.slice_dim < 0) {
            std::copy_n(mine, p.numel, out);
            continue;
        }
        SYSLM_CHECK(p.ne[p.slice_dim] * group.size() == p.full_len, "tensor parallel: '", p.name,
                    "' is not cut in ", group.size(), " equal slices");
        if (p.slice_dim == 1) {  // row slices in rank order are the whole tensor
            group.all_gather(mine, out, static_cast<size_t>(p.numel));
            continue;
        }
        blocks.resize(static_cast<size_t>(p.numel) * group.size());
        group.all_gather(mine, blocks.data(), static_cast<size_t>(p.numel));
        const int64_t w = p.ne[0], rows = p.numel / w;
        for (int k = 0; k < group.size(); ++k)
            for (int64_t r = 0; r < rows; ++r)
                std::copy_n(blocks.data() + static_cast<size_t>(k) * p.numel + r * w, w,
                            out + r * p.full_len + k * w);
    }
    return full;
}

const Param* ParamStore::find(const std::string& name) const {
    for (const Param& p : params_)
        if (p.name == name) return &p;
    return nullptr;
}

float* ParamStore::value(const std::string& name) {
    const Param* p = find(name);
    return p ? values_.data() + p->offset : nullptr;
}

float* ParamStore::grad(const std::string& name) {
    const Param* p = find(name);
    return p ? grads_.data() + p->offset : nullptr;
}

void ParamStore::tie(const std::string& alias, const std::string& target) {
    const Param* a = find(alias);
    const Param* t = find(target);
    SYSLM_CHECK(a && t && a->ne == t->ne, "cannot tie '", alias, "' to '", target, "'");
    ties_.emplace_back(alias, target);
    params_.erase(params_.begin() + (a - params_.data()));
}

void ParamStore::add(const std::string& name, std::vector<int64_t> ne,
                     const std::vector<float>& init, bool auxiliary) {
    SYSLM_CHECK(!find(name), "parameter '", name, "' exists already");
    int64_t numel = 1;
    for (int64_t n : ne) numel *= n;
    SYSLM_CHECK(static_cast<int64_t>(init.size()) == numel, "parameter '", name, "': ", init.size(),
                " initial values for ", numel);
    const size_t offset = (values_.size() + 15) / 16 * 16;
    values_.resize(offset + static_cast<size_t>(numel), 0.0f);
    grads_.resize(values_.size(), 0.0f);
    std::copy(init.begin(), init.end(), values_.begin() + static_cast<std::ptrdiff_t>(offset));
    params_.push_back({name, std::move(ne), offset, numel, auxiliary});
}

size_t ParamStore::auxiliary_size() const {
    size_t n = 0;
    for (const Param& p : params_)
        if (p.auxiliary) n += static_cast<size_t>(p.numel);
    return n;
}

void ParamStore::zero_grads() {
    std::fill(grads_.begin(), grads_.end(), 0.0f);
}

void ParamStore::write_gguf(const std::string& path,
                            const std::vector<std::pair<std::string, io::GGUFValue>>& metadata,
                            bool gradients, const io::GGUFFile* constants) const {
    io::GGUFWriter w;
    for (const auto& [k, v] : metadata) w.set(k, v);
    w.set("general.file_type", io::GGUFValue::u32(0));  // all F32
    const std::vector<float>& src = gradients ? grads_ : values_;
    for (const Param& p : params_)
        if (!p.auxiliary)
            w.add_tensor(p.name, DType::F32, p.ne, src.data() + p.offset,
                         static_cast<size_t>(p.numel) * sizeof(float));
    for (const auto& [alias, target] : ties_) {
        const Param* p = find(target);
        w.add_tensor(alias, DType::F32, p->ne, src.data() + p->offset,
                     static_cast<size_t>(p->numel) * sizeof(float));
    }
    auto tied = [&](const std::string& name) {
        for (const auto& t : ties_)
            if (t.first == name) return true;
        return false;
    };
    if (constants)
        for (const io::GGUFTensor& t : constants->tensors())
            if (!find(t.name) && !tied(t.name))
                w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
    w.write(path);
}

}  // namespace syslm::train
