"""Test helpers for the eval package: the shared data set, a fake chat server."""

import http.server
import json
import socketserver
import threading
import time

from eval import problems as problems_lib


def dataset_dir():
    """The shared VerilogEval copy (`<repo root>/../shared/...`)."""
    return problems_lib.default_dataset_dir()


def load_problem(problem_id):
    return problems_lib.problem(dataset_dir(), problem_id)


def reference_completion(problem):
    """The problem's reference as a model would answer: in [BEGIN]/[DONE]."""
    return "[BEGIN]\n" + problem.reference_as_sample() + "[DONE]\n"


def problem_of(messages, problem_list):
    """The problem whose spec is in the user message of `messages`."""
    user = next(m["content"] for m in messages if m["role"] == "user")
    for problem in problem_list:
        if problem.prompt().strip() in user:
            return problem
    raise KeyError("no known problem in the request")


class FakeChatServer:
    """An OpenAI-compatible /v1 endpoint on 127.0.0.1 answering with `answer`.

    `answer(request_json, count)` returns (HTTP status, list of completion
    texts or an error body). Records every request and the largest number
    of requests in flight at once; `delay_s` keeps each request open a while.
    """

    def __init__(self, answer, model="fake-model", delay_s=0.05):
        self.answer = answer
        self.model = model
        self.delay_s = delay_s
        self.requests = []
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # pylint: disable=invalid-name
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [
                        {"id": server.model, "object": "model", "owned_by": "test"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self):  # pylint: disable=invalid-name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests.append(body)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    time.sleep(server.delay_s)
                    status, texts = server.answer(body, body.get("n", 1))
                finally:
                    with server._lock:
                        server.in_flight -= 1
                if status != 200:
                    self._send(status, {"error": {"message": str(texts), "type": "test"}})
                    return
                self._send(200, {
                    "id": "chatcmpl-test", "object": "chat.completion", "created": 0,
                    "model": body["model"],
                    "choices": [{"index": i, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}
                                for i, text in enumerate(texts)],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._httpd.shutdown()
        self._httpd.server_close()
