"""Merged export of a multi-GB random Gemma 4: throughput and peak memory.

    bazel run //conversion:benchmark -- --layers=16

Writes a synthetic bf16 Gemma 4 (sizes below, several safetensors shards with
an index) and a rank-64 LoRA on every target, then times, in the same run and
each in a fresh subprocess whose peak RSS and CPU time are read back:
  * copy: a plain copy of the shard bytes to the disk (`cp` + `sync`:
    copyfile, then fsync);
  * stream: the same bytes through the merge's own I/O path with no factors
    (kernel copies in 16 MiB chunks that leave the page cache, then fsync):
    the I/O floor of the merge;
  * merge: the merged export (read, W + (alpha/r) B @ A in fp32, write; the
    export always fsyncs, so that its atomic rename publishes complete files).
Before each, earlier writes are flushed and the base shards are dropped from
the page cache, so all three read from and write to the disk, as a real export of
a 62 GB model does. The three alternate, `--repeats` times each; medians are
reported. CPU seconds show what the merge costs beyond the I/O. A plain copy
varies a lot with the machine's memory state (on a VM, page-cache pages that
are new to the guest are slow), which the merge avoids by reusing its pages;
the stream baseline shares that, so merge/stream is the cost of the compute.
Goals: merge at least 0.5x the copy's bytes/s, peak RSS at most 2x the largest
shard (reported both raw and above the interpreter's import baseline).
"""

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

from common import binaries
from common import cli

_LAYERS = flags.DEFINE_integer("layers", 16, "Decoder layers of the synthetic model.")
_SHARD_MB = flags.DEFINE_integer("shard_mb", 512, "Target shard size.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed runs of each copy and merge.")
_OUTPUT_JSON = flags.DEFINE_string("output_json", None, "Also write the figures here.")

CONFIG = dict(hidden_size=2048, intermediate_size=8192, num_attention_heads=16,
              num_key_value_heads=8, head_dim=128, num_global_key_value_heads=4,
              global_head_dim=256, vocab_size=32768)


def _child(code):
    """Runs `code` in a fresh interpreter; returns (seconds, CPU seconds, peak RSS bytes)."""
    env = binaries.this_interpreter_env()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode:
        raise RuntimeError(result.stderr[-3000:])
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return seconds, cpu, int(result.stdout.strip().splitlines()[-1]) * 1024


# The child's own high-water mark (VmHWM): ru_maxrss would carry over the
# parent's across fork + exec on Linux.
_PEAK = ("print(next(int(l.split()[1]) for l in open('/proc/self/status') "
         "if l.startswith('VmHWM')))")


def _settle(shards):
    """Flushes earlier writes and drops the shards from the page cache."""
    os.sync()
    for path in shards:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _copy_code(shards, out):
    return (f"import os, shutil; os.makedirs({out!r}); "
            f"outs = [os.path.join({out!r}, os.path.basename(p)) for p in {shards!r}]; "
            f"[shutil.copyfile(p, o) for p, o in zip({shards!r}, outs)]; "
            f"[os.fsync(os.open(o, os.O_RDONLY)) for o in outs]; " + _PEAK)


def _stream_code(base, out):
    return (f"import os; from conversion import merge; os.makedirs({out!r}); "
            f"merge.merge({base!r}, {out!r}, {{}}, 1.0); " + _PEAK)


def _merge_code(run_dir, out):
    return (f"from conversion import exporting; exporting.export({run_dir!r}, {out!r}, "
            f"'merged', progress=False); " + _PEAK)


def build(directory, layers, shard_mb):
    """The synthetic base (bf16 shards + index) and a fake TPU run holding a LoRA."""
    import torch  # pylint: disable=import-outside-toplevel
    from safetensors.torch import save_file  # pylint: disable=import-outside-toplevel
    from gemma4 import gemma4_map  # pylint: disable=import-outside-toplevel
    from conversion import testing  # pylint: disable=import-outside-toplevel
    from gemma4 import tiny_model  # pylint: disable=import-outside-toplevel
    from training.tpu import testing as tpu_testing  # pylint: disable=import-outside-toplevel
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
    factors = tpu_testing.random_factors(dims, run_config.lora)
    run = testing.fake_run(os.path.join(directory, "run"), base, run_config, factors)
    largest = max(os.path.getsize(os.path.join(base, f)) for f in set(weight_map.values()))
    return base, run, total, largest, len(set(weight_map.values()))


def run(directory, layers, shard_mb, repeats):
    base, run_dir, total, largest, shards = build(directory, layers, shard_mb)
    paths = sorted(os.path.join(base, f) for f in os.listdir(base) if f.endswith(".safetensors"))
    # Interpreter start and imports are not merge work: measured alone, subtracted.
    imports = {kind: [_child(f"from conversion import {module}; " + _PEAK)
                      for _ in range(repeats)]
               for kind, module in (("stream", "merge"), ("merge", "exporting"))}
    baselines = {kind: (statistics.median(s for s, _, _ in runs),
                        statistics.median(c for _, c, _ in runs), max(r for _, _, r in runs))
                 for kind, runs in imports.items()}
    out = os.path.join(directory, "out")
    codes = {"copy": _copy_code(paths, out), "stream": _stream_code(base, out),
             "merge": _merge_code(run_dir, out)}
    runs = {kind: [] for kind in codes}
    for _ in range(repeats):
        for kind, runs_of_kind in runs.items():
            _settle(paths)
            seconds, cpu, rss = _child(codes[kind])
            if kind in baselines:
                seconds, cpu = seconds - baselines[kind][0], cpu - baselines[kind][1]
            runs_of_kind.append((seconds, cpu, rss))
            shutil.rmtree(out)
    figures = {}
    for kind, runs_of_kind in runs.items():
        seconds = statistics.median(s for s, _, _ in runs_of_kind)
        figures[kind] = {"seconds": [s for s, _, _ in runs_of_kind],
                         "cpu_seconds": [c for _, c, _ in runs_of_kind],
                         "bytes_per_s": total / seconds,
                         "peak_rss_bytes": max(r for _, _, r in runs_of_kind)}
    merge_rss, baseline_rss = figures["merge"]["peak_rss_bytes"], baselines["merge"][2]
    return {
        "shards": shards, "total_bytes": total, "largest_shard_bytes": largest,
        "import_baselines": {kind: dict(zip(("seconds", "cpu_seconds", "peak_rss_bytes"), value))
                             for kind, value in baselines.items()},
        **figures,
        "merge_over_copy_speed": figures["merge"]["bytes_per_s"] / figures["copy"]["bytes_per_s"],
        "merge_over_fastest_copy_speed": min(figures["copy"]["seconds"]) / statistics.median(
            figures["merge"]["seconds"]),
        "merge_over_stream_speed": (figures["merge"]["bytes_per_s"]
                                    / figures["stream"]["bytes_per_s"]),
        "peak_rss_over_largest_shard": merge_rss / largest,
        "peak_rss_above_baseline_over_largest_shard": (merge_rss - baseline_rss) / largest,
        "goals": {"merge_over_copy_speed": 0.5, "peak_rss_over_largest_shard": 2.0},
    }


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    with tempfile.TemporaryDirectory() as directory:
        results = run(directory, _LAYERS.value, _SHARD_MB.value, _REPEATS.value)
    print(json.dumps(results, indent=2))
    gib, mib = 2**30, 2**20
    cpu = {k: statistics.median(results[k]["cpu_seconds"]) for k in ("copy", "stream", "merge")}
    print(f"\n{results['total_bytes'] / gib:.2f} GiB in {results['shards']} shards, largest "
          f"{results['largest_shard_bytes'] / gib:.2f} GiB\n"
          f"merge {results['merge']['bytes_per_s'] / mib:.0f} MiB/s vs copy "
          f"{results['copy']['bytes_per_s'] / mib:.0f} MiB/s: "
          f"{results['merge_over_copy_speed']:.2f}x (goal 0.5x; "
          f"{results['merge_over_fastest_copy_speed']:.2f}x the fastest copy); stream "
          f"{results['stream']['bytes_per_s'] / mib:.0f} MiB/s: merge/stream "
          f"{results['merge_over_stream_speed']:.2f}x\n"
          f"CPU seconds: merge {cpu['merge']:.1f}, stream {cpu['stream']:.1f}, "
          f"copy {cpu['copy']:.1f}\n"
          f"peak RSS {results['merge']['peak_rss_bytes'] / gib:.2f} GiB = "
          f"{results['peak_rss_over_largest_shard']:.2f}x the largest shard "
          f"({results['peak_rss_above_baseline_over_largest_shard']:.2f}x above imports; "
          "goal 2x)")
    if _OUTPUT_JSON.value:
        from common import config_cli  # pylint: disable=import-outside-toplevel
        with open(config_cli.user_path(_OUTPUT_JSON.value), "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    cli.run(main)
