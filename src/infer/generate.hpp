// The text-generation loop shared by the CLI (and later the server): prefill the prompt, then
// sample and decode one token at a time, streaming UTF-8-complete text as it is produced.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "infer/sampler.hpp"
#include "model/transformer.hpp"
#include "tokenizer/tokenizer.hpp"

namespace syslm::infer {

struct GenerateStats {
    int n_prompt = 0;
    int n_generated = 0;
    double prompt_seconds = 0;
    double generate_seconds = 0;
    bool stopped_at_eog = false;
};

GenerateStats generate(model::Context& ctx, const tokenizer::Tokenizer& tok,
                       std::span<const int32_t> prompt, int n_predict, Sampler& sampler,
                       bool ignore_eos, const std::function<void(std::string_view)>& on_text);

}  // namespace syslm::infer
