"""Small random-initialised Hugging Face models, one builder per architecture variant.

Each builder trains a small tokenizer with HF `tokenizers` on a fixed corpus (byte-level BPE for
gpt2/qwen2/qwen2moe, SentencePiece-style BPE with byte fallback for llama/mistral/mixtral), makes
a float32 model with awkward sizes (hidden 72, 6 heads, 2 KV heads, intermediate 104, a few
hundred tokens), fills every parameter with seeded random values (norm weights and biases too, so
none is 1 or 0), and saves model + tokenizer with save_pretrained. Everything is deterministic:
the same call gives the same files.

    from tiny_hf_models import VARIANTS, build
    path = build("llama", tmp_dir)          # -> tmp_dir / "llama"
    model = load(path)                      # eager attention, float32, eval mode

Variants: llama (GQA), llama_linear_rope, llama_llama3_rope, llama_tied, mistral_swa
(sliding_window 7), mixtral (4 experts, top-2), qwen2 (QKV bias, padded vocab, chat template),
qwen2moe (4 experts top-2 + shared expert), qwen3 (q/k norms, head_dim 16), qwen3_local_global (window 5 on
layers 0 and 1, layer 2 global), qwen3moe (the same
with 4 experts top-2, renormalised), gpt2, bloom, mpt, phi3, phi3_long and phi3_long_train (fused QKV and gate-up, LongRoPE's short and long
factors), gemma2 (soft-capping, 1:1 local/global), gemma3
(local/global with two RoPE bases, post-norms, GeGLU).
"""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (AutoModelForCausalLM, BloomConfig, BloomForCausalLM, Gemma2Config,
                          Gemma2ForCausalLM, Gemma3Config, Gemma3ForCausalLM,
                          Gemma3ForConditionalGeneration, Gemma3TextConfig, GPT2Config,
                          Phi3Config, Phi3ForCausalLM,
                          MptConfig, MptForCausalLM, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM, MistralConfig, MistralForCausalLM, MixtralConfig,
                          MixtralForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM,
                          Qwen2MoeConfig, Qwen2MoeForCausalLM, Qwen3Config, Qwen3ForCausalLM,
                          Qwen3MoeConfig, Qwen3MoeForCausalLM)

SEED = 1234

# Common sizes: nothing is a power of two, head_dim 12, GQA 3:1.
HIDDEN, HEADS, KV_HEADS, LAYERS, FFN = 72, 6, 2, 3, 104

# Qwen2's pre-tokenizer regex, as its tokenizer.json spells it.
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

CHAT_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
                 "{{ message['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

_PROSE = """\
The river ran low that autumn, and the ferryman said it had not been so quiet in thirty years.
Children walked across the stones where the water used to be deep; their mothers called them back.
In the town, the baker's oven burned from four in the morning until noon, and the smell of bread
reached the mill at the edge of the fields. Nobody counted the loaves: 240 on a good day, 180 on a
bad one, and 12 extra for the school on Fridays. "We've always done it this way," said the baker,
"and we'll keep doing it until the river comes back." The mayor wrote letters to the capital,
three a week, asking for engineers; the answers, when they came, were polite and useless.
A visiting teacher from Lyon taught the older pupils a little French: café, naïve, déjà vu, façade.
Some words came from further away: 東京, 北京, Москва, Αθήνα, and numbers like 3.14159 and 2,718.
At the market, prices were chalked on boards: apples 1.20, pears 0.95, cheese 7.50 per kilo.
Old Mr. O'Neill, who had sailed on ships for forty-two years, said the sea was the same as the
river, only larger and less forgiving; he'd seen storms that lasted six days and nights.
When the rain finally returned in November, it fell for a week without stopping, and the river
rose over the stones, and the children stood on the bank and watched it, and nobody said a word.
"""

_WORDS = ("the of and to in is was for on that with as it by at from this be are or an have not "
          "river water town bread mill field school market price boat ship sea rain storm wind "
          "morning evening night day week year people children teacher baker mayor letter "
          "quick brown fox jumps over lazy dog running walked talking quietly slowly suddenly "
          "tokenizer model weight layer attention matrix vector gradient engine kernel").split()


def corpus() -> list[str]:
    """The fixed training text: prose plus seeded sentences with digits, punctuation, spaces."""
    rng = random.Random(SEED)
    lines = _PROSE.splitlines()
    for _ in range(400):
        n = rng.randint(3, 14)
        words = [rng.choice(_WORDS) for _ in range(n)]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 99999)))
        sep = "  " if rng.random() < 0.1 else " "
        s = sep.join(words)
        s = s[0].upper() + s[1:] + rng.choice([".", "!", "?", ",", ";", "...", ":"])
        lines.append(s)
    return lines


# Texts the converter tests tokenize with both HF and syslm: unseen words, unicode outside the
# training alphabet (byte fallback), digits, runs of spaces and newlines.
TEST_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world! It's 2024, isn't it? We'll see...",
    "  leading spaces, double  spaces and trailing  ",
    "numbers 123456789 and 3.14159, 1,000,000",
    "line one\nline two\n\n  indented\ttab",
    "unicode: café naïve 東京 Москва Ωmega 🙂 ß",
    "unseen: xylophone zebra quixotic jazz",
]


def _byte_level_tokenizer(pre: str, vocab_size: int, specials: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    if pre == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif pre == "qwen2":
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(tokenizers_regex(QWEN2_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        raise ValueError(pre)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    return tok


def tokenizers_regex(r: str):
    from tokenizers import Regex
    return Regex(r)


def _spm_tokenizer(vocab_size: int) -> Tokenizer:
    """SentencePiece-style BPE like Llama's tokenizer.json: <unk> <s> </s>, then the 256 byte
    tokens <0x00>..<0xFF>, then the learned pieces; '▁' marks spaces; characters outside the
    learned alphabet fall back to bytes."""
    specials = ["<unk>", "<s>", "</s>"]
    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>"))
    trainer_tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    # Split on '▁' while training so pieces never span words (SentencePiece's own behaviour).
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never",
                                                         split=True)
    # Training on Latin-1 text only leaves the CJK, Cyrillic and Greek of the corpus and tests to
    # byte fallback. (limit_alphabet would do the same, but picks among equally frequent
    # characters in hash order, which makes the vocabulary differ from run to run.)
    latin1 = ["".join(c for c in line if ord(c) < 256) for line in corpus()]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - 256, special_tokens=specials,
                                  show_progress=False)
    trainer_tok.train_from_iterator(latin1, trainer)
    learned = json.loads(trainer_tok.to_str())["model"]
    pieces = sorted(learned["vocab"].items(), key=lambda kv: kv[1])
    vocab = {s: i for i, s in enumerate(specials)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece, _ in pieces:
        if piece not in vocab:
            vocab[piece] = len(vocab)
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in learned["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True,
                               fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens(specials)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    return tok


def _save_tokenizer(tok: Tokenizer, out: Path, **special) -> PreTrainedTokenizerFast:
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, **special)
    hf.save_pretrained(out)
    return hf


def _randomise(model: torch.nn.Module, seed: int) -> None:
    """Seeded values for every parameter: weights N(0, 0.1), biases N(0, 0.05), norm weights
    U(0.6, 1.4); tied parameters are filled once."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in name or "ln_" in name) and name.endswith("weight"):
                p.copy_(0.6 + 0.8 * torch.rand(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))


def _finish(model, out: Path, seed: int) -> Path:
    _randomise(model, seed)
    model.eval()
    model.save_pretrained(out)
    return out


def _llama_family(out: Path, cls, config_cls, seed: int, **cfg) -> Path:
    tok = _spm_tokenizer(vocab_size=560)
    hf_tok = _save_tokenizer(tok, out, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    base = dict(vocab_size=len(hf_tok), hidden_size=HIDDEN, intermediate_size=FFN,
                num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=10000.0,
                bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    base.update(cfg)
    config = config_cls(**base)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return _finish(cls(config), out, seed)


def llama(out: Path) -> Path:
    return _llama_family(out, LlamaForCausalLM, LlamaConfig, 11)


def llama_linear_rope(out: Path) -> Path:
    return _llama_family(out, LlamaForCausalLM, LlamaConfig, 12,
                         rope_scaling={"rope_type": "linear", "factor": 2.5})


def llama_llama3_rope(out: Path) -> Path:
    # original context 64 with head_dim 12: the 6 pairs span all three llama3 regimes.
    return _llama_family(out, LlamaForCausalLM, LlamaConfig, 13, rope_theta=500000.0,
                         rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 64})


def llama_yarn_rope(out: Path) -> Path:
    # YaRN with a short original context so the ramp between beta_fast and beta_slow falls
    # inside the 6 rotated pairs.
    return _llama_family(out, LlamaForCausalLM, LlamaConfig, 17, rope_theta=10000.0,
                         rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                       "original_max_position_embeddings": 64})


def llama_tied(out: Path) -> Path:
    return _llama_family(out, LlamaForCausalLM, LlamaConfig, 14, tie_word_embeddings=True,
                         num_key_value_heads=HEADS)


def mistral_swa(out: Path) -> Path:
    return _llama_family(out, MistralForCausalLM, MistralConfig, 15, sliding_window=7)


def mixtral(out: Path) -> Path:
    return _llama_family(out, MixtralForCausalLM, MixtralConfig, 16, num_local_experts=4,
                         num_experts_per_tok=2, num_hidden_layers=2)


def _qwen_tokenizer(out: Path, pad: int) -> int:
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = _byte_level_tokenizer("qwen2", vocab_size=480, specials=specials)
    hf = _save_tokenizer(tok, out, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False))
    return len(hf) + pad  # Qwen pads the embedding beyond the tokenizer


def qwen2(out: Path) -> Path:
    n_vocab = _qwen_tokenizer(out, pad=5)
    config = Qwen2Config(vocab_size=n_vocab, hidden_size=HIDDEN, intermediate_size=FFN,
                         num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                         num_key_value_heads=KV_HEADS, max_position_embeddings=256,
                         rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
                         eos_token_id=None, bos_token_id=None)
    config._attn_implementation = "eager"
    torch.manual_seed(21)
    return _finish(Qwen2ForCausalLM(config), out, 21)


def qwen2moe(out: Path) -> Path:
    n_vocab = _qwen_tokenizer(out, pad=3)
    config = Qwen2MoeConfig(vocab_size=n_vocab, hidden_size=HIDDEN, intermediate_size=FFN,
                            moe_intermediate_size=40, shared_expert_intermediate_size=88,
                            num_experts=4, num_experts_per_tok=2, norm_topk_prob=False,
                            num_hidden_layers=2, num_attention_heads=HEADS,
                            num_key_value_heads=KV_HEADS, max_position_embeddings=256,
                            rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
                            decoder_sparse_step=1, mlp_only_layers=[])
    config._attn_implementation = "eager"
    torch.manual_seed(22)
    return _finish(Qwen2MoeForCausalLM(config), out, 22)


def qwen3(out: Path) -> Path:
    """Per-head q/k RMSNorm, and a head_dim (16) that is not hidden / heads (12): the attention
    width 96 differs from the residual width 72."""
    n_vocab = _qwen_tokenizer(out, pad=2)
    config = Qwen3Config(vocab_size=n_vocab, hidden_size=HIDDEN, intermediate_size=FFN,
                         num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                         num_key_value_heads=KV_HEADS, head_dim=16, max_position_embeddings=256,
                         rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
                         attention_bias=False, eos_token_id=None, bos_token_id=None)
    config._attn_implementation = "eager"
    torch.manual_seed(23)
    return _finish(Qwen3ForCausalLM(config), out, 23)


def qwen3_local_global(out: Path) -> Path:
    """Qwen3 with per-layer attention: layers 0 and 1 see the last 5 positions, layer 2 all
    (transformers' layer_types); the prompt and the decode run past the window."""
    n_vocab = _qwen_tokenizer(out, pad=2)
    config = Qwen3Config(vocab_size=n_vocab, hidden_size=HIDDEN, intermediate_size=FFN,
                         num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                         num_key_value_heads=KV_HEADS, head_dim=16, max_position_embeddings=256,
                         rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
                         attention_bias=False, use_sliding_window=True, sliding_window=5,
                         layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                         eos_token_id=None, bos_token_id=None)
    config._attn_implementation = "eager"
    torch.manual_seed(25)
    return _finish(Qwen3ForCausalLM(config), out, 25)


def qwen3moe(out: Path) -> Path:
    """Qwen3's attention with 4 routed experts, top-2 renormalised (as the released models set
    norm_topk_prob), no shared expert."""
    n_vocab = _qwen_tokenizer(out, pad=4)
    config = Qwen3MoeConfig(vocab_size=n_vocab, hidden_size=HIDDEN, intermediate_size=FFN,
                            moe_intermediate_size=40, num_experts=4, num_experts_per_tok=2,
                            norm_topk_prob=True, num_hidden_layers=2, num_attention_heads=HEADS,
                            num_key_value_heads=KV_HEADS, head_dim=16, max_position_embeddings=256,
                            rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
                            decoder_sparse_step=1, mlp_only_layers=[], attention_bias=False)
    config._attn_implementation = "eager"
    torch.manual_seed(24)
    return _finish(Qwen3MoeForCausalLM(config), out, 24)


def _gpt2_style_tokenizer(out: Path) -> tuple[int, int]:
    """GPT-2's byte-level BPE with one end-of-text token, saved in `out`: (vocabulary size, its id)."""
    tok = _byte_level_tokenizer("gpt2", vocab_size=450, specials=["<|endoftext|>"])
    hf = _save_tokenizer(tok, out, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                         unk_token="<|endoftext|>")
    return len(hf), hf.convert_tokens_to_ids("<|endoftext|>")


def gpt2(out: Path) -> Path:
    n_vocab, eot = _gpt2_style_tokenizer(out)
    config = GPT2Config(vocab_size=n_vocab, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                        n_inner=FFN * 2, n_positions=96, layer_norm_epsilon=1e-5,
                        activation_function="gelu_new", bos_token_id=eot, eos_token_id=eot,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    config._attn_implementation = "eager"
    torch.manual_seed(31)
    return _finish(GPT2LMHeadModel(config), out, 31)


def bloom(out: Path) -> Path:
    """ALiBi (6 heads: not a power of two, so the interleaved slopes), the embedding LayerNorm,
    the per-head fused QKV."""
    n_vocab, eot = _gpt2_style_tokenizer(out)
    config = BloomConfig(vocab_size=n_vocab, hidden_size=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                         layer_norm_epsilon=1e-5, bos_token_id=eot, eos_token_id=eot,
                         hidden_dropout=0.0, attention_dropout=0.0)
    config._attn_implementation = "eager"
    torch.manual_seed(37)
    return _finish(BloomForCausalLM(config), out, 37)


def mpt(out: Path) -> Path:
    """ALiBi (6 heads), LayerNorm without bias, exact GELU, no biases, tied head."""
    n_vocab, eot = _gpt2_style_tokenizer(out)
    config = MptConfig(vocab_size=n_vocab, d_model=HIDDEN, n_heads=HEADS, n_layers=LAYERS,
                       expansion_ratio=4, max_seq_len=128, layer_norm_epsilon=1e-5,
                       no_bias=True, resid_pdrop=0.0, emb_pdrop=0.0,
                       attn_config={"alibi": True, "alibi_bias_max": 8, "attn_pdrop": 0},
                       bos_token_id=eot, eos_token_id=eot)
    config._attn_implementation = "eager"
    torch.manual_seed(41)
    return _finish(MptForCausalLM(config), out, 41)


def _phi3(out: Path, seed: int, original: int, **cfg) -> Path:
    tok = _spm_tokenizer(vocab_size=560)
    hf_tok = _save_tokenizer(tok, out, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    rope = {"rope_type": "longrope", "rope_theta": 10000.0,
            "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5],
            "long_factor": [1.0, 1.5, 2.5, 4.0, 6.0, 8.0]}
    config = Phi3Config(vocab_size=len(hf_tok), hidden_size=HIDDEN, intermediate_size=FFN,
                        num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                        num_key_value_heads=KV_HEADS, max_position_embeddings=256,
                        original_max_position_embeddings=original, rope_parameters=rope,
                        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1,
                        eos_token_id=2, pad_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0,
                        attention_dropout=0.0, **cfg)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return _finish(Phi3ForCausalLM(config), out, seed)


def phi3(out: Path) -> Path:
    """Phi-3: fused QKV and gate-up, LongRoPE with an original context of 64 (the 27 test
    positions take the short factors; the attention factor of 256 / 64 applies)."""
    return _phi3(out, 51, 64)


def phi3_long(out: Path) -> Path:
    """Phi-3 with an original context of 16: the 27 test positions take the long factors (a
    context longer than 16, as llama.cpp chooses); sliding window 9."""
    return _phi3(out, 53, 16, sliding_window=9)


def phi3_long_train(out: Path) -> Path:
    """Phi-3 with an original context of 4: a training batch of 9 positions takes the long
    factors (transformers chooses by the sequence's length, syslm's trainer by T)."""
    return _phi3(out, 57, 4)


def gemma2(out: Path) -> Path:
    """Gemma 2: layers alternate local (window 5) and global; scores soft-capped at 3 and logits
    at 4 (low enough that tanh bends them), four norms per block (HF's 1 + w), GeGLU, embeddings
    times sqrt(72), query_pre_attn_scalar 20 (not head_dim 16), tied head."""
    tok = _spm_tokenizer(vocab_size=560)
    hf_tok = _save_tokenizer(tok, out, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    config = Gemma2Config(
        vocab_size=len(hf_tok), hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=4,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=16,
        max_position_embeddings=256, rms_norm_eps=1e-6, query_pre_attn_scalar=20,
        sliding_window=5, attn_logit_softcapping=3.0, final_logit_softcapping=4.0,
        rope_theta=10000.0, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2, pad_token_id=0)
    config._attn_implementation = "eager"
    torch.manual_seed(47)
    return _finish(Gemma2ForCausalLM(config), out, 47)


def gemma3(out: Path) -> Path:
    """Gemma 3: layers 0, 1 and 3 local (window 5, RoPE base 10000), layer 2 global (base 50000,
    linear scaling 2); q/k norms, four norms per block (HF's 1 + w), GeGLU, embeddings times
    sqrt(72), query_pre_attn_scalar 20 (not head_dim 16), tied head."""
    tok = _spm_tokenizer(vocab_size=560)
    hf_tok = _save_tokenizer(tok, out, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    config = Gemma3TextConfig(
        vocab_size=len(hf_tok), hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=4,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=16,
        max_position_embeddings=256, rms_norm_eps=1e-6, query_pre_attn_scalar=20,
        sliding_window=5,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 50000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, bos_token_id=1,
        eos_token_id=2, pad_token_id=0)
    config._attn_implementation = "eager"
    torch.manual_seed(43)
    return _finish(Gemma3ForCausalLM(config), out, 43)


def gemma3_multimodal(out: Path) -> Path:
    """Gemma3ForConditionalGeneration (how Gemma 3 4B and larger are published): gemma3's text
    model under `language_model.`, with a tiny SigLIP vision tower and projector the converter
    leaves out; text_config lists every key (the defaults path is checked in test_convert)."""
    tok = _spm_tokenizer(vocab_size=560)
    hf_tok = _save_tokenizer(tok, out, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    text = dict(vocab_size=len(hf_tok), hidden_size=HIDDEN, intermediate_size=FFN,
                num_hidden_layers=4, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-6,
                query_pre_attn_scalar=20, sliding_window=5,
                layer_types=["sliding_attention", "sliding_attention", "full_attention",
                             "sliding_attention"], bos_token_id=1, eos_token_id=2, pad_token_id=0)
    vision = dict(hidden_size=32, intermediate_size=40, num_hidden_layers=1, num_attention_heads=2,
                  image_size=28, patch_size=14)
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                          image_token_index=len(hf_tok) + 7)  # no text token is an image
    config._attn_implementation = "eager"
    torch.manual_seed(59)
    return _finish(Gemma3ForConditionalGeneration(config), out, 59)


VARIANTS = {
    "llama": llama,
    "llama_linear_rope": llama_linear_rope,
    "llama_llama3_rope": llama_llama3_rope,
    "llama_yarn_rope": llama_yarn_rope,
    "llama_tied": llama_tied,
    "mistral_swa": mistral_swa,
    "mixtral": mixtral,
    "qwen2": qwen2,
    "qwen2moe": qwen2moe,
    "qwen3": qwen3,
    "qwen3_local_global": qwen3_local_global,
    "qwen3moe": qwen3moe,
    "gpt2": gpt2,
    "bloom": bloom,
    "mpt": mpt,
    "phi3": phi3,
    "phi3_long": phi3_long,
    "phi3_long_train": phi3_long_train,
    "gemma2": gemma2,
    "gemma3": gemma3,
    "gemma3_multimodal": gemma3_multimodal,
}


def build(name: str, root: Path) -> Path:
    """Builds variant `name` into root/name (replacing what was there) and returns the folder."""
    out = Path(root) / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    return VARIANTS[name](out)


def load(path: Path):
    """The saved model, as the logits comparison runs it: eager attention, float32, eval."""
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager",
                                                 dtype=torch.float32)
    return model.eval()


if __name__ == "__main__":
    import sys
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "tiny_hf_models")
    for name in VARIANTS:
        print(build(name, root))
