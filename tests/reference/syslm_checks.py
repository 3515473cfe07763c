"""What the structure checks share: syslm's logits of a model file against a PyTorch model's
(prefill, then decode through the KV cache), `syslm grad`'s loss and gradients against reference
ones, and a changed model's tensors saved as its plain HF checkpoint (for `syslm convert`)."""
import shutil

import numpy as np
import torch
import torch.nn.functional as F

import tiny_hf_models
from test_model_logits import TOLERANCE, rel_err_per_position
from test_train_grads import read_gguf


def check_logits(run_syslm, path, model, tokens, prefill, tmp_path, label):
    """syslm's logits of `tokens` (the first `prefill` in one batch, F32 cache) against model's."""
    with torch.no_grad():
        ref = model(tokens[None]).logits[0].numpy()
    out = tmp_path / "logits.npy"
    run_syslm("logits", "-m", path, "--ids", ",".join(map(str, tokens.tolist())),
              "--prefill", prefill, "-o", out, "-t", 2, "--cache-type", "f32")
    err = rel_err_per_position(np.load(out), ref)
    print(f"{label}: logits max rel err prefill {err[:prefill].max():.2e}, "
          f"decode {err[prefill:].max():.2e}")
    assert err.max() < TOLERANCE, err
    return ref


def check_changes_logits(run_syslm, path, tokens, prefill, ref, tmp_path):
    """The file without the feature (`path`) gives other logits than the reference: the
    feature under test matters."""
    out = tmp_path / "logits-without.npy"
    run_syslm("logits", "-m", path, "--ids", ",".join(map(str, tokens.tolist())),
              "--prefill", prefill, "-o", out, "-t", 2, "--cache-type", "f32")
    assert rel_err_per_position(np.load(out), ref).max() > 1e-2


def llama_with_attention(tmp_path, run_syslm, implementation):
    """transformers' 3-layer test Llama running the attention function registered as
    `implementation`, its checkpoint directory, and its conversion by `syslm convert`."""
    hf_dir = tiny_hf_models.build("llama", tmp_path / "hf")
    model = tiny_hf_models.load(hf_dir)
    model.set_attn_implementation(implementation)
    base = tmp_path / "base.gguf"
    run_syslm("convert", "--hf", hf_dir, "-o", base)
    return hf_dir, model, base


def reference_gradients(run_syslm, model, hf_dir, ids, tmp_path):
    """PyTorch's loss on the batch `ids` (B x T+1) and the gradients of every tensor the
    checkpoint in hf_dir holds, converted to GGUF names and layouts by `syslm convert`."""
    n_vocab = model.config.vocab_size
    logits = model(input_ids=ids[:, :-1]).logits
    loss = F.cross_entropy(logits.reshape(-1, n_vocab), ids[:, 1:].reshape(-1))
    loss.backward()
    save_untied(hf_dir, {k: v.grad for k, v in model.state_dict(keep_vars=True).items()},
                tmp_path / "grads_hf")
    ref_path = tmp_path / "grads_ref.gguf"
    run_syslm("convert", "--hf", tmp_path / "grads_hf", "-o", ref_path)
    return loss, read_gguf(ref_path)[0]


def check_gradients(run_syslm, path, ids, loss, ref, tmp_path, label):
    """`syslm grad` on the batch `ids` (B x T+1): its loss against `loss`, and every gradient
    it writes against ref (name -> flat array), which must name the same tensors."""
    got_path = tmp_path / "grads.gguf"
    out = run_syslm("grad", "-m", path, "--ids", ",".join(map(str, ids.reshape(-1).tolist())),
                    "--batch", ids.shape[0], "-o", got_path, "-t", 2).stdout
    assert abs(float(out.split()[1]) - loss.item()) < 1e-5 * loss.item()
    got, _ = read_gguf(got_path)
    assert set(got) == set(ref)
    worst = 0.0
    for name, g in got.items():
        err = np.abs(g - ref[name]).max() / np.abs(ref[name]).max()
        worst = max(worst, err)
        assert err < 1e-4, f"{name}: max rel err {err:.2e}"
    print(f"{label}: gradients worst tensor rel err {worst:.2e}")


def save_untied(hf_dir, tensors, out_dir):
    """The checkpoint of hf_dir's model with every tensor replaced from `tensors` (state-dict
    names -> tensors; a shared layer's names give its source's)."""
    shutil.copytree(hf_dir, out_dir)
    model = tiny_hf_models.load(hf_dir)
    with torch.no_grad():
        for name, p in model.state_dict(keep_vars=True).items():
            p.copy_(tensors[name])
    model.save_pretrained(out_dir)
