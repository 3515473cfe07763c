#include "tokenizer/tokenizer.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <optional>
#include <unordered_map>

#include "core/error.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/pre_tokenizer.hpp"
#include "tokenizer/special_split.hpp"
#include "tokenizer/spm.hpp"
#include "tokenizer/vocab_gguf.hpp"

namespace syslm::tokenizer {

struct Tokenizer::Impl {
    Vocab vocab;
    std::optional<PreTokenizer> pre_tokenizer;  // BPE only
    std::optional<BpeMerges> merges;            // BPE only
    std::vector<std::string> piece;             // id -> bytes it decodes to
    // SPM: id -> bytes before U+2581 becomes a space. decode() turns U+2581 into spaces only
    // after joining byte tokens, since byte fallback may split one U+2581 over three tokens.
    std::vector<std::string> spm_raw;

    Impl(Vocab v, const std::vector<std::string>& merge_list) : vocab(std::move(v)) {
        if (vocab.type == VocabType::BPE) {
            SYSLM_CHECK(!merge_list.empty(), vocab.source,
                        ": byte-level BPE vocabulary without tokenizer.ggml.merges");
            pre_tokenizer.emplace(find_pre_tokenizer(vocab.pre)->regexes);
            merges.emplace(vocab, merge_list);
        }
        piece.resize(vocab.text.size());
        for (int32_t id = 0; id < vocab.n_tokens(); ++id) piece[id] = make_piece(id);
        if (vocab.type == VocabType::SPM) {
            spm_raw.resize(vocab.text.size());
            for (int32_t id = 0; id < vocab.n_tokens(); ++id) {
                const TokenType t = vocab.token_type[id];
                spm_raw[id] = t == TokenType::NORMAL ? vocab.text[id]
                              : t == TokenType::BYTE ? piece[id]
                                                     : std::string();
            }
        }
    }

    static std::string unescape_spm(std::string_view s) {
        std::string out;
        out.reserve(s.size());
        for (size_t i = 0; i < s.size(); ++i) {
            if (s.compare(i, 3, "\xE2\x96\x81") == 0) {
                out += ' ';
                i += 2;
            } else {
                out += s[i];
            }
        }
        return out;
    }

    // What llama.cpp's token_to_piece gives with special = true.
    std::string make_piece(int32_t id) const {
        const std::string& t = vocab.text[id];
        const TokenType type = vocab.token_type[id];
        if (vocab.is_special(id)) return t;
        if (vocab.type == VocabType::SPM) {
            if (type == TokenType::NORMAL) return unescape_spm(t);
            if (type == TokenType::BYTE) {
                // "<0xXX>"; vocabularies that store raw one-byte tokens as BYTE are taken as is.
                unsigned byte = 0;
                if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>' &&
                    std::sscanf(t.c_str() + 3, "%2x", &byte) == 1 &&
                    std::isxdigit(static_cast<unsigned char>(t[3])) &&
                    std::isxdigit(static_cast<unsigned char>(t[4])))
                    return std::string(1, static_cast<char>(byte));
                return t;
            }
            return {};  // UNUSED / UNDEFINED tokens print nothing, as in llama.cpp
        }
        if (type == TokenType::NORMAL) return byte_level_decode(t);
        return {};
    }

    void encode_spm(std::string_view text, bool prefix_space, std::vector<int32_t>& out) const {
        std::string escaped;
        escaped.reserve(text.size() + 8);
        if (prefix_space) escaped += "\xE2\x96\x81";
        for (char c : text) {
            if (c == ' ')
                escaped += "\xE2\x96\x81";
            else
                escaped += c;
        }
        spm_tokenize(vocab, escaped, out);
    }

    // Word -> ids memo for one encode() call: natural text repeats its words, and the merge loop
    // is the expensive part.
    struct WordCache {
        std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> where;
        std::vector<int32_t> ids;
    };

    void encode_bpe(std::string_view text, WordCache& cache, std::vector<int32_t>& out) const {
        std::vector<std::string_view> words;
        pre_tokenizer->split(text, words);
        for (std::string_view w : words) {
            auto it = cache.where.find(w);
            if (it != cache.where.end()) {
                const auto [off, n] = it->second;
                out.insert(out.end(), cache.ids.begin() + off, cache.ids.begin() + off + n);
                continue;
            }
            const size_t before = out.size();
            int32_t whole = -1;
            if (vocab.ignore_merges) whole = vocab.find(byte_level_encode(w));
            if (whole >= 0)
                out.push_back(whole);
            else
                merges->encode_word(w, out);
            const auto off = static_cast<uint32_t>(cache.ids.size());
            cache.ids.insert(cache.ids.end(), out.begin() + before, out.end());
            cache.where.emplace(w, std::make_pair(off, static_cast<uint32_t>(out.size() - before)));
        }
    }
};

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

Tokenizer Tokenizer::from_spec(VocabSpec spec) {
    const std::vector<std::string> merges = std::move(spec.merges);
    return Tokenizer(std::make_shared<const Impl>(Vocab(std::move(spec)), merges));
}

Tokenizer Tokenizer::from_gguf(const io::GGUFFile& file) {
    return from_spec(read_vocab_spec(file));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
    const Vocab& v = impl_->vocab;
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 2);
    if (add_special && v.add_bos) out.push_back(v.bos);
    const std::vector<Fragment> frags = split_special_tokens(v, text, parse_special);
    if (v.type == VocabType::SPM) {
        // SentencePiece adds its space prefix to the text and again after every special token.
        bool prev_special = true;
        for (const Fragment& f : frags) {
            if (f.token >= 0) {
                out.push_back(f.token);
                prev_special = true;
            } else {
                impl_->encode_spm(f.text, v.add_space_prefix && prev_special, out);
                prev_special = false;
            }
        }
    } else {
        Impl::WordCache cache;
        for (const Fragment& f : frags) {
            if (f.token >= 0)
                out.push_back(f.token);
            else
                impl_->encode_bpe(f.text, cache, out);
        }
    }
    if (add_special && v.add_eos) out.push_back(v.eos);
    return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
    const Vocab& v = impl_->vocab;
    std::string out;
    auto skipped = [&](int32_t id) {
        check_id(id);
        const TokenType t = v.token_type[id];
        return skip_special && (t == TokenType::CONTROL || t == TokenType::UNKNOWN);
    };
    if (v.type == VocabType::BPE) {
        for (int32_t id : ids)
            if (!skipped(id)) out += impl_->piece[id];
        return out;
    }
    // SentencePiece: text runs are joined before U+2581 becomes a space; the space encode() put
    // before the text is removed from the first run, also when it follows a leading BOS.
    std::string run;
    bool strip = v.add_space_prefix;
    auto flush = [&] {
        if (run.empty()) return;
        std::string text = Impl::unescape_spm(run);
        out.append(text, strip && text.front() == ' ' ? 1 : 0);
        strip = false;
        run.clear();
    };
    for (size_t i = 0; i < ids.size(); ++i) {
        const int32_t id = ids[i];
        if (skipped(id)) continue;
        if (v.is_special(id)) {
            flush();
            if (!(i == 0 && id == v.bos)) strip = false;
            out += v.text[id];
        } else {
            run += impl_->spm_raw[id];
        }
    }
    flush();
    return out;
}

void Tokenizer::check_id(int32_t id) const {
    SYSLM_CHECK(id >= 0 && id < n_vocab(), "token id ", id, " is outside the vocabulary of ",
                impl_->vocab.source, " (", n_vocab(), " tokens)");
}

const std::string& Tokenizer::token_to_piece(int32_t id) const {
    check_id(id);
    return impl_->piece[id];
}

const std::string& Tokenizer::token_text(int32_t id) const {
    check_id(id);
    return impl_->vocab.text[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
    check_id(id);
    return impl_->vocab.token_type[id];
}

int32_t Tokenizer::find_token(std::string_view text) const {
    return impl_->vocab.find(text);
}
VocabType Tokenizer::type() const {
    return impl_->vocab.type;
}
const std::string& Tokenizer::pre() const {
    return impl_->vocab.pre;
}
int32_t Tokenizer::n_vocab() const {
    return impl_->vocab.n_tokens();
}
int32_t Tokenizer::bos() const {
    return impl_->vocab.bos;
}
int32_t Tokenizer::eos() const {
    return impl_->vocab.eos;
}
int32_t Tokenizer::eot() const {
    return impl_->vocab.eot;
}
int32_t Tokenizer::unk() const {
    return impl_->vocab.unk;
}
int32_t Tokenizer::pad() const {
    return impl_->vocab.pad;
}
bool Tokenizer::add_bos() const {
    return impl_->vocab.add_bos;
}
bool Tokenizer::add_eos() const {
    return impl_->vocab.add_eos;
}
bool Tokenizer::add_space_prefix() const {
    return impl_->vocab.add_space_prefix;
}
const std::vector<int32_t>& Tokenizer::eog_ids() const {
    return impl_->vocab.eog;
}

bool Tokenizer::is_eog(int32_t id) const {
    const auto& e = impl_->vocab.eog;
    return std::binary_search(e.begin(), e.end(), id);
}

bool Tokenizer::is_control(int32_t id) const {
    return id >= 0 && id < n_vocab() && impl_->vocab.token_type[id] == TokenType::CONTROL;
}

}  // namespace syslm::tokenizer
