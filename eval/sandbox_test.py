import os
import shutil
import signal
import socket
import threading
import time
from unittest import mock

from absl.testing import absltest

from common import pinned
from eval import sandbox
from eval import testing


def _processes_with(needle):
    """Pids whose command line contains `needle` (bytes)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if needle in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


class SandboxTest(absltest.TestCase):
    """bubblewrap must be installed: without it these tests fail, never skip."""

    def _box(self, kind=sandbox.BWRAP, **limits):
        return sandbox.Sandbox(kind, sandbox.Limits(**limits))

    def _run(self, box, script, files=None, **kwargs):
        run_dir = self.create_tempdir().full_path
        for name, text in (files or {}).items():
            with open(os.path.join(run_dir, name), "w") as f:
                f.write(text)
        result = box.run(["/bin/sh", "-c", script], run_dir, inputs=tuple(files or ()),
                         **kwargs)
        with open(os.path.join(run_dir, "stdout.txt"), "rb") as f:
            out = f.read()
        return result, out.decode(errors="replace"), result.stderr, run_dir

    def test_runs_on_its_inputs_and_captures_both_streams(self):
        result, out, err, _ = self._run(self._box(), "cat in.txt; pwd; echo oops >&2",
                                        {"in.txt": "hello\n"})
        self.assertEqual(result.returncode, 0)
        self.assertFalse(result.wall_timeout)
        self.assertEqual(out, f"hello\n{sandbox.SANDBOX_DIR}\n")
        self.assertEqual(err, "oops\n")

    def test_inputs_are_read_only(self):
        result, out, _, run_dir = self._run(
            self._box(), "echo changed > in.txt; echo rc=$?; cat in.txt", {"in.txt": "orig\n"})
        self.assertIn("rc=", out)
        self.assertNotIn("rc=0", out)
        with open(os.path.join(run_dir, "in.txt")) as f:
            self.assertEqual(f.read(), "orig\n")
        self.assertEqual(result.returncode, 0)

    def test_writes_outside_its_directory_land_nowhere(self):
        outside = self.create_tempdir().full_path
        target = os.path.join(outside, "pwned.txt")
        host_tmp_marker = f"/tmp/g4_sandbox_marker_{os.getpid()}"
        script = (f"mkdir -p {outside}; echo x > {target}; echo x > {host_tmp_marker}; "
                  f"echo x > local.txt; ls")
        _, out, _, run_dir = self._run(self._box(), script)
        self.assertIn("local.txt", out)  # its own directory is writable ...
        self.assertFalse(os.path.exists(target))  # ... nothing else on the host
        self.assertFalse(os.path.exists(host_tmp_marker))
        # Its working directory is private: nothing it wrote is left in run_dir.
        self.assertFalse(os.path.exists(os.path.join(run_dir, "local.txt")))

    def test_data_set_and_repository_are_invisible(self):
        dataset = testing.dataset_dir()
        script = f"cat {dataset}/problems.txt; ls {os.path.dirname(dataset)}; ls /; ls /work"
        _, out, err, _ = self._run(self._box(), script)
        self.assertNotIn("Prob001_zero", out)
        self.assertIn("No such file", err)
        self.assertEqual(sorted(out.split()), sorted(
            ["bin", "dev", "etc", "lib", "lib64", "sandbox", "sbin", "tmp", "usr"]))

    def test_no_proc(self):
        # No process of the run, the shell's arguments among them, can be read.
        _, out, err, _ = self._run(self._box(), "cat /proc/1/cmdline; ls /proc; echo done")
        self.assertEqual(out, "done\n")
        self.assertIn("No such file", err)

    def test_a_proc_of_one_link_for_a_tool_that_finds_itself(self):
        _, out, err, _ = self._run(self._box(), exe_link="/usr/bin/true", script=(
            "readlink /proc/self/exe; ls -A /proc; ls -A /proc/self; cat /proc/1/cmdline; "
            "echo x > /proc/y || echo read-only"))
        self.assertEqual(out.split(), ["/usr/bin/true", "self", "exe", "read-only"])
        self.assertIn("No such file", err)

    def test_an_empty_read_only_folder(self):
        for kind in (sandbox.BWRAP, sandbox.NONE):
            with self.subTest(kind=kind):
                result, out, _, _ = self._run(
                    self._box(kind), 'cd "$SANDBOX_EMPTY_DIR" && ls -A && '
                    'echo y > wave.vcd && echo nulled; echo x > mine.txt || echo refused',
                    {"in.txt": "x"}, null_files=("wave.vcd",), empty_dir=True)
                self.assertStartsWith(out, "wave.vcd\nnulled\n")
                if kind == sandbox.BWRAP:  # without isolation, root may still write
                    self.assertEqual(out.splitlines()[-1], "refused")
                    self.assertIn("Read-only", result.stderr)

    def test_no_network(self):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(3)
        port = listener.getsockname()[1]
        accepted = []

        def accept():
            try:
                accepted.append(listener.accept())
            except OSError:
                pass

        thread = threading.Thread(target=accept)
        thread.start()
        script = ("python3 -c \"import socket; s = socket.socket(); s.settimeout(2); "
                  f"s.connect(('127.0.0.1', {port})); print('connected')\"")
        _, out, err, _ = self._run(self._box(), script)
        thread.join()
        listener.close()
        self.assertNotIn("connected", out)
        self.assertRegex(err, "Network is unreachable|Connection refused")
        self.assertEqual(accepted, [])

    def test_wall_clock_limit_kills_every_process(self):
        start = time.monotonic()
        result, _, _, _ = self._run(self._box(wall_s=1.0),
                                    "sleep 987.125 & sleep 987.125 & sleep 987.125; wait")
        self.assertTrue(result.wall_timeout)
        self.assertLess(time.monotonic() - start, 10)
        time.sleep(0.5)  # the kernel tears the pid namespace down
        self.assertEqual(_processes_with(b"987.125"), [])

    def test_phase_deadlines(self):
        box = self._box(wall_s=30)
        # Each line on stderr ends a phase: the second phase has 1 s.
        script = "echo one >&2; sleep 1.5; echo two; sleep 987.25"
        start = time.monotonic()
        result, out, err, _ = self._run(box, script, phase_timeouts=(5, 1))
        self.assertLess(time.monotonic() - start, 10)
        self.assertEqual((result.timed_out_phase, result.wall_timeout), (1, False))
        self.assertEqual((err, out), ("one\n", ""))
        result, _, _, _ = self._run(box, "sleep 987.25", phase_timeouts=(1, 5))
        self.assertEqual(result.timed_out_phase, 0)
        result, _, err, _ = self._run(box, "echo a >&2; echo b >&2", phase_timeouts=(5, 5))
        self.assertEqual((result.returncode, result.timed_out_phase, err), (0, None, "a\nb\n"))
        time.sleep(0.5)
        self.assertEqual(_processes_with(b"987.25"), [])

    def test_log_size_cap(self):
        result, out, _, _ = self._run(self._box(file_bytes=64 << 10), "yes 'endless output'")
        self.assertLessEqual(len(out.encode()), 64 << 10)
        self.assertGreater(len(out), 60 << 10)
        self.assertEqual(result.returncode, 128 + signal.SIGXFSZ)  # sh reports the kill
        self.assertFalse(result.wall_timeout)

    def test_directory_size_cap(self):
        script = ("i=0; while [ $i -lt 100 ]; do head -c 60000 /dev/zero > f$i || exit 3; "
                  "i=$((i+1)); done")
        result, _, err, _ = self._run(self._box(dir_bytes=1 << 20), script)
        self.assertEqual(result.returncode, 3)
        self.assertIn("No space left", err)

    def test_memory_cap(self):
        result, out, err, _ = self._run(
            self._box(memory_bytes=512 << 20),
            "python3 -c \"b = bytearray(1 << 30); print('allocated')\"")
        self.assertNotIn("allocated", out)
        self.assertIn("MemoryError", err)
        self.assertNotEqual(result.returncode, 0)

    def test_cpu_cap(self):
        start = time.monotonic()
        result, _, _, _ = self._run(self._box(cpu_s=1, wall_s=60), "while :; do :; done")
        self.assertFalse(result.wall_timeout)
        self.assertLess(time.monotonic() - start, 30)
        self.assertEqual(result.returncode, 128 + signal.SIGXCPU)

    def test_limits_without_isolation(self):
        # A generous wall limit for the file cap: on a loaded machine `yes` may not
        # write 16 KiB within a second, and the wall limit would end it first.
        box = self._box(sandbox.NONE, file_bytes=16 << 10, wall_s=30.0)
        result, out, _, _ = self._run(box, "yes")
        self.assertLessEqual(len(out), 16 << 10)
        self.assertEqual(result.returncode, 128 + signal.SIGXFSZ)
        box = self._box(sandbox.NONE, file_bytes=16 << 10, wall_s=1.0)
        result, _, _, _ = self._run(box, "sleep 30")
        self.assertTrue(result.wall_timeout)

    def test_a_limit_that_cannot_be_set_stops_the_run(self):
        box = self._box(open_files=1 << 40)  # above the kernel's ceiling
        result, out, err, _ = self._run(box, "echo ran")
        self.assertEqual(result.returncode, sandbox.LIMITS_FAILED)
        self.assertEqual(out, "")
        self.assertIn("ulimit", err)

    def test_bwrap_missing_is_a_clear_error(self):
        with mock.patch.object(shutil, "which", return_value=None), \
                mock.patch.object(pinned, "path", return_value=None):
            with self.assertRaisesRegex(sandbox.SandboxError, "apt-get install -y bubblewrap"):
                sandbox.Sandbox(sandbox.BWRAP)

    def test_the_pinned_bubblewrap_runs_whatever_the_machine_has(self):
        with mock.patch.object(shutil, "which", return_value="/nonexistent/bwrap"):
            box = sandbox.Sandbox(sandbox.BWRAP)
        self.assertEqual(box._bwrap, pinned.path("bwrap"))  # pylint: disable=protected-access
        self.assertIn("/test_tools/bin/bwrap", box._bwrap)  # pylint: disable=protected-access

    def test_bad_kind_and_input_names(self):
        with self.assertRaises(ValueError):
            sandbox.Sandbox("docker")
        with self.assertRaises(ValueError):
            self._box().run(["true"], self.create_tempdir().full_path, inputs=("../x",))


if __name__ == "__main__":
    absltest.main()
