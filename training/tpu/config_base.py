"""The fields every TPU-stack config has; machine configs fill in the values."""

from ml_collections import config_dict

from training.common import hparams


def tpu_config(recipe, *, model, dtype, fsdp, tp, machine, cpu_devices=0):
    """`recipe` (training/common/hparams.py) plus the TPU stack's machine fields."""
    c = recipe
    c.model = hparams.model(model, dtype)
    c.mesh = config_dict.ConfigDict({"fsdp": fsdp, "tp": tp})
    # A name in common/machines.py: HBM per chip (the fit check) and peak (MFU).
    c.machine = machine
    # 8 virtual CPU devices make mesh and sharding code paths real on a laptop.
    c.cpu_devices = cpu_devices
    # Multi-host: `auto` on TPU pods; explicit coordinator for local tests.
    c.distributed = config_dict.ConfigDict({
        "auto": False, "coordinator_address": "", "num_processes": 1, "process_id": 0})
    # The packed forward pass (training/tpu/forward.py). kernel: "dense" (runs
    # anywhere) or "splash" (Pallas, for TPU; CPU runs it interpreted, slowly);
    # block: splash's query/key block, dividing the sequence length.
    c.attention = config_dict.ConfigDict({"kernel": "dense", "block": 512})
    # > 0: logits (and their float32 softmax) made this many positions at a
    # time instead of all [micro-batch, T, vocab] at once; 0: all at once.
    c.loss_chunk = 0
    # Decoder layers stored stacked per run of one type in the repeating block and
    # run under a scan over the block's repeats (training/tpu/layer_scan.py):
    # XLA compiles the block's layers once, not every repeat. False: every
    # layer unrolled (the same losses; comparison).
    c.scan_layers = True
    # Scanned, False: the block's layers one after another in the loop's body.
    # True: each run of one layer type in the block (31B: 5 sliding-window
    # layers) under a scan of its own, so XLA compiles 2 layers, not the
    # block's 6 (31B on v5p-8: 64 s against 96 s of compile), but the step is
    # slower (on a v5e chip, 12 layers at half width: 2.51 s against 2.31 s;
    # unrolled 2.02 s), and on XLA:CPU's 8 devices a full training run
    # deadlocked in its collectives (docs/performance.md).
    c.scan_runs = False
    # With remat: "layer" recomputes each decoder layer in the backward pass,
    # "block" each scanned block as a whole (fewer saved inputs, one block's
    # activations live at a time).
    c.remat_scope = "layer"
    # The random bits of LoRA dropout's masks: "rbg" is XLA's RngBitGenerator,
    # which a TPU runs natively; JAX's default, "threefry2x32", is a hash that
    # XLA compiles into every mask (on a v5e chip the step compiled 1.5x as long
    # and ran 1.11x as long with it; docs/performance.md). Any of
    # jax.random.key's implementations; step keys fold the step into `seed`'s.
    c.dropout_rng = "rbg"
    # On a slice, rbg's generator is not split across chips: every chip draws
    # each mask whole and keeps its own part (on v5p-8, tp=4: three quarters
    # of each chip's random words are thrown away). True sets libtpu's
    # --xla_tpu_spmd_rng_bit_generator_unsafe=true (LIBTPU_INIT_ARGS, before
    # JAX starts): each chip draws only its part, from the key plus a constant
    # of its own, so the masks then depend on the mesh (the same mesh draws
    # the same masks). Off by default: it cuts the random words per chip 4x on
    # v5p-8, but its speed is not yet measured on a slice. No effect on one
    # chip or with threefry2x32, whose masks are computed per chip already.
    c.dropout_rng_per_chip = False
    c.log_every = 1
    c.max_steps = 0  # 0: the whole data set (epochs x rows / effective batch)
    # JAX's persistent compilation cache in RUN_DIR/compilation_cache (a bucket
    # when the run is in one): a rerun after a preemption loads the compiled
    # step instead of compiling it again. `dir` puts it elsewhere, shared by
    # runs (a local folder or gs://; JAX keys each program by its code,
    # devices and flags). Programs that compile faster than `min_compile_s`
    # are not kept.
    c.compilation_cache = config_dict.ConfigDict(
        {"enabled": True, "dir": "", "min_compile_s": 1.0})
    return c
