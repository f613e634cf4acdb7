"""Every stage binary, given bad input, prints one `error:` line and exits 1.

One row per binary: the flags of a typical mistake and what the line must say.
The binaries run as users run them (their own process, absl flags), so a
domain error that is not a `cli.UserError` shows up here as a traceback.
"""

import subprocess

from absl.testing import absltest
from absl.testing import parameterized

from common import binaries

MISSING = "/nonexistent/g4"

# (binary, flags, what the error line says)
CASES = {
    "training_tpu_sft": ("//training/tpu:sft", ["--config.model.name=" + MISSING],
                         "is neither 'tiny-random-gemma4', 'random-gemma4', a directory, "
                         "nor a Hub id"),
    # Checked from the shipped config.json, before the 31B's weights would download.
    "training_tpu_sft_mesh": ("//training/tpu:sft", ["--config.model.name=google/gemma-4-31B-it",
                                                   "--config.mesh.tp=8"],
                              "tp=8"),
    # A config for a machine this one is not: refused before anything is read.
    "training_tpu_sft_v5p8_here": ("//training/tpu:sft", ["--config=v5p8.py"],
                                   "the config's machine tpu-v5p-8 needs 4 TPU chips; this "
                                   "process sees 1 CPU."),
    "training_tpu_sft_v5p16_here": ("//training/tpu:sft", ["--config=v5p16.py"],
                                    "the config's machine tpu-v5p-16 needs 8 TPU chips; this "
                                    "process sees 1 CPU."),
    "training_tpu_sft_v6e8_here": ("//training/tpu:sft", ["--config=v6e8.py"],
                                   "the config's machine tpu-v6e-8 needs 8 TPU chips; this "
                                   "process sees 1 CPU."),
    "training_tpu_sft_v5e16_here": ("//training/tpu:sft", ["--config=v5e16.py"],
                                    "the config's machine tpu-v5litepod-16 needs 16 TPU chips; "
                                    "this process sees 1 CPU."),
    "training_tpu_sft_one_chip_here": ("//training/tpu:sft", ["--config=one_chip.py"],
                                       "the config's machine tpu-v5litepod-1 needs 1 TPU chip; "
                                       "this process sees 1 CPU."),
    "training_tpu_compile": ("//training/tpu:compile", ["--base_config=" + MISSING,
                                                      "--workdir={tmp}/c"],
                             "is neither a config.json, a directory, nor a Hub id"),
    "training_gpu_sft": ("//training/gpu:sft", ["--config.model.name=" + MISSING],
                         "is neither 'tiny-random-gemma4', 'random-gemma4', a directory, "
                         "nor a Hub id"),
    "training_gpu_sft_h100x2_here": ("//training/gpu:sft", ["--config=h100x2.py"],
                                     "the config's machine gpu-h100x2 needs 2 GPUs; this "
                                     "process sees 1 CPU. This torch (2.13.0+cpu) is a CPU build."),
    "training_gpu_sft_nodes": ("//training/gpu:sft", ["--config.num_processes=3", "--nnodes=2"],
                               "config.num_processes=3 does not split over --nnodes=2"),
    "conversion_export": ("//conversion:export", ["--run_dir=" + MISSING, "--output_dir={tmp}/o"],
                          "is not a run directory"),
    "conversion_verify": ("//conversion:verify", ["--run_dir=" + MISSING,
                                                "--export_dir=" + MISSING],
                          "is not a --format=both export"),
    "conversion_import_adapter": ("//conversion:import_adapter",
                                  ["--adapter=" + MISSING, "--output_dir={tmp}/o"],
                                  "is not an adapter directory"),
    "serving_serve": ("//serving:serve", ["--adapter=codev=" + MISSING, "--run_dir={tmp}/s"],
                      "is not an adapter directory"),
    "serving_bench": ("//serving:bench", ["--adapter=codev=" + MISSING, "--out_dir={tmp}/b"],
                      "is not an adapter directory"),
    "serving_plot": ("//serving:plot", ["--runs=" + MISSING, "--out={tmp}/p"],
                     "is not a serving sweep"),
    "eval_verilog_eval": ("//eval:verilog_eval", ["--samples=" + MISSING, "--out_dir={tmp}/e"],
                          "cannot read completions file"),
    "eval_sample_tasks": ("//eval:sample_tasks", ["--source=" + MISSING + ".jsonl",
                                                "--out={tmp}/st"],
                          "is neither a file, folder or glob, nor 'sample'"),
    "data_inspect": ("//data:inspect", ["--data.source=" + MISSING + ".jsonl"],
                     "is neither a file, folder or glob, nor 'sample'"),
    "report": ("//report:report", ["--runs=" + MISSING, "--out={tmp}/r"],
                     "is not a directory"),
}


class BadInputTest(parameterized.TestCase):

    @parameterized.named_parameters(*((name, *case) for name, case in CASES.items()))
    def test_one_error_line_and_exit_1(self, binary, args, message):
        tmp = self.create_tempdir().full_path
        # Offline: no case may reach the Hub (the mesh case must fail before it would).
        env = binaries.child_env(JAX_PLATFORMS="cpu",
                   HF_HUB_OFFLINE="1")
        workdir = [f"--workdir={tmp}/w"] if binary.endswith(":sft") else []
        done = subprocess.run(
            binaries.command(binary, *workdir, *(a.format(tmp=tmp) for a in args)),
            env=env, capture_output=True, text=True, timeout=300, cwd=tmp, check=False)
        output = done.stdout + done.stderr
        errors = [line for line in output.splitlines() if line.startswith("error: ")]
        self.assertEqual(done.returncode, 1, output[-3000:])
        self.assertLen(errors, 1, output[-3000:])
        self.assertIn(message, errors[0])
        self.assertNotIn("Traceback", output)


if __name__ == "__main__":
    absltest.main()
