#include "tokenizer/special_split.hpp"

#include <algorithm>

namespace syslm::tokenizer {
namespace {

bool ascii_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// Special tokens whose text occurs somewhere in `text`, in vocab.special_tokens order (longest
// first, then by id). Only these can split anything, and real text rarely holds any, so the
// ordered passes below stay cheap even for vocabularies with thousands of added tokens.
std::vector<int32_t> tokens_present(const Vocab& vocab, std::string_view text, bool parse_special) {
    std::vector<int32_t> found;
    for (size_t pos = 0; pos < text.size(); ++pos) {
        for (int32_t id : vocab.special_by_first_byte[static_cast<uint8_t>(text[pos])]) {
            const TokenType t = vocab.token_type[id];
            if (!parse_special && (t == TokenType::CONTROL || t == TokenType::UNKNOWN)) continue;
            if (text.substr(pos).starts_with(vocab.text[id])) found.push_back(id);
        }
    }
    std::sort(found.begin(), found.end(), [&](int32_t a, int32_t b) {
        const size_t la = vocab.text[a].size(), lb = vocab.text[b].size();
        return la != lb ? la > lb : a < b;
    });
    found.erase(std::unique(found.begin(), found.end()), found.end());
    return found;
}

}  // namespace

std::vector<Fragment> split_special_tokens(const Vocab& vocab, std::string_view text,
                                           bool parse_special) {
    std::vector<Fragment> frags;
    if (text.empty()) return frags;
    frags.push_back({-1, text});
    std::vector<Fragment> next;
    for (int32_t id : tokens_present(vocab, text, parse_special)) {
        const std::string& tok = vocab.text[id];
        next.clear();
        for (const Fragment& f : frags) {
            if (f.token >= 0) {
                next.push_back(f);
                continue;
            }
            std::string_view rest = f.text;
            while (!rest.empty()) {
                const size_t at = rest.find(tok);
                if (at == std::string_view::npos) break;
                std::string_view left = rest.substr(0, at);
                if (vocab.lstrip[id])
                    while (!left.empty() && ascii_space(left.back())) left.remove_suffix(1);
                if (!left.empty()) next.push_back({-1, left});
                next.push_back({id, {}});
                rest = rest.substr(at + tok.size());
                if (vocab.rstrip[id])
                    while (!rest.empty() && ascii_space(rest.front())) rest.remove_prefix(1);
            }
            if (!rest.empty()) next.push_back({-1, rest});
        }
        frags.swap(next);
    }
    return frags;
}

}  // namespace syslm::tokenizer
