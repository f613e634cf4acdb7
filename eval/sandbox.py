"""Runs an untrusted command (a model's Verilog, compiled and simulated) contained.

Each run gets a host directory (`run_dir`) holding its input files and, after
the run, its stdout (stderr comes back through a pipe). With `kind="bwrap"`
(bubblewrap, Debian package `bubblewrap`; no root or setuid needed where user
namespaces are allowed) the command sees only:
- `/usr` (and the `/bin`, `/lib*` links into it), read-only, plus any extra
  read-only directories asked for (an iverilog installed outside /usr);
- `/dev` (null, zero, random, ...) and a private size-capped `/tmp`; no
  `/proc`, so no process of the run and no command line can be read (where a
  tool needs /proc/self/exe, as the pinned iverilog does, a /proc holding that
  one link);
- its working directory `/sandbox`: a private tmpfs capped at `dir_bytes`, in
  which the input files are read-only bind mounts of the run_dir copies, and
  when asked an empty read-only folder for a step that should see no files;
- new user, pid, network (loopback only, down), ipc and uts namespaces.
So it cannot see the data set directory, the repository or any other run,
cannot write anything that outlives it except its stdout file, and has no
network. With `kind="none"` only the limits below apply and the command runs
in run_dir itself (for machines without bubblewrap; not for untrusted models).

Limits for every process of the run (hard limits, so it cannot raise them):
CPU seconds, address space, largest file written (which caps the logs: they
are files), open files, no core dumps. They are set by `ulimit` lines that
start the run's /bin/sh script (POSIX units: -f counts 512-byte blocks, -v
KiB) rather than by setrlimit in a Popen `preexec_fn`, which would force a
full fork of the threaded Python process (about 1.2 ms more per run) and is
not safe beside threads. Wall-clock limits (the whole run, and optionally
successive phases that the command ends by writing a line to stderr) kill
the whole process group (`start_new_session`); bwrap's `--die-with-parent`
and its pid namespace take every process inside down with it.
"""

import dataclasses
import math
import os
import select
import signal
import subprocess
import tempfile
import time

from common import cli
from common import pinned

BWRAP = "bwrap"
NONE = "none"
KINDS = (BWRAP, NONE)
SANDBOX_DIR = "/sandbox"
EMPTY_DIR = "/empty"
EMPTY_DIR_ENV = "SANDBOX_EMPTY_DIR"
_ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_PATH = "/usr/local/bin:/usr/bin:/bin"
_STDERR_CAP = 64 << 10
LIMITS_FAILED = 125


class SandboxError(cli.UserError):
    """The sandbox cannot run here (tool missing, namespaces refused)."""


@dataclasses.dataclass(frozen=True)
class Limits:
    wall_s: float = 120.0
    cpu_s: int = 60
    memory_bytes: int = 2 << 30
    file_bytes: int = 1 << 20      # largest file any process writes: caps the logs
    dir_bytes: int = 256 << 20     # working directory and /tmp, each (bwrap only)
    open_files: int = 256


@dataclasses.dataclass(frozen=True)
class Run:
    returncode: int               # negative: killed by that signal (Popen's convention)
    wall_timeout: bool            # killed by the overall wall-clock limit
    seconds: float
    stderr: str = ""              # what the command wrote to its stderr (capped)
    timed_out_phase: int | None = None  # index of the phase killed at its deadline


def ulimit_lines(limits):
    """POSIX shell `ulimit` commands for `limits` (-f counts 512-byte blocks).

    Soft = hard, except for CPU time: SIGXCPU at the limit, SIGKILL a second
    later. A limit that cannot be set ends the script (exit 125), loudly.
    """
    return "".join(f"ulimit {flag} || exit {LIMITS_FAILED}\n" for flag in (
        f"-S -t {int(limits.cpu_s)}",
        f"-H -t {int(limits.cpu_s) + 1}",
        f"-v {int(limits.memory_bytes) >> 10}",
        f"-f {int(limits.file_bytes) // 512}",
        f"-n {int(limits.open_files)}",
        "-c 0",
    ))


def kill_group(proc):
    """SIGKILLs the process group led by `proc` and reaps `proc`."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _read_into(fd, captured):
    """Reads what `fd` has now into `captured` (up to the cap); False at EOF."""
    data = os.read(fd, 65536)
    if len(captured) < _STDERR_CAP:
        captured += data[:_STDERR_CAP - len(captured)]
    return data


def _drain(fd, captured):
    """Reads what is left in the pipe without waiting for writers that linger."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while poller.poll(0) and _read_into(fd, captured):
        pass


def _watch(proc, err_fd, wall_s, phase_timeouts):
    """Waits for `proc` while reading its stderr pipe and enforcing deadlines.

    Each line on stderr ends a phase; phase i may last `phase_timeouts[i]`
    seconds. Blocks in poll() on a pidfd and the pipe (Popen.wait(timeout)
    polls with sleeps of up to 50 ms, which would add tens of milliseconds
    to every short run). `proc` is not reaped here, so after a timeout its
    process group id is still valid for kill_group. Returns (stderr bytes,
    overall wall timeout, index of the phase that ran out, or None).
    """
    start = time.monotonic()
    wall_end = start + wall_s
    phase = 0
    phase_end = start + phase_timeouts[0] if phase_timeouts else math.inf
    captured = bytearray()
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # kernels before 5.3: poll the child every 10 ms
        pidfd = None
    poller = select.poll()
    poller.register(err_fd, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    try:
        while True:
            now = time.monotonic()
            if now >= wall_end:
                return bytes(captured), True, None
            if now >= phase_end:
                return bytes(captured), False, phase
            wait_ms = math.ceil((min(wall_end, phase_end) - now) * 1000)
            events = poller.poll(wait_ms if pidfd is not None else min(wait_ms, 10))
            if pidfd is None and proc.poll() is not None or any(
                    fd == pidfd for fd, _ in events):
                _drain(err_fd, captured)
                return bytes(captured), False, None
            for fd, _ in events:
                data = _read_into(fd, captured)
                if not data:  # every writer closed it: only the exit is left
                    poller.unregister(err_fd)
                for _ in range(data.count(b"\n")):
                    phase += 1
                    phase_end = (time.monotonic() + phase_timeouts[phase]
                                 if phase < len(phase_timeouts) else math.inf)
    finally:
        if pidfd is not None:
            os.close(pidfd)


class Sandbox:
    """Runs commands with `limits`, isolated by `kind` (bwrap or none)."""

    def __init__(self, kind=BWRAP, limits=Limits(), readonly_dirs=()):
        if kind not in KINDS:
            raise ValueError(f"sandbox kind must be one of {KINDS}, got {kind!r}")
        self.kind = kind
        self.limits = limits
        self._ulimits = ulimit_lines(limits)
        self._readonly_dirs = ()
        self.add_readonly_dirs(readonly_dirs)
        self._bwrap = None
        if kind == BWRAP:
            # The pinned bubblewrap (common/pinned.py); the machine's outside Bazel.
            try:
                self._bwrap = pinned.tool("bwrap")
            except FileNotFoundError as e:
                raise SandboxError(
                    f"{e}: `apt-get install -y bubblewrap`, or run without isolation "
                    "(sandbox kind 'none', trusted samples only)") from None
            self._check_bwrap()

    def add_readonly_dirs(self, directories):
        """Makes `directories` visible, read-only, to what runs inside (a tool's
        install prefix outside /usr, e.g. the pinned iverilog's)."""
        for directory in directories:
            if not _under(directory, "/usr") and directory not in self._readonly_dirs:
                self._readonly_dirs += (directory,)

    def _check_bwrap(self):
        probe = subprocess.run(self._bwrap_argv(None, (), (), ["/bin/true"]),
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=60, check=False)
        if probe.returncode != 0:
            raise SandboxError(
                f"bubblewrap cannot create its namespaces here (exit {probe.returncode}): "
                f"{probe.stderr.strip()}")

    def _bwrap_argv(self, run_dir, inputs, null_files, argv, exe_link=None, empty_dir=False):
        size = str(self.limits.dir_bytes)
        args = [self._bwrap, "--unshare-all", "--die-with-parent", "--new-session",
                "--clearenv", "--setenv", "PATH", _PATH, "--setenv", "HOME", SANDBOX_DIR,
                "--setenv", "TMPDIR", "/tmp", "--setenv", "LC_ALL", "C",
                "--ro-bind", "/usr", "/usr"]
        for name in _ROOT_LINKS:
            host = "/" + name
            if os.path.islink(host):
                args += ["--symlink", os.readlink(host), host]
            elif os.path.isdir(host):
                args += ["--ro-bind", host, host]
        if os.path.exists("/etc/ld.so.cache"):
            args += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
        for directory in self._readonly_dirs:
            args += ["--ro-bind", directory, directory]
        args += ["--dev", "/dev", "--size", size, "--tmpfs", "/tmp",
                 "--size", size, "--tmpfs", SANDBOX_DIR]
        if exe_link:  # a /proc of one link: no process or its arguments to read
            args += ["--tmpfs", "/proc", "--dir", "/proc/self",
                     "--symlink", exe_link, "/proc/self/exe", "--remount-ro", "/proc"]
        for name in inputs:
            args += ["--ro-bind", os.path.join(run_dir, name), os.path.join(SANDBOX_DIR, name)]
        links = null_files
        if empty_dir:
            args += ["--setenv", EMPTY_DIR_ENV, EMPTY_DIR, "--size", "4096", "--tmpfs", EMPTY_DIR]
            links = [os.path.join(EMPTY_DIR, name) for name in null_files]
        for name in links:
            args += ["--symlink", "/dev/null", os.path.join(SANDBOX_DIR, name)]
        if empty_dir:
            args += ["--remount-ro", EMPTY_DIR]
        return args + ["--chdir", SANDBOX_DIR, "--", *argv]

    def run(self, argv, run_dir, inputs=(), null_files=(), stdout_name="stdout.txt",
            phase_timeouts=(), **options):
        """Runs `argv` on the files `inputs` (names in `run_dir`).

        The command's working directory holds `inputs` (read-only) and, for
        each name in `null_files`, a link to /dev/null (e.g. a waveform dump
        nobody reads). Its stdout goes to `stdout_name` in run_dir, capped at
        `limits.file_bytes`; its stderr comes back in Run.stderr (64 KiB at
        most). `phase_timeouts`: wall-clock limits of successive phases, each
        ended by a line the command writes to stderr; the whole run is also
        limited to `limits.wall_s`. `options`: those of run_script.
        """
        return self.run_script('exec "$@"', run_dir, inputs, null_files, stdout_name,
                               phase_timeouts, args=argv, **options)

    def run_script(self, script, run_dir, inputs=(), null_files=(), stdout_name="stdout.txt",
                   phase_timeouts=(), args=(), exe_link=None, empty_dir=False):
        """As `run`, for a /bin/sh script (with `args` as its $@).

        `exe_link`: an executable that reads /proc/self/exe to find its own files
        (the pinned iverilog), given a /proc holding that one link and nothing
        else. `empty_dir`: an empty read-only folder, its path in the script's
        $SANDBOX_EMPTY_DIR, for a step that should see no files (the `null_files`
        links go there instead of the working directory)."""
        for name in inputs:
            if os.path.basename(name) != name:
                raise ValueError(f"input names are plain file names, got {name!r}")
        shell = ["/bin/sh", "-c", self._ulimits + script, "sandbox", *args]
        if self.kind == BWRAP:
            command = self._bwrap_argv(run_dir, inputs, null_files, shell, exe_link, empty_dir)
            env = {"PATH": _PATH, "LC_ALL": "C"}
        else:
            for name in inputs:
                os.chmod(os.path.join(run_dir, name), 0o444)
            links_dir = run_dir
            env = {"PATH": _PATH, "LC_ALL": "C", "HOME": run_dir, "TMPDIR": run_dir}
            if empty_dir:
                links_dir = env[EMPTY_DIR_ENV] = tempfile.mkdtemp(prefix="empty_", dir=run_dir)
            for name in null_files:
                os.symlink(os.devnull, os.path.join(links_dir, name))
            if empty_dir:
                os.chmod(links_dir, 0o555)
            command = shell
        start = time.monotonic()
        read_end, write_end = os.pipe()
        try:
            with open(os.path.join(run_dir, stdout_name), "wb") as out:
                # No preexec_fn: the limits are set by the script's own ulimit
                # lines, which keeps Popen on its fast vfork path.
                proc = subprocess.Popen(command, cwd=run_dir, env=env,
                                        stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=write_end, start_new_session=True,
                                        close_fds=True)
            os.close(write_end)
            write_end = -1
            try:
                err, wall_timeout, phase = _watch(proc, read_end, self.limits.wall_s,
                                                  tuple(phase_timeouts))
                if wall_timeout or phase is not None:
                    kill_group(proc)
                else:
                    proc.wait()
            except BaseException:
                kill_group(proc)
                raise
        finally:
            os.close(read_end)
            if write_end >= 0:
                os.close(write_end)
        return Run(proc.returncode, wall_timeout, time.monotonic() - start,
                   err.decode("utf-8", "replace"), phase)


def _under(path, root):
    path = os.path.realpath(path)
    return path == root or path.startswith(root + os.sep)
