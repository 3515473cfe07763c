// syslm init: write a new random-initialised model with the tokenizer of an existing GGUF, or with
// a byte-fallback vocabulary of a given size.
#include <cstdio>

#include "cli/command.hpp"
#include "cli/structure_options.hpp"
#include "cli/vocab_file.hpp"
#include "core/error.hpp"
#include "model/random_init.hpp"

namespace syslm::cli {
namespace {

struct InitArgs {
    model::InitConfig cfg;
    std::string vocab, out, type = "f32";
    StructureOptions structure;
    int vocab_size = 0;
};

int run_init(InitArgs& a) {
    usage_check(!a.vocab.empty() || a.vocab_size > 0, "init: give --vocab FILE or --vocab-size N");
    apply_structure_options(a.structure, "init", a.cfg);
    const auto t = dtype_from_name(a.type);
    SYSLM_CHECK(t, "--type: unknown type '", a.type, "'");
    a.cfg.type = *t;
    std::string vocab = a.vocab;
    if (vocab.empty()) vocab = write_byte_fallback_vocab(a.vocab_size, a.out + ".vocab.gguf");
    struct Remove {
        std::string path;
        ~Remove() {
            if (!path.empty()) std::remove(path.c_str());
        }
    } remove_vocab{a.vocab.empty() ? vocab : ""};
    model::write_random_model(a.cfg, vocab, a.out);
    std::printf("wrote %s (%s, random init, seed %llu)\n", a.out.c_str(), a.cfg.arch.c_str(),
                static_cast<unsigned long long>(a.cfg.seed));
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto a = std::make_shared<InitArgs>();
    auto& c = a->cfg;
    auto* vocab = app.add_option("--vocab", a->vocab,
                                 "GGUF file whose tokenizer the model uses "
                                 "(e.g. a vocabulary-only file)")
                      ->check(CLI::ExistingFile);
    app.add_option("--vocab-size", a->vocab_size,
                   "Instead of --vocab: a byte-fallback vocabulary of N tokens (<unk>, <s>, </s>, "
                   "the 256 bytes, unused placeholders), for models trained on random or "
                   "pre-tokenized ids")
        ->check(CLI::Range(3, 1 << 30))
        ->excludes(vocab);
    app.add_option("-o,--out", a->out, "Output GGUF file")->required();
    app.add_option("--arch", c.arch,
                   "llama | qwen2 | qwen2moe | qwen3 | qwen3moe | gpt2 | bloom | mpt (ALiBi) | "
                   "phi3 | gemma2 | gemma3")
        ->capture_default_str();
    app.add_option("--layers", c.n_layer, "Transformer blocks")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--dim", c.n_embd, "Embedding width")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--heads", c.n_head, "Attention heads")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--kv-heads", c.n_head_kv, "Key/value heads (GQA); 0 = heads")
        ->capture_default_str();
    app.add_option("--ff", c.n_ff, "FFN width; 0 = 4*dim (gpt2) or ~8/3*dim (SwiGLU)")
        ->capture_default_str();
    app.add_option("--ctx", c.n_ctx, "Trained context length")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    add_structure_options(app, a->structure);
    app.add_option("--experts", c.n_expert, "Routed experts (MoE); 0 = dense")
        ->capture_default_str();
    app.add_option("--experts-used", c.n_expert_used, "Experts per token (top-p: the most)")
        ->capture_default_str();
    app.add_option("--expert-top-p", c.expert_top_p,
                   "Top-p routing: experts until their probabilities sum to P (0: top-k)")
        ->check(CLI::Range(0.0f, 1.0f));
    app.add_option("--experts-used-min", c.n_expert_used_min, "Top-p: the fewest experts")
        ->capture_default_str();
    app.add_option("--seed", c.seed, "Random seed")->capture_default_str();
    app.add_option("--type", a->type, "Matrix type: f32 | f16 | bf16")->capture_default_str();
    app.add_option("--name", c.name, "general.name")->capture_default_str();
    return [a] { return run_init(*a); };
}

}  // namespace

SYSLM_COMMAND(init, "init",
              "Create a random-initialised model (tokenizer taken from a GGUF, or a byte-fallback "
              "vocabulary of a given size)",
              setup);

}  // namespace syslm::cli
