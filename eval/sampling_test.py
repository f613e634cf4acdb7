import os

from absl.testing import absltest

from eval import completions
from eval import sampling
from eval import testing


def _conversations(ids):
    return [(pid, [{"role": "system", "content": "sys"}, {"role": "user", "content": pid}])
            for pid in ids]


def _echo(body, count):
    """Answers sample i of problem P with 'P/i'."""
    return 200, [f"{body['messages'][-1]['content']}/{i}" for i in range(count)]


class SamplingTest(absltest.TestCase):

    def _path(self):
        return os.path.join(self.create_tempdir().full_path, "samples.jsonl")

    def _sample(self, server, path, ids, concurrency=4, max_retries=2, **settings):
        client = sampling.make_client(server.base_url, timeout_s=30, max_retries=max_retries)
        settings = sampling.Settings(model=sampling.resolve_model(client, ""), **settings)
        return sampling.sample(client, settings, _conversations(ids), path, concurrency)

    def test_all_samples_of_a_problem_in_one_request(self):
        path = self._path()
        with testing.FakeChatServer(_echo) as server:
            report = self._sample(server, path, ["P1", "P2"], n=3, temperature=0.5, top_p=0.9,
                                  max_tokens=77)
        self.assertEqual(report.failed, {})
        self.assertLen(server.requests, 2)
        body = server.requests[0]
        self.assertEqual(body["model"], "fake-model")
        self.assertEqual((body["n"], body["temperature"], body["top_p"], body["max_tokens"]),
                         (3, 0.5, 0.9, 77))
        self.assertIs(body["skip_special_tokens"], False)
        self.assertNotIn("chat_template_kwargs", body)
        self.assertNotIn("seed", body)
        rows = sorted(completions.read(path), key=lambda r: (r.problem, r.sample))
        self.assertEqual([(r.problem, r.sample, r.completion, r.finish_reason) for r in rows],
                         [("P1", 0, "P1/0", "stop"), ("P1", 1, "P1/1", "stop"),
                          ("P1", 2, "P1/2", "stop"), ("P2", 0, "P2/0", "stop"),
                          ("P2", 1, "P2/1", "stop"), ("P2", 2, "P2/2", "stop")])

    def test_concurrency_is_bounded(self):
        with testing.FakeChatServer(_echo, delay_s=0.2) as server:
            report = self._sample(server, self._path(), [f"P{i}" for i in range(12)], n=1,
                                  concurrency=3)
        self.assertLen(report.requested, 12)
        self.assertEqual(server.max_in_flight, 3)

    def test_resume_never_samples_a_problem_twice(self):
        path = self._path()
        with testing.FakeChatServer(_echo) as server:
            self._sample(server, path, ["P1", "P2"], n=2)
            self.assertLen(server.requests, 2)
            report = self._sample(server, path, ["P1", "P2"], n=2)
            self.assertLen(server.requests, 2)  # nothing asked again
            self.assertEqual(sorted(report.skipped), ["P1", "P2"])
            # n grows: only the missing samples are asked for, numbered after the saved.
            self._sample(server, path, ["P1", "P2"], n=3)
            self.assertEqual(sorted(b["n"] for b in server.requests[2:]), [1, 1])
        rows = completions.read(path)
        self.assertEqual(sorted((r.problem, r.sample) for r in rows),
                         [(p, i) for p in ("P1", "P2") for i in range(3)])

    def test_resume_after_a_torn_write(self):
        path = self._path()
        completions.append(path, [completions.Completion("P1", 0, "kept")])
        with open(path, "a") as f:
            f.write('{"problem": "P1", "sample": 1, "compl')  # killed mid-write
        with testing.FakeChatServer(_echo) as server:
            self._sample(server, path, ["P1"], n=3)
        self.assertEqual([b["n"] for b in server.requests], [2])
        rows = completions.read(path)
        self.assertEqual([(r.sample, r.completion) for r in rows],
                         [(0, "kept"), (1, "P1/0"), (2, "P1/1")])

    def test_transient_errors_are_retried(self):
        failures = {"P1": 2}

        def flaky(body, count):
            pid = body["messages"][-1]["content"]
            if failures.get(pid, 0) > 0:
                failures[pid] -= 1
                return 503, "overloaded"
            return _echo(body, count)

        path = self._path()
        with testing.FakeChatServer(flaky) as server:
            report = self._sample(server, path, ["P1", "P2"], n=2, max_retries=3)
        self.assertEqual(report.failed, {})
        self.assertLen(server.requests, 4)  # P1 three times, P2 once
        self.assertEqual(completions.counts(completions.read(path)), {"P1": 2, "P2": 2})

    def test_a_failing_problem_is_reported_and_left_for_the_next_run(self):
        def reject_p1(body, count):
            if body["messages"][-1]["content"] == "P1":
                return 400, "prompt too long"
            return _echo(body, count)

        path = self._path()
        with testing.FakeChatServer(reject_p1) as server:
            report = self._sample(server, path, ["P1", "P2"], n=2, max_retries=3)
            self.assertEqual(len(server.requests), 2)  # a 400 is not retried
        self.assertEqual(list(report.failed), ["P1"])
        self.assertIn("prompt too long", report.failed["P1"])
        self.assertEqual(completions.counts(completions.read(path)), {"P2": 2})

    def test_options(self):
        with testing.FakeChatServer(_echo) as server:
            self._sample(server, self._path(), ["P1", "P2"], n=1, seed=7,
                         keep_special_tokens=False, enable_thinking=True)
        bodies = sorted(server.requests, key=lambda b: b["messages"][-1]["content"])
        self.assertEqual([b["seed"] for b in bodies], [7, 8])
        self.assertNotIn("skip_special_tokens", bodies[0])
        self.assertEqual(bodies[0]["chat_template_kwargs"], {"enable_thinking": True})

    def test_model_name(self):
        with testing.FakeChatServer(_echo, model="served") as server:
            client = sampling.make_client(server.base_url)
            self.assertEqual(sampling.resolve_model(client, ""), "served")
            self.assertEqual(sampling.resolve_model(client, "mine"), "mine")


if __name__ == "__main__":
    absltest.main()
