#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pre_tokenizer.hpp"

#include <pcre2.h>

#include <algorithm>

#include "core/error.hpp"
#include "tokenizer/utf8.hpp"

namespace syslm::tokenizer {
namespace {

// The regex families of llama.cpp (llama-vocab.cpp, llm_tokenizer_bpe), written for PCRE2. Where
// llama.cpp rewrote a tokenizer.json regex only because std::regex lacks a feature (case-folding
// groups, \p{Lu}...), the original tokenizer.json form is used: PCRE2 supports it, and it is what
// the model was trained with. Non-ASCII characters are written as \x{...} escapes: an editor's
// Unicode normalisation once turned U+1F7D into U+03CE here and broke a range.
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kPoro =
    R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)";
// Latin, Greek, Cyrillic, Armenian, Georgian, Cherokee... letters of DeepSeek-LLM's tokenizer.json.
constexpr const char* kDeepSeekLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF})"
    R"(\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F})"
    R"(\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481})"
    R"(\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD})"
    R"(\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77})"
    R"(\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45})"
    R"(\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D})"
    R"(\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})"
    R"(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4})"
    R"(\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124})"
    R"(\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F})"
    R"(\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})"
    R"(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06})"
    R"(\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F})"
    R"(\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
    R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
constexpr const char* kCjkHangul = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

std::vector<PreTokenizerConfig> make_configs() {
    std::vector<PreTokenizerConfig> c;
    auto add = [&](std::string name, std::vector<std::string> regexes) -> PreTokenizerConfig& {
        c.push_back({std::move(name), std::move(regexes)});
        return c.back();
    };
    // llama.cpp's fallback for BPE vocabularies without a known family.
    add("default", {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"});
    auto& llama3 = add("llama3", {kLlama3});
    llama3.ignore_merges = true;
    llama3.add_bos = true;
    add("dbrx", {kLlama3});
    add("smaug-bpe", {kLlama3});
    add("deepseek-llm",
        {"[\r\n]", kDeepSeekLetters,
         R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)",
         R"(\s+$)", kCjkHangul, R"(\p{N}+)"});
    add("deepseek-v3",
        {R"(\p{N}{1,3})", R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
         R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"});
    add("deepseek-coder", {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjkHangul, R"(\p{N})"});
    add("falcon", {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"});
    // StarCoder and the families that copied its tokenizer: digits split one by one, then GPT-2.
    for (const char* name :
         {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"})
        add(name, {R"(\p{N})", kGpt2});
    // GPT-2's regex, also used by GPT-NeoX-style tokenizers (MPT, OLMo, Pythia...).
    for (const char* name :
         {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es",
          "jina-v2-de", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais"})
        add(name, {kGpt2});
    for (const char* name : {"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"})
        add(name, {kQwen2});
    for (const char* name : {"poro-chat", "bloom", "gpt3-finnish"}) add(name, {kPoro});
    add("chatglm-bpe", {kLlama3}).no_bos = true;
    add("viking", {kPoro, R"(\p{N})"});
    auto& tekken = add(
        "tekken",
        {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"});
    tekken.ignore_merges = true;
    tekken.add_bos = true;
    add("chameleon", {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
                      "([\\t\\n]|    |  )", R"(\p{N})", R"([\p{P}!-/:-@\[-`{-~])", kGpt2})
        .add_bos = true;
    return c;
}

const std::vector<PreTokenizerConfig>& configs() {
    static const std::vector<PreTokenizerConfig> c = make_configs();
    return c;
}

struct Alias {
    const char* alias;
    const char* name;
};
constexpr Alias kAliases[] = {
    {"llama-v3", "llama3"}, {"llama-bpe", "llama3"}, {"falcon3", "llama3"}};

constexpr const char* kWhiteSpace = R"(\t\n\x0B\f\r\x{85}\p{Z})";

}  // namespace

const PreTokenizerConfig* find_pre_tokenizer(std::string_view pre) {
    for (const auto& a : kAliases)
        if (pre == a.alias) pre = a.name;
    for (const auto& c : configs())
        if (c.name == pre) return &c;
    return nullptr;
}

std::vector<std::string> known_pre_tokenizer_names() {
    std::vector<std::string> names;
    for (const auto& c : configs()) names.push_back(c.name);
    for (const auto& a : kAliases) names.push_back(a.alias);
    std::sort(names.begin(), names.end());
    return names;
}

std::string rewrite_whitespace_classes(std::string_view re) {
    std::string out;
    bool in_class = false;
    for (size_t i = 0; i < re.size(); ++i) {
        const char c = re[i];
        if (c == '\\' && i + 1 < re.size()) {
            const char e = re[i + 1];
            ++i;
            if (e == 's') {
                out += in_class ? std::string(kWhiteSpace) : cat('[', kWhiteSpace, ']');
            } else if (e == 'S') {
                SYSLM_CHECK(!in_class, "pre-tokenizer regex '", re,
                            "': \\S inside a character class is not supported");
                out += cat("[^", kWhiteSpace, ']');
            } else {
                out += c;
                out += e;
            }
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
            out += c;
            // A ']' right after '[' or '[^' is a literal member, not the end of the class.
            if (i + 1 < re.size() && re[i + 1] == '^') out += re[++i];
            if (i + 1 < re.size() && re[i + 1] == ']') out += re[++i];
            continue;
        }
        if (c == ']' && in_class) in_class = false;
        out += c;
    }
    return out;
}

struct PreTokenizer::Compiled {
    pcre2_code* code = nullptr;
    ~Compiled() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(std::vector<std::string> regexes) : regexes_(std::move(regexes)) {
    for (const auto& re : regexes_) {
        const std::string pattern = rewrite_whitespace_classes(re);
        int err = 0;
        PCRE2_SIZE err_off = 0;
        auto compiled = std::make_unique<Compiled>();
        compiled->code =
            pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY,
                          &err, &err_off, nullptr);
        if (!compiled->code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            fail("pre-tokenizer regex '", re, "': ", reinterpret_cast<const char*>(msg),
                 " at offset ", err_off);
        }
        // JIT is only a speed-up: the interpreter gives the same matches when it is unavailable.
        pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);
        compiled_.push_back(std::move(compiled));
    }
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

namespace {

// Per-call PCRE2 state, so that one PreTokenizer can be used from several threads.
struct MatchScratch {
    pcre2_match_data* data = nullptr;
    pcre2_jit_stack* jit_stack = nullptr;
    pcre2_match_context* context = nullptr;
    MatchScratch() {
        data = pcre2_match_data_create(4, nullptr);
        context = pcre2_match_context_create(nullptr);
        // Long whitespace runs backtrack deeply; the default 32 KiB JIT stack is too small.
        jit_stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
        if (jit_stack) pcre2_jit_stack_assign(context, nullptr, jit_stack);
        SYSLM_CHECK(data && context, "pre-tokenizer: out of memory for PCRE2 match data");
    }
    ~MatchScratch() {
        pcre2_match_data_free(data);
        pcre2_match_context_free(context);
        pcre2_jit_stack_free(jit_stack);
    }
    MatchScratch(const MatchScratch&) = delete;
    MatchScratch& operator=(const MatchScratch&) = delete;
};

// Splits one piece with one regex: matches and the gaps between them, in order.
void split_piece(pcre2_code* code, const std::string& regex, std::string_view piece,
                 MatchScratch& scratch, std::vector<std::string_view>& out) {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
    size_t start = 0, last = 0;
    while (start < piece.size()) {
        int rc = pcre2_match(code, subject, piece.size(), start, 0, scratch.data, scratch.context);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter keeps its frames on the heap
            rc = pcre2_match(code, subject, piece.size(), start, PCRE2_NO_JIT, scratch.data,
                             scratch.context);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            fail("pre-tokenizer regex '", regex,
                 "' failed to match: ", reinterpret_cast<const char*>(msg));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.data);
        const size_t ms = ov[0], me = ov[1];
        if (me == ms) {  // an empty match splits nothing; move on by one character
            uint32_t cp;
            const size_t n = utf8_decode(piece, ms, cp);
            start = ms + (n ? n : 1);
            continue;
        }
        if (ms > last) out.push_back(piece.substr(last, ms - last));
        out.push_back(piece.substr(ms, me - ms));
        last = start = me;
    }
    if (last < piece.size()) out.push_back(piece.substr(last));
}

}  // namespace

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
    if (text.empty()) return;
    std::vector<std::string_view> pieces{text}, next;
    MatchScratch scratch;
    for (size_t r = 0; r < compiled_.size(); ++r) {
        next.clear();
        for (std::string_view piece : pieces)
            split_piece(compiled_[r]->code, regexes_[r], piece, scratch, next);
        pieces.swap(next);
    }
    out.insert(out.end(), pieces.begin(), pieces.end());
}

}  // namespace syslm::tokenizer
