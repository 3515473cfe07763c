#include "data/prepare.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <span>

#include "core/error.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/utf8.hpp"

namespace syslm::data {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

bool is_blank(std::string_view line) {
    return std::all_of(line.begin(), line.end(), [](char c) {
        return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
    });
}

// One split's token stream, written as shards of at most shard_tokens tokens.
class SplitWriter {
public:
    SplitWriter(std::string dir, std::string split, uint64_t shard_tokens, TokenDType dtype)
        : dir_(std::move(dir)),
          split_(std::move(split)),
          shard_tokens_(shard_tokens),
          dtype_(dtype) {}

    void append(std::span<const uint32_t> t) {
        while (!t.empty()) {
            const size_t n = std::min<uint64_t>(t.size(), shard_tokens_ - buf_.size());
            buf_.insert(buf_.end(), t.begin(), t.begin() + n);
            t = t.subspan(n);
            if (buf_.size() == shard_tokens_) flush();
        }
    }
    void finish() {
        if (!buf_.empty()) flush();
    }
    uint64_t n_tokens() const { return n_tokens_; }
    const std::vector<std::string>& names() const { return names_; }

private:
    void flush() {
        char name[64];
        std::snprintf(name, sizeof name, "%s_%03zu.bin", split_.c_str(), names_.size());
        write_shard((std::filesystem::path(dir_) / name).string(), buf_, dtype_);
        names_.push_back(name);
        n_tokens_ += buf_.size();
        buf_.clear();
    }

    std::string dir_, split_;
    uint64_t shard_tokens_;
    TokenDType dtype_;
    std::vector<uint32_t> buf_;
    std::vector<std::string> names_;
    uint64_t n_tokens_ = 0;
};

// Cuts the token stream into chunks and routes each to train or val (see prepare.hpp).
class Splitter {
public:
    Splitter(double val_fraction, uint64_t chunk_tokens, SplitWriter& train, SplitWriter& val)
        : ppm_(std::llround(val_fraction * 1e6)), chunk_(chunk_tokens), train_(train), val_(val) {}

    void push(std::span<const uint32_t> t) {
        while (!t.empty()) {
            const uint64_t c = pos_ / chunk_;
            const size_t n = std::min<uint64_t>(t.size(), (c + 1) * chunk_ - pos_);
            (is_val(c) ? val_ : train_).append(t.first(n));
            pos_ += n;
            t = t.subspan(n);
        }
    }

private:
    // In integers (f in millionths), so the rule is exact and the same everywhere.
    bool is_val(uint64_t c) const { return (c + 1) * ppm_ / 1000000 > c * ppm_ / 1000000; }
    uint64_t ppm_;
    uint64_t chunk_;
    SplitWriter &train_, &val_;
    uint64_t pos_ = 0;
};

// Calls fn(document) for each document of one file, per `mode`; false for a binary file (no
// document read).
template <class Fn>
bool for_each_document(const std::string& path, DocMode mode, Fn&& fn) {
    std::ifstream in(path, std::ios::binary);
    SYSLM_CHECK(in, path, ": cannot open the text file");
    if (is_binary_file(in)) return false;
    if (mode == DocMode::File) {
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        SYSLM_CHECK(!in.bad(), path, ": read error");
        if (!text.empty()) fn(text);
        return true;
    }
    std::string line, doc;
    while (std::getline(in, line)) {
        if (mode == DocMode::Line) {
            if (!line.empty() && line.back() == '\r') line.pop_back();
            if (!line.empty()) fn(line);
        } else if (is_blank(line)) {
            if (!doc.empty()) fn(doc);
            doc.clear();
        } else {
            if (!doc.empty()) doc += '\n';
            doc += line;
        }
    }
    SYSLM_CHECK(!in.bad(), path, ": read error");
    if (!doc.empty()) fn(doc);
    return true;
}

}  // namespace

bool is_binary_file(std::istream& in) {
    char buf[8192];
    in.read(buf, sizeof buf);
    const std::streamsize n = in.gcount();
    in.clear();
    in.seekg(0);
    return std::memchr(buf, 0, static_cast<size_t>(n)) != nullptr;
}

uint64_t tokenizer_fingerprint(const tokenizer::Tokenizer& tok) {
    uint64_t h = 0xcbf29ce484222325ull;
    const int32_t type = static_cast<int32_t>(tok.type()), n = tok.n_vocab();
    h = fnv1a(h, &type, sizeof type);
    h = fnv1a(h, &n, sizeof n);
    for (int32_t id = 0; id < n; ++id) {
        const std::string& text = tok.token_text(id);
        const uint64_t len = text.size();
        const int32_t tt = static_cast<int32_t>(tok.token_type(id));
        h = fnv1a(h, &len, sizeof len);
        h = fnv1a(h, text.data(), text.size());
        h = fnv1a(h, &tt, sizeof tt);
    }
    return h;
}

int32_t document_separator(const tokenizer::Tokenizer& tok) {
    if (tok.add_bos() && tok.bos() >= 0) return tok.bos();
    if (tok.eos() >= 0) return tok.eos();
    if (tok.bos() >= 0) return tok.bos();
    fail("the tokenizer has neither a BOS nor an EOS token to separate documents with");
}

namespace {

void check_prepare_options(const PrepareOptions& opt, const tokenizer::Tokenizer& tok) {
    SYSLM_CHECK(!opt.inputs.empty(), "data prepare: no input files");
    SYSLM_CHECK(tok.n_vocab() > 0, opt.tokenizer_path, ": the vocabulary is empty");
}

// Shards of a previous run that this one did not overwrite are no part of the data set.
void remove_stale_shards(const std::string& dir, const DataMeta& m) {
    std::set<std::string> ours(m.train_shards.begin(), m.train_shards.end());
    ours.insert(m.val_shards.begin(), m.val_shards.end());
    const std::regex shard_re("(train|val)_[0-9]+\\.bin");
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        const std::string name = e.path().filename().string();
        if (e.is_regular_file() && std::regex_match(name, shard_re) && !ours.count(name))
            std::filesystem::remove(e.path());
    }
}

}  // namespace

struct DatasetWriter::Impl {
    Impl(const std::string& dir, const DataMeta& m, uint64_t shard_tokens)
        : train(dir, "train", shard_tokens, m.dtype),
          val(dir, "val", shard_tokens, m.dtype),
          splitter(m.val_fraction, m.chunk_tokens, train, val) {}
    SplitWriter train, val;
    Splitter splitter;
    std::vector<uint32_t> doc_tokens;
};

DatasetWriter::DatasetWriter(const DatasetOptions& opt, const tokenizer::Tokenizer& tok)
    : opt_(opt), tok_(tok) {
    namespace fs = std::filesystem;
    SYSLM_CHECK(opt.val_fraction >= 0 && opt.val_fraction <= 0.5, "data: --val ", opt.val_fraction,
                " must be in [0, 0.5]");
    SYSLM_CHECK(opt.shard_tokens > 0, "data: --shard-tokens must be positive");
    SYSLM_CHECK(opt.chunk_tokens > 0, "data: --chunk-tokens must be positive");
    std::error_code ec;
    fs::create_directories(opt.out_dir, ec);
    SYSLM_CHECK(fs::is_directory(opt.out_dir), opt.out_dir, ": cannot create the directory",
                ec ? ": " + ec.message() : "");
    // meta.json is what makes a directory usable: without it until the new set is complete.
    fs::remove(meta_path(opt.out_dir), ec);
    SYSLM_CHECK(!ec, meta_path(opt.out_dir),
                ": cannot remove the previous run's file: ", ec.message());
    meta_.tokenizer = opt.tokenizer_path;
    meta_.n_vocab = static_cast<uint32_t>(tok.n_vocab());
    meta_.tokenizer_hash = tokenizer_fingerprint(tok);
    meta_.separator = document_separator(tok);
    meta_.dtype = dtype_for_vocab(meta_.n_vocab);
    meta_.val_fraction = opt.val_fraction;
    meta_.chunk_tokens = opt.chunk_tokens;
    impl_ = std::make_unique<Impl>(opt.out_dir, meta_, opt.shard_tokens);
}

DatasetWriter::~DatasetWriter() = default;

uint64_t DatasetWriter::add_document(std::string_view text) {
    const auto t0 = Clock::now();
    const std::vector<int32_t> ids = tok_.encode(std::string(text), false, false);
    tokenize_seconds_ += since(t0);
    std::vector<uint32_t>& t = impl_->doc_tokens;
    t.assign(1, static_cast<uint32_t>(meta_.separator));
    t.insert(t.end(), ids.begin(), ids.end());
    impl_->splitter.push(t);
    ++n_docs_;
    return t.size();
}

void DatasetWriter::add_tokens(std::span<const uint32_t> tokens, Split split) {
    if (split == Split::ByChunk)
        impl_->splitter.push(tokens);
    else
        (split == Split::Train ? impl_->train : impl_->val).append(tokens);
}

const DataMeta& DatasetWriter::finish() {
    Impl& w = *impl_;
    w.train.finish();
    w.val.finish();
    SYSLM_CHECK(w.train.n_tokens() > 0, opt_.out_dir, ": the train split is empty");
    SYSLM_CHECK(opt_.val_fraction == 0 || w.val.n_tokens() > 0, opt_.out_dir,
                ": the val split is empty: ", w.train.n_tokens(), " tokens make ",
                (w.train.n_tokens() + opt_.chunk_tokens - 1) / opt_.chunk_tokens, " chunks of ",
                opt_.chunk_tokens, " tokens, and val takes every ", 1.0 / opt_.val_fraction,
                "-th chunk; use a smaller --chunk-tokens or a larger --val");
    meta_.train_tokens = w.train.n_tokens();
    meta_.val_tokens = w.val.n_tokens();
    meta_.train_shards = w.train.names();
    meta_.val_shards = w.val.names();
    write_meta(opt_.out_dir, meta_);
    remove_stale_shards(opt_.out_dir, meta_);
    return meta_;
}

PrepareStats prepare_data(
    const PrepareOptions& opt, const tokenizer::Tokenizer& tok,
    const std::function<void(const std::string&, uint64_t, uint64_t)>& on_file) {
    const auto t_start = Clock::now();
    check_prepare_options(opt, tok);
    DatasetWriter out(opt, tok);
    PrepareStats st;
    for (const auto& path : opt.inputs) {
        uint64_t bytes = 0, tokens = 0;
        const bool text = for_each_document(path, opt.docs, [&](const std::string& doc) {
            if (!tokenizer::utf8_valid(doc)) {  // counted, never turned into tokens
                ++st.skipped_invalid_utf8;
                return;
            }
            tokens += out.add_document(doc);
            bytes += doc.size();
        });
        if (!text) {
            st.skipped_binary.push_back(path);
            continue;
        }
        st.n_bytes += bytes;
        if (on_file) on_file(path, bytes, tokens);
    }
    st.n_docs = out.n_docs();
    SYSLM_CHECK(st.n_docs > 0, "data prepare: the input files hold no text");
    st.meta = out.finish();
    st.tokenize_seconds = out.tokenize_seconds();
    st.seconds = since(t_start);
    return st;
}

void check_model_vocab(const std::string& data_dir, const DataMeta& meta, uint64_t n_vocab) {
    SYSLM_CHECK(meta.n_vocab <= n_vocab, meta_path(data_dir), ": the data was tokenized with ",
                meta.tokenizer, " (", meta.n_vocab,
                " tokens), larger than the model's vocabulary of ", n_vocab,
                " tokens: prepare the data with the model's tokenizer");
}

}  // namespace syslm::data
