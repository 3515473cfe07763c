"""`syslm data score` (CCNet-style document perplexity) against transformers: for each document
of a tiny llama's (tiny_hf_models) converted GGUF, the perplexity of its tokens after the first
(BOS first, as the tokenizer adds it), in windows of at most -c tokens that share their edge
token, from HF's tokenizer and model in float64; 1e-4 relative."""
import json
import math

import torch
from transformers import AutoTokenizer

import tiny_hf_models

DOCS = ["In the beginning God created the heaven and the earth.",
        "And the earth was without form, and void; and darkness was upon the face of the deep. "
        "And the Spirit of God moved upon the face of the waters.",
        "Let there be light."]


def reference_ppl(model, ids, n_ctx):
    nll, n, w = 0.0, 0, 0
    while w + 1 < len(ids):
        end = min(len(ids), w + n_ctx)
        with torch.no_grad():
            logits = model(torch.tensor([ids[w:end]])).logits[0].double()
        logp = torch.log_softmax(logits, -1)
        for t in range(w, end - 1):
            nll -= logp[t - w, ids[t + 1]].item()
            n += 1
        if end == len(ids):
            break
        w += n_ctx - 1
    return math.exp(nll / n), n


def test_document_perplexity_matches_transformers(tmp_path, run_syslm):
    hf_dir = tiny_hf_models.build("llama", tmp_path / "hf")
    model = tiny_hf_models.load(hf_dir).double()
    tok = AutoTokenizer.from_pretrained(hf_dir)
    gguf = tmp_path / "model.gguf"
    run_syslm("convert", "--hf", hf_dir, "-o", gguf)
    text = tmp_path / "docs.txt"
    text.write_text("\n\n".join(DOCS) + "\n")
    for n_ctx in (512, 12):  # whole documents; windows of 12 tokens
        out = tmp_path / f"scores{n_ctx}.jsonl"
        run_syslm("data", "score", "-m", gguf, "-f", text, "-o", out, "-c", n_ctx, "-t", 2)
        rows = [json.loads(l) for l in out.read_text().splitlines()]
        assert [r["id"] for r in rows] == [0, 1, 2]
        for doc, row in zip(DOCS, rows):
            ids = tok(doc)["input_ids"]
            assert ids[0] == tok.bos_token_id
            ppl, n = reference_ppl(model, ids, n_ctx)
            assert row["tokens"] == n, (doc, row)
            assert abs(row["ppl"] - ppl) < 1e-4 * ppl, (n_ctx, doc, row["ppl"], ppl)
    assert len(tok(DOCS[1])["input_ids"]) > 24  # the long document took several windows
