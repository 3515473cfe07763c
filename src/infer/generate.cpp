#include "infer/generate.hpp"

#include <chrono>

#include "core/error.hpp"

namespace syslm::infer {
namespace {

// Length of the sequence a UTF-8 lead byte starts (continuation or invalid bytes: 1, so invalid
// input is passed through rather than held forever).
size_t utf8_len(unsigned char c) {
    if (c >= 0xF0 && c < 0xF8) return 4;
    if (c >= 0xE0) return c < 0xF0 ? 3 : 1;
    if (c >= 0xC0) return 2;
    return 1;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string Utf8Stream::push(std::string_view bytes) {
    pending_.append(bytes);
    size_t i = 0, complete = 0;
    while (i < pending_.size()) {
        const size_t len = utf8_len(static_cast<unsigned char>(pending_[i]));
        if (i + len > pending_.size()) break;
        i += len;
        complete = i;
    }
    std::string out = pending_.substr(0, complete);
    pending_.erase(0, complete);
    return out;
}

std::string Utf8Stream::flush() { return std::exchange(pending_, {}); }

GenerateStats generate(model::Context& ctx, const tokenizer::Tokenizer& tok,
                       std::span<const int32_t> prompt, int n_predict, Sampler& sampler,
                       bool ignore_eos, const std::function<void(std::string_view)>& on_text) {
    SYSLM_CHECK(!prompt.empty(), "the prompt is empty (no tokens to start from)");
    GenerateStats st;
    st.n_prompt = static_cast<int>(prompt.size());
    for (int32_t t : prompt) sampler.accept(t);

    auto t0 = std::chrono::steady_clock::now();
    std::span<const float> logits = ctx.forward(prompt);
    st.prompt_seconds = seconds_since(t0);

    Utf8Stream stream;
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n_predict; ++i) {
        const int32_t next = sampler.sample(logits);
        sampler.accept(next);
        ++st.n_generated;
        if (!ignore_eos && tok.is_eog(next)) {
            st.stopped_at_eog = true;
            break;
        }
        if (std::string text = stream.push(tok.token_to_piece(next)); !text.empty()) on_text(text);
        if (i + 1 == n_predict || ctx.n_past() >= ctx.n_ctx()) break;
        const int32_t one[1] = {next};
        logits = ctx.forward(one);
    }
    if (std::string rest = stream.flush(); !rest.empty()) on_text(rest);
    st.generate_seconds = seconds_since(t0);
    return st;
}

}  // namespace syslm::infer
