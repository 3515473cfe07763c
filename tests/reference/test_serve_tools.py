"""Tool calls through the official `openai` client on a random model (validity, not sense):
`tool_choice` required and a named function constrain the answer to calls in the chat family's
syntax whose arguments validate against each tool's JSON schema (checked with `jsonschema`),
streamed and not; the whole flow (call, tool result, answer) works; `none` leaves the tools out;
bad tools are OpenAI-shaped 400s. The prompts and call syntax of each family are checked in
test_chat_templates.py; the lazy grammar of `auto` in tests/infer (EngineGrammar)."""
import json
import signal

import jsonschema
import openai
import pytest

from test_chat_templates import TEMPLATE_DIR, model_with_template
from test_serve_openai import http, init_model, start_server

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 12},
            "unit": {"type": "string", "enum": ["c", "f"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city", "days"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds numbers",
        "parameters": {"type": "object", "properties": {
            "terms": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3}},
            "required": ["terms"], "additionalProperties": False}}},
]
MODEL = "syslm random-init"
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def check_calls(calls):
    assert calls, "no tool calls"
    for c in calls:
        assert c.type == "function" and c.id
        jsonschema.validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])


@pytest.fixture(scope="module", params=["chatml", "llama3.1", "mistral-nemo"])
def server(request, tmp_path_factory, syslm_bin, vocab_dir):
    d = tmp_path_factory.mktemp("tools")
    extra = ["--ctx-size", "1024"]
    if request.param == "chatml":
        model = init_model(syslm_bin, vocab_dir, d / "model.gguf", 2, 64, 4, 1024)
    else:
        name = {"llama3.1": "meta-llama-Llama-3.1-8B-Instruct.jinja",
                "mistral-nemo": "mistralai-Mistral-Nemo-Instruct-2407.jinja"}[request.param]
        model = model_with_template(d, syslm_bin, vocab_dir, (TEMPLATE_DIR / name).read_text())
        extra += ["--chat-template", {"llama3.1": "llama3.1", "mistral-nemo": "mistral-v3-tekken"}[request.param]]
    proc, port = start_server(syslm_bin, model, *extra)
    yield request.param, port
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{server[1]}/v1", api_key="unused")


def test_required_and_named_calls_validate_streamed_or_not(client, server):
    family = server[0]
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Weather in Paris for 3 days?"}],
        tools=TOOLS, tool_choice="required", n=3, temperature=1.0, seed=7, max_tokens=200,
        parallel_tool_calls=False)
    for ch in r.choices:
        assert ch.finish_reason == "tool_calls", ch
        check_calls(ch.message.tool_calls)
        if family == "llama3.1":
            assert len(ch.message.tool_calls) == 1
        if family == "mistral-nemo":
            assert all(len(c.id) == 9 and c.id.isalnum() for c in ch.message.tool_calls)
    args = dict(model=MODEL, messages=[{"role": "user", "content": "Add 2 and 3"}], tools=TOOLS,
                tool_choice={"type": "function", "function": {"name": "add"}}, temperature=0,
                max_tokens=200)
    whole = client.chat.completions.create(**args)
    assert whole.choices[0].finish_reason == "tool_calls"
    check_calls(whole.choices[0].message.tool_calls)
    assert [c.function.name for c in whole.choices[0].message.tool_calls] == ["add"]
    calls, finish = {}, None
    for chunk in client.chat.completions.create(**args, stream=True):
        for d in chunk.choices[0].delta.tool_calls or []:
            if d.id:
                assert d.index not in calls and d.function.name
                calls[d.index] = [d.function.name, d.function.arguments or ""]
            else:
                calls[d.index][1] += d.function.arguments
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert [(n, a) for n, a in calls.values()] == \
        [(c.function.name, c.function.arguments) for c in whole.choices[0].message.tool_calls]


def test_call_result_answer_flow_and_tool_choice_none(client, server):
    messages = [{"role": "system", "content": "Use tools."},
                {"role": "user", "content": "What is the weather in Oslo?"}]
    r = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS,
                                       tool_choice="required", temperature=0, max_tokens=200)
    msg = r.choices[0].message
    check_calls(msg.tool_calls)
    messages.append(msg.model_dump(exclude_none=True))
    for c in msg.tool_calls:
        messages.append({"role": "tool", "tool_call_id": c.id, "content": "sunny, 18 C"})
    prompt = json.loads(http(server[1], "POST", "/apply-template",
                             {"messages": messages, "tools": TOOLS})[1])["prompt"]
    assert "sunny, 18 C" in prompt and msg.tool_calls[0].function.name in prompt
    answer = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS,
                                            tool_choice="none", temperature=0, max_tokens=8)
    assert answer.choices[0].message.tool_calls is None
    assert answer.choices[0].finish_reason == "length" and answer.choices[0].message.content
    # tool_choice none: the definitions are not in the prompt
    without = json.loads(http(server[1], "POST", "/apply-template",
                              {"messages": messages[:2], "tools": TOOLS,
                               "tool_choice": "none"})[1])["prompt"]
    assert "get_weather" not in without


@pytest.mark.parametrize("body,param", [
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": TOOLS + TOOLS[:1]}, "tools"),
    ({"tools": TOOLS, "response_format": {"type": "json_object"}}, "tools"),
    ({"tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"x": {"format": "date"}}}}}]},
     "tools"),
    ({"tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {
            "x": {"type": "array", "minItems": "two"}}}}}]}, "tools"),
])
def test_bad_tools_are_openai_errors(server, body, param):
    code, text = http(server[1], "POST", "/v1/chat/completions",
                      {"messages": [{"role": "user", "content": "hi"}], **body})
    assert code == 400, text
    assert json.loads(text)["error"]["param"] == param, text
