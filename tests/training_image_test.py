"""//training/tpu:image runs: unpacked, its entrypoint trains the tiny CPU config
inside the image's own root filesystem.

Builds the image offline with G4_OFFLINE_IMAGES=real (the Python base made from
pinned Debian packages, tools/oci/debian_base.py; the `train` lock's wheels and
the libtpu overlay, downloaded by hash), with its own Bazel output base. Copies
the layout with skopeo, unpacks it with umoci, and runs the image config's
entrypoint and environment under bubblewrap with the unpacked root as `/`
(nothing of the host is visible but /proc, /dev and the run directory), with
`--config=cpu.py` in place of the entrypoint's machine config: a two-step training run completes and writes its run
directory, checkpoint included. Prints the image's size and the build time.

Tagged `manual` (about 10 minutes, and it downloads the wheels, ~1 GB): run it
with `./bazelw test //tests:training_image_test` (docs/build.md, "Images").
"""

import json
import os
import shutil
import subprocess
import tempfile
import time

from absl.testing import absltest

from common import pinned
from common import repo

_TARGET = "//training/tpu:image"
_TOOLS = ("bazel-4", "skopeo", "umoci")  # ./bazelw installs them; bwrap is pinned


def du(path):
    return int(subprocess.run(["du", "-sb", path], check=True, capture_output=True,
                              text=True).stdout.split()[0])


class TrainingImageTest(absltest.TestCase):

    def test_tiny_training_inside_the_image(self):
        missing = [tool for tool in _TOOLS if not shutil.which(tool)]
        self.assertEqual(missing, [], "not installed: `./bazelw test` installs them (apt)")
        root = repo.source_root()
        tmp = tempfile.mkdtemp(prefix="g4train-", dir="/tmp")  # short: Bazel's socket
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("RUNFILES_", "TEST_", "PYTHON"))}
        bazel = ["bazel-4", "--batch", f"--output_user_root={tmp}/user",
                 f"--output_base={tmp}/base"]
        started = time.monotonic()
        done = subprocess.run(
            [*bazel, "build", "--config=offline", "--repo_env=G4_OFFLINE_IMAGES=real",
             "--symlink_prefix=/", _TARGET], cwd=root, env=env, capture_output=True,
            text=True, check=False, timeout=3000)
        self.assertEqual(done.returncode, 0, done.stderr[-4000:])
        build_s = time.monotonic() - started
        bin_dir = subprocess.run([*bazel, "info", "--config=offline",
                                  "--repo_env=G4_OFFLINE_IMAGES=real", "bazel-bin"], cwd=root,
                                 env=env, capture_output=True, text=True,
                                 check=True).stdout.strip()
        layout = os.path.join(bin_dir, "training", "tpu", "image")
        with open(os.path.join(layout, "index.json")) as f:
            digest = json.load(f)["manifests"][0]["digest"]

        def blob(d):
            with open(os.path.join(layout, "blobs", *d.split(":")), "rb") as f:
                return json.loads(f.read())
        manifest = blob(digest)
        config = blob(manifest["config"]["digest"])["config"]
        compressed = sum(layer["size"] for layer in manifest["layers"])

        copy = os.path.join(tmp, "copy")
        subprocess.run(["skopeo", "copy", "--quiet", f"oci:{layout}", f"oci:{copy}:run"],
                       check=True)
        bundle = os.path.join(tmp, "bundle")
        subprocess.run(["umoci", "unpack", "--rootless", "--image", f"{copy}:run", bundle],
                       check=True, capture_output=True)
        rootfs = os.path.join(bundle, "rootfs")
        print(f"{_TARGET} {digest}: {len(manifest['layers'])} layers, "
              f"{compressed / 1e6:.0f} MB compressed, {du(rootfs) / 1e6:.0f} MB unpacked; "
              f"built in {build_s:.0f} s")
        self.assertFalse(os.path.exists(os.path.join(rootfs, "etc", "gemma4-offline-base")))

        runs = os.path.join(tmp, "runs")
        os.makedirs(runs)
        command = [pinned.path("bwrap"), "--bind", rootfs, "/", "--proc", "/proc", "--dev", "/dev",
                   "--tmpfs", "/tmp", "--bind", runs, "/runs", "--unshare-all",
                   "--die-with-parent", "--clearenv"]
        for item in config["Env"]:
            name, _, value = item.partition("=")
            command += ["--setenv", name, value]
        # The entrypoint with the CPU config in place of the machine's (absl parses
        # one --config), as `docker run --entrypoint python3 IMAGE -m MODULE ...`.
        entrypoint = config["Entrypoint"]
        self.assertEqual(entrypoint, ["python3", "-m", "training.tpu.sft", "--config=v5p8.py"])
        command += ["--setenv", "HOME", "/tmp", "--chdir", config.get("WorkingDir", "/"),
                    *entrypoint[:3], "--config=cpu.py", "--workdir=/runs/tiny",
                    "--config.max_steps=2", "--config.checkpoint_every_steps=2"]
        started = time.monotonic()
        ran = subprocess.run(command, capture_output=True, text=True, check=False,
                             timeout=1800)
        print(f"training inside the image: exit {ran.returncode} in "
              f"{time.monotonic() - started:.0f} s")
        self.assertEqual(ran.returncode, 0, (ran.stdout + ran.stderr)[-6000:])
        run_dir = os.path.join(runs, "tiny")
        with open(os.path.join(run_dir, "run.json")) as f:
            self.assertEqual(json.load(f)["total_steps"], 2)
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            steps = [json.loads(line)["step"] for line in f if '"loss"' in line]
        self.assertEqual(steps[-1], 2)
        self.assertTrue(any(name.isdigit() or "checkpoint" in name
                            for name in os.listdir(run_dir)), os.listdir(run_dir))


if __name__ == "__main__":
    absltest.main()
