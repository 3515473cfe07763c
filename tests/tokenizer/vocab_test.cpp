// Loading tokenizers from GGUF metadata: every bad-input case gives an Error naming the file and
// the key; flags (add_bos/add_eos/add_space_prefix), special-token ids, end-of-generation tokens
// and special-token splitting behave as in llama.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "core/error.hpp"
#include "io/gguf.hpp"
#include "test_util.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/vocab_gguf.hpp"

using namespace syslm::tokenizer;
using syslm::io::GGUFFile;
using syslm::io::GGUFValue;
using syslm::io::GGUFWriter;

namespace {

std::string tmp_path(const std::string& name) {
    std::filesystem::create_directories(SYSLM_TEST_TMP);
    return std::string(SYSLM_TEST_TMP) + "/tokenizer_" + name + ".gguf";
}

// A small byte-level BPE vocabulary: 256 byte characters, merges for "he", "ll", "hell", "hello",
// and special tokens of each type.
VocabSpec small_bpe() {
    VocabSpec s;
    s.type = VocabType::BPE;
    s.pre = "gpt-2";
    for (int b = 0; b < 256; ++b) s.tokens.push_back(byte_level_encode(std::string(1, char(b))));
    s.merges = {"h e", "l l", "he ll", "hell o"};
    for (const char* t : {"he", "ll", "hell", "hello"}) s.tokens.push_back(t);
    s.token_types.assign(s.tokens.size(), 1);
    const std::pair<const char*, int> specials[] = {{"<|endoftext|>", 3},
                                                    {"<|im_start|>", 3},
                                                    {"<|im_end|>", 3},
                                                    {"<tool>", 4},
                                                    {"<|im_start|>x", 4}};
    for (auto [text, type] : specials) {
        s.tokens.push_back(text);
        s.token_types.push_back(type);
    }
    return s;
}

// Writes `spec` (after `edit` changes keys) to a vocabulary-only GGUF and loads it back.
Tokenizer load(const std::string& name, const VocabSpec& spec,
               const std::function<void(GGUFWriter&)>& edit = {}) {
    GGUFWriter w;
    w.set("general.architecture", GGUFValue::string("llama"));
    write_vocab_spec(w, spec);
    if (edit) edit(w);
    const std::string path = tmp_path(name);
    w.write(path);
    const GGUFFile file(path);
    return Tokenizer::from_gguf(file);
}

// Expects loading to fail with a message naming the file and containing `what`.
void expect_error(const std::string& name, const VocabSpec& spec,
                  const std::function<void(GGUFWriter&)>& edit, const std::string& what) {
    SCOPED_TRACE(name);
    try {
        load(name, spec, edit);
        FAIL() << "loaded without error; expected: " << what;
    } catch (const syslm::Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(tmp_path(name)), std::string::npos) << msg;
        EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
}

int32_t id_of(const Tokenizer& t, const char* text) {
    const int32_t id = t.find_token(text);
    if (id < 0) throw std::runtime_error(std::string("no token ") + text);
    return id;
}

}  // namespace

TEST(Vocab, BadMetadataGivesClearErrors) {
    const VocabSpec ok = small_bpe();
    auto drop = [](const char* key) { return [key](GGUFWriter& w) { w.remove(key); }; };
    auto put = [](const char* key, GGUFValue v) {
        return [key, v](GGUFWriter& w) { w.set(key, v); };
    };
    expect_error("no_model", ok, drop("tokenizer.ggml.model"), "tokenizer.ggml.model");
    expect_error("bert", ok, put("tokenizer.ggml.model", GGUFValue::string("bert")),
                 "'bert' is not supported");
    expect_error("no_tokens", ok, drop("tokenizer.ggml.tokens"),
                 "missing key tokenizer.ggml.tokens");
    expect_error("tokens_not_array", ok, put("tokenizer.ggml.tokens", GGUFValue::u32(5)),
                 "tokenizer.ggml.tokens must be an array");
    expect_error("tokens_of_ints", ok,
                 put("tokenizer.ggml.tokens", GGUFValue::i32s(std::vector<int32_t>{1, 2, 3})),
                 "tokenizer.ggml.tokens");
    expect_error("no_merges", ok, drop("tokenizer.ggml.merges"), "tokenizer.ggml.merges");
    expect_error("bad_merge", ok,
                 put("tokenizer.ggml.merges", GGUFValue::strings({"h e", "nospace"})),
                 "tokenizer.ggml.merges[1] = 'nospace'");
    expect_error("types_short", ok,
                 put("tokenizer.ggml.token_type", GGUFValue::i32s(std::vector<int32_t>{1, 1})),
                 "tokenizer.ggml.token_type has 2 entries");
    expect_error("scores_short", ok,
                 put("tokenizer.ggml.scores", GGUFValue::f32s(std::vector<float>{0.5f})),
                 "tokenizer.ggml.scores has 1 entries");
    expect_error("bos_range", ok, put("tokenizer.ggml.bos_token_id", GGUFValue::u32(99999)),
                 "tokenizer.ggml.bos_token_id = 99999 is outside the vocabulary");
    expect_error("eos_type", ok, put("tokenizer.ggml.eos_token_id", GGUFValue::string("x")),
                 "tokenizer.ggml.eos_token_id");
    expect_error("unknown_pre", ok, put("tokenizer.ggml.pre", GGUFValue::string("gpt-7")),
                 "unknown pre-tokenizer tokenizer.ggml.pre = 'gpt-7'");
    expect_error("add_bos_no_bos", ok,
                 put("tokenizer.ggml.add_bos_token", GGUFValue::boolean(true)),
                 "add_bos_token is set but the vocabulary has no BOS token");
    VocabSpec dup = ok;
    dup.tokens[257] = dup.tokens[10];
    expect_error("duplicate", dup, {}, "twice");
    VocabSpec empty = ok;
    empty.tokens.clear();
    empty.token_types.clear();
    expect_error("empty", empty, {}, "tokenizer.ggml.tokens is empty");
}

TEST(Vocab, BpeFlagsAndSpecialTokens) {
    VocabSpec spec = small_bpe();
    const Tokenizer plain = load("bpe_plain", spec);
    EXPECT_EQ(plain.type(), VocabType::BPE);
    EXPECT_EQ(plain.bos(), -1);
    EXPECT_FALSE(plain.add_bos());
    // <|endoftext|> and <|im_end|> end generation even without an eos key (found by text).
    EXPECT_TRUE(plain.is_eog(id_of(plain, "<|endoftext|>")));
    EXPECT_TRUE(plain.is_eog(id_of(plain, "<|im_end|>")));
    EXPECT_FALSE(plain.is_eog(id_of(plain, "<|im_start|>")));
    EXPECT_EQ(plain.eot(), id_of(plain, "<|im_end|>"));
    EXPECT_EQ(plain.encode("hello", true, false), (std::vector<int32_t>{id_of(plain, "hello")}));

    spec.bos = id_of(plain, "<|im_start|>");
    spec.eos = id_of(plain, "<|endoftext|>");
    spec.add_bos = true;
    spec.add_eos = true;
    const Tokenizer t = load("bpe_flags", spec);
    const int32_t bos = t.bos(), eos = t.eos(), hello = id_of(t, "hello");
    EXPECT_EQ(t.encode("hello", true, false), (std::vector<int32_t>{bos, hello, eos}));
    EXPECT_EQ(t.encode("hello", false, false), (std::vector<int32_t>{hello}));
    EXPECT_EQ(t.encode("", true, false), (std::vector<int32_t>{bos, eos}));

    // CONTROL tokens are split out only with parse_special; USER_DEFINED ones always.
    const int32_t tool = id_of(t, "<tool>"), end = id_of(t, "<|im_end|>");
    const auto parsed = t.encode("hello<|im_end|><tool>hello", false, true);
    EXPECT_EQ(parsed, (std::vector<int32_t>{hello, end, tool, hello}));
    const auto unparsed = t.encode("hello<|im_end|><tool>hello", false, false);
    EXPECT_EQ(std::count(unparsed.begin(), unparsed.end(), end), 0);
    EXPECT_EQ(std::count(unparsed.begin(), unparsed.end(), tool), 1);
    EXPECT_EQ(t.decode(unparsed), "hello<|im_end|><tool>hello");
    // The longest special token wins where two start at the same place.
    const int32_t start_x = id_of(t, "<|im_start|>x"), start = id_of(t, "<|im_start|>");
    EXPECT_EQ(t.encode("<|im_start|>xhe<|im_start|>", false, true),
              (std::vector<int32_t>{start_x, id_of(t, "he"), start}));
}

TEST(Vocab, SpmDefaultsAndFlags) {
    // llama-spm: add_bos, no add_eos, space prefix; ids 1/2/0 for BOS/EOS/UNK.
    const Tokenizer& spm = test::shared_tokenizer("llama-spm");
    EXPECT_EQ(spm.type(), VocabType::SPM);
    EXPECT_EQ(spm.bos(), 1);
    EXPECT_EQ(spm.eos(), 2);
    EXPECT_EQ(spm.unk(), 0);
    EXPECT_TRUE(spm.add_bos());
    EXPECT_FALSE(spm.add_eos());
    EXPECT_TRUE(spm.add_space_prefix());
    EXPECT_TRUE(spm.is_eog(2));
    EXPECT_FALSE(spm.is_eog(1));
    EXPECT_EQ(spm.encode("Hello", true, false), (std::vector<int32_t>{1, 15043}));
    EXPECT_EQ(spm.token_to_piece(15043), " Hello");
    EXPECT_EQ(spm.token_to_piece(13), "\n");  // <0x0A>

    // add_space_prefix = false (e.g. Gemma-style vocabularies) keeps the text as is.
    const GGUFFile file(test::shared_vocab_path("llama-spm"));
    VocabSpec spec = read_vocab_spec(file);
    spec.add_space_prefix = false;
    spec.add_eos = true;
    const Tokenizer t = load("spm_flags", spec);
    EXPECT_EQ(t.encode("Hello", true, false), (std::vector<int32_t>{1, 10994, 2}));
    EXPECT_EQ(t.decode(t.encode(" Hello", false, false)), " Hello");

    const Tokenizer& gpt2 = test::shared_tokenizer("gpt-2");
    EXPECT_EQ(gpt2.bos(), 50256);
    EXPECT_EQ(gpt2.eos(), 50256);
    EXPECT_FALSE(gpt2.add_bos());
    EXPECT_TRUE(gpt2.is_eog(50256));
    EXPECT_EQ(gpt2.n_vocab(), 50257);
}

TEST(Vocab, Phi3StripsSpaceAfterSpecialTokens) {
    // llama.cpp gives Phi-3's special tokens "rstrip": whitespace after them is dropped.
    const VocabSpec spec = small_bpe();
    const Tokenizer t = load("phi3", spec, [](GGUFWriter& w) {
        w.set("general.name", GGUFValue::string("Phi-3-mini"));
    });
    const int32_t tool = id_of(t, "<tool>"), hello = id_of(t, "hello");
    EXPECT_EQ(t.encode("<tool>  \nhello", false, false), (std::vector<int32_t>{tool, hello}));
}

TEST(Vocab, OutOfRangeIdsAreErrors) {
    const Tokenizer& t = test::shared_tokenizer("gpt-2");
    EXPECT_THROW(t.token_to_piece(50257), syslm::Error);
    EXPECT_THROW(t.token_to_piece(-1), syslm::Error);
    const std::vector<int32_t> ids = {15496, 123456};
    EXPECT_THROW(t.decode(ids), syslm::Error);
    EXPECT_FALSE(t.is_eog(-1));
}
