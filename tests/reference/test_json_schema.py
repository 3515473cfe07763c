"""Structured output against the `jsonschema` package: 220 generated JSON Schemas (nested
objects with required and optional properties, arrays with item bounds and prefixItems, enums
and consts, integer and number ranges with exclusive bounds, strings with length bounds,
$defs/$ref, anyOf, type lists) are sent as OpenAI `response_format` json_schema (and llama-server's
`json_schema`) to a served random model; every completion must end by itself, parse, and
validate against its schema."""
import concurrent.futures
import json
import random
import signal

import jsonschema
import openai

from test_serve_openai import init_model, start_server


PATTERNS = [r"^[a-z]{2,5}-[0-9]{3}$", r"^(foo|bar|baz)( (foo|bar|baz)){0,2}$",
            r"^\d{2}\.\d{1,2}$", r"^[A-Z][a-z]{0,6}( [A-Z][a-z]{0,6})?$",
            r'^"[a-c\\]{1,4}"$', r"^x.y$", r"^[^a-z]{1,3}$", r"^(?:ab|c)+?d$",
            r"^\w{1,4}\s\S{1,2}$", r"^é[à-ä]{1,2}€$"]


def gen_schema(rng, depth, defs):
    kinds = ["string", "integer", "number", "boolean", "null", "enum", "const", "types",
             "pattern", "format"]
    if depth > 0 and rng.random() < 0.55:  # nested structure more often than leaves
        kinds = ["object", "object", "array", "array", "anyof", "ref"]
    kind = rng.choice(kinds)
    if kind == "string":
        lo = rng.randint(0, 3)
        return {"type": "string", "minLength": lo, "maxLength": lo + rng.randint(0, 6)}
    if kind == "pattern":  # jsonschema checks them with re.search on the decoded string
        return {"type": "string", "pattern": rng.choice(PATTERNS)}
    if kind == "format":  # checked by the 2020-12 format checker (rfc3339-validator for times)
        return {"type": "string",
                "format": rng.choice(["date", "time", "date-time", "uuid", "ipv4", "email"])}
    if kind == "integer":
        s = {"type": "integer"}
        lo = rng.randint(-1000, 1000)
        if rng.random() < 0.7:
            s["exclusiveMinimum" if rng.random() < 0.3 else "minimum"] = lo
        if rng.random() < 0.7:
            s["exclusiveMaximum" if rng.random() < 0.3 else "maximum"] = lo + rng.randint(2, 3000)
        return s
    if kind == "number":
        lo = round(rng.uniform(-50, 50), 2)
        return {"type": "number", "minimum": lo, "maximum": lo + rng.randint(2, 100)}
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "null":
        return {"type": "null"}
    if kind == "enum":
        pool = ["red", "green", "blue", 7, -3, 2.5, True, None, "a\"b", "naïve"]
        return {"enum": rng.sample(pool, rng.randint(1, 4))}
    if kind == "const":
        return {"const": rng.choice(["fixed", 42, False, None])}
    if kind == "types":
        return {"type": ["string", "null"], "maxLength": rng.randint(0, 5)}
    if kind == "object":
        n = rng.randint(1, 4)
        props = {f"p{depth}_{i}": gen_schema(rng, depth - 1, defs) for i in range(n)}
        req = [k for k in props if rng.random() < 0.6]
        return {"type": "object", "properties": props, "required": req}
    if kind == "array":
        lo = rng.randint(0, 2)
        s = {"type": "array", "items": gen_schema(rng, depth - 1, defs), "minItems": lo,
             "maxItems": lo + rng.randint(0, 3)}
        if rng.random() < 0.3:
            s["prefixItems"] = [gen_schema(rng, 0, defs) for _ in range(rng.randint(1, 2))]
            s["minItems"] = 0
        return s
    if kind == "anyof":
        return {"anyOf": [gen_schema(rng, depth - 1, defs) for _ in range(rng.randint(2, 3))]}
    name = f"d{len(defs)}"
    defs[name] = None  # reserved before its body, which may make definitions of its own
    defs[name] = gen_schema(rng, depth - 1, defs)
    return {"$ref": f"#/$defs/{name}"}


def schemas(n, seed=11):
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        defs = {}
        s = gen_schema(rng, 3, defs)
        if s.get("type") != "object":  # a document at the top, as response_format expects
            s = {"type": "object", "properties": {"answer": s, "more": gen_schema(rng, 2, defs)},
                 "required": ["answer"]}
        if defs:
            s["$defs"] = defs
        out.append(s)
    return out


def test_generated_schemas_give_valid_documents(syslm_bin, tmp_path, vocab_dir):
    model = init_model(syslm_bin, vocab_dir, tmp_path / "m.gguf", 2, 64, 4, 2048)
    all_schemas = schemas(220)
    proc, port = start_server(syslm_bin, model, "--ctx-size", "2048", "--parallel", "16")
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        name = client.models.list().data[0].id

        def ask(i):
            s = all_schemas[i]
            kw = dict(model=name, max_tokens=1500, temperature=0.7, seed=i)
            if i % 2:
                r = client.completions.create(prompt=f"Record {i}:", extra_body={"json_schema": s},
                                              **kw)
                return r.choices[0].text, r.choices[0].finish_reason
            r = client.chat.completions.create(
                messages=[{"role": "user", "content": f"Record {i}"}],
                response_format={"type": "json_schema",
                                 "json_schema": {"name": f"s{i}", "schema": s, "strict": True}},
                **kw)
            return r.choices[0].message.content, r.choices[0].finish_reason

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            results = list(pool.map(ask, range(len(all_schemas))))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    failures = []
    for i, ((text, finish), s) in enumerate(zip(results, all_schemas)):
        try:
            assert finish == "stop", f"finish_reason {finish}"
            jsonschema.validate(json.loads(text), s, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        except (AssertionError, ValueError, jsonschema.ValidationError) as e:
            failures.append((i, str(e)[:200], text[:200], json.dumps(s)[:300]))
    assert not failures, f"{len(failures)} of {len(all_schemas)} failed; first: {failures[:3]}"
    # Not only trivial documents: nested ones, of some length.
    assert sum(len(t) for t, _ in results) / len(results) > 40
    assert sum(t.count("{") + t.count("[") > 3 for t, _ in results) > 20
