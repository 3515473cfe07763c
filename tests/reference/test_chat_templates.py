"""Chat templates: the prompt `syslm serve` builds (/apply-template) for a conversation equals
the model family's own Jinja template rendered by jinja2 (as transformers' apply_chat_template
does: trim_blocks, lstrip_blocks, add_generation_prompt) for ChatML, Llama-3, Gemma and Phi-3,
recognised from the template text itself (no --chat-template flag: the template is written into
the model's GGUF). BOS is the tokenizer's, so bos_token renders empty. A template of no known
family is refused at start-up with the list of choices.
"""
import contextlib
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


@contextlib.contextmanager
def template_server(syslm_bin, model):
    """`syslm serve` on the model, its template recognised from the file: (port, ready line)."""
    proc = subprocess.Popen([str(syslm_bin), "serve", "-m", str(model), "--port", "0", "-t", "1"],
                            stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in proc.stderr:
            if "listening on" in line:
                port = int(line.split(":")[-1].split()[0])
            if "ready" in line:
                break
        yield port, line
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def apply_template(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/apply-template",
                                 data=json.dumps(body).encode(), method="POST")
    return json.loads(urllib.request.urlopen(req, timeout=30).read())["prompt"]


@pytest.mark.parametrize("family", list(TEMPLATES))
def test_prompt_equals_the_jinja_template(family, tmp_path, syslm_bin, vocab_dir):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = lambda msg: (_ for _ in ()).throw(ValueError(msg))
    conv = [m for m in CONVERSATION if not (family == "gemma" and m["role"] == "system")]
    want = env.from_string(TEMPLATES[family]).render(messages=conv, add_generation_prompt=True,
                                                     bos_token="", eos_token="</s>")
    model = model_with_template(tmp_path, syslm_bin, vocab_dir, TEMPLATES[family])
    with template_server(syslm_bin, model) as (port, ready):
        assert f"chat template {family}" in ready, ready
        assert apply_template(port, {"messages": conv}) == want


def test_unknown_template_is_refused(tmp_path, syslm_bin, vocab_dir):
    model = model_with_template(tmp_path, syslm_bin, vocab_dir,
                                "{% for m in messages %}[[{{ m['content'] }}]]{% endfor %}")
    proc = subprocess.run([str(syslm_bin), "serve", "-m", str(model), "--port", "0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "chat template not recognised" in proc.stderr and "chatml" in proc.stderr


TEMPLATE_DIR = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"

# Keys deliberately out of alphabetical order: the prompt must show them as the client sent them.
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city, e.g. Zürich"},
            "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "description": "Adds two integers", "name": "add",
        "parameters": {"type": "object", "properties": {"b": {"type": "integer"},
                                                        "a": {"type": "integer"}},
                       "required": ["b", "a"]}}},
]
CALL = {"id": "abcDEF123", "type": "function",
        "function": {"name": "get_weather", "arguments": {"unit": "c", "city": "Paris"}}}
WITH_TOOLS = {
    "ends-with-user": [
        {"role": "system", "content": "You are a helpful assistant with tools."},
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "abcDEF123", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 21 degrees and clear."},
        {"role": "user", "content": "And 2 + 3, ünïcode?"},
    ],
    "ends-with-tool": [
        {"role": "user", "content": "Weather in Paris please"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "abcDEF123", "content": "21 C"},
    ],
}


def as_openai(messages):
    """The same conversation as an OpenAI client sends it: arguments as a JSON string."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "function": {**c["function"],
                                                  "arguments": json.dumps(c["function"]["arguments"])}}
                               for c in m["tool_calls"]]
        out.append(m)
    return out


def hf_render(template, messages, tools):
    """transformers' apply_chat_template on a bare tokenizer (no BOS: syslm's tokenizer adds it)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({"</s>": 0, "x": 1},
                                                                       unk_token="x")),
                                  eos_token="</s>")
    return tok.apply_chat_template(messages, tools=tools, chat_template=template, tokenize=False,
                                   add_generation_prompt=True)


@pytest.mark.parametrize("template_file,family", [
    ("Qwen-Qwen2.5-7B-Instruct.jinja", "qwen2.5"),
    ("meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3.1"),
    ("meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3.2"),
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral-v3-tekken"),
])
def test_tools_and_calls_render_as_the_models_own_template(template_file, family, tmp_path,
                                                           syslm_bin, vocab_dir):
    """Tool definitions, an assistant's call, the tool's result and later turns: the prompt
    /apply-template builds equals transformers' apply_chat_template with the model's own Jinja
    template (recognised from the GGUF's text), with and without tools."""
    template = (TEMPLATE_DIR / template_file).read_text()
    model = model_with_template(tmp_path, syslm_bin, vocab_dir, template)
    with template_server(syslm_bin, model) as (port, ready):
        assert f"chat template {family}," in ready, ready
        for name, conv in WITH_TOOLS.items():
            want = hf_render(template, conv, TOOLS)
            assert apply_template(port, {"messages": as_openai(conv), "tools": TOOLS}) == want, name
            plain = [m for m in conv if m["role"] == "system"] + \
                [next(m for m in conv if m["role"] == "user")]
            assert apply_template(port, {"messages": plain}) == hf_render(template, plain, None), name
