"""tools/verilog_eval.py installs the pinned data only when every file checks out.

The archive is built here from the shared copy in the upstream layout and served
by a loopback HTTP server (no download from GitHub in tests).
"""

import functools
import http.server
import io
import os
import tarfile
import threading
from unittest import mock

from absl.testing import absltest

from tools import verilog_eval


def upstream_archive(shared, corrupt=None):
    """A GitHub-style archive (one top folder) of the files tools/verilog_eval.sha256 lists."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for path in verilog_eval.expected():
            with open(os.path.join(shared, path), "rb") as f:
                data = f.read()
            if path == corrupt:
                data += b"// changed\n"
            info = tarfile.TarInfo(f"verilog-eval-{verilog_eval.COMMIT}/"
                                   f"{verilog_eval.upstream_path(path)}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class FetchTest(absltest.TestCase):

    def serve(self, body):
        handler = type("Handler", (http.server.BaseHTTPRequestHandler,), {
            "do_GET": functools.partialmethod(_reply, body),
            "log_message": lambda *a: None})
        server = http.server.HTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        return f"http://127.0.0.1:{server.server_port}/archive.tar.gz"

    def test_installs_checked_files_in_our_layout(self):
        dest = os.path.join(self.create_tempdir().full_path, "verilog-eval")
        url = self.serve(upstream_archive(verilog_eval.SHARED))
        dataset = verilog_eval.fetch(dest, url)
        self.assertEqual(dataset, os.path.join(dest, "dataset_spec-to-rtl"))
        self.assertTrue(verilog_eval.complete(dest, verilog_eval.expected()))
        self.assertTrue(os.path.isfile(os.path.join(
            dest, "icl-examples", "verilog-example-prefix_spec-to-rtl_1-shot.txt")))
        with open(os.path.join(dataset, "problems.txt")) as f:
            self.assertLen(f.read().split(), 156)
        # Complete: a second call does not download (this URL answers nothing).
        self.assertEqual(verilog_eval.fetch(dest, "http://127.0.0.1:9/none"), dataset)

    def test_a_changed_file_is_refused_and_nothing_is_left(self):
        parent = self.create_tempdir().full_path
        dest = os.path.join(parent, "verilog-eval")
        url = self.serve(upstream_archive(verilog_eval.SHARED,
                                          corrupt="dataset_spec-to-rtl/Prob001_zero_test.sv"))
        with self.assertRaisesRegex(SystemExit, "Prob001_zero_test.sv .*checksum"):
            verilog_eval.fetch(dest, url)
        self.assertEqual(os.listdir(parent), [])


class PinnedTest(absltest.TestCase):
    """The `verilog_eval` repository's data: the shared copy where it checks out."""

    def test_from_an_intact_shared_copy_without_a_download(self):
        dest = os.path.join(self.create_tempdir().full_path, "data")
        with mock.patch.object(verilog_eval, "fetch", side_effect=AssertionError("download")):
            dataset = verilog_eval.pinned(dest)
        self.assertEqual(dataset, os.path.join(dest, "dataset_spec-to-rtl"))
        self.assertTrue(verilog_eval.complete(dest, verilog_eval.expected()))

    def test_a_damaged_shared_copy_is_not_used(self):
        shared = self.create_tempdir().full_path
        sums = verilog_eval.expected()
        for path in sums:
            os.makedirs(os.path.join(shared, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(verilog_eval.SHARED, path), "rb") as src, \
                    open(os.path.join(shared, path), "wb") as out:
                out.write(src.read() + (b"// changed\n" if path.endswith("Prob001_zero_ref.sv")
                                        else b""))
        parent = self.create_tempdir().full_path
        dest = os.path.join(parent, "data")
        self.assertFalse(verilog_eval.copy_checked(shared, dest, sums))
        self.assertEqual(os.listdir(parent), [])  # nothing half-written
        with mock.patch.object(verilog_eval, "SHARED", shared), \
                mock.patch.object(verilog_eval, "fetch") as fetch:
            verilog_eval.pinned(dest)
        fetch.assert_called_once_with(dest)


def _reply(handler, body):
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


if __name__ == "__main__":
    absltest.main()
