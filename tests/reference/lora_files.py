"""Random LoRA adapters in llama.cpp's adapter GGUF for a GGUF base model, written with gguf-py:
A and B both random (B is zero at training's start, which would change nothing). Shared by
test_serve_lora.py and bench/serve/bench_lora.py."""
import gguf
import numpy as np

ALL_TARGETS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def write_random_adapter(base, path, rank, seed, targets=ALL_TARGETS, std=0.2, dtype=np.float32):
    reader = gguf.GGUFReader(str(base))
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    w = gguf.GGUFWriter(str(path), arch=arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", 2.0 * rank)
    rng = np.random.default_rng(seed)
    for t in reader.tensors:
        parts = t.name.split(".")
        if len(parts) == 4 and parts[2] in targets and parts[3] == "weight":
            n_in, n_out = int(t.shape[0]), int(t.shape[1])
            w.add_tensor(t.name + ".lora_a", (std * rng.standard_normal((rank, n_in))).astype(dtype))
            w.add_tensor(t.name + ".lora_b", (std * rng.standard_normal((n_out, rank))).astype(dtype))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
