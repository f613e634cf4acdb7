"""Measures what a GPU-stack step allocates, on CPU, against the memory plan.

    bazel run //training/gpu:memory_calibration

A mid-size random Gemma 4 (bf16, LoRA on every projection with dropout, AdamW,
transformers' sdpa) takes a warm-up step, so that the LoRA gradients and AdamW
moments exist; then a torch dispatch mode counts the bytes of every storage that
an op creates during one more step, as long as it lives, and keeps the peak:
the activations and logits of that step, no CUDA needed. Each row prints that
peak beside memory_plan's activations + logits for the same shape. The first
rows vary one width each (they gave memory_plan's coefficients); the last are
shapes the coefficients were not taken from.
"""

import time
import weakref

from absl import app
from absl import flags

SHAPES = (  # (D, F, heads, vocab, tokens, remat)
    (512, 2048, 8, 32768, 512, False),
    (512, 4096, 8, 32768, 512, False),
    (512, 2048, 16, 32768, 512, False),
    (1024, 2048, 8, 32768, 512, False),
    (512, 2048, 8, 65536, 512, False),
    (768, 3072, 12, 49152, 768, False),
    (768, 3072, 12, 49152, 768, True),
    (512, 2048, 8, 32768, 1024, True),
)
LAYERS = 6  # 5 sliding, 1 global, as the 31B's repeating block

_SHAPES = flags.DEFINE_string(
    "shapes", "", "D,F,heads,vocab,tokens,remat;... instead of the built-in rows.")


def _tracker():
    import torch  # pylint: disable=import-outside-toplevel
    from torch.utils._python_dispatch import TorchDispatchMode  # pylint: disable=import-outside-toplevel
    from torch.utils._pytree import tree_flatten  # pylint: disable=import-outside-toplevel

    class LiveBytes(TorchDispatchMode):
        """The peak bytes of the storages ops create while it is active."""

        def __init__(self):
            super().__init__()
            self.current = self.peak = 0
            self._alive = {}

        def _freed(self, key, size):
            self._alive.pop(key, None)
            self.current -= size

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for tensor in tree_flatten(out)[0]:
                if not isinstance(tensor, torch.Tensor):
                    continue
                storage = tensor.untyped_storage()
                key = id(storage)
                if key in self._alive:
                    continue
                size = storage.nbytes()
                self._alive[key] = weakref.ref(storage,
                                               lambda _, k=key, s=size: self._freed(k, s))
                self.current += size
                self.peak = max(self.peak, self.current)
            return out

    return LiveBytes


def measure(d, f, heads, vocab, tokens, remat, seed=0):
    """(measured peak bytes of one step, planned activations + logits, Dims)."""
    import torch  # pylint: disable=import-outside-toplevel
    import transformers  # pylint: disable=import-outside-toplevel
    from peft import LoraConfig  # pylint: disable=import-outside-toplevel
    from peft import get_peft_model  # pylint: disable=import-outside-toplevel

    from training.common import hparams  # pylint: disable=import-outside-toplevel
    from gemma4 import gemma4_map  # pylint: disable=import-outside-toplevel
    from gemma4 import tiny_model  # pylint: disable=import-outside-toplevel
    from training.gpu import memory_plan  # pylint: disable=import-outside-toplevel
    from training.gpu import trainer  # pylint: disable=import-outside-toplevel

    text = tiny_model.tiny_config(vocab, hidden_size=d, intermediate_size=f,
                                  num_attention_heads=heads, num_key_value_heads=4, head_dim=64,
                                  num_global_key_value_heads=2, global_head_dim=128,
                                  sliding_window=128, num_hidden_layers=LAYERS)
    torch.manual_seed(seed)
    model = transformers.Gemma4ForCausalLM(text).to(torch.bfloat16)
    model.set_attn_implementation("sdpa")
    recipe = hparams.reference()
    model = get_peft_model(model, LoraConfig(
        r=16, lora_alpha=16, lora_dropout=recipe.lora.dropout, task_type="CAUSAL_LM",
        target_modules=trainer.lora_target_regex(recipe.lora.target_modules)))
    if remat:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    ids = torch.randint(3, vocab, (1, tokens))

    def step():
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)

    step()  # gradients and moments now exist: the plan counts them apart
    tracker = _tracker()()
    with tracker:
        step()
    dims = gemma4_map.Dims.from_hf_config(text.to_dict())
    parts = memory_plan.estimate(
        dims, processes=1, fsdp=False, micro_batch=1, seq_len=tokens, base_bytes=2,
        lora_rank=16, tunix_modules=gemma4_map.tunix_lora_modules(recipe.lora.target_modules),
        remat=remat)
    return tracker.peak, parts["activations"] + parts["logits"], dims


def main(argv):
    del argv
    shapes = SHAPES
    if _SHAPES.value:
        shapes = [tuple(int(v) for v in row.split(",")) for row in _SHAPES.value.split(";")]
    print(f"{'D':>5} {'F':>5} {'heads':>5} {'vocab':>6} {'tokens':>6} {'remat':>5}  "
          f"{'measured MiB':>12} {'planned MiB':>11} {'plan / measured':>15}")
    for d, f, heads, vocab, tokens, remat in shapes:
        started = time.time()
        measured, planned, _ = measure(d, f, heads, vocab, tokens, bool(remat))
        print(f"{d:>5} {f:>5} {heads:>5} {vocab:>6} {tokens:>6} {'on' if remat else 'off':>5}  "
              f"{measured / 2**20:12.1f} {planned / 2**20:11.1f} {planned / measured:15.3f}"
              f"   ({time.time() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    app.run(main)
