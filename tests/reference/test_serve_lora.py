"""LoRA adapters in `syslm serve` through the official `openai` client: /v1/models lists the
model and the model with each adapter; a request picks an adapter by the model name
"<model>:<adapter>" or with llama-server's "lora": [{"id", "scale"}], and its greedy answer is
`syslm generate --lora` / `--lora-scaled`'s; requests with different adapters served together
give the answers they give alone; unknown adapters are OpenAI-shaped errors."""
import concurrent.futures
import json
import signal

import numpy as np
import openai
import pytest

from lora_files import write_random_adapter
from test_serve_openai import http, init_model, start_server

@pytest.fixture(scope="module")
def setup(tmp_path_factory, syslm_bin, vocab_dir):
    d = tmp_path_factory.mktemp("lora")
    model = init_model(syslm_bin, vocab_dir, d / "model.gguf", 2, 64, 4, 512)
    a = write_random_adapter(model, d / "style.gguf", 4, 1)
    b = write_random_adapter(model, d / "tone.gguf", 8, 2, ["attn_v", "ffn_down"])
    proc, port = start_server(syslm_bin, model, "--ctx-size", "512", "--lora", f"style={a}",
                              "--lora", str(b))
    yield model, a, b, port
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def generate(run_syslm, model, prompt, n, *extra):
    out = run_syslm("generate", "-m", model, "-p", prompt, "-n", n, "--temp", 0, "-t", 2,
                    *extra).stdout
    assert out.startswith(prompt)
    return out[len(prompt):].rstrip("\n")


def test_models_list_and_answers_equal_generate(setup, run_syslm):
    model, a, b, port = setup
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
    ids = [m.id for m in client.models.list().data]
    base = ids[0]
    assert ids == [base, f"{base}:style", f"{base}:tone"]
    adapters = json.loads(http(port, "GET", "/lora-adapters")[1])
    assert [x["name"] for x in adapters] == ["style", "tone"] and adapters[1]["path"] == str(b)
    prompt = "The quick brown fox"
    text = lambda **kw: client.completions.create(prompt=prompt, max_tokens=10, temperature=0,
                                                  **kw).choices[0].text
    plain, styled = text(model=base), text(model=f"{base}:style")
    assert plain == generate(run_syslm, model, prompt, 10)
    assert styled == generate(run_syslm, model, prompt, 10, "--lora", a)
    assert styled != plain
    half = text(model=base, extra_body={"lora": [{"id": 1, "scale": 0.5}]})
    assert half == generate(run_syslm, model, prompt, 10, "--lora-scaled", b, "0.5")
    both = text(model=f"{base}:style", extra_body={"lora": [{"id": 1, "scale": 0.5}]})
    assert both == generate(run_syslm, model, prompt, 10, "--lora", a, "--lora-scaled", b, "0.5")
    # all of them at once, and the same again from the prefix cache: each its own answer
    kinds = [dict(model=base), dict(model=f"{base}:style"),
             dict(model=base, extra_body={"lora": [{"id": 1, "scale": 0.5}]}),
             dict(model=f"{base}:style", extra_body={"lora": [{"id": 1, "scale": 0.5}]})] * 3
    with concurrent.futures.ThreadPoolExecutor(len(kinds)) as pool:
        got = list(pool.map(lambda kw: text(**kw), kinds))
    assert got == [plain, styled, half, both] * 3
    chat = client.chat.completions.create(model=f"{base}:tone", temperature=0, max_tokens=4,
                                          messages=[{"role": "user", "content": "Hi"}])
    assert chat.choices[0].message.content


def test_embeddings_with_an_adapter_equal_the_merged_models(setup, run_syslm, syslm_bin, tmp_path):
    model, a, _, port = setup
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
    base = client.models.list().data[0].id
    texts = ["In the beginning", "God created the heaven and the earth"]
    emb = lambda c, m: np.array([d.embedding for d in c.embeddings.create(model=m, input=texts).data])
    styled = emb(client, f"{base}:style")
    assert np.abs(styled - emb(client, base)).max() > 1e-3
    merged = tmp_path / "merged.gguf"
    run_syslm("lora", "merge", "-m", model, "--lora", a, "-o", merged)
    proc, mport = start_server(syslm_bin, merged)
    try:
        mc = openai.OpenAI(base_url=f"http://127.0.0.1:{mport}/v1", api_key="unused")
        assert np.abs(styled - emb(mc, mc.models.list().data[0].id)).max() < 1e-5
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def test_unknown_adapters_are_openai_errors(setup):
    _, _, _, port = setup
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
    base = client.models.list().data[0].id
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model=f"{base}:nope", prompt="x", max_tokens=2)
    assert f"{base}:style" in str(e.value)
    code, text = http(port, "POST", "/v1/completions",
                      {"prompt": "x", "max_tokens": 2, "lora": [{"id": 7}]})
    assert code == 400 and json.loads(text)["error"]["param"] == "lora", text
