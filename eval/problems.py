"""The VerilogEval v2 spec-to-rtl problems of a data set directory.

A data set directory (`dataset_spec-to-rtl/` of an NVlabs/verilog-eval
checkout, or the shared copy) has `problems.txt` (one id per line, e.g.
`Prob001_zero`) and per problem `<id>_prompt.txt` (the spec), `<id>_ref.sv`
(the reference, `module RefModule`) and `<id>_test.sv` (the testbench, top
`tb`). Problems are listed from problems.txt, never by globbing: the upstream
data has a stray duplicate testbench (`Prob062_bugs_mux2.sv`).

The default data set is $VERILOG_EVAL_DIR, else the shared copy beside the
checkout (`<checkout>/../shared/verilog-eval/dataset_spec-to-rtl`, where CI
clones the repository), else the copy tools/verilog_eval.py fetches into
`<checkout>/.venvs/verilog-eval` (./bazelw runs it where neither exists).
"""

import dataclasses
import os
import re

from common import cli
from common import pinned
from common import repo


class ProblemsError(cli.UserError):
    """A problem id or data set folder that cannot be used."""


PROBLEMS_FILE = "problems.txt"
# A sample-task data set's problems as `messages` training rows (eval/sample_tasks.py).
TRAINING_ROWS = "train.jsonl"
DATASET = "dataset_spec-to-rtl"
SHARED_DATASET = os.path.join("shared", "verilog-eval", DATASET)
FETCHED_DATASET = os.path.join(".venvs", "verilog-eval", DATASET)
ID_PATTERN = re.compile(r"^Prob\d{3}_\w+$")


def default_dataset_dir():
    """$VERILOG_EVAL_DIR, else the pinned data where this target carries it
    (//third_party/pinned:verilog_eval, what Bazel runs), else the shared copy
    beside the checkout, else the one tools/verilog_eval.py fetched."""
    override = os.environ.get("VERILOG_EVAL_DIR")
    if override:
        return os.path.abspath(override)
    problems_file = pinned.path("verilog_eval")
    if problems_file:
        return os.path.dirname(problems_file)
    root = repo.source_root()
    candidates = [os.path.normpath(os.path.join(root, os.pardir, SHARED_DATASET)),
                  os.path.join(root, FETCHED_DATASET)]
    for candidate in candidates:
        if os.path.isfile(os.path.join(candidate, PROBLEMS_FILE)):
            return candidate
    raise ProblemsError(
        f"no VerilogEval data in {' or '.join(candidates)}: run `python3 "
        "tools/verilog_eval.py` (./bazelw runs it; it downloads the pinned commit), "
        "set $VERILOG_EVAL_DIR or pass --dataset_dir")


@dataclasses.dataclass(frozen=True)
class Problem:
    id: str
    prompt_path: str
    ref_path: str
    test_path: str

    def prompt(self):
        with open(self.prompt_path) as f:
            return f.read()

    def reference_as_sample(self):
        """The reference solution renamed to `TopModule`, i.e. as a sample."""
        with open(self.ref_path) as f:
            return re.sub(r"\bRefModule\b", "TopModule", f.read())


def problem(dataset_dir, problem_id):
    """The Problem `problem_id` of `dataset_dir`; fails if a file is missing."""
    if not ID_PATTERN.match(problem_id):
        raise ProblemsError(f"not a VerilogEval problem id: {problem_id!r}")
    base = os.path.join(dataset_dir, problem_id)
    found = Problem(problem_id, base + "_prompt.txt", base + "_ref.sv", base + "_test.sv")
    for path in (found.prompt_path, found.ref_path, found.test_path):
        if not os.path.isfile(path):
            raise ProblemsError(f"{problem_id}: {path} is missing")
    return found


def problem_ids(dataset_dir):
    """The ids of problems.txt, in order."""
    path = os.path.join(dataset_dir, PROBLEMS_FILE)
    if not os.path.isfile(path):
        raise ProblemsError(
            f"{path} not found: --dataset_dir must be the dataset_spec-to-rtl folder "
            f"of a VerilogEval v2 checkout")
    with open(path) as f:
        return [line.strip() for line in f if line.strip()]


def load(dataset_dir, only=None, limit=0):
    """Problems of `dataset_dir` in problems.txt order.

    `only`: ids to keep (all others dropped; an unknown id is an error).
    `limit`: keep the first `limit` problems after that (0: all).
    """
    ids = problem_ids(dataset_dir)
    if only:
        wanted = list(dict.fromkeys(only))
        unknown = sorted(set(wanted) - set(ids))
        if unknown:
            raise ProblemsError(f"problems not in {dataset_dir}/{PROBLEMS_FILE}: {unknown}")
        keep = set(wanted)
        ids = [i for i in ids if i in keep]
    if limit:
        ids = ids[:limit]
    return [problem(dataset_dir, i) for i in ids]


def parse_id_list(text):
    """`Prob001_zero,Prob002_m2014_q4i` (commas or whitespace) -> ids."""
    return [part for part in re.split(r"[\s,]+", text or "") if part]
