"""Bad input to the data commands (issue 23): a binary file, an empty file and a document that is
not valid UTF-8 are reported and skipped with a count, never crashed on and never turned into
tokens, by data clean, data prepare, data score and data mix alike."""
import json
import shutil


def make_inputs(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    shutil.copy("/bin/ls", d / "ls.bin")
    (d / "empty.txt").write_bytes(b"")
    (d / "text.txt").write_bytes(b"In the beginning God created the heaven and the earth.\n\n"
                                 b"bad \xff\xfe bytes in this one\n\n"
                                 b"And the earth was without form, and void.\n")
    return d


def test_binary_empty_and_invalid_utf8_are_skipped_and_counted(tmp_path, run_syslm, vocab_dir):
    d = make_inputs(tmp_path)
    tok = vocab_dir / "ggml-vocab-gpt-2.gguf"
    r = run_syslm("data", "clean", "-f", d, "-o", tmp_path / "clean", "--dedup", "exact")
    assert "skipped 1 binary and 1 empty files, 1 documents that are not UTF-8" in r.stdout
    assert sorted(p.name for p in (tmp_path / "clean").iterdir()) == ["text.txt"]
    assert b"\xff" not in (tmp_path / "clean" / "text.txt").read_bytes()
    # data prepare: the binary file named, the bad document counted, two documents tokenized
    r = run_syslm("data", "prepare", "-f", d / "ls.bin", "-f", d / "text.txt", "--tokenizer",
                  tok, "-o", tmp_path / "data", "--val", 0)
    assert "ls.bin: a binary file" in r.stderr and "skipped 1 documents that are not valid" in r.stderr
    assert "2 documents" in r.stdout
    # data score and data mix read documents the same way
    model = tmp_path / "m.gguf"
    run_syslm("init", "--vocab", tok, "--layers", 1, "--dim", 16, "--heads", 2, "--ctx", 64,
              "-o", model)
    r = run_syslm("data", "score", "-m", model, "-f", d, "-o", tmp_path / "s.jsonl")
    assert "skipped 1 binary and 1 empty files" in r.stderr
    assert len((tmp_path / "s.jsonl").read_text().splitlines()) == 2
    r = run_syslm("data", "mix", "--source", f"t={d}", "--tokenizer", tok, "-o", tmp_path / "mix",
                  "--val", 0)
    assert "source 't': skipped 1 binary and 1 empty files, 1 documents" in r.stderr
    assert json.loads((tmp_path / "mix" / "mixture.json").read_text())["strata"][0]["docs"] == 2
