// data prepare: the shards hold exactly separator + encode(document) for every document, split
// into train and val by the documented chunk rule; meta.json describes them; bad input and a
// tokenizer that does not match the model are clear errors.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.hpp"
#include "data/loader.hpp"
#include "data/prepare.hpp"
#include "io/gguf.hpp"
#include "test_util.hpp"
#include "tokenizer/tokenizer.hpp"

namespace syslm::data {
namespace {

using test::fresh_dir;
using test::opts;
using test::write_text;

const tokenizer::Tokenizer& vocab(const std::string& name) {
    static const auto gpt2 =
        tokenizer::Tokenizer::from_gguf(io::GGUFFile(test::shared_vocab_path("gpt-2")));
    static const auto spm =
        tokenizer::Tokenizer::from_gguf(io::GGUFFile(test::shared_vocab_path("llama-spm")));
    return name == "gpt-2" ? gpt2 : spm;
}

std::string corpus_text(int n_paragraphs) {
    std::string s;
    for (int i = 0; i < n_paragraphs; ++i) {
        s += "In the beginning " + std::to_string(i) + " God created the heaven.\n";
        s += "And the earth was without form, and void.\n";
        s += i % 3 ? "\n" : "  \n\n";  // blank lines, one of them only spaces
    }
    return s;
}

std::vector<uint32_t> read_split(const std::string& dir, const std::string& split) {
    std::vector<uint32_t> out;
    for (const auto& p : split_shard_paths(dir, split)) {
        const Shard s(p);
        for (uint64_t i = 0; i < s.size(); ++i) out.push_back(s[i]);
    }
    return out;
}

TEST(Prepare, ShardsHoldTheDocumentsSplitByChunks) {
    const std::string dir = fresh_dir();
    const std::string text = corpus_text(60);
    write_text(dir + "/a.txt", text);
    write_text(dir + "/b.txt", "Second file, one paragraph\nof two lines.\n");
    for (const char* name : {"gpt-2", "llama-spm"}) {
        SCOPED_TRACE(name);
        const auto& tok = vocab(name);
        PrepareOptions opt;
        opt.inputs = {dir + "/a.txt", dir + "/b.txt"};
        opt.tokenizer_path = test::shared_vocab_path(name);
        opt.out_dir = dir + "/out_" + name;
        opt.val_fraction = 0.3;
        opt.chunk_tokens = 50;
        opt.shard_tokens = 400;
        const PrepareStats st = prepare_data(opt, tok);
        EXPECT_EQ(st.n_docs, 61u);

        // The expected stream: separator + tokens of each paragraph.
        const int32_t sep = document_separator(tok);
        EXPECT_EQ(sep, std::string(name) == "gpt-2" ? tok.eos() : tok.bos());
        std::vector<uint32_t> stream;
        auto add_doc = [&](const std::string& doc) {
            stream.push_back(uint32_t(sep));
            for (int32_t id : tok.encode(doc, false, false)) stream.push_back(uint32_t(id));
        };
        for (int i = 0; i < 60; ++i)
            add_doc("In the beginning " + std::to_string(i) +
                    " God created the heaven.\nAnd the earth was without form, and void.");
        add_doc("Second file, one paragraph\nof two lines.");

        std::vector<uint32_t> train, val;
        for (size_t i = 0; i < stream.size(); ++i) {
            const uint64_t c = i / 50;  // chunk c is val iff floor((c+1)*0.3) > floor(c*0.3)
            (uint64_t((c + 1) * 3 / 10) > uint64_t(c * 3 / 10) ? val : train).push_back(stream[i]);
        }
        EXPECT_EQ(read_split(opt.out_dir, "train"), train);
        EXPECT_EQ(read_split(opt.out_dir, "val"), val);

        const DataMeta m = read_meta(opt.out_dir);
        EXPECT_EQ(m.n_vocab, uint32_t(tok.n_vocab()));
        EXPECT_EQ(m.tokenizer, opt.tokenizer_path);
        EXPECT_EQ(m.tokenizer_hash, tokenizer_fingerprint(tok));
        EXPECT_EQ(m.separator, sep);
        EXPECT_EQ(m.dtype, TokenDType::U16);
        EXPECT_EQ(m.train_tokens, train.size());
        EXPECT_EQ(m.val_tokens, val.size());
        EXPECT_EQ(m.train_shards.size(), (train.size() + 399) / 400);
        EXPECT_EQ(m.train_shards[0], "train_000.bin");
        EXPECT_EQ(m.val_shards[0], "val_000.bin");
        EXPECT_EQ(st.meta.train_tokens, m.train_tokens);
    }
    EXPECT_NE(tokenizer_fingerprint(vocab("gpt-2")), tokenizer_fingerprint(vocab("llama-spm")));
}

TEST(Prepare, DocumentModes) {
    const std::string dir = fresh_dir();
    write_text(dir + "/a.txt", "one\r\ntwo\n\n\nthree\nfour");
    const auto& tok = vocab("gpt-2");
    auto docs = [&](DocMode mode) {
        PrepareOptions opt;
        opt.inputs = {dir + "/a.txt"};
        opt.out_dir = dir + "/out";
        opt.val_fraction = 0;
        opt.docs = mode;
        const auto st = prepare_data(opt, tok);
        EXPECT_TRUE(st.meta.val_shards.empty());
        return std::pair{st.n_docs, read_split(opt.out_dir, "train")};
    };
    const uint32_t sep = uint32_t(tok.eos());
    auto ids = [&](const std::string& s) {
        std::vector<uint32_t> v{sep};
        for (int32_t id : tok.encode(s, false, false)) v.push_back(uint32_t(id));
        return v;
    };
    auto cat_ids = [&](std::initializer_list<std::string> docs) {
        std::vector<uint32_t> v;
        for (const auto& d : docs) {
            auto x = ids(d);
            v.insert(v.end(), x.begin(), x.end());
        }
        return v;
    };
    EXPECT_EQ(docs(DocMode::Line),
              std::pair(uint64_t(4), cat_ids({"one", "two", "three", "four"})));
    EXPECT_EQ(docs(DocMode::Blank), std::pair(uint64_t(2), cat_ids({"one\r\ntwo", "three\nfour"})));
    EXPECT_EQ(docs(DocMode::File),
              std::pair(uint64_t(1), cat_ids({"one\r\ntwo\n\n\nthree\nfour"})));
}

TEST(Prepare, RerunReplacesTheWholeSet) {
    const std::string dir = fresh_dir();
    write_text(dir + "/a.txt", corpus_text(40));
    PrepareOptions opt;
    opt.inputs = {dir + "/a.txt"};
    opt.out_dir = dir + "/out";
    opt.val_fraction = 0.1;
    opt.chunk_tokens = 20;
    opt.shard_tokens = 100;
    const auto first = prepare_data(opt, vocab("gpt-2"));
    ASSERT_GT(first.meta.train_shards.size(), 3u);
    opt.shard_tokens = 1000;
    const auto second = prepare_data(opt, vocab("gpt-2"));
    EXPECT_EQ(second.meta.train_shards.size(), 1u);
    EXPECT_TRUE(std::filesystem::exists(dir + "/out/train_000.bin"));
    EXPECT_FALSE(std::filesystem::exists(dir + "/out/train_001.bin"));
    EXPECT_EQ(second.meta.train_tokens, first.meta.train_tokens);
}

TEST(Prepare, BadInputIsAnError) {
    const std::string dir = fresh_dir();
    write_text(dir + "/small.txt", "A few words only.\n");
    write_text(dir + "/blank.txt", "\n \n\n");
    PrepareOptions opt;
    opt.out_dir = dir + "/out";
    opt.val_fraction = 0.02;
    auto expect_error = [&](const std::string& what) {
        try {
            prepare_data(opt, vocab("gpt-2"));
            ADD_FAILURE() << "no error";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
        // A failed run leaves no meta.json, so no loader takes the half-written directory.
        EXPECT_THROW(split_shard_paths(opt.out_dir, "train"), Error);
    };
    opt.inputs = {dir + "/small.txt"};
    expect_error("val split is empty");
    opt.inputs = {dir + "/blank.txt"};
    expect_error("no text");
    opt.inputs = {dir + "/missing.txt"};
    expect_error("missing.txt: cannot open");
    opt.inputs = {dir + "/small.txt"};
    opt.val_fraction = 0.9;
    expect_error("--val");
}

TEST(Prepare, TokenizerModelMismatchIsCaught) {
    const std::string dir = fresh_dir();
    write_text(dir + "/a.txt", corpus_text(30));
    PrepareOptions opt;
    opt.inputs = {dir + "/a.txt"};
    opt.out_dir = dir + "/out";
    opt.val_fraction = 0;
    const auto st = prepare_data(opt, vocab("gpt-2"));  // separator 50256
    // A model with the llama vocabulary (32000) cannot take these ids.
    EXPECT_THROW(check_model_vocab(opt.out_dir, st.meta, 32000), Error);
    EXPECT_NO_THROW(check_model_vocab(opt.out_dir, st.meta, 50304));  // padded vocabulary: fine
    try {
        BatchLoader l(split_shard_paths(opt.out_dir, "train"), opts(2, 8, 0, 32000));
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("train_000.bin: token 0 is 50256"), std::string::npos)
            << e.what();
    }
    BatchLoader ok(split_shard_paths(opt.out_dir, "train"), opts(2, 8, 0, 50257));
    EXPECT_EQ(ok.n_windows(), (st.meta.train_tokens - 9) / 8 + 1);
}

}  // namespace
}  // namespace syslm::data
