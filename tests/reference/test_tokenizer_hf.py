"""Tokenizers against the reference implementations: HF `tokenizers` and `sentencepiece`.

1. Byte-level BPE, one case per pre-tokenizer family without shared test vectors: a small BPE
   vocabulary is trained with HF `tokenizers`, using the pre-tokenizer of that family's
   tokenizer.json (Split regex(es) / Digits / Punctuation + ByteLevel), exported to a
   vocabulary-only GGUF with PyPI `gguf` (tokenizer.ggml.model = gpt2, pre = <family>, tokens,
   token_type, merges), and `syslm tokenize --ids` must give exactly HF's ids on varied text
   (multilingual, digits, code, whitespace runs, contractions, emoji, random Unicode).
2. The shared GPT-2 vocabulary as an HF BPE (its vocab and merges + GPT-2's ByteLevel) on the
   King James Bible and random text.
3. SentencePiece: a BPE model trained with `sentencepiece` (byte fallback, identity
   normalisation) exported to GGUF (tokenizer.ggml.model = llama), and the shared LLaMA
   vocabulary rebuilt as a sentencepiece model, against sentencepiece's own encoder.

Many texts go through one syslm call: they are joined with a separator token that both sides
split out before tokenizing (an added token in HF, a USER_DEFINED token in the GGUF), so the ids
between separators are the ids of each text on its own.
"""
import json
import pathlib
import random
import shutil
import struct
import subprocess
import unicodedata

import gguf
import pytest
from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

SEP = "<|sep|>"

GPT2_RE = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_RE = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
             r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2_RE = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
            r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
TEKKEN_RE = (r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"""
             r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"""
             r"""\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
DEEPSEEK_LETTERS = (
    "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293"
    "\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C"
    "\u038E-\u03A1\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5"
    "\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77"
    "\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59"
    "\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC"
    "\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107"
    "\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139"
    "\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE"
    "\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E"
    "\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A"
    "\U00010400-\U0001044F\U000104B0-\U000104D3\U000104D8-\U000104FB\U00010C80-\U00010CB2"
    "\U00010CC0-\U00010CF2\U000118A0-\U000118DF\U0001E900-\U0001E943]+")
DEEPSEEK_PUNCT = "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+"
DEEPSEEK_CJK = "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+"
DEEPSEEK_V3 = (r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?"""
               r"""[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
PORO_RE = " ?[^(\\s|[.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C])]+"


def split(regex):
    return pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False)


def byte_level(use_regex=False):
    return pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=use_regex)


# family (tokenizer.ggml.pre) -> (pre-tokenizer of the family's tokenizer.json, ignore_merges)
def families():
    digits = pre_tokenizers.Digits
    seq = pre_tokenizers.Sequence
    starcoder = seq([digits(individual_digits=True), byte_level(True)])
    return {
        "llama-bpe": (seq([split(LLAMA3_RE), byte_level()]), True),
        "dbrx": (seq([split(LLAMA3_RE), byte_level()]), False),
        "qwen2": (seq([split(QWEN2_RE), byte_level()]), False),
        "stablelm2": (seq([split(QWEN2_RE), byte_level()]), False),
        "deepseek-llm": (seq([split("[\r\n]"), split(DEEPSEEK_LETTERS), split(DEEPSEEK_PUNCT),
                              split("\\s+$"), split(DEEPSEEK_CJK),
                              digits(individual_digits=False), byte_level()]), False),
        "deepseek-coder": (seq([split("[\r\n]"), split("\\s?\\p{L}+"), split("\\s?\\p{P}+"),
                                split(DEEPSEEK_CJK), digits(individual_digits=True),
                                byte_level()]), False),
        "deepseek-v3": (seq([split("\\p{N}{1,3}"), split("[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+"),
                             split(DEEPSEEK_V3), byte_level()]), False),
        "falcon": (seq([pre_tokenizers.Punctuation("contiguous"), byte_level(True),
                        digits(individual_digits=False), split("[0-9][0-9][0-9]")]), False),
        "starcoder": (starcoder, False),
        "refact": (starcoder, False),
        "smollm": (starcoder, False),
        "olmo": (byte_level(True), False),  # GPT-NeoX-style: ByteLevel with GPT-2's regex
        "mpt": (byte_level(True), False),
        "poro-chat": (seq([split(PORO_RE), byte_level()]), False),
        "tekken": (seq([split(TEKKEN_RE), byte_level()]), True),
    }


MULTILINGUAL = [
    "The quick brown fox jumps over the lazy dog. I'm sure you'll agree it's fine; we'd've known.",
    "DON'T SHOUT! She'S here, THEY'LL come, we'RE late, I'M done, you'VE won, he'D go.",
    "Grüße aus München: Fußgänger, Ärzte und Öl kosten 12,50 € pro Stück.",
    "Ça va très bien, merci ! L'œuvre d'art coûte 3 400 € — n'est-ce pas ?",
    "Съешь же ещё этих мягких французских булок, да выпей чаю. 2024 год.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Αριθμός 42.",
    "نص حكيم له سر قاطع وذو شأن عظيم مكتوب على ثوب أخضر ١٢٣٤٥",
    "עטלף אבק נס דרך מזגן שהתפוצץ כי חם",
    "ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले विष्णुवतार भगवान श्रीराम ९८७",
    "我能吞下玻璃而不伤身体。今天是2024年5月17日，天气很好！",
    "いろはにほへと ちりぬるを わかよたれそ つねならむ。カタカナ１２３",
    "키스의 고유조건은 입술끼리 만나야 하고 특별한 기술은 필요치 않다.",
    "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน",
    "Tiếng Việt có dấu: Trăm năm trong cõi người ta, chữ tài chữ mệnh khéo là ghét nhau.",
    "Emoji: 🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ 👍🏽 🇺🇸 🏳️‍🌈 family: 👨‍👩‍👧‍👦",
    "Numbers: 3 33 333 3333 33333 333333 3.14159 1,234,567 0x1F 1e-10 ²³ ½ Ⅻ ١٢٣ ৪৫ ５６",
    "def f(x):\n    return x ** 2  # square\n\nif __name__ == '__main__':\n\tprint(f(12345))\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i] * c; }  // C++\r\n#include <vector>\n",
    "    Hello\n    Hello\n\n\n\t\t  mixed   whitespace\u00a0nbsp\u3000ideographic\u2003em  \n",
    "   leading spaces, trailing spaces   ",
    "\n\n\n",
    "' era 'quoted' \"double\" `back` ... !!! ??? ¿¡ «» „“ ‘’",
    "ied 4 ½ months",
    "w048 7tuijk dsdfhu",
    "Ӏ ӏ ſ K Å ﬁ ﬀ",
]

CODE_SNIPPETS = [
    "fn main() { let v: Vec<u32> = (0..10).map(|x| x * x).collect(); println!(\"{:?}\", v); }",
    "SELECT id, name FROM users WHERE age >= 18 AND city = 'Zürich' ORDER BY name;",
    "<html><body><p class=\"x\">Hello &amp; goodbye</p></body></html>",
    "$ ls -la | grep '^d' && echo \"done\" > /tmp/out.txt 2>&1",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
]


def random_text(rng, n):
    """Random Unicode: ASCII, whitespace runs, controls, combining marks, emoji, CJK, scripts,
    digits, contractions, and code points from every plane (surrogates excluded)."""
    pools = [
        [(0x20, 0x7E)] * 6,
        [(0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x2000, 0x200A), (0x3000, 0x3000),
         (0x2028, 0x2029)],
        [(0x00, 0x08), (0x0E, 0x1F), (0x7F, 0x9F)],
        [(0x0300, 0x036F), (0x20D0, 0x20FF)],
        [(0x1F300, 0x1F64F), (0x1F900, 0x1FAFF), (0x200D, 0x200D), (0xFE0F, 0xFE0F)],
        [(0x4E00, 0x9FFF), (0x3040, 0x30FF), (0xAC00, 0xD7A3), (0x20000, 0x2A6DF)],
        [(0x0600, 0x06FF), (0x0900, 0x097F), (0x0E00, 0x0E7F), (0x0400, 0x04FF), (0x0370, 0x03FF)],
        [(0x30, 0x39), (0x0660, 0x0669), (0xFF10, 0xFF19), (0x2160, 0x2188)],
    ]
    out = []
    while len(out) < n:
        k = rng.random()
        if k < 0.1:
            out.append(rng.choice(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", " '",
                                   "  ", "\n\n", "\r\n", "\t"]))
            continue
        if k < 0.14:
            # Anywhere in the 17 planes, but assigned in Python's Unicode version (private use
            # included): PCRE2 and HF's Oniguruma may know different Unicode versions, and a
            # code point unassigned in one is a letter in the other.
            while True:
                cp = rng.randrange(0, 0x110000)
                if unicodedata.category(chr(cp)) not in ("Cn", "Cs"):
                    break
        else:
            pool = rng.choice(pools)
            lo, hi = rng.choice(pool)
            cp = rng.randint(lo, hi)
            if pool is pools[1] and rng.random() < 0.5:
                out.append(chr(cp) * rng.randint(2, 6))
                continue
        out.append(chr(cp))
    return "".join(out)


@pytest.fixture(scope="session")
def kjv():
    if shutil.which("bible") is None:
        pytest.fail("the KJV text needs the Debian package bible-kjv (`bible` command not found)")
    text = subprocess.run(["bible", "-f", "Genesis1:1-Revelation22:21"], capture_output=True,
                          check=True).stdout.decode()
    assert len(text) > 4_000_000, "bible-kjv printed too little text"
    return text


@pytest.fixture(scope="session")
def training_corpus(kjv):
    rng = random.Random(1)
    lines = kjv.splitlines()[:20000]
    extra = (MULTILINGUAL + CODE_SNIPPETS) * 30 + [random_text(rng, 200) for _ in range(300)]
    return lines + extra


@pytest.fixture(scope="session")
def sample_texts(kjv):
    rng = random.Random(2)
    lines = kjv.splitlines()
    texts = list(MULTILINGUAL) + list(CODE_SNIPPETS)
    texts += [lines[rng.randrange(len(lines))] for _ in range(40)]
    texts += [random_text(rng, rng.randint(1, 120)) for _ in range(150)]
    texts += ["", " ", "  ", "\t", "\n", "a", "3", "333333333", "Hello", " Hello", "  Hello"]
    return [t for t in texts if SEP not in t]


def tokenize_many(run_syslm, path, texts, sep_id):
    """Ids of each text from one `syslm tokenize` call (texts joined by the separator)."""
    joined = SEP.join(texts)
    inp = pathlib.Path(str(path) + ".txt")
    inp.write_bytes(joined.encode())
    out = run_syslm("tokenize", "-m", path, "-f", inp, "--ids", "--no-bos").stdout
    ids = json.loads(out)
    parts, cur = [], []
    for i in ids:
        if i == sep_id:
            parts.append(cur)
            cur = []
        else:
            cur.append(i)
    parts.append(cur)
    assert len(parts) == len(texts), "separator token appeared inside a text's tokens"
    return parts


def bpe_gguf_from_hf(tok, pre, path):
    """Writes the HF BPE tokenizer `tok` as a vocabulary-only GGUF the way convert_hf_to_gguf.py
    does: byte-level token texts, CONTROL (3) for special added tokens, USER_DEFINED (4) for the
    others, merges as "left right"."""
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    tokens = [None] * tok.get_vocab_size(with_added_tokens=True)
    for text, i in vocab.items():
        tokens[i] = text
    types = [1] * len(tokens)
    for added in data["added_tokens"]:
        tokens[added["id"]] = added["content"]
        types[added["id"]] = 3 if added["special"] else 4
    assert None not in tokens
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    w = gguf.GGUFWriter(str(path), "gpt2")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def first_mismatch(texts, got, want):
    for t, g, w in zip(texts, got, want):
        if g != w:
            return f"text {t!r}\n  syslm {g}\n  hf    {w}"
    return None


@pytest.mark.parametrize("family", sorted(families()))
def test_bpe_family_matches_hf(family, tmp_path, run_syslm, training_corpus, sample_texts):
    pre_tok, ignore_merges = families()[family]
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tok
    trainer = trainers.BpeTrainer(vocab_size=4000, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(training_corpus, trainer)
    tok.add_tokens([SEP])  # not special: HF splits it out; the GGUF marks it USER_DEFINED
    sep_id = tok.token_to_id(SEP)
    path = tmp_path / f"{family}.gguf"
    bpe_gguf_from_hf(tok, family, path)

    want = [tok.encode(t, add_special_tokens=False).ids for t in sample_texts]
    got = tokenize_many(run_syslm, path, sample_texts, sep_id)
    assert got == want, first_mismatch(sample_texts, got, want)
    # Merges really happened (the vocabulary is not just bytes).
    assert sum(map(len, want)) < sum(len(t.encode()) for t in sample_texts) * 0.8
    # Also one text directly through -p, with the special token parsed.
    text = "Hello<|endoftext|> world 12345"
    ids = json.loads(run_syslm("tokenize", "-m", path, "-p", text, "--ids", "--parse-special").stdout)
    assert ids == tok.encode(text, add_special_tokens=False).ids


def test_gpt2_vocab_matches_hf_on_kjv_and_random(vocab_dir, run_syslm, kjv, sample_texts, tmp_path):
    path = vocab_dir / "ggml-vocab-gpt-2.gguf"
    r = gguf.GGUFReader(str(path))
    field = r.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(field.parts[i]).decode() for i in field.data]
    mfield = r.fields["tokenizer.ggml.merges"]
    merges = [tuple(bytes(mfield.parts[i]).decode().split(" ", 1)) for i in mfield.data]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = byte_level(True)

    kjv_file = tmp_path / "kjv.txt"
    kjv_file.write_bytes(kjv.encode())
    got = json.loads(run_syslm("tokenize", "-m", path, "-f", kjv_file, "--ids", "--no-bos").stdout)
    want = tok.encode(kjv).ids
    assert got == want, f"first difference at token {next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)}"

    for text in sample_texts[:60]:
        got = json.loads(run_syslm("tokenize", "-m", path, "-p", text, "--ids", "--no-bos").stdout) if text else []
        assert got == tok.encode(text).ids, text


# --- SentencePiece -----------------------------------------------------------------------------

def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num, wire, payload):
    key = _varint(num << 3 | wire)
    if wire == 2:
        return key + _varint(len(payload)) + payload
    return key + payload


def sentencepiece_model(pieces, scores, types):
    """A sentencepiece ModelProto (BPE, byte fallback, identity normalisation, dummy prefix, no
    whitespace folding: LLaMA's settings), serialised by hand (protobuf wire format) so that no
    protobuf package is needed."""
    body = b""
    for p, s, t in zip(pieces, scores, types):
        msg = _field(1, 2, p.encode()) + _field(2, 5, struct.pack("<f", s)) + _field(3, 0, _varint(t))
        body += _field(1, 2, msg)
    trainer = (_field(3, 0, _varint(2)) + _field(4, 0, _varint(len(pieces))) +
               _field(35, 0, _varint(1)) + _field(40, 0, _varint(0)) + _field(41, 0, _varint(1)) +
               _field(42, 0, _varint(2)) + _field(43, 0, _varint((1 << 64) - 1)))
    normalizer = (_field(1, 2, b"identity") + _field(3, 0, _varint(1)) + _field(4, 0, _varint(0)) +
                  _field(5, 0, _varint(1)))
    return body + _field(2, 2, trainer) + _field(3, 2, normalizer)


def spm_gguf(path, pieces, scores, types):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def spm_compare(run_syslm, sp, path, texts):
    for text in texts:
        want = sp.encode(text)
        if not text:
            got = []
        else:
            got = json.loads(run_syslm("tokenize", "-m", path, "-p", text, "--ids", "--no-bos").stdout)
        assert got == want, f"text {text!r}\n  syslm {got}\n  sentencepiece {want}"


def spm_texts(sample_texts):
    # Each text goes to syslm through argv, which cannot hold NUL.
    return ["x\u2581y \u2581", "\u2581"] + [t for t in sample_texts if "\0" not in t]


def test_spm_trained_matches_sentencepiece(tmp_path, run_syslm, training_corpus, sample_texts):
    spm = pytest.importorskip("sentencepiece", reason="needs PyPI sentencepiece")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(t.replace("\n", " ") for t in training_corpus[:8000]))
    prefix = tmp_path / "sp"
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(prefix), model_type="bpe", vocab_size=3000,
        byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        character_coverage=0.9995, split_digits=True, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(prefix) + ".model")
    n = sp.get_piece_size()
    pieces = [sp.id_to_piece(i) for i in range(n)]
    scores = [sp.get_score(i) for i in range(n)]
    types = [2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i)
             else 5 if sp.is_unused(i) else 1 for i in range(n)]
    path = tmp_path / "spm.gguf"
    spm_gguf(path, pieces, scores, types)
    spm_compare(run_syslm, sp, path, spm_texts(sample_texts)[:120])


def test_llama_vocab_matches_sentencepiece(vocab_dir, tmp_path, run_syslm, kjv, sample_texts):
    spm = pytest.importorskip("sentencepiece", reason="needs PyPI sentencepiece")
    path = vocab_dir / "ggml-vocab-llama-spm.gguf"
    r = gguf.GGUFReader(str(path))
    field = r.fields["tokenizer.ggml.tokens"]
    pieces = [bytes(field.parts[i]).decode() for i in field.data]
    scores = [float(x) for x in r.fields["tokenizer.ggml.scores"].contents()]
    types = [int(x) for x in r.fields["tokenizer.ggml.token_type"].contents()]
    sp = spm.SentencePieceProcessor(model_proto=sentencepiece_model(pieces, scores, types))
    assert sp.get_piece_size() == 32000

    kjv_part = kjv[:1_500_000]
    kjv_file = tmp_path / "kjv.txt"
    kjv_file.write_bytes(kjv_part.encode())
    got = json.loads(run_syslm("tokenize", "-m", path, "-f", kjv_file, "--ids", "--no-bos").stdout)
    want = sp.encode(kjv_part)
    assert got == want, f"first difference at token {next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)}"
    spm_compare(run_syslm, sp, path, spm_texts(sample_texts)[:80])


def test_cli_output_and_errors(vocab_dir, run_syslm, syslm_bin, tmp_path):
    vocab = vocab_dir / "ggml-vocab-llama-spm.gguf"
    text = "Hello world 🦙"
    ids = json.loads(run_syslm("tokenize", "-m", vocab, "-p", text, "--ids").stdout)
    assert ids[0] == 1  # llama-spm adds BOS unless --no-bos
    assert json.loads(run_syslm("tokenize", "-m", vocab, "-p", text, "--ids", "--no-bos").stdout) == ids[1:]
    # Default output: one line per token, "ID -> 'PIECE'" (pieces are raw bytes: the llama emoji
    # is four byte tokens, each an incomplete UTF-8 sequence).
    proc = subprocess.run([str(syslm_bin), "tokenize", "-m", str(vocab), "-p", text],
                          capture_output=True, check=True)
    lines = proc.stdout.split(b"\n")[:-1]
    assert [int(l.split(b" -> ")[0]) for l in lines] == ids
    assert lines[0] == b"     1 -> '<s>'"
    assert lines[1] == b" 15043 -> ' Hello'"
    assert b"".join(l.split(b" -> ", 1)[1][1:-1] for l in lines[1:]) == b" Hello world " + "🦙".encode()
    # Special-token text is plain text unless --parse-special.
    plain = json.loads(run_syslm("tokenize", "-m", vocab, "-p", "a</s>", "--ids", "--no-bos").stdout)
    parsed = json.loads(run_syslm("tokenize", "-m", vocab, "-p", "a</s>", "--ids", "--no-bos",
                                  "--parse-special").stdout)
    assert 2 not in plain and parsed[-1] == 2
    # Errors: no text; a GGUF without a tokenizer; an unknown pre-tokenizer.
    proc = run_syslm("tokenize", "-m", vocab, check=False)
    assert proc.returncode != 0 and "-p TEXT or -f FILE" in proc.stderr
    bare = tmp_path / "bare.gguf"
    w = gguf.GGUFWriter(str(bare), "llama")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    proc = run_syslm("tokenize", "-m", bare, "-p", "x", check=False)
    assert proc.returncode == 1 and str(bare) in proc.stderr and "tokenizer.ggml.model" in proc.stderr
    odd = tmp_path / "odd_pre.gguf"
    w = gguf.GGUFWriter(str(odd), "gpt2")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("no-such-family")
    w.add_token_list(["a", "b", "ab"])
    w.add_token_merges(["a b"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    proc = run_syslm("tokenize", "-m", odd, "-p", "x", check=False)
    assert proc.returncode == 1 and "unknown pre-tokenizer" in proc.stderr and "no-such-family" in proc.stderr
