"""llama.cpp's own grammars (tests/fixtures/grammars, copied with their notice): syslm serves
completions constrained by each, and every completion that ends by itself is a sentence of the
grammar by an independent parser: the GBNF is read again here, in Python, translated to a Lark
grammar, and Lark's Earley parser parses the output. A random model seldom finishes the long
ones (json, c, english) within the token limit; those cut short are checked by syslm's own
matcher only (tests/infer/engine_test.cpp)."""
import json
import re
import signal
from pathlib import Path

import lark
import openai
import pytest

from test_serve_openai import init_model, start_server

GRAMMARS = Path(__file__).resolve().parents[1] / "fixtures" / "grammars"


def gbnf_tokens(text):
    spec = r'''(?P<ws>[ \t]+|\#[^\n]*)|(?P<nl>\r?\n)|(?P<def>::=)|(?P<name>[A-Za-z0-9_-]+)|
               (?P<lit>"(?:\\.|[^"\\])*")|(?P<cls>\[(?:\\.|[^\]\\])*\])|(?P<rep>\{[0-9 ,]*\})|
               (?P<op>[|()*+?.])'''
    pos = 0
    for m in re.finditer(spec, text, re.X):
        assert m.start() == pos, f"cannot read GBNF at {text[pos:pos + 20]!r}"
        pos = m.end()
        if m.lastgroup != "ws":
            yield m.lastgroup, m.group()
    assert pos == len(text)


def unescape(body):
    """A GBNF literal's or class's escapes to characters (\\x, \\u, \\U, \\n, ...)."""
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        n = {"x": 2, "u": 4, "U": 8}.get(e)
        if n:
            out.append(chr(int(body[i + 2:i + 2 + n], 16)))
            i += 2 + n
        else:
            out.append({"n": "\n", "r": "\r", "t": "\t"}.get(e, e))
            i += 2
    return out


def esc(c):
    """One character for a regex: itself when alphanumeric, else escaped."""
    if c.isascii() and c.isalnum():
        return c
    if 0x20 < ord(c) < 0x7F:
        return "\\" + c
    return f"\\u{ord(c):04x}" if ord(c) < 0x10000 else c


def regex_of_class(cls):
    chars = unescape(cls[1:-1])
    neg = bool(chars) and chars[0] == "^" and not cls[1:].startswith("\\^")
    if neg:
        chars = chars[1:]
    parts, i = [], 0
    while i < len(chars):
        if i + 2 < len(chars) and chars[i + 1] == "-":
            parts.append(f"{esc(chars[i])}-{esc(chars[i + 2])}")
            i += 3
        else:
            parts.append(esc(chars[i]))
            i += 1
    return "[" + ("^" if neg else "") + "".join(parts) + "]"


def to_lark(text):
    """GBNF to a Lark grammar: rules become lark rules, terminals inline regexes."""
    toks = list(gbnf_tokens(text))
    rules, i = [], 0

    def name(n):
        return "r_" + n.replace("-", "_").lower()

    def regex(pattern):  # esc() already escapes "/"
        return "/" + pattern + "/s"

    def parse_alts(depth):
        nonlocal i
        alts = [parse_seq(depth)]
        while i < len(toks) and toks[i][1] == "|":
            i += 1
            while i < len(toks) and toks[i][0] == "nl":
                i += 1
            alts.append(parse_seq(depth))
        full = [a for a in alts if a]
        body = " | ".join(full) if full else ""
        return f"({body})?" if len(full) < len(alts) and full else body

    def parse_seq(depth):
        nonlocal i
        items = []
        while i < len(toks):
            kind, t = toks[i]
            if kind == "nl":
                if depth == 0:
                    break
                i += 1
                continue
            if t in ("|", ")"):
                break
            if kind == "name" and i + 1 < len(toks) and toks[i + 1][0] == "def":
                break
            i += 1
            if kind == "lit":
                s = "".join(unescape(t[1:-1]))
                atom = regex("".join(esc(c) for c in s)) if s else ""
            elif kind == "cls":
                atom = regex(regex_of_class(t))
            elif t == ".":
                atom = regex(".")
            elif t == "(":
                atom = "(" + parse_alts(depth + 1) + ")"
                assert toks[i][1] == ")"
                i += 1
            elif kind == "name":
                atom = name(t)
            else:
                raise AssertionError(f"unexpected {t!r}")
            while i < len(toks) and (toks[i][0] == "rep" or toks[i][1] in "*+?"):
                op = toks[i][1]
                i += 1
                if op in "*+?":
                    atom = f"({atom}){op}"
                else:
                    lo, _, hi = op[1:-1].replace(" ", "").partition(",")
                    lo = int(lo)
                    if not _:
                        atom = f"({atom}) ~ {lo}" if lo else ""
                    elif hi:
                        atom = f"({atom}) ~ {lo}..{int(hi)}" if int(hi) else ""
                    else:
                        atom = (f"({atom}) ~ {lo} " if lo else "") + f"({atom})*"
            if atom and atom != "()":
                items.append(atom)
        return " ".join(items)

    while i < len(toks):
        if toks[i][0] == "nl":
            i += 1
            continue
        rule = toks[i][1]
        assert toks[i + 1][0] == "def", toks[i:i + 2]
        i += 2
        while i < len(toks) and toks[i][0] == "nl":
            i += 1
        rules.append(f"{name(rule)}: {parse_alts(0)}")
    return "\n".join(rules)


def test_the_translation_itself_accepts_and_refuses():
    g = lark.Lark(to_lark((GRAMMARS / "arithmetic.gbnf").read_text()), start="r_root",
                  parser="earley", lexer="dynamic")
    g.parse("1+2*(3-x)=4\n")
    with pytest.raises(lark.exceptions.LarkError):
        g.parse("1+=\n")


@pytest.mark.parametrize("name", ["json", "json_arr", "arithmetic", "list", "c", "chess",
                                  "english", "japanese"])
def test_llama_cpp_grammar_outputs_parse_independently(syslm_bin, tmp_path, vocab_dir, name):
    text = (GRAMMARS / f"{name}.gbnf").read_text()
    checker = lark.Lark(to_lark(text), start="r_root", parser="earley", lexer="dynamic")
    model = init_model(syslm_bin, vocab_dir, tmp_path / "m.gguf", 2, 64, 4, 1024)
    proc, port = start_server(syslm_bin, model, "--ctx-size", "1024", "--parallel", "8")
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        r = client.completions.create(model=client.models.list().data[0].id, prompt="Output:",
                                      max_tokens=400, n=8, temperature=0.8, seed=3,
                                      extra_body={"grammar": text})
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    ended = [c.text for c in r.choices if c.finish_reason == "stop"]
    for out in ended:
        checker.parse(out)  # raises if the output is not a sentence
    if name == "json":
        for out in ended:
            assert isinstance(json.loads(out), dict)
    assert all(c.text for c in r.choices)
