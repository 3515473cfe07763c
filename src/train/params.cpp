#include "train/params.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/mapped_file.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::train {

ParamStore ParamStore::from_gguf(const io::GGUFFile& file) {
    ParamStore s;
    size_t total = 0;
    for (const io::GGUFTensor& t : file.tensors()) {
        if (t.name == "rope_freqs.weight") continue;
        SYSLM_CHECK(kernels::has_type_traits(t.type), file.path(), ": tensor '", t.name,
                    "' has type ", dtype_name(t.type), ", which syslm cannot convert to f32");
        // 16-float alignment: every tensor starts on a cache line of the arena.
        total = (total + 15) / 16 * 16;
        s.params_.push_back({t.name, t.ne, total, t.numel()});
        total += static_cast<size_t>(t.numel());
    }
    try {
        s.values_.assign(total, 0.0f);
        s.grads_.assign(total, 0.0f);
    } catch (const std::bad_alloc&) {
        fail(file.path(), ": cannot allocate ", 2 * total * sizeof(float) >> 20,
             " MiB for the f32 parameters and their gradients");
    }
    for (const Param& p : s.params_) {
        const io::GGUFTensor& t = file.tensor(p.name);
        const auto& tt = kernels::type_traits(t.type);
        const int64_t rows = t.rows();
        const size_t rb = row_bytes(t.type, t.ne[0]);
        for (int64_t r = 0; r < rows; ++r)
            tt.to_float(t.data + r * rb, s.values_.data() + p.offset + r * t.ne[0], t.ne[0]);
        if (file.mapped()) release_mapped_pages(t.data, t.nbytes);  // the f32 copy trains
    }
    return s;
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

void ParamStore::add_auxiliary(const std::string& name, std::vector<int64_t> ne,
                               const std::vector<float>& init) {
    SYSLM_CHECK(!find(name), "parameter '", name, "' exists already");
    int64_t numel = 1;
    for (int64_t n : ne) numel *= n;
    SYSLM_CHECK(static_cast<int64_t>(init.size()) == numel, "parameter '", name, "': ",
                init.size(), " initial values for ", numel);
    const size_t offset = (values_.size() + 15) / 16 * 16;
    values_.resize(offset + static_cast<size_t>(numel), 0.0f);
    grads_.resize(values_.size(), 0.0f);
    std::copy(init.begin(), init.end(), values_.begin() + static_cast<std::ptrdiff_t>(offset));
    params_.push_back({name, std::move(ne), offset, numel, true});
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
