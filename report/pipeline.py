"""The whole system in one command: train on both stacks, export, serve, sweep,
evaluate, report.

    ./bazelw run //:pipeline                                  # the CPU default
    ./bazelw run //:pipeline -- --workdir=runs/p --stages=report
    bazel run //:pipeline -- --tpu_config=v5p8.py --stages=tpu_sft,export

Stages, in order (each a stage binary run as its own process, its output in
WORKDIR/logs/STAGE.log):
  tpu_sft   //training/tpu:sft                     -> WORKDIR/tpu
  gpu_sft   //training/gpu:sft (same data, recipe) -> WORKDIR/gpu
  export    //conversion:export of the TPU run     -> WORKDIR/export/{adapter,merged}
  bench     vLLM serving the base with the exported adapter (the fine-tuned
            model; the merged export where the serving config has lora=False,
            v6e8.py), //serving:bench on it         -> WORKDIR/serve, WORKDIR/bench
  eval      //eval:verilog_eval of the base and of the fine-tuned model,
            through the same server, on --problems of VerilogEval
                                                   -> WORKDIR/eval-{base,finetuned}
            and on --sample_problems of the sample tasks (//eval:sample_tasks)
                                                   -> WORKDIR/eval-sample-{base,finetuned}
  report    //report:report of all of the above     -> WORKDIR/report
With the CPU training configs the pipeline is a demo (`--demo`, on by default
there): both stacks train on the --sample_problems' own rows (the conversation
the evaluation sends, answered with the reference; WORKDIR/demo) from a tiny
base whose logits can peak, until the fine-tuned model reproduces them. The
fine-tuned model then passes sample tasks the base does not, which shows that
what was learned survives export, serving and evaluation; it measures
memorisation of training rows, not skill.
A stage whose outputs are complete is skipped, so rerunning after an
interruption resumes (the trainers resume from their checkpoints). A failing
stage is named with its log; finished stages are kept. `--base_url` uses a
running server instead of starting one (e.g. the TPU image on a v6e-8).
"""

import json
import math
import os
import subprocess
import time

from absl import app
from absl import flags

from common import binaries
from common import cli
from common import config_cli
from common import jsonl
from common import storage
from eval import problems as problems_lib
from serving import launcher
from serving import server_config

STAGES = ("tpu_sft", "gpu_sft", "export", "bench", "eval", "report")
SERVER_START_TIMEOUT_S = 1800  # vLLM on CPU starts in ~2 min; on TPU it compiles for ~8
FINETUNED, BASE = "finetuned", "base"

_WORKDIR = flags.DEFINE_string("workdir", "runs/pipeline", "Where every stage writes.")
_STAGES = flags.DEFINE_list("stages", list(STAGES), f"Stages to run, of {', '.join(STAGES)}.")
_TPU_CONFIG = flags.DEFINE_string("tpu_config", "cpu.py", "//training/tpu:sft --config.")
_GPU_CONFIG = flags.DEFINE_string("gpu_config", "cpu.py", "//training/gpu:sft --config.")
_SERVE_CONFIG = flags.DEFINE_string("serve_config", "cpu.py", "//serving:bench --config.")
_BASE_URL = flags.DEFINE_string("base_url", None, "A running vLLM server (serving the base as "
                                f"'{BASE}' and the fine-tuned model as '{FINETUNED}').")
_TRAIN_ARGS = flags.DEFINE_list("train_args", [], "Extra flags for both trainers.")
_TPU_ARGS = flags.DEFINE_list(
    "tpu_args", [], "Extra flags for //training/tpu:sft alone (after --train_args), e.g. "
    "--config.cpu_devices=1,--config.mesh.fsdp=1,--config.mesh.tp=1 (one CPU device).")
_GPU_ARGS = flags.DEFINE_list("gpu_args", [], "Extra flags for //training/gpu:sft alone "
                              "(after --train_args).")
_DEMO = flags.DEFINE_bool(
    "demo", None, "Train both stacks on the --sample_problems' own rows (the conversation "
    "the evaluation sends, answered with the reference) from a base that can learn them, "
    "until it reproduces them: proof that what is learned survives export, serving and "
    "evaluation. It measures memorisation of training rows, nothing else. Default: on "
    "with the CPU training configs.")
_DEMO_STEPS = flags.DEFINE_integer("demo_steps", 30, "Optimizer steps of the demo's training.")
_PROBLEMS = flags.DEFINE_string("problems", "Prob001_zero,Prob002_m2014_q4i,Prob003_step_one,"
                                "Prob004_vector2,Prob005_notgate", "VerilogEval problems.")
_SAMPLE_PROBLEMS = flags.DEFINE_string(
    "sample_problems", "Prob001_mux4_8,Prob008_parity_gen,Prob022_dff_srst,Prob040_johnson4",
    "Sample tasks (data/sample as a VerilogEval data set, //eval:sample_tasks) to evaluate "
    "too, comma-separated; empty: none.")
# Greedy: the demo shows what the fine-tuned model reproduces, not sampling luck.
_EVAL_ARGS = flags.DEFINE_list("eval_args", ["--n=1", "--temperature=0.0", "--max_tokens=256"],
                               "Extra flags for both evaluations.")
_SWEEP = flags.DEFINE_string("sweep", "64x1,4", "//serving:bench --sweep (LENGTHS x RATES).")


class StageFailed(cli.UserError):
    pass


class Pipeline:
    """Runs the stages, each once its inputs exist and unless its outputs do."""

    def __init__(self, workdir, sync=lambda: None):
        """`sync()` runs after each stage: it uploads a gs:// pipeline's local mirror."""
        self.workdir = workdir
        self.sync = sync
        self.logs = os.path.join(workdir, "logs")
        self.env = binaries.child_env()

    def path(self, *parts):
        return os.path.join(self.workdir, *parts)

    def run(self, stage, binary, *args):
        """Runs binary `binary` (a label in this target's `data`) with `args`, its
        output in logs/STAGE.log."""
        os.makedirs(self.logs, exist_ok=True)
        log = os.path.join(self.logs, f"{stage}.log")
        command = binaries.command(binary, *args)
        with open(log, "a") as out:
            out.write(f"\n$ {binary} {' '.join(args)}\n")
            out.flush()
            done = subprocess.run(command, env=self.env,
                                  stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  check=False)
        if done.returncode:
            raise StageFailed(f"stage {stage} failed (exit {done.returncode}); its log: {log}; "
                              "finished stages are kept, rerun to resume")


def _complete(path, *names):
    return all(os.path.exists(os.path.join(path, name)) for name in names)


DEMO_EMBEDDING_STD = 0.5  # gemma4/tiny_model.py: a base whose logits can peak
DEMO_DATA_PARALLEL = 2  # the CPU TPU config's replicas: an effective batch splits over them
# Measured on the TPU stack, 4 sample problems, 40 steps of 8 rows: LoRA r=8/alpha 16
# with the cosine schedule ends at loss 0.13; r=16/alpha 64 at 0.107; with the rate
# held at its peak at 0.050, where greedy decoding reproduces all 4 answers. Steps of
# the 4 rows once: 0.097 with the recipe's LoRA dropout, and without it 0.016 after 30
# steps (dropout is noise to a demo whose point is to memorise).
# The demo owns the data: a recipe's validation set (held out of it, or read from
# elsewhere) would take rows the demo trains on, or name data it does not use.
DEMO_RECIPE = ("--config.lora.rank=16", "--config.lora.alpha=64.0", "--config.lora.dropout=0.0",
               "--config.optimizer.end_learning_rate=0.01", "--config.data.packing=False",
               "--config.data.eval_fraction=0.0", "--config.data.eval_source=",
               "--config.data.eval_split=")


def demo_inputs(p, sample_problems, steps):
    """The demo's base and rows, written once; returns the trainers' flags for them."""
    sample_dir, demo = p.path("sample-tasks"), p.path("demo")
    if not _complete(sample_dir, problems_lib.PROBLEMS_FILE, problems_lib.TRAINING_ROWS):
        p.run("demo", "//eval:sample_tasks", f"--out={sample_dir}")
    wanted = [name for name in sample_problems.split(",") if name]
    with open(os.path.join(sample_dir, problems_lib.TRAINING_ROWS)) as f:
        rows = {row["id"]: row for row in map(json.loads, f)}
    missing = [name for name in wanted if name not in rows]
    if not wanted or missing:
        raise StageFailed(f"the demo trains on --sample_problems; not sample tasks: {missing}")
    os.makedirs(demo, exist_ok=True)
    path = os.path.join(demo, problems_lib.TRAINING_ROWS)
    with open(path + ".tmp", "w") as f:
        f.writelines(json.dumps(rows[name]) + "\n" for name in wanted)
    os.replace(path + ".tmp", path)
    from gemma4 import tiny_model  # pylint: disable=import-outside-toplevel
    base = tiny_model.ensure(os.path.join(demo, "base"), embedding_std=DEMO_EMBEDDING_STD)
    # Each step is one pass over the rows (two over an odd count, which the replicas
    # cannot split): the full-batch gradient at the least compute.
    batch = math.lcm(len(wanted), DEMO_DATA_PARALLEL)
    epochs = steps * batch // len(wanted)
    return [f"--config.model.name={base}", f"--config.data.source={path}",
            f"--config.batch.effective_size={batch}", f"--config.data.epochs={epochs}",
            f"--config.max_steps={steps}",
            f"--config.checkpoint_every_steps={steps}", *DEMO_RECIPE]


def run_stages(p, stages, *, tpu_config, gpu_config, serve_config, base_url, train_args,
               problems, sample_problems, eval_args, sweep, demo_steps=0, tpu_args=(),
               gpu_args=(), say=print):
    """Runs `stages` under Pipeline `p`; returns {stage: "ran" | "skipped"}. With
    `demo_steps`, both trainers learn the sample problems' rows in that many steps.
    `train_args` go to both trainers, then `tpu_args` or `gpu_args` to one."""
    status = {}
    if demo_steps and stages & {"tpu_sft", "gpu_sft"}:
        train_args = [*demo_inputs(p, sample_problems, demo_steps), *train_args]

    def stage(name, complete, body, suffix=""):
        if name not in stages:
            return
        number = f"[{STAGES.index(name) + 1}/{len(STAGES)}]"
        name_shown = name + suffix
        if complete():
            status.setdefault(name, "skipped")
            say(f"{number} {name_shown}: complete, skipped")
            return
        say(f"{number} {name_shown} ... (log: {os.path.join(p.logs, name + '.log')})")
        started = time.time()
        try:
            body()
        finally:
            p.sync()
        status[name] = "ran"
        say(f"{number} {name_shown}: done in {time.time() - started:.0f} s")

    tpu, gpu, export = p.path("tpu"), p.path("gpu"), p.path("export")
    stage("tpu_sft", lambda: _tpu_finished(tpu), lambda: p.run(
        "tpu_sft", "//training/tpu:sft", f"--config={tpu_config}", f"--workdir={tpu}",
        *train_args, *tpu_args))
    stage("gpu_sft", lambda: _complete(gpu, "run.json", "adapter/adapter_config.json"),
          lambda: p.run(
        "gpu_sft", "//training/gpu:sft", f"--config={gpu_config}", f"--workdir={gpu}",
        *train_args, *gpu_args))
    stage("export", lambda: _complete(export, "adapter/adapter_config.json",
                                      "merged/config.json"), lambda: p.run(
        "export", "//conversion:export", f"--run_dir={tpu}", "--format=both",
        f"--output_dir={export}", "--overwrite"))

    sample_dir = p.path("sample-tasks")
    # (served model, problems flags, run directory) of each evaluation.
    evals = [(model, [f"--problems={problems}"], p.path(f"eval-{model}"))
             for model in (BASE, FINETUNED)]
    if sample_problems:
        evals += [(model, [f"--dataset_dir={sample_dir}", f"--problems={sample_problems}"],
                   p.path(f"eval-sample-{model}")) for model in (BASE, FINETUNED)]

    def bench_done():
        return _complete(p.path("bench"), "summary.json")

    def evals_done(names):
        return all(_complete(d, "summary.json") for model, _, d in evals if model in names)

    def bench():
        p.run("bench", "//serving:bench", f"--config={serve_config}", f"--base_url={base_url}",
              f"--model={FINETUNED}", f"--tokenizer={os.path.join(export, 'merged')}",
              f"--server_json={p.path('serve', 'server.json')}", f"--sweep={sweep}",
              f"--out_dir={p.path('bench')}", "--label=fine-tuned")

    def evaluate(names):
        # The server's key, if it has one, is read by eval from the same variable.
        key_env = _serving(serve_config).api_key_env
        if sample_problems and not _complete(sample_dir, "problems.txt"):
            p.run("eval", "//eval:sample_tasks", f"--out={sample_dir}")
        # A --config of eval_args (a recipe's) goes before any --config.FIELD override.
        configs = [a for a in eval_args if a.startswith("--config=")]
        others = [a for a in eval_args if not a.startswith("--config=")]
        for model, which, out in evals:
            if model in names and not _complete(out, "summary.json"):
                p.run("eval", "//eval:verilog_eval", *configs, f"--base_url={base_url}/v1",
                      f"--model={model}", *which, f"--out_dir={out}",
                      f"--config.api_key_env={key_env}", *others)

    plans = [(None, [], None, (BASE, FINETUNED))] if base_url else _serve_plans(
        serves_adapters(serve_config), _base_model(tpu), export)
    for model, adapters, served_name, names in plans:
        needed = (("eval" in stages and not evals_done(names))
                  or ("bench" in stages and FINETUNED in names and not bench_done()))
        server = None
        if needed and model is not None:
            port = launcher.free_port()
            base_url = f"http://127.0.0.1:{port}"
            say(f"starting vLLM with {model} as {', '.join(map(repr, names))}; a few minutes "
                f"on CPU (log: {p.path('logs', 'serve.log')})")
            server = _start_server(p, serve_config, model, adapters, served_name, port)
        try:
            if FINETUNED in names:
                stage("bench", bench_done, bench)
            suffix = "" if len(plans) == 1 else f" ({', '.join(names)})"
            stage("eval", lambda n=names: evals_done(n), lambda n=names: evaluate(n),
                  suffix=suffix)
        finally:
            if server is not None:
                server.stop()
    runs = [d for d in (tpu, gpu, p.path("bench"), *(out for _, _, out in evals))
            if _complete(d, "run.json") or _complete(d, "summary.json")]
    stage("report", lambda: False, lambda: p.run(
        "report", "//report:report", f"--runs={','.join(runs)}", f"--out={p.path('report')}"))
    return status


def _serving(serve_config):
    configs = os.path.join(os.path.dirname(os.path.abspath(launcher.__file__)), "configs")
    return config_cli.load(serve_config, configs)


def serves_adapters(serve_config):
    """Whether the serving config's backend adds LoRA adapters (its `lora` field)."""
    return _serving(serve_config).lora


def _base_model(tpu_run):
    with open(os.path.join(tpu_run, "run.json")) as f:
        return json.load(f)["base_model"]


def _serve_plans(adapters_served, base, export):
    """[(model, serve flags, served name, names it answers to)], one per server: the
    base with the fine-tuned adapter, or, where the backend adds no adapters
    (v6e8.py), the merged export and then the base, one after the other."""
    if adapters_served:
        return [(base, [f"--adapter={FINETUNED}={os.path.join(export, 'adapter')}"], BASE,
                 (BASE, FINETUNED))]
    return [(os.path.join(export, "merged"), [], FINETUNED, (FINETUNED,)),
            (base, [], BASE, (BASE,))]


def _start_server(p, serve_config, model, adapters, served_name, port):
    """//serving:serve as a child process, once it answers and has written server.json."""
    os.makedirs(p.logs, exist_ok=True)
    record = p.path("serve", "server.json")
    if os.path.exists(record):
        os.remove(record)  # the record of this server, not of an earlier one
    server = launcher.Server(
        binaries.command("//serving:serve", f"--config={serve_config}", f"--model={model}",
                         *adapters, f"--served_model_name={served_name}", f"--port={port}",
                         f"--run_dir={p.path('serve')}"),
        env=p.env, log_path=p.path("logs", "serve.log"), echo=False).start()
    try:
        server.wait_ready(f"http://127.0.0.1:{port}", SERVER_START_TIMEOUT_S,
                          server_config.api_key(_serving(serve_config)))
        # serving.serve writes its record once it has seen the server answer too.
        _wait_for_file(record, server)
    except launcher.ServerError as e:
        server.stop()
        raise StageFailed(f"the vLLM server did not start: {e}") from None
    return server


def _wait_for_file(path, server, timeout_s=120):
    deadline = time.time() + timeout_s
    while not os.path.exists(path):
        if time.time() > deadline or not server.alive():
            raise launcher.ServerError(f"{path} was not written")
        time.sleep(0.5)


def _tpu_finished(run_dir):
    """A TPU run is finished when its metrics reach the step count run.json records."""
    if not _complete(run_dir, "run.json", "metrics.jsonl"):
        return False
    with open(os.path.join(run_dir, "run.json")) as f:
        total = json.load(f)["total_steps"]
    records, _ = jsonl.read(os.path.join(run_dir, "metrics.jsonl"))
    steps = [record["step"] for record in records]
    return bool(steps) and steps[-1] >= total


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    unknown = sorted(set(_STAGES.value) - set(STAGES))
    if unknown:
        raise app.UsageError(f"unknown stages {unknown}; stages are {', '.join(STAGES)}")
    workdir = config_cli.user_path(_WORKDIR.value)
    storage.probe(workdir)
    # A gs:// --workdir is worked on in a local mirror: pulled first (stages whose
    # outputs are in the bucket are skipped), pushed after every stage.
    mirror = storage.Mirror(workdir, clear=True)
    mirror.pull()
    started = time.time()
    demo = _DEMO.value
    if demo is None:
        demo = (_TPU_CONFIG.value, _GPU_CONFIG.value) == ("cpu.py", "cpu.py")
    status = run_stages(
        Pipeline(mirror.local, sync=mirror.push), set(_STAGES.value), tpu_config=_TPU_CONFIG.value,
        gpu_config=_GPU_CONFIG.value, serve_config=_SERVE_CONFIG.value,
        base_url=_BASE_URL.value, train_args=_TRAIN_ARGS.value, problems=_PROBLEMS.value,
        sample_problems=_SAMPLE_PROBLEMS.value, eval_args=_EVAL_ARGS.value, sweep=_SWEEP.value,
        demo_steps=_DEMO_STEPS.value if demo else 0, tpu_args=_TPU_ARGS.value,
        gpu_args=_GPU_ARGS.value)
    print(f"pipeline finished in {time.time() - started:.0f} s ({status}); report: "
          f"{storage.join(workdir, 'report', 'report.html')}")


if __name__ == "__main__":
    cli.run(main)
