"""/v1/embeddings against HF transformers: a tiny random Llama (tiny_hf_models), converted by
`syslm convert` and served, embeds token-id inputs of awkward lengths; each embedding equals the
model's final-norm hidden states (transformers' last hidden_states) pooled by mean or last token
and L2-normalised, to 1e-4 (the logits tests' bound). Strings and the official client work too."""
import signal

import numpy as np
import openai
import torch

import tiny_hf_models
import json

from test_serve_openai import http, start_server


def test_embeddings_match_transformers(tmp_path, run_syslm, syslm_bin):
    hf_dir = tiny_hf_models.build("llama", tmp_path / "hf")
    model = tiny_hf_models.load(hf_dir)
    gguf = tmp_path / "model.gguf"
    run_syslm("convert", "--hf", hf_dir, "-o", gguf)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(5)
    inputs = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in (1, 7, 33)]
    with torch.no_grad():
        hidden = [model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0]
                  .float().numpy() for ids in inputs]
    for pooling in ("mean", "last"):
        proc, port = start_server(syslm_bin, gguf, "--ctx-size", "128", "--parallel", "2",
                                  "--pooling", pooling)
        try:
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
            name = client.models.list().data[0].id
            r = client.embeddings.create(model=name, input=inputs)
            assert [d.index for d in r.data] == [0, 1, 2]
            assert r.usage.prompt_tokens == sum(len(i) for i in inputs)
            for d, h in zip(r.data, hidden):
                v = h.mean(axis=0) if pooling == "mean" else h[-1]
                want = v / np.linalg.norm(v)
                got = np.array(d.embedding)
                assert got.shape == want.shape
                err = np.abs(got - want).max() / np.abs(want).max()
                assert err < 1e-4, (pooling, err)
            code, text = http(port, "POST", "/v1/embeddings",
                              {"input": inputs[1], "encoding_format": "float"})
            assert code == 200, text
            assert json.loads(text)["data"][0]["embedding"] == list(r.data[1].embedding)
            one = client.embeddings.create(model=name, input="In the beginning")
            assert abs(np.linalg.norm(one.data[0].embedding) - 1) < 1e-5
            try:
                client.embeddings.create(model=name, input=[])
                raise AssertionError("an empty input list was accepted")
            except openai.BadRequestError as e:
                assert "input" in str(e)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
