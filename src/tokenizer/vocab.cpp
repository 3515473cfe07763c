#include "tokenizer/vocab.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "core/error.hpp"
#include "tokenizer/pre_tokenizer.hpp"
#include "tokenizer/spm.hpp"

namespace syslm::tokenizer {
namespace {

// Token texts llama.cpp recognises when the metadata does not name these ids (its convert scripts
// often omit them). Candidates are tried in this order, so the choice is deterministic.
const std::vector<std::string_view> kEotTexts = {"<|eot_id|>",           "<|im_end|>",    "<|end|>",
                                                 "<end_of_turn>",        "<|endoftext|>", "<EOT>",
                                                 "<｜end▁of▁sentence｜>"};
const std::vector<std::string_view> kEomTexts = {"<|eom_id|>"};
const std::vector<std::string_view> kFimPreTexts = {"<|fim_prefix|>", "<fim-prefix>",
                                                    "<｜fim▁begin｜>", "<PRE>"};
const std::vector<std::string_view> kFimSufTexts = {"<|fim_suffix|>", "<fim-suffix>",
                                                    "<｜fim▁hole｜>", "<SUF>"};
const std::vector<std::string_view> kFimMidTexts = {"<|fim_middle|>", "<fim-middle>",
                                                    "<｜fim▁end｜>", "<MID>"};
const std::vector<std::string_view> kFimPadTexts = {"<|fim_pad|>", "<fim-pad>", "<PAD>"};
const std::vector<std::string_view> kFimRepTexts = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                                    "<REPO>"};
const std::vector<std::string_view> kFimSepTexts = {"<|file_sep|>"};
// Every token with one of these texts ends generation.
const std::vector<std::string_view> kEogTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>"};

bool contains_any(std::string_view s, std::initializer_list<std::string_view> parts) {
    for (auto p : parts)
        if (s.find(p) != std::string_view::npos) return true;
    return false;
}

}  // namespace

Vocab::Vocab(VocabSpec spec) : type(spec.type), source(std::move(spec.source)) {
    const size_t n = spec.tokens.size();
    SYSLM_CHECK(n > 0, source, ": tokenizer.ggml.tokens is empty");
    SYSLM_CHECK(n <= static_cast<size_t>(INT32_MAX), source, ": too many tokens (", n, ")");
    SYSLM_CHECK(spec.scores.empty() || spec.scores.size() == n, source,
                ": tokenizer.ggml.scores has ", spec.scores.size(), " entries for ", n, " tokens");
    SYSLM_CHECK(spec.token_types.empty() || spec.token_types.size() == n, source,
                ": tokenizer.ggml.token_type has ", spec.token_types.size(), " entries for ", n,
                " tokens");

    set_type_defaults(spec);
    take_tokens(spec);
    set_special_ids(spec);
    detect_special_ids();
    index_special_tokens();
    set_strip_flags(spec);
    index_byte_tokens();
}

// Defaults per tokenizer type, as llama.cpp's llama_vocab::load, then the file's flags.
void Vocab::set_type_defaults(const VocabSpec& spec) {
    if (type == VocabType::SPM) {
        pre = "default";
        bos = 1, eos = 2, unk = 0;
        add_bos = true;
        add_space_prefix = true;
    } else {
        pre = spec.pre.empty() ? "default" : spec.pre;
        const PreTokenizerConfig* cfg = find_pre_tokenizer(pre);
        if (!cfg) {
            std::string known;
            for (const auto& name : known_pre_tokenizer_names())
                known += (known.empty() ? "" : ", ") + name;
            fail(source, ": unknown pre-tokenizer tokenizer.ggml.pre = '", pre, "' (known: ", known,
                 ")");
        }
        pre = cfg->name;
        ignore_merges = cfg->ignore_merges;
        add_bos = cfg->add_bos;
    }
    if (spec.add_space_prefix) add_space_prefix = *spec.add_space_prefix;
    if (spec.add_bos) add_bos = *spec.add_bos;
    if (spec.add_eos) add_eos = *spec.add_eos;
}

// Texts, scores and types; every text a distinct key.
void Vocab::take_tokens(VocabSpec& spec) {
    const size_t n = spec.tokens.size();
    text = std::move(spec.tokens);
    score = spec.scores.empty() ? std::vector<float>(n, 0.0f) : std::move(spec.scores);
    token_type.assign(n, TokenType::NORMAL);
    ids.reserve(n * 2);
    for (size_t i = 0; i < n; ++i) {
        if (!spec.token_types.empty()) {
            const int32_t t = spec.token_types[i];
            token_type[i] = t >= 0 && t <= 6 ? static_cast<TokenType>(t) : TokenType::UNDEFINED;
        }
        // llama.cpp renames empty tokens so that every text is a distinct key.
        if (text[i].empty()) text[i] = cat("[EMPTY_", i, "]");
        auto [it, inserted] = ids.emplace(text[i], static_cast<int32_t>(i));
        SYSLM_CHECK(inserted, source, ": tokenizer.ggml.tokens has the text '", text[i],
                    "' twice (ids ", it->second, " and ", i, ")");
    }
}

// The ids the file names (checked to be in range), and what follows for BOS / EOS.
void Vocab::set_special_ids(const VocabSpec& spec) {
    const size_t n = text.size();
    auto set_id = [&](const std::optional<uint32_t>& v, int32_t& id, const char* key) {
        if (!v) return;
        SYSLM_CHECK(*v < n, source, ": tokenizer.ggml.", key, " = ", *v,
                    " is outside the vocabulary (", n, " tokens)");
        id = static_cast<int32_t>(*v);
    };
    if (type == VocabType::SPM) {  // the defaults must exist too
        if (bos >= static_cast<int32_t>(n)) bos = -1;
        if (eos >= static_cast<int32_t>(n)) eos = -1;
        if (unk >= static_cast<int32_t>(n)) unk = -1;
    }
    if (type == VocabType::BPE && find_pre_tokenizer(pre)->no_bos) bos = -1;
    set_id(spec.bos, bos, "bos_token_id");
    set_id(spec.eos, eos, "eos_token_id");
    set_id(spec.eot, eot, "eot_token_id");
    set_id(spec.eom, eom, "eom_token_id");
    set_id(spec.unk, unk, "unknown_token_id");
    set_id(spec.sep, sep, "seperator_token_id");
    set_id(spec.pad, pad, "padding_token_id");
    set_id(spec.mask, mask, "mask_token_id");
    set_id(spec.fim_pre, fim_pre, "fim_pre_token_id");
    set_id(spec.fim_suf, fim_suf, "fim_suf_token_id");
    set_id(spec.fim_mid, fim_mid, "fim_mid_token_id");
    set_id(spec.fim_pad, fim_pad, "fim_pad_token_id");
    set_id(spec.fim_rep, fim_rep, "fim_rep_token_id");
    set_id(spec.fim_sep, fim_sep, "fim_sep_token_id");
    // A family default (llama3 adds BOS) gives way when the file names no BOS token; an explicit
    // add_bos_token / add_eos_token without the token is a broken file.
    SYSLM_CHECK(!add_bos || bos >= 0 || !spec.add_bos, source,
                ": tokenizer.ggml.add_bos_token is set but the vocabulary has no BOS token");
    SYSLM_CHECK(!add_eos || eos >= 0 || !spec.add_eos, source,
                ": tokenizer.ggml.add_eos_token is set but the vocabulary has no EOS token");
    if (bos < 0) add_bos = false;
    if (eos < 0) add_eos = false;
}

// Auto-detect ids by text; a token found this way is treated as a control token, as llama.cpp
// does, so that it is never merged into ordinary text.
void Vocab::detect_special_ids() {
    auto detect = [&](int32_t& id, const std::vector<std::string_view>& texts) {
        if (id >= 0) return;
        for (auto t : texts) {
            const int32_t found = find(t);
            if (found >= 0) {
                id = found;
                token_type[found] = TokenType::CONTROL;
                return;
            }
        }
    };
    detect(eot, kEotTexts);
    detect(eom, kEomTexts);
    detect(fim_pre, kFimPreTexts);
    detect(fim_suf, kFimSufTexts);
    detect(fim_mid, kFimMidTexts);
    detect(fim_pad, kFimPadTexts);
    detect(fim_rep, kFimRepTexts);
    detect(fim_sep, kFimSepTexts);

    for (int32_t id : {fim_pad, fim_rep, fim_sep, eos, eot, eom})
        if (id >= 0) eog.push_back(id);
    for (auto t : kEogTexts) {
        const int32_t id = find(t);
        if (id >= 0) {
            eog.push_back(id);
            token_type[id] = TokenType::CONTROL;
        }
    }
    std::sort(eog.begin(), eog.end());
    eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
}

// The special tokens, longest first and by first byte, for splitting text around them.
void Vocab::index_special_tokens() {
    for (int32_t id = 0; id < n_tokens(); ++id)
        if (is_special(id)) special_tokens.push_back(id);
    // Longest first, so that "<|im_end|>" is split out before a shorter token inside it.
    std::stable_sort(special_tokens.begin(), special_tokens.end(),
                     [&](int32_t a, int32_t b) { return text[a].size() > text[b].size(); });
    for (int32_t id : special_tokens)
        special_by_first_byte[static_cast<uint8_t>(text[id][0])].push_back(id);
}

// llama.cpp's per-model strip flags (the GGUF has no per-token attributes for them).
void Vocab::set_strip_flags(const VocabSpec& spec) {
    const size_t n = text.size();
    lstrip.assign(n, 0);
    rstrip.assign(n, 0);
    std::string name = spec.model_name;
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (contains_any(spec.pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"})) {
        if (int32_t id = find("<mask>"); id >= 0) lstrip[id] = 1;
    } else if (contains_any(name, {"phi-3", "phi3"})) {
        for (int32_t id : special_tokens) rstrip[id] = 1;
        if (int32_t id = find("</s>"); id >= 0) rstrip[id] = 1;
        for (auto t : {"<unk>", "<s>", "<|endoftext|>"})
            if (int32_t id = find(t); id >= 0) rstrip[id] = 0;
    }
}

// SPM: the byte-fallback tokens (<0xXX>) and the character pairs inside tokens.
void Vocab::index_byte_tokens() {
    byte_token.fill(-1);
    if (type == VocabType::SPM) {
        spm_pairs = spm_adjacent_pairs(*this);
        for (int b = 0; b < 256; ++b) {
            char hex[8];
            std::snprintf(hex, sizeof hex, "<0x%02X>", b);
            int32_t id = find(hex);
            if (id < 0) id = find(std::string(1, static_cast<char>(b)));
            byte_token[b] = id;
        }
    }
}

VocabSpec byte_fallback_vocab(int n_tokens) {
    SYSLM_CHECK(n_tokens >= 3, "a byte-fallback vocabulary needs at least 3 tokens (<unk>, <s>, "
                               "</s>), not ", n_tokens);
    VocabSpec spec;
    spec.type = VocabType::SPM;
    spec.source = "byte-fallback vocabulary of " + std::to_string(n_tokens) + " tokens";
    auto add = [&](std::string text, TokenType type) {
        spec.tokens.push_back(std::move(text));
        spec.token_types.push_back(static_cast<int32_t>(type));
        spec.scores.push_back(0.0f);
    };
    add("<unk>", TokenType::UNKNOWN);
    add("<s>", TokenType::CONTROL);
    add("</s>", TokenType::CONTROL);
    for (int b = 0; b < 256 && static_cast<int>(spec.tokens.size()) < n_tokens; ++b) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "<0x%02X>", b);
        add(hex, TokenType::BYTE);
    }
    while (static_cast<int>(spec.tokens.size()) < n_tokens)
        add("<unused" + std::to_string(spec.tokens.size()) + ">", TokenType::UNUSED);
    spec.unk = 0;
    spec.bos = 1;
    spec.eos = 2;
    spec.add_bos = true;
    spec.add_eos = false;
    return spec;
}

}  // namespace syslm::tokenizer
