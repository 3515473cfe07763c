#include "io/hf_tokenizer.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace syslm::io {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

enum TokenType : int32_t {
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6,
};

// The pre-tokenizer regexes as tokenizer.json spells them (JSON-decoded).
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

json parse_json(std::string_view text, const std::string& name) {
    try {
        return json::parse(text);
    } catch (const json::exception& e) {
        fail(name, ": not valid JSON: ", e.what());
    }
}

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) fail(p.string(), ": cannot open");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Writes control characters visibly so regexes compare the same however JSON escaped them.
std::string canonical_regex(const std::string& r) {
    std::string out;
    for (char c : r) {
        if (c == '\r')
            out += "\\r";
        else if (c == '\n')
            out += "\\n";
        else if (c == '\t')
            out += "\\t";
        else
            out += c;
    }
    return out;
}

// Flattens a pre_tokenizer into steps: "REGEX:<re>", "GPT2" (ByteLevel's own regex),
// "PUNCT:<behavior>", "BYTES" (byte mapping without a split), or "?<what>" for anything else.
void pre_steps(const json& p, std::vector<std::string>& out) {
    if (p.is_null()) return;
    if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) {
        out.push_back("?malformed");
        return;
    }
    const std::string type = p["type"].get<std::string>();
    if (type == "Sequence") {
        if (!p.contains("pretokenizers") || !p["pretokenizers"].is_array()) {
            out.push_back("?malformed Sequence");
            return;
        }
        for (const auto& q : p["pretokenizers"]) pre_steps(q, out);
    } else if (type == "ByteLevel") {
        if (p.value("add_prefix_space", false)) out.push_back("?ByteLevel add_prefix_space");
        out.push_back(p.value("use_regex", true) ? "GPT2" : "BYTES");
    } else if (type == "Split") {
        const json& pat = p.value("pattern", json::object());
        const std::string behavior = p.value("behavior", "");
        const bool invert = p.value("invert", false);
        // Removed+invert keeps the matches and their gaps exactly as Isolated does.
        const bool isolated = (behavior == "Isolated") || (behavior == "Removed" && invert);
        if (pat.contains("Regex") && pat["Regex"].is_string() && isolated)
            out.push_back("REGEX:" + canonical_regex(pat["Regex"].get<std::string>()));
        else
            out.push_back("?Split " + p.dump());
    } else if (type == "Digits") {
        out.push_back(p.value("individual_digits", false) ? "REGEX:\\p{N}" : "REGEX:\\p{N}+");
    } else if (type == "Punctuation") {
        out.push_back("PUNCT:" + p.value("behavior", std::string("Isolated")));
    } else {
        out.push_back("?" + type);
    }
}

bool looks_special(const std::string& t) {
    auto wrapped = [&](std::string_view a, std::string_view b) {
        return t.size() >= a.size() + b.size() && t.starts_with(a) && t.ends_with(b);
    };
    return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" ||
           wrapped("<|", "|>") || wrapped("<｜", "｜>") || wrapped("<unused", ">");
}

bool is_byte_token(const std::string& t) {
    auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
    return t.size() == 6 && t.starts_with("<0x") && t[5] == '>' && hex(t[3]) && hex(t[4]);
}

struct Added {
    int64_t id;
    std::string content;
    bool special;
};

// State shared by both flavours while building the token list.
struct Builder {
    std::string name;
    std::vector<std::optional<std::string>> tokens;  // by id; nullopt = hole
    std::vector<int32_t> types;
    std::vector<float> scores;
    std::map<std::string, int64_t> by_text;

    void set(int64_t id, std::string text, int32_t type, float score) {
        SYSLM_CHECK(id >= 0 && id < (int64_t{1} << 31), name, ": token id ", id, " out of range");
        if (static_cast<size_t>(id) >= tokens.size()) {
            tokens.resize(id + 1);
            types.resize(id + 1, kUnused);
            scores.resize(id + 1, -1000.0f);
        }
        tokens[id] = std::move(text);
        types[id] = type;
        scores[id] = score;
    }

    // Pads to n_vocab and checks that every text is unique (llama.cpp asserts it).
    std::vector<std::string> finish(int64_t n_vocab) {
        if (n_vocab > 0) {
            SYSLM_CHECK(static_cast<int64_t>(tokens.size()) <= n_vocab, name,
                        ": the tokenizer has ", tokens.size(),
                        " tokens but config.json's vocab_size is ", n_vocab);
            tokens.resize(n_vocab);
            types.resize(n_vocab, kUnused);
            scores.resize(n_vocab, -1000.0f);
        }
        std::vector<std::string> out(tokens.size());
        for (size_t i = 0; i < tokens.size(); ++i) {
            if (!tokens[i]) {
                tokens[i] = "[PAD" + std::to_string(i) + "]";
                types[i] = kUnused;
                scores[i] = -1000.0f;
            }
            out[i] = *tokens[i];
            auto [it, fresh] = by_text.emplace(out[i], static_cast<int64_t>(i));
            SYSLM_CHECK(fresh, name, ": token text '", out[i], "' is used by ids ", it->second,
                        " and ", i);
        }
        return out;
    }
};

std::vector<Added> read_added(const json& tok, const std::string& name) {
    std::vector<Added> out;
    if (!tok.contains("added_tokens") || tok["added_tokens"].is_null()) return out;
    SYSLM_CHECK(tok["added_tokens"].is_array(), name, ": added_tokens must be an array");
    for (const auto& a : tok["added_tokens"]) {
        SYSLM_CHECK(a.is_object() && a.contains("id") && a["id"].is_number_integer() &&
                        a.contains("content") && a["content"].is_string(),
                    name, ": malformed added_tokens entry ", a.dump());
        out.push_back(
            {a["id"].get<int64_t>(), a["content"].get<std::string>(), a.value("special", false)});
    }
    return out;
}

// Reads {"token": id} into the builder (BPE vocab).
void read_bpe_vocab(const json& model, Builder& b, int32_t type, float score) {
    SYSLM_CHECK(model.contains("vocab") && model["vocab"].is_object(), b.name,
                ": model.vocab must be an object of token -> id");
    for (const auto& [text, id] : model["vocab"].items()) {
        SYSLM_CHECK(id.is_number_integer(), b.name, ": vocab id of '", text, "' is not an integer");
        b.set(id.get<int64_t>(), text, type, score);
    }
}

// Merges as "left right" strings; pairs (transformers >= 4.45) may hold spaces, which gguf-py
// encodes as U+0120 like the byte-level alphabet does.
std::vector<std::pair<std::string, std::string>> read_merges(const json& model,
                                                             const std::string& name) {
    std::vector<std::pair<std::string, std::string>> out;
    if (!model.contains("merges") || model["merges"].is_null()) return out;
    SYSLM_CHECK(model["merges"].is_array(), name, ": model.merges must be an array");
    for (const auto& m : model["merges"]) {
        if (m.is_string()) {
            const std::string s = m.get<std::string>();
            const size_t sp = s.find(' ', 1);
            SYSLM_CHECK(sp != std::string::npos, name, ": merge '", s, "' has no space");
            out.emplace_back(s.substr(0, sp), s.substr(sp + 1));
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
            out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
        } else {
            fail(name, ": unknown merge format ", m.dump());
        }
    }
    return out;
}

std::string encode_merge_part(const std::string& s) {
    std::string out;
    for (char c : s) out += (c == ' ') ? std::string("\xC4\xA0") : std::string(1, c);  // U+0120
    return out;
}

// The special-token ids llama.cpp's SpecialVocab finds: tokenizer_config.json's <typ>_token
// looked up among the added tokens (then the vocab), else config.json's <typ>_token_id.
struct Specials {
    std::map<std::string, int64_t> ids;       // typ -> id
    std::map<std::string, std::string> text;  // typ -> token text from tokenizer_config
};

Specials read_specials(const json& tcfg, const json& cfg, const std::vector<Added>& added,
                       const Builder& b) {
    Specials s;
    for (const char* typ : {"bos", "eos", "unk", "sep", "pad", "mask"}) {
        const std::string key = std::string(typ) + "_token";
        if (tcfg.is_object() && tcfg.contains(key)) {
            const json& e = tcfg[key];
            std::string content;
            if (e.is_string())
                content = e.get<std::string>();
            else if (e.is_object() && e.contains("content") && e["content"].is_string())
                content = e["content"].get<std::string>();
            if (!content.empty()) {
                s.text[typ] = content;
                for (const auto& a : added)
                    if (a.content == content) {
                        s.ids[typ] = a.id;
                        break;
                    }
                if (!s.ids.count(typ)) {
                    auto it = b.by_text.find(content);
                    if (it != b.by_text.end()) s.ids[typ] = it->second;
                }
            }
        }
        const std::string id_key = std::string(typ) + "_token_id";
        if (!s.ids.count(typ) && cfg.is_object() && cfg.contains(id_key) &&
            cfg[id_key].is_number_integer() && cfg[id_key].get<int64_t>() >= 0)
            s.ids[typ] = cfg[id_key].get<int64_t>();
    }
    return s;
}

// What the post-processor adds around a single sequence: (bos first, eos last).
std::pair<std::optional<bool>, std::optional<bool>> template_adds(const json& pp,
                                                                  const Specials& sp) {
    if (pp.is_null() || !pp.is_object()) return {false, false};
    const std::string type = pp.value("type", "");
    if (type == "Sequence" && pp.contains("processors") && pp["processors"].is_array()) {
        std::pair<std::optional<bool>, std::optional<bool>> r{false, false};
        for (const auto& q : pp["processors"]) {
            auto [b, e] = template_adds(q, sp);
            if (b && *b) r.first = true;
            if (e && *e) r.second = true;
        }
        return r;
    }
    if (type == "TemplateProcessing" && pp.contains("single") && pp["single"].is_array()) {
        const json& single = pp["single"];
        auto special_at = [&](size_t i) -> std::string {
            const json& item = single[i];
            if (item.contains("SpecialToken") && item["SpecialToken"].contains("id"))
                return item["SpecialToken"]["id"].get<std::string>();
            return "";
        };
        bool bos = false, eos = false;
        if (!single.empty()) {
            const std::string first = special_at(0), last = special_at(single.size() - 1);
            auto bt = sp.text.find("bos"), et = sp.text.find("eos");
            bos = !first.empty() && bt != sp.text.end() && first == bt->second;
            eos = !last.empty() && et != sp.text.end() && last == et->second;
        }
        return {bos, eos};
    }
    return {false, false};  // ByteLevel, Roberta/Bert processing: no BOS/EOS of llama's kind
}

void add_common_tail(const json& tok, const json& tcfg, const json& cfg,
                     const std::vector<Added>& added, const Builder& b,
                     const std::string& chat_template_file, HFVocab& v) {
    const Specials sp = read_specials(tcfg, cfg, added, b);
    const std::map<std::string, std::string> key_of = {
        {"bos", "tokenizer.ggml.bos_token_id"},     {"eos", "tokenizer.ggml.eos_token_id"},
        {"unk", "tokenizer.ggml.unknown_token_id"}, {"sep", "tokenizer.ggml.seperator_token_id"},
        {"pad", "tokenizer.ggml.padding_token_id"}, {"mask", "tokenizer.ggml.mask_token_id"}};
    for (const char* typ : {"bos", "eos", "unk", "sep", "pad", "mask"}) {
        auto it = sp.ids.find(typ);
        if (it == sp.ids.end() || it->second >= static_cast<int64_t>(v.n_tokens)) continue;
        v.kv.emplace_back(key_of.at(typ), GGUFValue::u32(static_cast<uint32_t>(it->second)));
    }
    auto [tpl_bos, tpl_eos] = template_adds(tok.value("post_processor", json()), sp);
    auto flag = [&](const char* key, std::optional<bool> tpl) {
        if (tcfg.is_object() && tcfg.contains(key) && tcfg[key].is_boolean())
            return tcfg[key].get<bool>();
        return tpl.value_or(false);
    };
    v.kv.emplace_back("tokenizer.ggml.add_bos_token",
                      GGUFValue::boolean(flag("add_bos_token", tpl_bos)));
    v.kv.emplace_back("tokenizer.ggml.add_eos_token",
                      GGUFValue::boolean(flag("add_eos_token", tpl_eos)));

    // Chat template: tokenizer_config.json (a string or a list of named templates, which gguf-py
    // stores as tokenizer.chat_template.<name>), else chat_template.jinja.
    const json ct = tcfg.is_object() ? tcfg.value("chat_template", json()) : json();
    if (ct.is_string()) {
        v.kv.emplace_back("tokenizer.chat_template", GGUFValue::string(ct.get<std::string>()));
    } else if (ct.is_array()) {
        std::vector<std::string> names;
        std::optional<std::string> def;
        for (const auto& c : ct) {
            if (!c.is_object() || !c.contains("template") || !c["template"].is_string()) continue;
            std::string name = c.value("name", "");
            for (char& ch : name)
                if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
            if (name.empty()) continue;
            if (name == "default") {
                def = c["template"].get<std::string>();
            } else {
                names.push_back(name);
                v.kv.emplace_back("tokenizer.chat_template." + name,
                                  GGUFValue::string(c["template"].get<std::string>()));
            }
        }
        if (!names.empty())
            v.kv.emplace_back("tokenizer.chat_templates", GGUFValue::strings(names));
        if (def) v.kv.emplace_back("tokenizer.chat_template", GGUFValue::string(*def));
    } else if (!chat_template_file.empty()) {
        v.kv.emplace_back("tokenizer.chat_template", GGUFValue::string(chat_template_file));
    }
}

HFVocab convert_byte_level(const json& tok, const json& tcfg, const json& cfg,
                           const HFTokenizerFiles& f, int64_t n_vocab,
                           const std::string& pre_override) {
    const json& model = tok["model"];
    HFVocab v;
    v.model = "gpt2";
    if (!pre_override.empty()) {
        const auto& known = known_bpe_pre_names();
        SYSLM_CHECK(std::find(known.begin(), known.end(), pre_override) != known.end(), "--pre ",
                    pre_override, ": not a pre-tokenizer llama.cpp knows");
        v.pre = pre_override;
    } else {
        const json norm = tok.value("normalizer", json());
        SYSLM_CHECK(
            norm.is_null() || norm.value("type", "") == "NFC", f.name,
            ": tokenizer.json normalizer ", norm.dump(),
            " has no llama.cpp equivalent; name a pre-tokenizer with --pre to convert anyway");
        v.pre = identify_bpe_pre(tok.value("pre_tokenizer", json()).dump(),
                                 model.value("ignore_merges", false));
        if (v.pre.empty()) {
            std::vector<std::string> steps;
            pre_steps(tok.value("pre_tokenizer", json()), steps);
            std::string s;
            for (const auto& st : steps) s += "\n  " + st;
            fail(f.name, ": unknown BPE pre-tokenizer in tokenizer.json (steps:", s,
                 "\n); pass --pre NAME with the llama.cpp pre-tokenizer it matches (e.g. gpt-2, "
                 "llama-bpe, qwen2)");
        }
    }

    Builder b;
    b.name = f.name;
    read_bpe_vocab(model, b, kNormal, 0.0f);
    const auto added = read_added(tok, f.name);
    for (const auto& a : added)
        b.set(a.id, a.content, (a.special || looks_special(a.content)) ? kControl : kUserDefined,
              0.0f);
    const auto tokens = b.finish(n_vocab);
    v.n_tokens = tokens.size();

    std::vector<std::string> merges;
    for (const auto& [l, r] : read_merges(model, f.name))
        merges.push_back(encode_merge_part(l) + " " + encode_merge_part(r));
    SYSLM_CHECK(!merges.empty(), f.name, ": byte-level BPE without merges");

    v.kv.emplace_back("tokenizer.ggml.model", GGUFValue::string("gpt2"));
    v.kv.emplace_back("tokenizer.ggml.pre", GGUFValue::string(v.pre));
    v.kv.emplace_back("tokenizer.ggml.tokens", GGUFValue::strings(tokens));
    v.kv.emplace_back("tokenizer.ggml.token_type", GGUFValue::i32s(b.types));
    v.kv.emplace_back("tokenizer.ggml.merges", GGUFValue::strings(std::move(merges)));
    add_common_tail(tok, tcfg, cfg, added, b, f.chat_template, v);
    return v;
}

// '▁' handling of a SentencePiece-derived tokenizer.json: does it prepend one to the text?
bool spm_space_prefix(const json& tok, const std::string& name) {
    bool replaces_spaces = false, prepends = false;
    std::vector<const json*> norms;
    const json norm = tok.value("normalizer", json());
    if (norm.is_object() && norm.value("type", "") == "Sequence" && norm.contains("normalizers"))
        for (const auto& n : norm["normalizers"]) norms.push_back(&n);
    else if (norm.is_object())
        norms.push_back(&norm);
    for (const json* n : norms) {
        const std::string t = n->value("type", "");
        if (t == "Prepend" && n->value("prepend", "") == "\xE2\x96\x81") prepends = true;
        if (t == "Replace" && n->contains("pattern") &&
            (*n)["pattern"].value("String", "") == " " && n->value("content", "") == "\xE2\x96\x81")
            replaces_spaces = true;
    }
    std::vector<const json*> pres;
    const json pre = tok.value("pre_tokenizer", json());
    if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers"))
        for (const auto& p : pre["pretokenizers"]) pres.push_back(&p);
    else if (pre.is_object())
        pres.push_back(&pre);
    for (const json* p : pres) {
        if (p->value("type", "") != "Metaspace") continue;
        replaces_spaces = true;
        if (p->contains("prepend_scheme"))
            prepends = (*p)["prepend_scheme"] != "never";
        else
            prepends = p->value("add_prefix_space", true);
    }
    SYSLM_CHECK(
        replaces_spaces, name,
        ": tokenizer.json looks SentencePiece-derived (byte_fallback or Unigram) but has no "
        "Metaspace pre-tokenizer or Replace(' ', '\xE2\x96\x81') normalizer");
    return prepends;
}

HFVocab convert_spm(const json& tok, const json& tcfg, const json& cfg, const HFTokenizerFiles& f,
                    int64_t n_vocab) {
    const json& model = tok["model"];
    const std::string type = model.value("type", "");
    HFVocab v;
    v.model = "llama";
    v.pre = "default";
    Builder b;
    b.name = f.name;
    std::optional<int64_t> unk_id;

    if (type == "BPE") {
        read_bpe_vocab(model, b, kNormal, 0.0f);
        const auto merges = read_merges(model, f.name);
        std::map<std::string, int64_t> rank;  // merged text -> first merge producing it
        for (size_t r = 0; r < merges.size(); ++r)
            rank.emplace(merges[r].first + merges[r].second, static_cast<int64_t>(r));
        const auto n_merges = static_cast<float>(merges.size());
        for (size_t id = 0; id < b.tokens.size(); ++id) {
            if (!b.tokens[id]) continue;
            auto it = rank.find(*b.tokens[id]);
            // Merged tokens score by merge order; the rest (single characters) below them all.
            b.scores[id] = it != rank.end() ? -static_cast<float>(it->second)
                                            : -(n_merges + static_cast<float>(id));
        }
        if (model.contains("unk_token") && model["unk_token"].is_string()) {
            auto t = model["vocab"].find(model["unk_token"].get<std::string>());
            if (t != model["vocab"].end()) unk_id = t->get<int64_t>();
        }
    } else {  // Unigram: vocab is [[piece, log-prob], ...] in id order
        SYSLM_CHECK(model.contains("vocab") && model["vocab"].is_array(), f.name,
                    ": Unigram model.vocab must be an array of [piece, score]");
        int64_t id = 0;
        for (const auto& e : model["vocab"]) {
            SYSLM_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_number(),
                        f.name, ": malformed Unigram vocab entry ", e.dump());
            b.set(id++, e[0].get<std::string>(), kNormal, e[1].get<float>());
        }
        if (model.contains("unk_id") && model["unk_id"].is_number_integer())
            unk_id = model["unk_id"].get<int64_t>();
    }
    for (size_t id = 0; id < b.tokens.size(); ++id)
        if (b.tokens[id] && is_byte_token(*b.tokens[id])) {
            b.types[id] = kByte;
            b.scores[id] = 0.0f;
        }
    const auto added = read_added(tok, f.name);
    for (const auto& a : added) {
        const bool control = a.special || looks_special(a.content);
        // Control tokens keep SentencePiece's 0 (as <s>, </s> in Llama); user tokens get -1000
        // like llama.cpp's converter gives added tokens.
        b.set(a.id, a.content, control ? kControl : kUserDefined, control ? 0.0f : -1000.0f);
    }
    if (unk_id && *unk_id >= 0 && static_cast<size_t>(*unk_id) < b.tokens.size()) {
        b.types[*unk_id] = kUnknown;
        b.scores[*unk_id] = 0.0f;
    }
    const auto tokens = b.finish(n_vocab);
    v.n_tokens = tokens.size();

    bool space_prefix = spm_space_prefix(tok, f.name);
    if (tcfg.is_object() && tcfg.contains("add_prefix_space") &&
        tcfg["add_prefix_space"].is_boolean())
        space_prefix = tcfg["add_prefix_space"].get<bool>();  // llama.cpp's converter reads it too

    v.kv.emplace_back("tokenizer.ggml.model", GGUFValue::string("llama"));
    v.kv.emplace_back("tokenizer.ggml.pre", GGUFValue::string("default"));
    v.kv.emplace_back("tokenizer.ggml.tokens", GGUFValue::strings(tokens));
    v.kv.emplace_back("tokenizer.ggml.scores", GGUFValue::f32s(b.scores));
    v.kv.emplace_back("tokenizer.ggml.token_type", GGUFValue::i32s(b.types));
    v.kv.emplace_back("tokenizer.ggml.add_space_prefix", GGUFValue::boolean(space_prefix));
    // The unknown id defaults to the model's unk token when tokenizer_config.json names none.
    json cfg2 = cfg.is_object() ? cfg : json::object();
    if (unk_id && !cfg2.contains("unk_token_id")) cfg2["unk_token_id"] = *unk_id;
    add_common_tail(tok, tcfg, cfg2, added, b, f.chat_template, v);
    return v;
}

HFVocab convert_checked(const HFTokenizerFiles& f, int64_t n_vocab,
                        const std::string& pre_override) {
    const json tok = parse_json(f.tokenizer_json, f.name + "/tokenizer.json");
    SYSLM_CHECK(tok.is_object() && tok.contains("model") && tok["model"].is_object(), f.name,
                "/tokenizer.json: missing \"model\"");
    const json tcfg = f.tokenizer_config_json.empty()
                          ? json()
                          : parse_json(f.tokenizer_config_json, f.name + "/tokenizer_config.json");
    const json cfg =
        f.config_json.empty() ? json() : parse_json(f.config_json, f.name + "/config.json");
    const json& model = tok["model"];
    const std::string type = model.value("type", "");
    const std::string where = f.name + "/tokenizer.json";
    HFTokenizerFiles named = f;
    named.name = where;
    if (type == "BPE" && !model.value("byte_fallback", false)) {
        return convert_byte_level(tok, tcfg, cfg, named, n_vocab, pre_override);
    }
    if (type == "BPE" || type == "Unigram") return convert_spm(tok, tcfg, cfg, named, n_vocab);
    fail(where, ": tokenizer model type '", type,
         "' is not supported (byte-level BPE, SentencePiece-style BPE or Unigram)");
}

}  // namespace

const std::vector<std::string_view>& known_bpe_pre_names() {
    static const std::vector<std::string_view> names = {
        "default",      "llama3",         "llama-v3",     "llama-bpe",  "falcon3",
        "deepseek-llm", "deepseek-coder", "deepseek-v3",  "falcon",     "mpt",
        "starcoder",    "gpt-2",          "phi-2",        "jina-es",    "jina-de",
        "gigachat",     "jina-v1-en",     "jina-v2-es",   "jina-v2-de", "jina-v2-code",
        "roberta-bpe",  "refact",         "command-r",    "qwen2",      "deepseek-r1-qwen",
        "stablelm2",    "olmo",           "dbrx",         "smaug-bpe",  "poro-chat",
        "chatglm-bpe",  "viking",         "jais",         "tekken",     "smollm",
        "codeshell",    "bloom",          "gpt3-finnish", "exaone",     "chameleon",
        "minerva-7b",   "megrez",
    };
    return names;
}

std::string identify_bpe_pre(std::string_view pre_tokenizer_json, bool ignore_merges) {
    json p;
    try {
        p = json::parse(pre_tokenizer_json);
    } catch (const json::exception&) {
        return "";
    }
    std::vector<std::string> steps;
    pre_steps(p, steps);
    // Byte mapping must happen somewhere; where it is does not change the splits.
    const bool byte_level = std::any_of(steps.begin(), steps.end(),
                                        [](auto& s) { return s == "GPT2" || s == "BYTES"; });
    if (!byte_level) return "";
    std::erase(steps, "BYTES");
    for (const auto& s : steps)
        if (s.starts_with("?")) return "";

    const std::string R = "REGEX:";
    auto re = [&](std::string_view r) { return R + canonical_regex(std::string(r)); };
    using V = std::vector<std::string>;
    if (steps == V{"GPT2"}) return "gpt-2";
    if (steps == V{re(kLlama3Regex)}) return ignore_merges ? "llama-bpe" : "dbrx";
    if (steps == V{re(kQwen2Regex)}) return "qwen2";
    // Digits(individual) before GPT-2's regex: StarCoder, SmolLM and others, which llama.cpp
    // treats identically; "smollm" is the name its hash table gives SmolLM.
    if (steps == V{re("\\p{N}"), "GPT2"}) return "smollm";
    if (steps == V{"PUNCT:Contiguous", "GPT2", re("\\p{N}+"), re("[0-9][0-9][0-9]")})
        return "falcon";
    if (steps.size() == 6 && steps[0] == re("[\r\n]") &&
        steps[1].starts_with(R + "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓ") &&
        steps[2] == re("\\s?[!-/:-~！-／：-～‘-‟　-。]+") && steps[3] == re("\\s+$") &&
        steps[4] == re("[一-龥ࠀ-一가-퟿]+") && steps[5] == re("\\p{N}+"))
        return "deepseek-llm";
    if (steps == V{re("[\r\n]"), re("\\s?\\p{L}+"), re("\\s?\\p{P}+"),
                   re("[一-龥ࠀ-一가-퟿]+"), re("\\p{N}")})
        return "deepseek-coder";
    return "";
}

HFVocab convert_hf_tokenizer(const HFTokenizerFiles& f, int64_t n_vocab,
                             const std::string& pre_override) {
    try {
        return convert_checked(f, n_vocab, pre_override);
    } catch (const json::exception& e) {
        // A value of the wrong JSON type somewhere the checks above did not look.
        fail(f.name, "/tokenizer.json: unexpected structure: ", e.what());
    }
}

HFVocab read_hf_tokenizer(const std::string& model_dir, int64_t n_vocab,
                          const std::string& pre_override) {
    const fs::path d(model_dir);
    HFTokenizerFiles f;
    f.name = model_dir;
    SYSLM_CHECK(fs::exists(d / "tokenizer.json"), model_dir,
                ": no tokenizer.json (tokenizer.model / vocab.json-only folders are not supported; "
                "save the tokenizer with a fast tokenizer to produce tokenizer.json)");
    f.tokenizer_json = read_file(d / "tokenizer.json");
    if (fs::exists(d / "tokenizer_config.json"))
        f.tokenizer_config_json = read_file(d / "tokenizer_config.json");
    if (fs::exists(d / "config.json")) f.config_json = read_file(d / "config.json");
    if (fs::exists(d / "chat_template.jinja"))
        f.chat_template = read_file(d / "chat_template.jinja");
    return convert_hf_tokenizer(f, n_vocab, pre_override);
}

}  // namespace syslm::io
