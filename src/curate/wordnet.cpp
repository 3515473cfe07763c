#include "curate/wordnet.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "core/mapped_file.hpp"

namespace syslm::curate {

namespace {

struct Sense {
    int pos = -1;  // index into kPos
    long tagged = -1, senses = 0;
    long offset = 0;  // of the first synset in data.<pos>
};

constexpr const char* kPos[] = {"noun", "verb", "adj", "adv"};

// index line: lemma pos synset_cnt p_cnt [ptr_symbol x p_cnt] sense_cnt tagsense_cnt offsets...
bool parse_index_line(const std::string& line, std::string& lemma, Sense& s) {
    std::istringstream in(line);
    std::string pos, ptr;
    long synsets = 0, pointers = 0;
    if (!(in >> lemma >> pos >> synsets >> pointers)) return false;
    for (long i = 0; i < pointers; ++i) in >> ptr;
    return static_cast<bool>(in >> s.senses >> s.tagged >> s.offset);
}

// data line at `offset`: offset lex_filenum ss_type w_cnt(hex) [word lex_id(hex)] x w_cnt ...
std::vector<std::string> synset_words(const std::string& data, long offset,
                                      const std::string& where) {
    SYSLM_CHECK(offset >= 0 && static_cast<size_t>(offset) < data.size(), where, ": synset offset ",
                offset, " is past the end");
    const size_t end = data.find('\n', static_cast<size_t>(offset));
    std::istringstream in(data.substr(static_cast<size_t>(offset), end - offset));
    long off = 0;
    std::string lex, type, count;
    SYSLM_CHECK(in >> off >> lex >> type >> count && off == offset, where, ": no synset at offset ",
                offset);
    const long n = std::strtol(count.c_str(), nullptr, 16);
    std::vector<std::string> words;
    for (long i = 0; i < n; ++i) {
        std::string w, lex_id;
        SYSLM_CHECK(in >> w >> lex_id, where, ": synset ", offset, " ends early");
        if (const size_t p = w.find('('); p != std::string::npos) w.resize(p);  // adj. marker
        std::replace(w.begin(), w.end(), '_', ' ');
        words.push_back(std::move(w));
    }
    return words;
}

bool same_word(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) ==
                      std::tolower(static_cast<unsigned char>(y));
           });
}

}  // namespace

WordNet::WordNet(const std::string& dir) {
    std::unordered_map<std::string, Sense> best;
    for (int p = 0; p < 4; ++p) {
        const std::string path = dir + "/index." + kPos[p];
        std::ifstream in(path);
        SYSLM_CHECK(in, path, ": cannot read (WordNet's database: apt-get install wordnet-base)");
        std::string line, lemma;
        long n = 0;
        while (std::getline(in, line)) {
            if (line.empty() || line[0] == ' ') continue;  // the licence header
            Sense s;
            SYSLM_CHECK(parse_index_line(line, lemma, s), path, ": malformed line ", n + 1);
            s.pos = p;
            Sense& b = best[lemma];
            if (s.tagged > b.tagged || (s.tagged == b.tagged && s.senses > b.senses)) b = s;
            ++n;
        }
        SYSLM_CHECK(n > 0, path, ": no lemmas");
    }
    std::string data[4];
    for (int p = 0; p < 4; ++p) data[p] = read_whole_file(dir + "/data." + kPos[p]);
    for (const auto& [lemma, s] : best) {
        std::string word = lemma;
        std::replace(word.begin(), word.end(), '_', ' ');
        Synset syn;
        for (std::string& w : synset_words(data[s.pos], s.offset, dir + "/data." + kPos[s.pos])) {
            if (same_word(w, word))
                syn.spelled = w;
            else if (std::find(syn.others.begin(), syn.others.end(), w) == syn.others.end())
                syn.others.push_back(std::move(w));
        }
        if (!syn.others.empty()) synonyms_.emplace(lemma, std::move(syn));
    }
}

const WordNet::Synset* WordNet::synonyms(std::string_view lemma) const {
    const auto it = synonyms_.find(std::string(lemma));
    return it == synonyms_.end() ? nullptr : &it->second;
}

}  // namespace syslm::curate
