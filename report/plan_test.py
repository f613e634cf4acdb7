"""The planner: extrapolation per layer, its cache, the calibration arithmetic,
configs that do not fit, the data's steps, and bad input as one error line."""

import dataclasses
import json
import os
import subprocess
from unittest import mock

from training.tpu import aot

aot.use_libtpu()  # before JAX starts

# pylint: disable=wrong-import-position
import numpy as np
from absl.testing import absltest

from common import binaries
from common import calibration
from common import config_cli
from common import machines
from gemma4 import base_model
from gemma4 import gemma4_map
from report import comparison
from report import plan as plan_lib
from report import planning
from training.tpu import extrapolate
from training.tpu.configs import v5p8

H100X1, H100X2 = machines.get("gpu-h100x1"), machines.get("gpu-h100x2")


def dims_31b(layers=None):
    hf_config, _ = base_model.config_only("google/gemma-4-31B-it")
    dims = gemma4_map.Dims.from_hf_config(hf_config)
    return dims if layers is None else extrapolate.cut(dims, layers)


def small_dims(blocks):
    """`blocks` repeats of a sliding and a global layer of 31B at a few MB."""
    types = dims_31b().layer_types
    return dataclasses.replace(dims_31b(), layer_types=(types[0], types[5]) * blocks, vocab=1024, embed=256, mlp=512, heads=8,
                               kv_heads=4, global_kv_heads=4, head_dim=64, global_head_dim=128)


def small_config():
    config = v5p8.get_config()
    config.data.max_seq_len = 256
    config.attention.block = 128
    return config


def gpu_config(**overrides):
    config = plan_lib.machine_configs(["gpu-h100x2"])[0][2]
    config.update_from_flattened_dict(overrides)
    return config


def rates():
    return planning.Rates(download_gbps=0.5, load_gbps=0.25, checkpoint_gbps=1.0)


def layout(steps=100, seq_len=3072):
    return {"examples": 8 * steps, "sequences": 8 * steps, "steps": steps, "seq_len": seq_len,
            "packed": True, "tokens": 0, "trained_tokens": 0, "non_padding_fraction": 0.9,
            "trained_fraction": 0.2, "eval_sequences": 0}


class ExtrapolationTest(absltest.TestCase):

    def test_two_blocks_extend_to_three_within_three_percent_and_are_cached(self):
        dims, config = small_dims(3), small_config()
        self.assertEqual(extrapolate.sizes(dims, config), (2, 4))
        config.scan_layers = True
        self.assertIsNone(extrapolate.sizes(dims, config))  # scanned: compiled whole
        config.scan_layers = False
        machine = machines.get("tpu-v5p-8")
        cache = extrapolate.Cache(self.create_tempdir().full_path)
        extended = extrapolate.compile_step(dims, config, machine, cache)
        self.assertEqual(extended["extrapolated"]["from_layers"], [2, 4])
        self.assertEqual(cache.misses, 2)
        whole = extrapolate.compile_step(dims, config, machine, cache, whole=True)
        self.assertIsNone(whole["extrapolated"])
        for name in ("xla_flops", "xla_bytes_accessed"):
            self.assertAlmostEqual(extended[name] / whole[name], 1, delta=0.03, msg=name)
        self.assertAlmostEqual(aot.per_chip_bytes(extended["memory"]) /
                               aot.per_chip_bytes(whole["memory"]), 1, delta=0.03)
        # A second plan of the same inputs compiles nothing.
        with mock.patch.object(aot, "compile_step", side_effect=AssertionError("compiled")):
            again = extrapolate.compile_step(dims, config, machine, cache)
        self.assertTrue(again["cached"])
        self.assertEqual(again["xla_flops"], extended["xla_flops"])
        self.assertEqual(cache.hits, 2)
        # What determines the compile is in the key: another sequence length compiles again.
        longer = small_config()
        longer.data.max_seq_len = 512
        self.assertNotEqual(extrapolate.cache_key(dims, config, machine, 6),
                            extrapolate.cache_key(dims, longer, machine, 6))
        self.assertNotEqual(extrapolate.cache_key(dims, config, machine, 6),
                            extrapolate.cache_key(dims, config, machines.get("tpu-v5p-16"), 6))
        # The plan's TPU step from the cache: fits v5p-8, not a chip of a few MB of HBM.
        step = planning.tpu_step(machine, config, dims, layout(seq_len=256), cache)
        self.assertTrue(step.fits)
        self.assertEqual(step.bytes_per_device, aot.per_chip_bytes(extended["memory"]))
        small = dataclasses.replace(machine, hbm_gib_per_chip=0.01)
        step = planning.tpu_step(small, config, dims, layout(seq_len=256), cache)
        self.assertFalse(step.fits)
        self.assertIn("per chip (XLA), over 90% of 0.01 GiB HBM", step.why)
        self.assertEqual(cache.misses, 3)  # the two depths and the whole: nothing since

    def test_a_tpu_run_directory_calibrates_with_its_own_step(self):
        config = small_config()
        config.model.name = base_model.RANDOM
        config.model.random.layers, config.model.random.width_divisor = 2, 4
        config.mesh.fsdp, config.mesh.tp = 4, 1  # a quarter of 31B's 4 global KV heads: 1
        run_dir = self.create_tempdir().full_path
        config_cli.write_resolved_config(config, run_dir)
        with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
            for step, seconds in enumerate([30.0, 0.5, 0.6, 0.5], 1):  # the first compiles
                f.write(json.dumps({"step": step, "step_time_s": seconds}) + "\n")
        cache = extrapolate.Cache(self.create_tempdir().full_path)
        run = plan_lib.run_factor(run_dir, cache)
        self.assertEqual((run["machine"], cache.misses), ("tpu-v5p-8", 1))
        dims = plan_lib._dims(config)  # pylint: disable=protected-access
        self.assertEqual(dims.num_layers, 2)
        roofline = planning.tpu_step(machines.get("tpu-v5p-8"), config, dims,
                                     layout(seq_len=256), cache).roofline_seconds
        self.assertEqual(cache.misses, 1)  # the same compile, from the cache
        self.assertAlmostEqual(run["factor"], 0.5 / roofline)

    def test_a_shipped_step_compiles_nothing_and_a_bad_shipped_file_is_one_error(self):
        dims, config, machine = small_dims(2), small_config(), machines.get("tpu-v5p-8")
        key, = extrapolate.needed_keys(dims, config, machine, whole=True)
        figures = {"xla_flops": 1.0, "memory": {"temp": 3}}
        cache = extrapolate.Cache("", shipped={key: figures})
        with mock.patch.object(aot, "compile_step", side_effect=AssertionError("compiled")):
            found = extrapolate.compile_step(dims, config, machine, cache, whole=True)
        self.assertEqual((found["xla_flops"], found["cached"]), (1.0, True))
        self.assertEqual((cache.hits, cache.shipped_hits, cache.misses), (1, 1, 0))
        self.assertEqual(cache.used[key]["figures"], figures)  # what a ship would write
        good = {"xla_flops": 1.0, "xla_bytes_accessed": 2.0, "optimal_seconds": -3.0,
                "compile_seconds": 4.0, "host_peak_bytes": 5,
                "memory": {"argument": 1, "output": 2, "alias": 3, "temp": 4}, "scan": {}}
        for steps in ([1], {"k": {"figures": 7}}, {"k": {"figures": "x"}},
                      {"k": {"figures": {**good, "memory": {}}}},
                      {"k": {"figures": {**good, "xla_flops": float("nan")}}}):
            shipped = self.create_tempfile("shipped.json", content=json.dumps(
                {"steps": steps})).full_path
            with self.assertRaisesRegex(extrapolate.ShippedError, "^.*shipped.json: not a file "
                                        "of shipped compile results .*; regenerate it with "
                                        "`bazel run //report:ship_compiled_steps`$"):
                extrapolate.read_shipped(shipped)
        self.assertEqual(extrapolate.read_shipped(self.create_tempfile(content=json.dumps(
            {"steps": {"k": {"figures": good}}})).full_path), {"k": good})
        self.assertEqual(extrapolate.read_shipped(shipped + ".missing"), {})

    def test_a_torn_cache_entry_is_compiled_again(self):
        cache = extrapolate.Cache(self.create_tempdir().full_path)
        cache.put("k", {"a": 1})
        self.assertEqual(cache.get("k"), {"a": 1})
        with open(os.path.join(cache.directory, "k.json"), "w") as f:
            f.write("{\"a\": ")
        self.assertIsNone(cache.get("k"))

    def test_line_through_two_depths(self):
        small = {"xla_flops": 10.0, "xla_bytes_accessed": 4.0, "optimal_seconds": 1.0,
                 "compile_seconds": 30.0, "host_peak_bytes": 5, "memory": {"temp": 100}}
        large = {"xla_flops": 16.0, "xla_bytes_accessed": 6.0, "optimal_seconds": 1.5,
                 "compile_seconds": 40.0, "host_peak_bytes": 7, "memory": {"temp": 160}}
        out = extrapolate.line(small, large, 6, 12, 60)
        self.assertEqual(out["xla_flops"], 10 + 6 * 9)
        self.assertEqual(out["memory"]["temp"], 100 + 60 * 9)
        self.assertEqual(out["host_peak_bytes"], 7)


class ShippedStepsTest(absltest.TestCase):
    """report/compiled_steps.json: the repository's own TPU steps, current."""

    def test_the_shipped_steps_are_the_current_ones(self):
        wanted, ours = {}, set()
        for machine, settings, config, dims in plan_lib.own_steps(reference=True):
            try:
                planning.hparams_check(config, machine)
            except planning.cli.UserError:
                continue
            for key in extrapolate.needed_keys(dims, config, machine):
                wanted[key] = f"{machine.name} ({settings} settings)"
                if settings == "ours":
                    ours.add(key)
        shipped = extrapolate.read_shipped(plan_lib.SHIPPED)
        stale = sorted(ours - set(shipped))  # the reference's steps are shipped or not
        self.assertFalse(stale, "report/compiled_steps.json is not current for " + ", ".join(
            sorted({wanted[k] for k in stale})) + ": a module that makes the step "
            "(extrapolate.STEP_MODULES), a pinned package or a TPU config changed; run "
            "`./bazelw run //report:ship_compiled_steps` and commit the file")
        self.assertEqual(set(shipped) - set(wanted), set(), "steps no config plans any more")

    def test_every_module_the_step_imports_is_classified(self):
        # A module the step's modules import either makes the step (its source is in
        # the cache key) or is listed as not making it.
        step, seen, todo = set(extrapolate.STEP_MODULES), set(), [extrapolate.STEP_ROOT]
        while todo:
            module = todo.pop()
            seen.add(module)
            for imported in extrapolate.first_party_imports(module):
                self.assertIn(imported, step | set(extrapolate.NOT_THE_STEP),
                              f"{module} imports {imported}: add it to STEP_MODULES (it "
                              "makes the compiled step) or NOT_THE_STEP")
                if imported in step and imported not in seen:
                    todo.append(imported)
        self.assertEqual(seen, step)  # nothing listed that the step does not import


class CountsCacheTest(absltest.TestCase):

    def test_a_second_read_of_the_same_local_data_counts_nothing(self):
        from data import tokenizer as tokenizer_lib  # pylint: disable=import-outside-toplevel
        tokenizer = tokenizer_lib.load()
        rows = self.create_tempfile("rows.jsonl", content="".join(
            json.dumps({"prompt": f"p{i}", "completion": "x " * i}) + "\n"
            for i in range(1, 30))).full_path
        data_config = planning.pipeline.default_config()
        data_config.source = rows
        cache = self.create_tempdir().full_path
        first = planning.read_data(data_config, tokenizer, cache)
        self.assertFalse(first.cached)
        with mock.patch.object(planning.pipeline, "encode",
                               side_effect=AssertionError("counted again")):
            second = planning.read_data(data_config, tokenizer, cache)
        self.assertTrue(second.cached)
        np.testing.assert_array_equal(second.lengths, first.lengths)
        np.testing.assert_array_equal(second.trained, first.trained)
        self.assertEqual((second.report.rows_read, second.report.kept),
                         (first.report.rows_read, first.report.kept))
        # Another tokenizer, another data setting or a changed file: counted again.
        self.assertTrue(len({planning.counts_key(data_config, tokenizer),
                             planning.counts_key(data_config, tokenizer_lib.build_tokenizer(
                                 chat_template="{{ messages[0].content }}")),
                             planning.counts_key(_with(data_config, max_seq_len=64),
                                                 tokenizer)}) == 3)
        with open(rows, "a") as f:
            f.write(json.dumps({"prompt": "new", "completion": "row"}) + "\n")
        self.assertFalse(planning.read_data(data_config, tokenizer, cache).cached)
        # A dangling link (an editor's lock file) and a link back up a folder are
        # read past, as the data layer reads past them; an eval source is keyed too.
        folder = self.create_tempdir()
        folder.create_file("train.jsonl", content=json.dumps(
            {"prompt": "p", "completion": "c"}) + "\n")
        os.symlink("nowhere:1", os.path.join(folder.full_path, ".#train.jsonl"))
        os.symlink(".", os.path.join(folder.full_path, "self"))
        os.symlink(".", os.path.join(folder.full_path, "again"))
        in_folder = _with(data_config, source=folder.full_path)
        self.assertIsNotNone(planning.counts_key(in_folder, tokenizer))
        evals = self.create_tempfile("eval.jsonl", content="{}\n").full_path
        self.assertNotEqual(planning.counts_key(_with(in_folder, eval_source=evals), tokenizer),
                            planning.counts_key(in_folder, tokenizer))
        self.assertIsNone(planning.counts_key(_with(in_folder, eval_source="gs://b/e.jsonl"),
                                              tokenizer))
        # A cache entry that is not one is counted again.
        key = planning.counts_key(data_config, tokenizer)
        with open(os.path.join(cache, "counts", f"{key}.json"), "w") as f:
            json.dump({"lengths": [[1]], "trained": [1], "eval_lengths": None,
                       "report": {"rows_read": 1}}, f)
        self.assertFalse(planning.read_data(data_config, tokenizer, cache).cached)
        # Data in a bucket or on the Hub is read every time.
        self.assertIsNone(planning.counts_key(_with(data_config, source="gs://b/rows.jsonl"),
                                              tokenizer))
        self.assertIsNone(planning.counts_key(_with(data_config, source="owner/name"),
                                              tokenizer))


def _with(data_config, **fields):
    changed = data_config.copy_and_resolve_references()
    changed.update(fields)
    return changed


class CalibrationTest(absltest.TestCase):

    def _plan(self, machine, extra, exclude, roofline=2.0):
        step = planning.Step(fits=True, roofline_seconds=roofline, bound="compute",
                             bytes_per_device=1, device_bytes=2, compile_seconds=60.0)
        return planning.plan_machine(machine, gpu_config(), dims_31b(), layout(), step,
                                     rates(), extra=extra, exclude=exclude)

    def test_interval_is_the_spread_of_the_applicable_factors(self):
        every = [run["id"] for run in calibration.runs()]
        extra = [{"id": "a", "machine": "gpu-h100x8", "factor": 1.5, "source": "x"},
                 {"id": "b", "machine": "gpu-h100x2", "factor": 2.5, "source": "y"},
                 {"id": "c", "machine": "tpu-v5p-8", "factor": 9.0, "source": "z"}]
        plan = self._plan(H100X2, extra, every)
        self.assertEqual(plan["calibration"]["count"], 2)  # the GPU runs only
        self.assertEqual(plan["step_seconds"], {"point": 4.0, "low": 3.0, "high": 5.0})
        billed = plan["billed_seconds"]
        self.assertEqual(billed["steps"], 100 * 4.0)
        self.assertEqual(billed["compile"], 60.0)
        self.assertEqual(billed["checkpoints"], planning.lora_state_bytes(
            dims_31b(), gpu_config()) / 1e9)  # step 100, the last: one save at 1 GB/s
        self.assertAlmostEqual(billed["download"] * 0.5, billed["load"] * 0.25)
        self.assertAlmostEqual(plan["hours"]["high"] - plan["hours"]["low"], 100 * 2.0 / 3600)
        self.assertAlmostEqual(plan["dollars"]["point"], plan["hours"]["point"] *
                               H100X2.dollars_per_hour)
        self.assertAlmostEqual(plan["spot_dollars"]["low"], plan["hours"]["low"] *
                               H100X2.spot_dollars_per_hour)

    def test_other_platforms_when_none_of_its_own_and_held_out_runs(self):
        every = [run["id"] for run in calibration.runs()]
        extra = [{"id": "c", "machine": "tpu-v5p-8", "factor": 3.0, "source": "z"}]
        plan = self._plan(H100X2, extra, every)
        self.assertIn("no GPU run", plan["calibration"]["scope"])
        self.assertEqual(plan["step_seconds"]["point"], 6.0)
        with self.assertRaisesRegex(planning.PlanError, "no measured run"):
            self._plan(H100X2, extra, every + ["c"])

    def test_a_tpu_step_comes_from_the_chip_step_model_unless_tpu_runs_are_given(self):
        v5p8_machine = machines.get("tpu-v5p-8")
        config = plan_lib.machine_configs(["tpu-v5p-8"])[0][2]
        step = planning.Step(fits=True, roofline_seconds=2.0, bound="compute",
                             bytes_per_device=1, device_bytes=2, compile_seconds=60.0,
                             details={"compute_seconds": 2.0, "memory_seconds": 1.5})

        def plan(**kwargs):
            return planning.plan_machine(v5p8_machine, config, dims_31b(), layout(), step,
                                         rates(), **kwargs)

        model = calibration.step_model()
        point, low, high = calibration.predict_step(model, 2.0, 1.5)
        modelled = plan()
        self.assertEqual(modelled["step_seconds"], {"point": point, "low": low, "high": high})
        self.assertEqual(modelled["calibration"]["scope"], "chip step model, 5 shapes fitted")
        self.assertEqual(modelled["calibration"]["count"], 0)  # no run
        self.assertAlmostEqual(point, 1.2306 * 2.0 + 0.2289 * 1.5, places=3)
        self.assertLess(low, high)
        # A TPU run of the user's: it alone calibrates (not the study's other stack).
        mine = [{"id": "mine", "machine": "tpu-v5p-8", "factor": 1.5, "source": "x"}]
        yours = plan(extra=mine)
        self.assertEqual(yours["step_seconds"], {"point": 3.0, "low": 3.0, "high": 3.0})
        self.assertEqual(yours["calibration"]["scope"], "your TPU runs")
        # ... unless it is left out: the model again.
        self.assertEqual(plan(extra=mine, exclude=["mine"])["step_seconds"]["point"], point)
        # The model left out: the recorded TPU runs (the v5e chip's 1.4287, the study's 3.3511).
        runs = plan(exclude=[planning.STEP_MODEL])
        self.assertEqual(runs["calibration"]["scope"], "TPU runs")
        self.assertAlmostEqual(runs["step_seconds"]["point"], 2.0 * (1.4287 + 3.3511) / 2)

    def test_checkpoint_saves_and_validation_passes(self):
        # The v5e chip's 39 steps, every 10: Orbax's first save, then 10, 20, 30 and 39.
        self.assertEqual(planning.saves("tpu", 39, 10), 5)
        self.assertEqual(planning.saves("gpu", 39, 10), 4)
        self.assertEqual(planning.saves("gpu", 40, 10), 4)  # the last step is a multiple
        self.assertEqual(planning.saves("gpu", 40, 0), 1)
        self.assertEqual(planning.evaluations(40, 30), 2)
        self.assertEqual(planning.evaluations(40, 0), 1)

    def test_deadline_and_budget(self):
        fast = {"machine": "a", "fits": True, "hours": {"point": 1, "low": 0.5, "high": 1.5},
                "dollars": {"point": 10, "low": 5, "high": 15}}
        slow = {"machine": "b", "fits": True, "hours": {"point": 3, "low": 2, "high": 4},
                "dollars": {"point": 5, "low": 4, "high": 6}}
        no = {"machine": "c", "fits": False, "hours": None, "dollars": None}
        unpriced = {"machine": "d", "fits": True, "hours": {"point": 2, "low": 2, "high": 2},
                    "dollars": None}
        ranking = planning.mark([fast, slow, no, unpriced], deadline_hours=1.2, budget=12)
        self.assertEqual(ranking, {"by_hours": ["a", "d", "b"], "by_dollars": ["b", "a"]})
        self.assertEqual((unpriced["meets_deadline"], unpriced["within_budget"]),
                         ("no", "no price"))
        self.assertEqual((fast["meets_deadline"], fast["within_budget"]), ("maybe", "maybe"))
        self.assertEqual((slow["meets_deadline"], slow["within_budget"]), ("no", "yes"))
        self.assertEqual((no["meets_deadline"], no["rank_hours"]), ("no", None))


class FitTest(absltest.TestCase):

    def test_gpu_config_that_does_not_fit_names_the_smallest_change(self):
        step = planning.gpu_step(H100X1, gpu_config(num_processes=1), dims_31b())
        self.assertFalse(step.fits)
        self.assertEqual(step.change, "2 GPUs (gpu-h100x2)")
        self.assertIn("per GPU, over its 74.51 GiB", step.why)
        # Micro-batch 8 holds 8 x 3072 tokens of logits: the largest halving that fits.
        step = planning.gpu_step(H100X2, gpu_config(**{"batch.per_device_size": 8}),
                                 dims_31b())
        self.assertFalse(step.fits)
        size = int(step.change.split()[1])
        self.assertTrue(planning.gpu_step(H100X2, gpu_config(**{"batch.per_device_size": size}),
                                          dims_31b()).fits)
        self.assertFalse(planning.gpu_step(
            H100X2, gpu_config(**{"batch.per_device_size": 2 * size}), dims_31b()).fits)
        fits = planning.gpu_step(H100X2, gpu_config(), dims_31b())
        self.assertTrue(fits.fits)
        self.assertEqual(fits.why, "")

    def test_steps_of_packed_and_padded_rows(self):
        # In any order, three 1000-token rows share a sequence; a 3072-token row fills one.
        data = planning.Data(lengths=np.array([1000] * 30 + [3072] * 10),
                             trained=np.array([100] * 40), report=None)
        config = gpu_config(**{"data.max_seq_len": 3072, "data.packing": True})
        packed = planning.layout(data, config)
        self.assertEqual((packed["sequences"], packed["steps"]), (20, 2))
        config.data.packing = False
        padded = planning.layout(data, config)
        self.assertEqual((padded["sequences"], padded["steps"]), (40, 5))
        self.assertAlmostEqual(padded["non_padding_fraction"], 60720 / (40 * 3072))
        self.assertAlmostEqual(padded["trained_fraction"], 4000 / (40 * 3072))
        config.data.epochs = 2
        self.assertEqual(planning.layout(data, config)["steps"], 10)
        with self.assertRaisesRegex(planning.PlanError, "not enough data"):
            planning.layout(planning.Data(np.array([10]), np.array([1]), None), config)


class BinaryTest(absltest.TestCase):

    def _run(self, *args, tokenizer="embedded", cache=None):
        out = self.create_tempdir().full_path
        result = subprocess.run(
            binaries.command("//report:plan", f"--out={out}",
                             *([f"--tokenizer={tokenizer}"] if tokenizer else []),
                             f"--cache_dir={cache or self.create_tempdir().full_path}", *args),
            capture_output=True, text=True, timeout=600, check=False, env=binaries.child_env())
        return result, out

    def test_gpu_plan_writes_json_markdown_html_and_plot(self):
        run_dir = self.create_tempdir().full_path
        config_cli.write_resolved_config(gpu_config(), run_dir)
        with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
            for step, seconds in enumerate([60.0, 20.0, 20.0, 21.0], 1):
                f.write(json.dumps({"step": step, "step_time_s": seconds}) + "\n")
        # A team's own GPU price in a region the built-in table has no GPU figure for.
        prices = os.path.join(run_dir, "prices.json")
        with open(prices, "w") as f:
            json.dump({"source": "our contract", "date": "2026-11-30",
                       "prices": {"gpu-h100": {"on_demand": 5.0}}}, f)
        result, out = self._run("--machines=gpu-h100x2,gpu-h100x1,gpu-h100x8",
                                "--config.data.source=synthetic:300", "--budget=1000",
                                "--config.batch.effective_size=4", f"--calibrate_with={run_dir}",
                                "--region=europe-west4", f"--prices={prices}")
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(os.path.join(out, "plan.json")) as f:
            plan = json.load(f)
        h100x2, h100x1, h100x8 = plan["plans"]
        self.assertEqual(plan["prices"], {"region": "europe-west4", "file": prices})
        self.assertAlmostEqual(h100x2["dollars"]["point"], h100x2["hours"]["point"] * 10.0)
        self.assertIsNone(h100x2["spot_dollars"])  # none in the file, none for the region
        self.assertEqual((h100x2["price"]["on_demand"], h100x2["price"]["date"]),
                         (5.0, "2026-11-30"))
        # A machine whose config cannot run is said so; the others are planned.
        self.assertFalse(h100x8["fits"])
        self.assertIn("effective batch 4 is not a multiple", h100x8["why"])
        roofline = planning.gpu_step(H100X2, gpu_config(), dims_31b()).roofline_seconds
        self.assertEqual(h100x2["calibration"]["runs"][-1]["factor"], 20.0 / roofline)
        self.assertEqual(h100x2["calibration"]["scope"], "GPU runs")
        self.assertFalse(h100x1["fits"])
        self.assertEqual(plan["ranking"]["by_dollars"], ["gpu-h100x2"])
        self.assertEqual(plan["data"]["rows_read"], 300)
        for name in ("plan.md", "plan.html", "plan.png"):
            self.assertTrue(os.path.getsize(os.path.join(out, name)), name)
        with open(os.path.join(out, "plan.md")) as f:
            text = f.read()
        self.assertIn("fits with 2 GPUs", text)
        self.assertIn("| gpu-h100x2 | yes |", text)
        self.assertIn("## Prices (europe-west4)", text)
        self.assertIn("| gpu-h100x2 | $5.000/chip-h | n/a | $10.00/h x 1 | our contract", text)
        # The report puts a run of a planned machine beside its plan.
        training = [{"label": "GPU", "machine": "gpu-h100x2", "hours": h100x2["hours"]["point"],
                     "cost": 1.0, "tokens_per_s": h100x2["tokens_per_s"] / 2}]
        row, = comparison.planned(training, plan)
        self.assertEqual((row["hours_ratio"], row["in_interval"], row["tokens_per_s_ratio"]),
                         (1.0, True, 0.5))

    def test_with_no_flags_offline_every_machine_is_planned_from_shipped_steps(self):
        # No Hub (a closed loopback port stands for it): the default recipe's
        # tokenizer and data become CodeV-R1-shaped rows and the embedded tokenizer;
        # every TPU step comes from report/compiled_steps.json, compiled by nobody.
        cache = self.create_tempdir().full_path
        os.environ["HF_ENDPOINT"] = "http://127.0.0.1:9"
        try:
            result, out = self._run(tokenizer=None, cache=cache)
            again, out_again = self._run(tokenizer=None, cache=cache)
        finally:
            del os.environ["HF_ENDPOINT"]
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertIn("offline (127.0.0.1 unreachable): counting synthetic:10000 instead of "
                      "hf://datasets/zhuyaoyu/CodeV-R1-dataset/codev_r1_sft.jsonl", result.stdout)
        with open(os.path.join(out, "plan.json")) as f:
            plan = json.load(f)
        self.assertEqual((plan["data"]["source"], plan["data"]["tokenizer"],
                          plan["data"]["counted_before"]), ("synthetic:10000", "embedded", False))
        tpus = [p for p in plan["plans"] if p["platform"] == "tpu"]
        self.assertEqual({p["machine"] for p in tpus}, {
            "tpu-v5litepod-16", "tpu-v5p-16", "tpu-v5p-8", "tpu-v6e-8"})
        self.assertEqual(plan["cache"]["compiled"], 0)
        self.assertEqual(plan["cache"]["shipped"], 5)  # v5p-8 at two depths, 3 scanned
        self.assertTrue(all(p["fits"] for p in tpus), [p.get("why") for p in tpus])
        self.assertIn("gpu-h100x2", {p["machine"] for p in plan["plans"] if p["fits"]})
        # The second plan counts nothing either: the same figures.
        self.assertEqual(again.returncode, 0, again.stderr[-3000:])
        self.assertIn("its token counts from the plan's cache", again.stdout)
        with open(os.path.join(out_again, "plan.json")) as f:
            second = json.load(f)
        self.assertTrue(second["data"]["counted_before"])
        self.assertEqual([p.get("hours") for p in second["plans"]],
                         [p.get("hours") for p in plan["plans"]])
        # Data of the user's own is never stood in for: its tokenizer is one error.
        rows = self.create_tempfile("rows.jsonl",
                                    content='{"prompt": "a", "completion": "b"}\n').full_path
        os.environ["HF_ENDPOINT"] = "http://127.0.0.1:9"
        try:
            result, _ = self._run("--machines=gpu-h100x2", f"--config.data.source={rows}",
                                  tokenizer=None)
        finally:
            del os.environ["HF_ENDPOINT"]
        self.assertEqual(result.returncode, 1)
        self.assertIn("cannot load the tokenizer of google/gemma-4-31B-it to count the data "
                      "(127.0.0.1 is unreachable and it is not in the local cache); pass "
                      "--tokenizer=embedded to count offline", result.stderr)

    def test_bad_input_is_one_error_line(self):
        empty = self.create_tempfile("empty.jsonl", content="").full_path
        prices = self.create_tempfile("prices.json", content=json.dumps(
            {"source": "ours", "prices": {"gpu-h100": {"on_demand": -3}}})).full_path
        for args, message in (
                (["--machines=gpu-h100x2", f"--prices={prices}"],
                 "gpu-h100.on_demand: dollars per chip-hour"),
                (["--machines=gpu-h100x2", "--region=Mars"], "--region='Mars'"),
                (["--machines=tpu-v9-8"], "unknown machine 'tpu-v9-8'"),
                (["--machines=tpu-v5litepod-4"], "no TPU config for tpu-v5litepod-4"),
                (["--machines=gpu-h100x2", f"--config.data.source={empty}"],
                 "no token to train on"),
                (["--machines=gpu-h100x8", "--config.data.source=synthetic:50",
                  "--config.batch.effective_size=4"], "no machine can run this recipe: "
                 "gpu-h100x8: effective batch 4 is not a multiple")):
            result, _ = self._run(*args)
            self.assertEqual(result.returncode, 1, result.stderr)
            lines = result.stderr.strip().splitlines()
            self.assertTrue(lines[-1].startswith("error: "), result.stderr)
            self.assertIn(message, lines[-1])
            self.assertNotIn("Traceback", result.stderr)


if __name__ == "__main__":
    absltest.main()
