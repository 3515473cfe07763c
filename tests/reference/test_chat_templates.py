"""Chat templates: the prompt `syslm serve` builds (/apply-template) for a conversation equals
the model family's own Jinja template rendered by jinja2 (as transformers' apply_chat_template
does: trim_blocks, lstrip_blocks, add_generation_prompt) for ChatML, Llama-3, Gemma and Phi-3,
recognised from the template text itself (no --chat-template flag: the template is written into
the model's GGUF). BOS is the tokenizer's, so bos_token renders empty. A template of no known
family is refused at start-up with the list of choices.
"""
import json
import subprocess
import urllib.request

import gguf
import jinja2
import numpy as np
import pytest

from test_serve_openai import init_model

TEMPLATES = {
    "chatml": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
              "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
              "{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "llama3": "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
              "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
              "message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = "
              "bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
              "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}",
    "gemma": "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role "
             "not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == "
             "'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
             "{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + "
             "'<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}"
             "{{'<start_of_turn>model\\n'}}{% endif %}",
    "phi3": "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + "
            "message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\\n' + "
            "message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'assistant' %}"
            "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}",
}

CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "  Hello there! "},
    {"role": "assistant", "content": "Hi."},
    {"role": "user", "content": "What is 2+2?"},
]


def model_with_template(tmp_path, syslm_bin, vocab_dir, template):
    base = tmp_path / "base.gguf"
    init_model(syslm_bin, vocab_dir, base, 1, 32, 2, 256)
    reader = gguf.GGUFReader(str(base))
    out = tmp_path / "model.gguf"
    w = gguf.GGUFWriter(str(out), arch=bytes(reader.fields["general.architecture"].parts[-1]).decode())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        t = field.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            sub = field.types[-1]
            vals = [bytes(field.parts[i]).decode() if sub == gguf.GGUFValueType.STRING
                    else field.parts[i].tolist()[0] for i in field.data]
            w.add_array(name, vals)
        elif t == gguf.GGUFValueType.STRING:
            w.add_string(name, bytes(field.parts[-1]).decode())
        else:
            w.add_key_value(name, field.parts[-1].tolist()[0], t)
    w.add_string("tokenizer.chat_template", template)
    for t in reader.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_shape=list(reversed(t.shape.tolist())),
                     raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


@pytest.mark.parametrize("family", list(TEMPLATES))
def test_prompt_equals_the_jinja_template(family, tmp_path, syslm_bin, vocab_dir):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = lambda msg: (_ for _ in ()).throw(ValueError(msg))
    conv = [m for m in CONVERSATION if not (family == "gemma" and m["role"] == "system")]
    want = env.from_string(TEMPLATES[family]).render(messages=conv, add_generation_prompt=True,
                                                     bos_token="", eos_token="</s>")
    model = model_with_template(tmp_path, syslm_bin, vocab_dir, TEMPLATES[family])
    proc = subprocess.Popen([str(syslm_bin), "serve", "-m", str(model), "--port", "0", "-t", "1"],
                            stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in proc.stderr:
            if "listening on" in line:
                port = int(line.split(":")[-1].split()[0])
            if "ready" in line:
                assert f"chat template {family}" in line, line
                break
        req = urllib.request.Request(f"http://127.0.0.1:{port}/apply-template",
                                     data=json.dumps({"messages": conv}).encode(), method="POST")
        got = json.loads(urllib.request.urlopen(req, timeout=30).read())["prompt"]
        assert got == want
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_unknown_template_is_refused(tmp_path, syslm_bin, vocab_dir):
    model = model_with_template(tmp_path, syslm_bin, vocab_dir,
                                "{% for m in messages %}[[{{ m['content'] }}]]{% endfor %}")
    proc = subprocess.run([str(syslm_bin), "serve", "-m", str(model), "--port", "0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "chat template not recognised" in proc.stderr and "chatml" in proc.stderr
