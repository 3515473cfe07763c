// Generated pieces in, text safe to send out: whole UTF-8 characters only, nothing that could
// still become the start of a stop string, and nothing from the first stop string on (OpenAI's
// `stop`: the answer ends before it). Shared by the engine and the edge's generator.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/utf8.hpp"

namespace syslm::infer {

class StopText {
public:
    explicit StopText(std::vector<std::string> stop) : stop_(std::move(stop)) {}
    // The text to send after this token's piece. `*stopped`: a stop string appeared; the text
    // ends before it and the answer ends.
    std::string push(std::string_view piece, bool* stopped);
    // The answer ended otherwise (end of generation, length): what was held back.
    std::string finish();

private:
    std::vector<std::string> stop_;
    tokenizer::Utf8StreamBuffer stream_;
    std::string text_;    // generated text so far
    size_t emitted_ = 0;  // bytes of it sent
    bool stopped_ = false;
};

}  // namespace syslm::infer
