"""Merged export of a multi-GB random Gemma 4: throughput and peak memory.

    bazel run //conversion:benchmark -- --layers=16

Writes a synthetic bf16 Gemma 4 (sizes below, several safetensors shards with
an index) and a rank-64 LoRA on every target, then in the same run times
  * a plain copy of the same shard bytes (the I/O ceiling), and
  * the merged export (read, W + (alpha/r) B @ A in fp32, write),
each in a fresh subprocess whose peak RSS is read back. Goals: merge at least
0.5x the copy's bytes/s, peak RSS at most 2x the largest shard (reported both
raw and above the interpreter's import baseline). The copy reads the shards
from the page cache (they were just written), so it is an upper bound; the
merge is bound by the B @ A products (2 x rank FLOPs per weight element).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

_LAYERS = flags.DEFINE_integer("layers", 16, "Decoder layers of the synthetic model.")
_SHARD_MB = flags.DEFINE_integer("shard_mb", 512, "Target shard size.")
_OUTPUT_JSON = flags.DEFINE_string("output_json", None, "Also write the figures here.")

CONFIG = dict(hidden_size=2048, intermediate_size=8192, num_attention_heads=16,
              num_key_value_heads=8, head_dim=128, num_global_key_value_heads=4,
              global_head_dim=256, vocab_size=32768)


def _child(code):
    """Runs `code` in a fresh interpreter; returns (seconds, peak RSS bytes)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True)
    seconds = time.perf_counter() - started
    if result.returncode:
        raise RuntimeError(result.stderr[-3000:])
    return seconds, int(result.stdout.strip().splitlines()[-1]) * 1024


# The child's own high-water mark (VmHWM): ru_maxrss would carry over the
# parent's across fork + exec on Linux.
_PEAK = ("print(next(int(l.split()[1]) for l in open('/proc/self/status') "
         "if l.startswith('VmHWM')))")


def build(directory, layers, shard_mb):
    """The synthetic base (bf16 shards + index) and a fake TPU run holding a LoRA."""
    import torch  # pylint: disable=import-outside-toplevel
    from safetensors.torch import save_file  # pylint: disable=import-outside-toplevel
    from conversion import gemma4_map  # pylint: disable=import-outside-toplevel
    from conversion import testing  # pylint: disable=import-outside-toplevel
    from training.common import tiny_model  # pylint: disable=import-outside-toplevel
    from training.tpu.configs import cpu  # pylint: disable=import-outside-toplevel
    base = os.path.join(directory, "base")
    os.makedirs(base)
    config = tiny_model.tiny_config(CONFIG["vocab_size"], num_hidden_layers=layers,
                                    **{k: v for k, v in CONFIG.items() if k != "vocab_size"})
    config.save_pretrained(base)
    dims = gemma4_map.Dims.from_hf_config(json.load(open(os.path.join(base, "config.json"))))
    generator = torch.Generator().manual_seed(0)
    weight_map, shard, shard_bytes, number = {}, {}, 0, 0

    def flush():
        nonlocal shard, shard_bytes, number
        if shard:
            number += 1
            name = f"model-{number:05d}.safetensors"
            save_file(shard, os.path.join(base, name), metadata={"format": "pt"})
            weight_map.update({k: name for k in shard})
            shard, shard_bytes = {}, 0

    for name in gemma4_map.base_names(dims):
        shape = gemma4_map.expected_hf_shape(dims, name)
        tensor = (0.02 * torch.randn(shape, generator=generator)).to(torch.bfloat16)
        if shard_bytes + tensor.numel() * 2 > shard_mb * 2**20:
            flush()
        shard[name] = tensor
        shard_bytes += tensor.numel() * 2
    flush()
    total = sum(os.path.getsize(os.path.join(base, f)) for f in set(weight_map.values()))
    with open(os.path.join(base, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    run_config = cpu.get_config()
    run_config.lora.rank, run_config.lora.alpha = 64, 64.0
    factors = testing.random_factors(dims, run_config.lora)
    run = testing.fake_run(os.path.join(directory, "run"), base, run_config, factors)
    largest = max(os.path.getsize(os.path.join(base, f)) for f in set(weight_map.values()))
    return base, run, total, largest, len(set(weight_map.values()))


def run(directory, layers, shard_mb):
    base, run_dir, total, largest, shards = build(directory, layers, shard_mb)
    copy_dir = os.path.join(directory, "copy")
    copy_code = (f"import os, shutil; os.makedirs({copy_dir!r}); "
                 f"[shutil.copyfile(os.path.join({base!r}, f), os.path.join({copy_dir!r}, f)) "
                 f"for f in sorted(os.listdir({base!r})) if f.endswith('.safetensors')]; "
                 + _PEAK)
    copy_seconds, copy_rss = _child(copy_code)
    shutil.rmtree(copy_dir)
    baseline_seconds, baseline_rss = _child("from conversion import exporting; " + _PEAK)
    merge_code = (f"from conversion import exporting; exporting.export({run_dir!r}, "
                  f"{os.path.join(directory, 'merged')!r}, 'merged', progress=False); " + _PEAK)
    merge_seconds, merge_rss = _child(merge_code)
    merge_seconds -= baseline_seconds  # import time is not merge work
    return {
        "shards": shards, "total_bytes": total, "largest_shard_bytes": largest,
        "copy": {"seconds": copy_seconds, "bytes_per_s": total / copy_seconds,
                 "peak_rss_bytes": copy_rss},
        "merge": {"seconds": merge_seconds, "bytes_per_s": total / merge_seconds,
                  "peak_rss_bytes": merge_rss,
                  "peak_rss_above_import_baseline": merge_rss - baseline_rss},
        "import_baseline_rss_bytes": baseline_rss,
        "merge_over_copy_speed": copy_seconds / merge_seconds,
        "peak_rss_over_largest_shard": merge_rss / largest,
        "peak_rss_above_baseline_over_largest_shard": (merge_rss - baseline_rss) / largest,
        "goals": {"merge_over_copy_speed": 0.5, "peak_rss_over_largest_shard": 2.0},
    }


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    with tempfile.TemporaryDirectory() as directory:
        results = run(directory, _LAYERS.value, _SHARD_MB.value)
    print(json.dumps(results, indent=2))
    gib = 2**30
    print(f"\n{results['total_bytes'] / gib:.2f} GiB in {results['shards']} shards: merge "
          f"{results['merge']['bytes_per_s'] / 2**20:.0f} MiB/s vs copy "
          f"{results['copy']['bytes_per_s'] / 2**20:.0f} MiB/s "
          f"({results['merge_over_copy_speed']:.2f}x); peak RSS "
          f"{results['merge']['peak_rss_bytes'] / gib:.2f} GiB = "
          f"{results['peak_rss_over_largest_shard']:.2f}x the largest shard "
          f"({results['peak_rss_above_baseline_over_largest_shard']:.2f}x above imports)")
    if _OUTPUT_JSON.value:
        from tools import config_cli  # pylint: disable=import-outside-toplevel
        with open(config_cli.user_path(_OUTPUT_JSON.value), "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    app.run(main)
