#include "infer/stop_text.hpp"

#include <algorithm>

namespace syslm::infer {

std::string StopText::push(std::string_view piece, bool* stopped) {
    *stopped = false;
    if (stopped_) return {};
    text_ += stream_.push(std::string(piece));
    size_t cut = std::string::npos, hold = 0;
    for (const std::string& s : stop_) {
        if (s.empty()) continue;
        const size_t from = emitted_ >= s.size() ? emitted_ - s.size() + 1 : 0;
        cut = std::min(cut, text_.find(s, from));
        hold = std::max(hold, s.size() - 1);
    }
    if (cut != std::string::npos) {
        std::string out = text_.substr(emitted_, cut - std::min(cut, emitted_));
        text_.resize(std::max(cut, emitted_));
        emitted_ = text_.size();
        stopped_ = *stopped = true;
        return out;
    }
    size_t safe = text_.size() > hold ? text_.size() - hold : 0;
    safe = std::max(safe, emitted_);
    while (safe > emitted_ && safe < text_.size() &&
           (static_cast<unsigned char>(text_[safe]) & 0xC0) == 0x80)
        --safe;  // never split a character
    std::string out = text_.substr(emitted_, safe - emitted_);
    emitted_ = safe;
    return out;
}

std::string StopText::finish() {
    if (stopped_) return {};
    text_ += stream_.flush();
    std::string out = text_.substr(emitted_);
    emitted_ = text_.size();
    return out;
}

}  // namespace syslm::infer
