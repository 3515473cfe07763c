#include "cli/structure_options.hpp"

#include <cctype>
#include <tuple>

#include "cli/command.hpp"

namespace syslm::cli {

void add_structure_options(CLI::App& app, StructureOptions& s, const std::string& prefix) {
    // "From scratch: local ...", or "Local ..." alone.
    auto says = [&](std::string text) {
        if (prefix.empty()) text[0] = static_cast<char>(std::toupper(text[0]));
        return prefix + text;
    };
    app.add_option("--window", s.window,
                   says("local attention over the last N positions (every layer, or the local "
                        "ones of --attn-pattern); 0 = global"))
        ->check(CLI::NonNegativeNumber);
    app.add_option("--attn-pattern", s.attn_pattern,
                   says("LOCAL:GLOBAL, e.g. 5:1 = five layers with --window, then one with "
                        "global attention, repeated"));
    app.add_option("--global-tokens", s.global_tokens,
                   says("the first N positions stay visible to every local layer (with "
                        "--window)"))
        ->check(CLI::NonNegativeNumber);
    app.add_option("--random-blocks", s.random_blocks,
                   says("R[:B], BigBird: each block of B positions (default 64) of a local "
                        "layer's queries also sees R key blocks drawn at random from before its "
                        "window (with --window)"));
    app.add_option("--linear-attn", s.linear_attn,
                   says("LINEAR:SOFTMAX, e.g. 5:1 = five layers of linear attention (elu + 1 "
                        "feature map, prefix sums: O(T)), then one of softmax attention, "
                        "repeated; 1:0 = every layer linear"));
    app.add_option("--share-blocks", s.share_blocks,
                   says("U[:cycle|sequence], the layers share U blocks of weights (ALBERT): "
                        "layer i takes block i % U (cycle) or runs of layers one block "
                        "(sequence); a shared block's gradient sums over its layers"));
    app.add_option("--conv", s.conv_kernel,
                   says("a causal depthwise convolution of K taps over the attention norm's "
                        "output before every attention (conv + attention hybrid); 0 = none"))
        ->check(CLI::Range(0, 64));
    app.add_flag("--swish-beta", s.swish_beta,
                 says("SwiGLU's gate with a learned Swish beta per channel (x sigmoid(beta x), "
                      "starting at SwiGLU's beta = 1)"));
}

void apply_structure_options(const StructureOptions& s, const std::string& command,
                             model::InitConfig& c) {
    usage_check(s.attn_pattern.empty() || s.window > 0, command, ": --attn-pattern needs --window");
    usage_check(s.global_tokens == 0 || s.window > 0, command, ": --global-tokens needs --window");
    usage_check(s.random_blocks.empty() || s.window > 0, command,
                ": --random-blocks needs --window");
    if (!s.random_blocks.empty())
        std::tie(c.random_blocks, c.random_block_size) = option_value(
            "--random-blocks", [&] { return model::random_blocks_spec(s.random_blocks); });
    c.window = s.window;
    c.global_tokens = s.global_tokens;
    c.conv_kernel = s.conv_kernel;
    c.swish_beta = s.swish_beta;
    const int L = c.n_layer;
    if (!s.attn_pattern.empty())
        c.local_layers = option_value("--attn-pattern",
                                      [&] { return model::attention_pattern(s.attn_pattern, L); });
    if (!s.linear_attn.empty())
        c.linear_layers = option_value("--linear-attn",
                                       [&] { return model::attention_pattern(s.linear_attn, L); });
    if (!s.share_blocks.empty())
        c.block_source =
            option_value("--share-blocks", [&] { return model::shared_blocks(s.share_blocks, L); });
}

}  // namespace syslm::cli
