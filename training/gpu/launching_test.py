import io
import json
import os
import time
from unittest import mock

from absl.testing import absltest

from common import cli
from common import machines
from common import run_dir
from training.gpu import launching
from training.gpu.configs import cpu
from training.gpu.configs import h100x2


class PreemptedStatusTest(absltest.TestCase):
    """What the launcher exits with once its workers stopped for a SIGTERM."""

    def _status(self, segments, started, preempted_exit_code=143):
        workdir = self.create_tempdir().full_path
        if segments is not None:
            with open(os.path.join(workdir, run_dir.RUN_INFO), "w") as f:
                json.dump({"segments": segments}, f)
        config = cpu.get_config()
        config.preempted_exit_code = preempted_exit_code
        err = io.StringIO()
        with mock.patch("sys.stderr", err):
            code = launching.preempted_status(config, workdir, started, "SIGTERM")
        return code, err.getvalue()

    def test_a_saved_checkpoint_gives_the_preempted_status(self):
        now = time.time()
        code, said = self._status([{"start": now - 100, "end": [now - 90, 4, "preempted"]},
                                   {"start": now + 2, "end": [now + 60, 7, "preempted"]}], now)
        self.assertEqual(code, 143)
        self.assertIn("saved the checkpoint of step 7", said)
        self.assertEqual(self._status([{"start": now, "end": [now, 7, "preempted"]}], now,
                                      preempted_exit_code=0)[0], 0)  # a VM: exit 0
        code, said = self._status([{"start": now, "end": [now + 9, 9, "finished"]}], now)
        self.assertEqual(code, 0)  # the signal came as the run ended
        self.assertIn("after the run finished at step 9", said)

    def test_no_saved_checkpoint_is_a_failure(self):
        now = time.time()
        for segments in (None, [], [{"start": now + 1}],  # killed before its end
                         [{"start": now + 1, "end": [now + 9, 3, "failed"]}],
                         # a preemption of an earlier launch is not this one's
                         [{"start": now - 600, "end": [now - 500, 5, "preempted"]}]):
            with self.subTest(segments=segments):
                code, said = self._status(segments, now)
                self.assertEqual(code, 1)
                self.assertIn("error: SIGTERM: the training processes stopped without "
                              "recording a saved checkpoint", said)

    def test_workers_stopped_by_another_machines_sigterm(self):
        self.assertTrue(launching.stopped_for_preemption([143, 143], 143))
        for codes, preempted in (([143, 1], 143), ([1], 143), ([], 143), ([0], 0)):
            self.assertFalse(launching.stopped_for_preemption(codes, preempted), codes)


class TorchrunArgsTest(absltest.TestCase):

    def test_one_machine_is_the_default(self):
        args = launching.torchrun_args(2, master_port=1234, argv=["--config=h100x2.py"])
        self.assertEqual(args, ["--nnodes=1", "--node_rank=0", "--nproc_per_node=2",
                                "--master_addr=127.0.0.1", "--master_port=1234",
                                "--shutdown_timeout=300", "--module", "training.gpu.sft",
                                "--config=h100x2.py"])
        self.assertRegex(launching.torchrun_args(2)[4], r"^--master_port=[1-9]\d*$")

    def test_two_machines_split_the_processes(self):
        args = launching.torchrun_args(4, nnodes=2, node_rank=1, master_addr="10.0.0.2",
                                       master_port=29500, argv=["--nnodes=2"])
        self.assertEqual(args[:5], ["--nnodes=2", "--node_rank=1", "--nproc_per_node=2",
                                    "--master_addr=10.0.0.2", "--master_port=29500"])
        self.assertEqual(args[-1], "--nnodes=2")  # the workers see the same flags

    def test_bad_layouts_are_refused(self):
        for kwargs, message in (
                (dict(processes=3, nnodes=2, master_addr="h", master_port=1), "does not split"),
                (dict(processes=4, nnodes=2, node_rank=2, master_addr="h", master_port=1),
                 "--node_rank=2 is not below --nnodes=2"),
                (dict(processes=4, nnodes=2, master_port=1), "not loopback"),
                (dict(processes=4, nnodes=2, master_addr="h"), "--master_port")):
            with self.assertRaisesRegex(cli.UserError, message):
                launching.torchrun_args(**kwargs)


class CheckDevicesTest(absltest.TestCase):

    def test_cpu_configs_run_anywhere(self):
        launching.check_devices(cpu.get_config(), nnodes=1)

    def test_a_gpu_config_needs_its_share_of_gpus(self):
        config = h100x2.get_config()
        with self.assertRaisesRegex(machines.WrongMachine, "needs 2 GPUs; this process sees "
                                    "1 CPU. This torch .* is a CPU build"):
            launching.check_devices(config, nnodes=1)
        with mock.patch("torch.cuda.device_count", return_value=1), \
                mock.patch("torch.version.cuda", "13.0"):
            with self.assertRaisesRegex(machines.WrongMachine, "needs 2 GPUs; this process "
                                        "sees 1 GPU. This torch: .*CUDA 13.0"):
                launching.check_devices(config, nnodes=1)
            config.num_processes = 2
            launching.check_devices(config, nnodes=2)  # one GPU per machine, two machines


if __name__ == "__main__":
    absltest.main()
