"""Samples completions from an OpenAI-compatible server (vLLM), resumably.

One chat completions request per problem asks for all its missing samples at
once (`n`), so a problem's samples are written together; `concurrency`
requests run at a time on threads. The openai client retries transient
failures (connection errors, timeouts, 408/409/429 and 5xx answers) with
exponential backoff, `max_retries` times, each try bounded by
`request_timeout_s`. A problem whose request still fails is reported and left
for the next run: nothing is written for it.

Resume: the samples file is appended to, a problem at a time (one write,
fsync'd). A new run on the same file first cuts a torn last line, then asks
only for what is missing (n minus the samples saved), so no problem is ever
sampled twice.

Two vLLM extensions are sent in the request body: `skip_special_tokens: false`
(so that thinking delimiters such as Gemma 4's `<|channel>`/`<channel|>`
survive and can be removed before extraction) unless `keep_special_tokens`
is off, and `chat_template_kwargs: {"enable_thinking": true}` when thinking
is asked for.
"""

import concurrent.futures
import dataclasses
import os
import time

import openai
from absl import logging

from common import jsonl
from eval import completions


@dataclasses.dataclass(frozen=True)
class Settings:
    model: str
    n: int = 5
    temperature: float = 0.8
    top_p: float = 0.95
    max_tokens: int = 1024
    seed: int = -1                    # < 0: no seed
    keep_special_tokens: bool = True  # vLLM: skip_special_tokens=False
    enable_thinking: bool = False     # vLLM: chat_template_kwargs


@dataclasses.dataclass(frozen=True)
class Report:
    requested: list      # problem ids asked for in this run
    skipped: list        # already complete in the samples file
    failed: dict         # problem id -> error text
    seconds: float


def make_client(base_url, api_key="EMPTY", timeout_s=600.0, max_retries=5):
    """An openai client for `base_url` (e.g. http://127.0.0.1:8000/v1)."""
    return openai.OpenAI(base_url=base_url, api_key=api_key or "EMPTY", timeout=timeout_s,
                         max_retries=max_retries)


def resolve_model(client, model):
    """`model`, or the first model the server lists when it is empty."""
    if model:
        return model
    listed = [m.id for m in client.models.list()]
    if not listed:
        raise RuntimeError("the server lists no models; pass --model")
    return listed[0]


def template_kwargs(settings):
    """The chat template's keyword arguments the server is asked to render with."""
    return {"enable_thinking": True} if settings.enable_thinking else {}


def _extra_body(settings):
    body = {}
    if settings.keep_special_tokens:
        body["skip_special_tokens"] = False
    kwargs = template_kwargs(settings)
    if kwargs:
        body["chat_template_kwargs"] = kwargs
    return body or None


def request(client, settings, messages, count, seed_offset=0):
    """[(text, finish_reason)] of `count` samples for one conversation."""
    kwargs = {}
    if settings.seed >= 0:
        kwargs["seed"] = settings.seed + seed_offset
    response = client.chat.completions.create(
        model=settings.model, messages=messages, n=count, temperature=settings.temperature,
        top_p=settings.top_p, max_tokens=settings.max_tokens, extra_body=_extra_body(settings),
        **kwargs)
    choices = sorted(response.choices, key=lambda c: c.index)
    if len(choices) != count:
        raise RuntimeError(f"asked for {count} samples, the server sent {len(choices)}")
    return [(c.message.content or "", c.finish_reason) for c in choices]


def sample(client, settings, conversations, samples_path, concurrency=8):
    """Fills `samples_path` up to `settings.n` samples for each conversation.

    `conversations`: [(problem id, chat messages)]. Returns a Report.
    """
    start = time.monotonic()
    have, next_index = {}, {}
    if os.path.exists(samples_path):
        jsonl.repair(samples_path)  # a killed run's torn last line, before appending
        for row in completions.read(samples_path):
            have[row.problem] = have.get(row.problem, 0) + 1
            next_index[row.problem] = max(next_index.get(row.problem, 0), row.sample + 1)
    todo, skipped = [], []
    for position, (pid, messages) in enumerate(conversations):
        missing = settings.n - have.get(pid, 0)
        if missing > 0:
            todo.append((position, pid, messages, missing))
        else:
            skipped.append(pid)
    logging.info("sampling %d problems (%d already complete) with %d requests at a time",
                 len(todo), len(skipped), concurrency)
    failed = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        futures = {pool.submit(request, client, settings, messages, missing, position): pid
                   for position, pid, messages, missing in todo}
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            pid = futures[future]
            try:
                answers = future.result()
            except (openai.OpenAIError, RuntimeError) as e:
                failed[pid] = f"{type(e).__name__}: {e}"
                logging.error("%s: sampling failed: %s", pid, failed[pid])
                continue
            first = next_index.get(pid, 0)
            completions.append(samples_path, [
                completions.Completion(pid, first + i, text, reason)
                for i, (text, reason) in enumerate(answers)])
            logging.info("sampled %s (%d/%d)", pid, done, len(todo))
    return Report([t[1] for t in todo], skipped, failed, time.monotonic() - start)
