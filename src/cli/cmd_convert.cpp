// syslm convert: a Hugging Face model folder (config.json, *.safetensors, tokenizer.json) -> GGUF
// with llama.cpp's metadata keys and tensor names, so the file also loads in llama.cpp.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.hpp"
#include "core/error.hpp"
#include "io/hf_convert.hpp"
#include "io/hf_lora_convert.hpp"
#include "model/shared_blocks.hpp"

namespace syslm::cli {
namespace {

struct ConvertArgs {
    std::string hf_dir;
    std::string lora_hf;  // a PEFT adapter folder (with --hf: its base)
    std::string unshare;  // a GGUF whose layers share blocks
    std::string output;
    std::string outtype = "f32";
    std::string pre;
    std::string name;
    bool vocab_only = false;
    bool verbose = false;
};

DType out_type(const std::string& name) {
    std::string t = name;
    std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
    if (t == "f32") return DType::F32;
    if (t == "f16") return DType::F16;
    if (t == "bf16") return DType::BF16;
    fail("--outtype ", name, ": expected f32, f16 or bf16");
}

int run_convert(const ConvertArgs& a) {
    usage_check(a.hf_dir.empty() != a.unshare.empty(), "convert: give --hf DIR or --unshare FILE");
    if (!a.unshare.empty()) {
        model::unshare_blocks(io::GGUFFile(a.unshare), a.output);
        std::printf("%s: %s with every layer's own block\n", a.output.c_str(), a.unshare.c_str());
        return 0;
    }
    if (!a.lora_hf.empty()) {
        const io::HFLoraConvertResult r =
            io::convert_hf_lora({a.lora_hf, a.hf_dir, a.output, out_type(a.outtype)});
        std::printf("%s: LoRA adapter for %s, rank %d, alpha %g, %zu matrices\n", a.output.c_str(),
                    r.arch.c_str(), r.rank, static_cast<double>(r.alpha), r.n_pairs);
        return 0;
    }
    io::HFConvertOptions opt;
    opt.model_dir = a.hf_dir;
    opt.output = a.output;
    opt.out_type = out_type(a.outtype);
    opt.pre = a.pre;
    opt.name = a.name;
    opt.vocab_only = a.vocab_only;
    if (a.verbose)
        opt.log = [](const std::string& line) { std::fprintf(stderr, "  %s\n", line.c_str()); };
    const io::HFConvertResult r = io::convert_hf_model(opt);
    std::printf("%s: %s -> %s, %zu tensors, %llu parameters, tokenizer %s (pre %s, %zu tokens)\n",
                a.output.c_str(), r.hf_arch.c_str(), r.arch.c_str(), r.n_tensors,
                static_cast<unsigned long long>(r.n_params), r.tokenizer_model.c_str(),
                r.tokenizer_pre.c_str(), r.n_tokens);
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto a = std::make_shared<ConvertArgs>();
    app.footer(
        "Reads config.json, the safetensors weights (model.safetensors, or the shards listed in "
        "model.safetensors.index.json; F32, F16 or BF16) and tokenizer.json (+ "
        "tokenizer_config.json, chat_template.jinja) and writes one GGUF v3 file the way "
        "llama.cpp's convert_hf_to_gguf.py does: the same general.*, <arch>.* and tokenizer.* "
        "keys, tensor names (token_embd, blk.N.attn_q, ffn_gate_exps, output, ...) and layouts.\n"
        "Architectures: LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM -> llama "
        "(Q/K rows permuted for llama.cpp's interleaved RoPE; RoPE scaling linear, yarn, or llama3 "
        "as the rope_freqs tensor; experts merged into ffn_*_exps); Qwen2ForCausalLM -> qwen2; "
        "Qwen2MoeForCausalLM -> qwen2moe (shared expert and its gate); Qwen3ForCausalLM -> qwen3 "
        "(q/k norms); Qwen3MoeForCausalLM -> qwen3moe; GPT2LMHeadModel -> gpt2 "
        "(Conv1D weights transposed, output = wte when lm_head is tied).\n"
        "Mistral/Mixtral's sliding_window is written as llama.attention.sliding_window: syslm "
        "honours it, llama.cpp ignores that key (its llama arch attends to the full context).\n"
        "Tokenizers: byte-level BPE -> tokenizer.ggml.model gpt2, with tokenizer.ggml.pre "
        "identified from the pre-tokenizer's regexes (gpt-2, llama-bpe, dbrx, qwen2, smollm, "
        "falcon, deepseek-llm, deepseek-coder; --pre names another); SentencePiece-style BPE with "
        "byte fallback, or Unigram -> llama with scores (BPE merge rank r scores -r).\n"
        "Tensors of 2+ dimensions are written as --outtype; 1-D tensors, norms, biases, the MoE "
        "router and position embeddings stay F32, as in llama.cpp. The output is written to a "
        "temporary file and renamed into place, so a failed run leaves no partial file. Any "
        "unsupported architecture, missing, unexpected or mis-shaped tensor, or corrupt "
        "safetensors file is one error naming the file and tensor, and exit code 1.");
    auto* hf = app.add_option("--hf", a->hf_dir, "Hugging Face model folder")
                   ->check(CLI::ExistingDirectory);
    app.add_option("--lora-hf", a->lora_hf,
                   "With --hf BASE: a PEFT LoRA adapter folder (adapter_config.json, "
                   "adapter_model.safetensors) -> llama.cpp's adapter GGUF for that base")
        ->check(CLI::ExistingDirectory)
        ->needs(hf);
    app.add_option("--unshare", a->unshare,
                   "Instead of --hf: a GGUF whose layers share blocks (--share-blocks) -> the same "
                   "model with each layer's own copy, which llama.cpp loads")
        ->check(CLI::ExistingFile)
        ->excludes(hf);
    app.add_option("-o,--output", a->output, "Output .gguf file")->required();
    app.add_option("--outtype", a->outtype, "Type of 2-D+ weights: f32 (default), f16 or bf16");
    app.add_option("--pre", a->pre,
                   "tokenizer.ggml.pre for a byte-level BPE tokenizer whose pre-tokenizer is not "
                   "recognised (a llama.cpp name, e.g. gpt-2, llama-bpe, qwen2)");
    app.add_option("--name", a->name, "general.name (default: the folder's name)");
    app.add_flag("--vocab-only", a->vocab_only, "Write metadata and tokenizer only, no tensors");
    app.add_flag("-v,--verbose", a->verbose, "List each tensor written (name, type, GGML shape)");
    return [a] { return run_convert(*a); };
}

}  // namespace

SYSLM_COMMAND(convert, "convert",
              "Convert a Hugging Face model (safetensors) to GGUF, or unshare a GGUF's shared "
              "blocks",
              setup);

}  // namespace syslm::cli
