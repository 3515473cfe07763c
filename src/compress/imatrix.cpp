#include "compress/imatrix.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <ostream>
#include <sstream>

#include "core/error.hpp"
#include "core/mapped_file.hpp"
#include "io/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

namespace syslm::compress {
namespace {

constexpr std::string_view kSums = ".in_sum2", kCounts = ".counts";

// llama.cpp's legacy imatrix: int32 n_entries, then per entry int32 name length, the name,
// int32 ncall, int32 nval, nval floats (mean squares times ncall); then optionally int32
// last_chunk, int32 length and the dataset name.
class LegacyReader {
public:
    LegacyReader(const std::string& bytes, const std::string& path) : b_(bytes), path_(path) {}
    int32_t i32(const char* what) {
        need(4, what);
        int32_t v;
        std::memcpy(&v, b_.data() + pos_, 4);
        pos_ += 4;
        return v;
    }
    std::string str(int32_t n, const char* what) {
        SYSLM_CHECK(n >= 0, path_, ": negative ", what, " length at byte ", pos_ - 4);
        need(static_cast<size_t>(n), what);
        std::string s = b_.substr(pos_, static_cast<size_t>(n));
        pos_ += static_cast<size_t>(n);
        return s;
    }
    void floats(float* dst, int32_t n, const char* what) {
        need(static_cast<size_t>(n) * 4, what);
        std::memcpy(dst, b_.data() + pos_, static_cast<size_t>(n) * 4);
        pos_ += static_cast<size_t>(n) * 4;
    }
    size_t left() const { return b_.size() - pos_; }
    size_t pos() const { return pos_; }

private:
    void need(size_t n, const char* what) {
        SYSLM_CHECK(n <= left(), path_, ": truncated imatrix: ", what, " at byte ", pos_, " needs ",
                    n, " bytes, ", left(), " remain");
    }
    const std::string& b_;
    const std::string& path_;
    size_t pos_ = 0;
};

ImportanceMatrix load_legacy(const std::string& path) {
    const std::string bytes = read_whole_file(path);
    LegacyReader r(bytes, path);
    ImportanceMatrix m;
    const int32_t n_entries = r.i32("entry count");
    SYSLM_CHECK(n_entries > 0 && static_cast<size_t>(n_entries) <= bytes.size() / 16, path,
                ": not an imatrix file (entry count ", n_entries, ")");
    for (int32_t e = 0; e < n_entries; ++e) {
        const std::string name = r.str(r.i32("name length"), "tensor name");
        const int32_t ncall = r.i32("call count");
        const int32_t nval = r.i32("value count");
        SYSLM_CHECK(nval > 0 && ncall >= 0, path, ": entry ", name, " has ", nval, " values and ",
                    ncall, " calls");
        std::vector<float> v(static_cast<size_t>(nval));
        r.floats(v.data(), nval, "values");
        // The values are mean squares times ncall; store them as sums over ncall "tokens".
        ImportanceMatrix::Entry entry;
        entry.n_in = nval;
        entry.sum_sq.assign(v.begin(), v.end());
        entry.count = {static_cast<double>(ncall)};
        m.insert(name, std::move(entry));
    }
    if (r.left() >= 4) {
        m.chunk_count = r.i32("last chunk");
        if (r.left() >= 4) {
            const int32_t n = r.i32("dataset name length");
            if (n >= 0 && static_cast<size_t>(n) <= r.left()) m.datasets = {r.str(n, "dataset")};
        }
    }
    return m;
}

ImportanceMatrix load_gguf(const std::string& path) {
    const io::GGUFFile f(path);
    const std::string type = f.get_string("general.type", "");
    SYSLM_CHECK(type == "imatrix", path, ": a GGUF file but not an imatrix (general.type is \"",
                type, "\")");
    ImportanceMatrix m;
    if (const io::GGUFValue* v = f.find("imatrix.datasets")) m.datasets = v->as_strings();
    m.chunk_count = f.get_u32("imatrix.chunk_count", 0);
    m.chunk_size = f.get_u32("imatrix.chunk_size", 0);
    for (const io::GGUFTensor& t : f.tensors()) {
        if (!t.name.ends_with(kSums)) continue;
        const std::string name = t.name.substr(0, t.name.size() - kSums.size());
        const io::GGUFTensor* c = f.find_tensor(name + std::string(kCounts));
        SYSLM_CHECK(c, path, ": tensor ", t.name, " has no ", name, kCounts);
        SYSLM_CHECK(t.type == DType::F32 && c->type == DType::F32, path, ": ", name,
                    ": imatrix tensors must be F32");
        const int64_t n_in = t.ne[0], n_mat = t.numel() / std::max<int64_t>(n_in, 1);
        SYSLM_CHECK(n_in > 0 && c->numel() == n_mat, path, ": ", name, ": ", n_mat,
                    " matrices of sums but ", c->numel(), " counts");
        ImportanceMatrix::Entry e;
        e.n_in = n_in;
        const auto* s = reinterpret_cast<const float*>(t.data);
        const auto* n = reinterpret_cast<const float*>(c->data);
        e.sum_sq.assign(s, s + t.numel());
        e.count.assign(n, n + n_mat);
        m.insert(name, std::move(e));
    }
    SYSLM_CHECK(!m.empty(), path, ": the imatrix has no entries");
    return m;
}

}  // namespace

void ImportanceMatrix::insert(const std::string& name, Entry e) {
    SYSLM_CHECK(entries_.emplace(name, std::move(e)).second, "imatrix: duplicate entry ", name);
}

void ImportanceMatrix::add(const std::string& tensor, int64_t mat, int64_t n_mat, const float* x,
                           int64_t rows, int64_t n_in) {
    Entry& e = entries_[tensor];
    if (e.n_in == 0) {
        e.n_in = n_in;
        e.sum_sq.assign(static_cast<size_t>(n_mat * n_in), 0.0);
        e.count.assign(static_cast<size_t>(n_mat), 0.0);
        e.max_abs.assign(static_cast<size_t>(n_mat * n_in), 0.0f);
    }
    SYSLM_CHECK(e.n_in == n_in && e.n_mat() == n_mat && mat >= 0 && mat < n_mat,
                "imatrix: ", tensor, ": inputs of ", n_in, " columns for matrix ", mat, " of ",
                n_mat, " contradict earlier ones (", e.n_in, " columns, ", e.n_mat(), " matrices)");
    if (e.max_abs.empty()) e.max_abs.assign(e.sum_sq.size(), 0.0f);  // a loaded entry
    double* sums = e.sum_sq.data() + mat * n_in;
    float* mx = e.max_abs.data() + mat * n_in;
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * n_in;
        for (int64_t j = 0; j < n_in; ++j) {
            sums[j] += static_cast<double>(xr[j]) * xr[j];
            mx[j] = std::max(mx[j], std::fabs(xr[j]));
        }
    }
    e.count[static_cast<size_t>(mat)] += static_cast<double>(rows);
}

std::vector<float> ImportanceMatrix::importance(const std::string& tensor, int64_t mat,
                                                int64_t n_in) const {
    const auto it = entries_.find(tensor);
    if (it == entries_.end()) return {};
    const Entry& e = it->second;
    if (e.n_in != n_in || mat < 0 || mat >= e.n_mat() || e.count[static_cast<size_t>(mat)] <= 0)
        return {};
    // In float from float-rounded sums, as llama-quantize computes it from the file: the same
    // importance whether the matrix was just collected or saved and loaded.
    std::vector<float> w(static_cast<size_t>(n_in));
    const auto count = static_cast<float>(e.count[static_cast<size_t>(mat)]);
    for (int64_t j = 0; j < n_in; ++j)
        w[static_cast<size_t>(j)] = static_cast<float>(e.sum_sq[mat * n_in + j]) / count;
    return w;
}

void ImportanceMatrix::save(const std::string& path) const {
    io::GGUFWriter w;
    w.set("general.type", io::GGUFValue::string("imatrix"));
    w.set("imatrix.datasets", io::GGUFValue::strings(datasets));
    w.set("imatrix.chunk_count", io::GGUFValue::u32(static_cast<uint32_t>(chunk_count)));
    w.set("imatrix.chunk_size", io::GGUFValue::u32(static_cast<uint32_t>(chunk_size)));
    for (const auto& [name, e] : entries_) {
        std::vector<uint8_t> sums(e.sum_sq.size() * 4), counts(e.count.size() * 4);
        for (size_t i = 0; i < e.sum_sq.size(); ++i) {
            const auto v = static_cast<float>(e.sum_sq[i]);
            std::memcpy(sums.data() + 4 * i, &v, 4);
        }
        for (size_t i = 0; i < e.count.size(); ++i) {
            const auto v = static_cast<float>(e.count[i]);
            std::memcpy(counts.data() + 4 * i, &v, 4);
        }
        w.add_tensor(name + std::string(kSums), DType::F32, {e.n_in, e.n_mat()}, std::move(sums));
        w.add_tensor(name + std::string(kCounts), DType::F32, {1, e.n_mat()}, std::move(counts));
    }
    w.write(path);
}

bool ImportanceMatrix::looks_like_imatrix(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    char head[12] = {};
    in.read(head, sizeof head);
    if (in.gcount() >= 4 && std::memcmp(head, "GGUF", 4) == 0) return true;
    if (in.gcount() < 12) return false;
    // Legacy: a small positive entry count, then a name length that fits a tensor name, then
    // the name's first bytes: text files fail this on the first few bytes.
    int32_t n_entries, len;
    std::memcpy(&n_entries, head, 4);
    std::memcpy(&len, head + 4, 4);
    return n_entries > 0 && n_entries < (1 << 20) && len > 0 && len < 4096 &&
           std::isalpha(static_cast<unsigned char>(head[8]));
}

ImportanceMatrix ImportanceMatrix::load(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    SYSLM_CHECK(in, path, ": cannot open imatrix file");
    char magic[4] = {};
    in.read(magic, 4);
    if (in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) return load_gguf(path);
    return load_legacy(path);
}

void ImatrixCollector::observe(const std::string& tensor, int expert, const float* x, int64_t rows,
                               int64_t n_in) {
    if (expert >= 0)
        m_.add(tensor, expert, n_expert_, x, rows, n_in);
    else
        m_.add(tensor, 0, 1, x, rows, n_in);
}

ImportanceMatrix collect_imatrix(const model::Model& model, std::span<const int32_t> tokens,
                                 int32_t bos, const ImatrixOptions& o) {
    SYSLM_CHECK(o.n_ctx >= 8, "imatrix: chunk size ", o.n_ctx, " is too small (minimum 8)");
    int64_t n_chunks = static_cast<int64_t>(tokens.size()) / o.n_ctx;
    SYSLM_CHECK(n_chunks > 0, "imatrix: the calibration text has ", tokens.size(),
                " tokens, fewer than one chunk of ", o.n_ctx);
    if (o.max_chunks > 0) n_chunks = std::min<int64_t>(n_chunks, o.max_chunks);
    ImportanceMatrix m;
    m.chunk_size = o.n_ctx;
    ImatrixCollector collector(m, model.hparams().n_expert);
    model::Context ctx(model, o.n_ctx, o.threads, std::min(o.n_ctx, 512), DType::F16);
    ctx.set_observer(&collector);
    std::vector<int32_t> chunk(static_cast<size_t>(o.n_ctx));
    for (int64_t c = 0; c < n_chunks; ++c) {
        std::copy_n(tokens.begin() + c * o.n_ctx, o.n_ctx, chunk.begin());
        if (bos >= 0) chunk[0] = bos;
        ctx.reset();
        ctx.forward(chunk, /*all_logits=*/true);  // every row through the output matrix too
        m.chunk_count = c + 1;
        if (o.log) *o.log << "imatrix: chunk " << c + 1 << "/" << n_chunks << '\n' << std::flush;
    }
    return m;
}

ImportanceMatrix collect_imatrix_from_text(const model::Model& model, const std::string& text_path,
                                           const ImatrixOptions& options) {
    const std::string text = read_whole_file(text_path);
    const auto tok = tokenizer::Tokenizer::from_gguf(model.file());
    const std::vector<int32_t> tokens = tok.encode(text, /*add_special=*/true, false);
    if (options.log)
        *options.log << "imatrix: " << text_path << ": " << tokens.size() << " tokens\n";
    ImportanceMatrix m = collect_imatrix(model, tokens, tok.add_bos() ? tok.bos() : -1, options);
    m.datasets = {text_path};
    return m;
}

ImportanceMatrix load_or_collect_imatrix(const std::string& model_path, const std::string& file,
                                         const ImatrixOptions& options) {
    if (ImportanceMatrix::looks_like_imatrix(file)) {
        ImportanceMatrix m = ImportanceMatrix::load(file);
        if (options.log)
            *options.log << "imatrix: " << m.entries().size() << " entries from " << file << '\n';
        return m;
    }
    const model::Model m(model_path);
    return collect_imatrix_from_text(m, file, options);
}

}  // namespace syslm::compress
