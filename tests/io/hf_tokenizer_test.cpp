// tokenizer.json -> tokenizer.* keys. Pre-tokenizer JSON is spelled as the HF `tokenizers` library
// serialises it (the shapes of GPT-2, Llama 3, Qwen2, SmolLM/StarCoder, Falcon, DeepSeek files).
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "io/hf_tokenizer.hpp"

namespace syslm::io {
namespace {

const GGUFValue* kv(const HFVocab& v, const std::string& key) {
    for (const auto& [k, val] : v.kv)
        if (k == key) return &val;
    return nullptr;
}

const char* kByteLevel =
    R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false})";

std::string split(const std::string& regex_json) {
    return R"({"type":"Split","pattern":{"Regex":)" + regex_json +
           R"(},"behavior":"Isolated","invert":false})";
}

std::string seq(std::initializer_list<std::string> steps) {
    std::string s = R"({"type":"Sequence","pretokenizers":[)";
    bool first = true;
    for (const auto& x : steps) s += cat(first ? "" : ",", x), first = false;
    return s + "]}";
}

TEST(HFTokenizer, IdentifiesPreTokenizers) {
    EXPECT_EQ(identify_bpe_pre(
                  R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true})", false),
              "gpt-2");
    const std::string llama3 =
        R"("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")";
    EXPECT_EQ(identify_bpe_pre(seq({split(llama3), kByteLevel}), true), "llama-bpe");
    EXPECT_EQ(identify_bpe_pre(seq({split(llama3), kByteLevel}), false), "dbrx");
    const std::string qwen2 =
        R"("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")";
    EXPECT_EQ(identify_bpe_pre(seq({split(qwen2), kByteLevel}), false), "qwen2");
    EXPECT_EQ(
        identify_bpe_pre(
            seq({R"({"type":"Digits","individual_digits":true})",
                 R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})"}),
            false),
        "smollm");
    EXPECT_EQ(
        identify_bpe_pre(
            seq({R"({"type":"Punctuation","behavior":"Contiguous"})",
                 R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})",
                 R"({"type":"Digits","individual_digits":false})", split(R"("[0-9][0-9][0-9]")")}),
            false),
        "falcon");
    EXPECT_EQ(
        identify_bpe_pre(seq({split(R"("[\r\n]")"), split(R"("\\s?\\p{L}+")"),
                              split(R"("\\s?\\p{P}+")"), split(R"("[一-龥ࠀ-一가-퟿]+")"),
                              R"({"type":"Digits","individual_digits":true})", kByteLevel}),
                         false),
        "deepseek-coder");
    // Unknown: another regex, a prefix space, a missing ByteLevel step.
    EXPECT_EQ(identify_bpe_pre(seq({split(R"("\\p{L}+")"), kByteLevel}), false), "");
    EXPECT_EQ(
        identify_bpe_pre(R"({"type":"ByteLevel","add_prefix_space":true,"use_regex":true})", false),
        "");
    EXPECT_EQ(identify_bpe_pre(split(qwen2), false), "");
    EXPECT_EQ(identify_bpe_pre("null", false), "");
}

// A byte-level BPE tokenizer.json: 6 vocab entries, 2 merges, an added special and user token.
const char* kGpt2Json = R"({
  "added_tokens": [
    {"id": 6, "content": "<|endoftext|>", "special": true, "normalized": false},
    {"id": 7, "content": "<extra>", "special": false, "normalized": true}],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
  "post_processor": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
  "model": {"type": "BPE", "byte_fallback": false, "ignore_merges": false,
            "vocab": {"a": 0, "b": 1, "Ġ": 2, "ab": 3, "Ġab": 4, "c": 5},
            "merges": [["a", "b"], ["Ġ", "ab"]]}})";

TEST(HFTokenizer, ByteLevelBpe) {
    HFTokenizerFiles f;
    f.name = "m";
    f.tokenizer_json = kGpt2Json;
    f.tokenizer_config_json =
        R"({"eos_token": "<|endoftext|>", "bos_token": {"content": "<|endoftext|>"},
      "chat_template": [{"name": "default", "template": "T1"}, {"name": "tool use", "template": "T2"}]})";
    const HFVocab v = convert_hf_tokenizer(f, 10);
    EXPECT_EQ(v.model, "gpt2");
    EXPECT_EQ(v.pre, "gpt-2");
    EXPECT_EQ(v.n_tokens, 10u);
    EXPECT_EQ(kv(v, "tokenizer.ggml.tokens")->as_strings(),
              (std::vector<std::string>{"a", "b", "Ġ", "ab", "Ġab", "c", "<|endoftext|>", "<extra>",
                                        "[PAD8]", "[PAD9]"}));
    EXPECT_EQ(kv(v, "tokenizer.ggml.token_type")->as_i32s(),
              (std::vector<int32_t>{1, 1, 1, 1, 1, 1, 3, 4, 5, 5}));
    EXPECT_EQ(kv(v, "tokenizer.ggml.token_type")->array_type(), GGUFType::I32);
    EXPECT_EQ(kv(v, "tokenizer.ggml.merges")->as_strings(),
              (std::vector<std::string>{"a b", "Ġ ab"}));
    EXPECT_EQ(kv(v, "tokenizer.ggml.eos_token_id")->as_u32(), 6u);
    EXPECT_EQ(kv(v, "tokenizer.ggml.bos_token_id")->as_u32(), 6u);
    EXPECT_FALSE(kv(v, "tokenizer.ggml.add_bos_token")->as_bool());
    EXPECT_EQ(kv(v, "tokenizer.chat_template")->as_string(), "T1");
    EXPECT_EQ(kv(v, "tokenizer.chat_template.tool_use")->as_string(), "T2");
    EXPECT_EQ(kv(v, "tokenizer.chat_templates")->as_strings(),
              (std::vector<std::string>{"tool_use"}));
    EXPECT_EQ(kv(v, "tokenizer.ggml.scores"), nullptr);

    // More tokens than the embedding has rows.
    EXPECT_THROW(convert_hf_tokenizer(f, 7), Error);
    // An unknown pre-tokenizer needs --pre; --pre must be a llama.cpp name.
    std::string j = kGpt2Json;
    j.replace(j.find(R"("use_regex": true})"), 18,
              R"("use_regex": true, "add_prefix_space": true})");
    f.tokenizer_json = j;
    try {
        convert_hf_tokenizer(f, 0);
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--pre"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("m/tokenizer.json"), std::string::npos) << e.what();
    }
    EXPECT_EQ(convert_hf_tokenizer(f, 0, "gpt-2").pre, "gpt-2");
    EXPECT_THROW(convert_hf_tokenizer(f, 0, "gpt-3"), Error);
}

TEST(HFTokenizer, DuplicateTokenTextIsAnError) {
    std::string j = kGpt2Json;
    j.replace(j.find(R"("<extra>")"), 9, R"("ab")");
    HFTokenizerFiles f{j, "", "", "", "m"};
    try {
        convert_hf_tokenizer(f, 0);
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'ab' is used by ids 3 and 7"), std::string::npos)
            << e.what();
    }
}

// SentencePiece-style BPE: specials, byte tokens, pieces; merges in rank order.
const char* kSpmJson = R"({
  "added_tokens": [
    {"id": 0, "content": "<unk>", "special": true}, {"id": 1, "content": "<s>", "special": true},
    {"id": 2, "content": "</s>", "special": true}],
  "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                 {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
  "pre_tokenizer": null,
  "post_processor": {"type": "TemplateProcessing",
     "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
     "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
  "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
            "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x00>": 3, "<0x0A>": 4, "▁": 5, "t": 6,
                      "h": 7, "e": 8, "▁t": 9, "he": 10, "▁the": 11, "▁th": 12},
            "merges": ["▁ t", "h e", "▁t he", "▁t h"]}})";

TEST(HFTokenizer, SentencePieceBpeScoresFollowMergeRank) {
    HFTokenizerFiles f{kSpmJson,
                       R"({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})", "", "",
                       "m"};
    const HFVocab v = convert_hf_tokenizer(f, 14);
    EXPECT_EQ(v.model, "llama");
    EXPECT_EQ(kv(v, "tokenizer.ggml.pre")->as_string(), "default");
    const auto scores = kv(v, "tokenizer.ggml.scores")->as_f32s();
    const auto types = kv(v, "tokenizer.ggml.token_type")->as_i32s();
    ASSERT_EQ(scores.size(), 14u);
    EXPECT_EQ(scores[9], 0.0f);                                      // ▁t: merge rank 0
    EXPECT_EQ(scores[10], -1.0f);                                    // he: rank 1
    EXPECT_EQ(scores[11], -2.0f);                                    // ▁the: rank 2
    EXPECT_EQ(scores[12], -3.0f);                                    // ▁th: rank 3
    for (int id : {5, 6, 7, 8}) EXPECT_LT(scores[id], -3.0f) << id;  // characters below every merge
    EXPECT_EQ(types, (std::vector<int32_t>{2, 3, 3, 6, 6, 1, 1, 1, 1, 1, 1, 1, 1, 5}));
    EXPECT_TRUE(kv(v, "tokenizer.ggml.add_space_prefix")->as_bool());
    EXPECT_TRUE(kv(v, "tokenizer.ggml.add_bos_token")->as_bool());  // from the template
    EXPECT_FALSE(kv(v, "tokenizer.ggml.add_eos_token")->as_bool());
    EXPECT_EQ(kv(v, "tokenizer.ggml.bos_token_id")->as_u32(), 1u);
    EXPECT_EQ(kv(v, "tokenizer.ggml.eos_token_id")->as_u32(), 2u);
    EXPECT_EQ(kv(v, "tokenizer.ggml.unknown_token_id")->as_u32(), 0u);
    EXPECT_EQ(kv(v, "tokenizer.ggml.merges"), nullptr);

    // tokenizer_config.json's flags win over the template, as in llama.cpp's converter.
    f.tokenizer_config_json =
        R"({"add_bos_token": false, "add_eos_token": true, "add_prefix_space": false})";
    const HFVocab w = convert_hf_tokenizer(f, 0);
    EXPECT_FALSE(kv(w, "tokenizer.ggml.add_bos_token")->as_bool());
    EXPECT_TRUE(kv(w, "tokenizer.ggml.add_eos_token")->as_bool());
    EXPECT_FALSE(kv(w, "tokenizer.ggml.add_space_prefix")->as_bool());
    EXPECT_EQ(kv(w, "tokenizer.ggml.unknown_token_id")->as_u32(), 0u);  // from model.unk_token
}

TEST(HFTokenizer, MetaspaceAndUnigram) {
    const char* uni = R"({
      "added_tokens": [{"id": 3, "content": "<|user|>", "special": false}],
      "normalizer": null,
      "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": true},
      "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": false,
                "vocab": [["<unk>", 0.0], ["▁a", -1.5], ["b", -2.25], ["<|user|>", 0.0]]}})";
    const HFVocab v = convert_hf_tokenizer({uni, "", R"({"bos_token_id": 1})", "", "m"}, 0);
    EXPECT_EQ(v.model, "llama");
    EXPECT_EQ(kv(v, "tokenizer.ggml.scores")->as_f32s(),
              (std::vector<float>{0.0f, -1.5f, -2.25f, 0.0f}));
    // "<|user|>" is not marked special but looks like a control token (llama.cpp's heuristic).
    EXPECT_EQ(kv(v, "tokenizer.ggml.token_type")->as_i32s(), (std::vector<int32_t>{2, 1, 1, 3}));
    EXPECT_FALSE(kv(v, "tokenizer.ggml.add_space_prefix")->as_bool());
    EXPECT_EQ(kv(v, "tokenizer.ggml.bos_token_id")->as_u32(), 1u);  // config.json fallback
}

TEST(HFTokenizer, Rejects) {
    auto err = [](const std::string& j) {
        try {
            convert_hf_tokenizer({j, "", "", "", "m"}, 0);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_NE(err(R"({"model": {"type": "WordPiece", "vocab": {}}})")
                  .find("'WordPiece' is not supported"),
              std::string::npos);
    EXPECT_NE(err("[1,2").find("not valid JSON"), std::string::npos);
    EXPECT_NE(
        err(R"({"model": {"type": "BPE", "byte_fallback": true, "vocab": {"a": 0}, "merges": []},
                    "normalizer": null, "pre_tokenizer": null})")
            .find("no Metaspace"),
        std::string::npos);
    EXPECT_NE(err(R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []},
                    "pre_tokenizer": {"type": "ByteLevel"}})")
                  .find("not an integer"),
              std::string::npos);
}

}  // namespace
}  // namespace syslm::io
