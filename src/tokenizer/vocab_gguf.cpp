#include "tokenizer/vocab_gguf.hpp"

#include "core/error.hpp"
#include "io/gguf.hpp"

namespace syslm::tokenizer {
namespace {

struct IdKey {
    const char* key;
    std::optional<uint32_t> VocabSpec::*field;
};

// The deprecated prefix/suffix/middle keys come last so that the fim_* keys win when both exist.
const IdKey kIdKeys[] = {
    {"tokenizer.ggml.bos_token_id", &VocabSpec::bos},
    {"tokenizer.ggml.eos_token_id", &VocabSpec::eos},
    {"tokenizer.ggml.eot_token_id", &VocabSpec::eot},
    {"tokenizer.ggml.eom_token_id", &VocabSpec::eom},
    {"tokenizer.ggml.unknown_token_id", &VocabSpec::unk},
    {"tokenizer.ggml.seperator_token_id", &VocabSpec::sep},  // sic: llama.cpp's spelling
    {"tokenizer.ggml.padding_token_id", &VocabSpec::pad},
    {"tokenizer.ggml.mask_token_id", &VocabSpec::mask},
    {"tokenizer.ggml.fim_pre_token_id", &VocabSpec::fim_pre},
    {"tokenizer.ggml.fim_suf_token_id", &VocabSpec::fim_suf},
    {"tokenizer.ggml.fim_mid_token_id", &VocabSpec::fim_mid},
    {"tokenizer.ggml.fim_pad_token_id", &VocabSpec::fim_pad},
    {"tokenizer.ggml.fim_rep_token_id", &VocabSpec::fim_rep},
    {"tokenizer.ggml.fim_sep_token_id", &VocabSpec::fim_sep},
};
const IdKey kDeprecatedIdKeys[] = {
    {"tokenizer.ggml.prefix_token_id", &VocabSpec::fim_pre},
    {"tokenizer.ggml.suffix_token_id", &VocabSpec::fim_suf},
    {"tokenizer.ggml.middle_token_id", &VocabSpec::fim_mid},
};

struct FlagKey {
    const char* key;
    std::optional<bool> VocabSpec::*field;
};
const FlagKey kFlagKeys[] = {
    {"tokenizer.ggml.add_bos_token", &VocabSpec::add_bos},
    {"tokenizer.ggml.add_eos_token", &VocabSpec::add_eos},
    {"tokenizer.ggml.add_space_prefix", &VocabSpec::add_space_prefix},
};

// Runs `read` on the value of `key`, adding the file and key to any type error.
template <class F>
auto with_key(const io::GGUFFile& file, std::string_view key, const io::GGUFValue& v, F read) {
    try {
        return read(v);
    } catch (const Error& e) {
        fail(file.path(), ": ", key, ": ", e.what());
    }
}

const io::GGUFValue& array_of(const io::GGUFFile& file, std::string_view key, size_t n,
                              bool required) {
    static const io::GGUFValue none;
    const io::GGUFValue* v = file.find(key);
    if (!v) {
        SYSLM_CHECK(!required, file.path(), ": missing key ", key,
                    " (not a GGUF file with a tokenizer?)");
        return none;
    }
    SYSLM_CHECK(v->is_array(), file.path(), ": ", key, " must be an array, found ",
                io::gguf_type_name(v->type()));
    SYSLM_CHECK(n == 0 || v->size() == n, file.path(), ": ", key, " has ", v->size(),
                " entries, expected ", n, " (one per token)");
    return *v;
}

}  // namespace

VocabSpec read_vocab_spec(const io::GGUFFile& file) {
    VocabSpec spec;
    spec.source = file.path();
    const std::string model = file.get_string("tokenizer.ggml.model");
    if (model == "llama") {
        spec.type = VocabType::SPM;
    } else if (model == "gpt2") {
        spec.type = VocabType::BPE;
    } else {
        fail(file.path(), ": tokenizer.ggml.model = '", model,
             "' is not supported (supported: 'llama' = SentencePiece, 'gpt2' = byte-level BPE)");
    }
    spec.pre = file.get_string("tokenizer.ggml.pre", "");
    spec.model_name = file.get_string("general.name", "");

    const auto& tokens = array_of(file, "tokenizer.ggml.tokens", 0, true);
    spec.tokens = with_key(file, "tokenizer.ggml.tokens", tokens,
                           [](const io::GGUFValue& v) { return v.as_strings(); });
    const size_t n = spec.tokens.size();
    SYSLM_CHECK(n > 0, file.path(), ": tokenizer.ggml.tokens is empty");

    if (const auto& s = array_of(file, "tokenizer.ggml.scores", n, false); s.is_array())
        spec.scores = with_key(file, "tokenizer.ggml.scores", s,
                               [](const io::GGUFValue& v) { return v.as_f32s(); });
    if (const auto& t = array_of(file, "tokenizer.ggml.token_type", n, false); t.is_array())
        spec.token_types = with_key(file, "tokenizer.ggml.token_type", t,
                                    [](const io::GGUFValue& v) { return v.as_i32s(); });
    if (spec.type == VocabType::BPE) {
        const auto& m = array_of(file, "tokenizer.ggml.merges", 0, true);
        spec.merges = with_key(file, "tokenizer.ggml.merges", m,
                               [](const io::GGUFValue& v) { return v.as_strings(); });
    }

    auto read_ids = [&](const auto& keys) {
        for (const auto& k : keys)
            if (const io::GGUFValue* v = file.find(k.key))
                spec.*k.field =
                    with_key(file, k.key, *v, [](const io::GGUFValue& x) { return x.as_u32(); });
    };
    read_ids(kDeprecatedIdKeys);
    read_ids(kIdKeys);
    for (const auto& k : kFlagKeys)
        if (const io::GGUFValue* v = file.find(k.key))
            spec.*k.field =
                with_key(file, k.key, *v, [](const io::GGUFValue& x) { return x.as_bool(); });
    return spec;
}

void write_vocab_spec(io::GGUFWriter& w, const VocabSpec& spec) {
    using io::GGUFValue;
    w.set("tokenizer.ggml.model",
          GGUFValue::string(spec.type == VocabType::SPM ? "llama" : "gpt2"));
    if (spec.type == VocabType::BPE)
        w.set("tokenizer.ggml.pre", GGUFValue::string(spec.pre.empty() ? "default" : spec.pre));
    w.set("tokenizer.ggml.tokens", GGUFValue::strings(spec.tokens));
    if (!spec.scores.empty()) w.set("tokenizer.ggml.scores", GGUFValue::f32s(spec.scores));
    if (!spec.token_types.empty())
        w.set("tokenizer.ggml.token_type", GGUFValue::i32s(spec.token_types));
    if (spec.type == VocabType::BPE)
        w.set("tokenizer.ggml.merges", GGUFValue::strings(spec.merges));
    for (const auto& k : kIdKeys)
        if (spec.*k.field) w.set(k.key, GGUFValue::u32(*(spec.*k.field)));
    for (const auto& k : kFlagKeys)
        if (spec.*k.field) w.set(k.key, GGUFValue::boolean(*(spec.*k.field)));
}

}  // namespace syslm::tokenizer
