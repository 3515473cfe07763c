#include "infer/generate.hpp"

#include <chrono>

#include "core/error.hpp"
#include "tokenizer/utf8.hpp"

namespace syslm::infer {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

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

    // One token may hold part of a character (byte fallback, byte-level BPE): hold it back.
    tokenizer::Utf8StreamBuffer stream;
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
