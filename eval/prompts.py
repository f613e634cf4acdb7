"""Chat messages for a spec-to-rtl problem, in the upstream VerilogEval style.

Upstream (NVlabs/verilog-eval `sv-generate --task=spec-to-rtl`) sends a system
message and one user message: the optional n-shot prefix, then `Question:`,
the spec, the instruction to enclose the code in [BEGIN] and [DONE], and
`Answer:`. The wording below is that benchmark protocol; the server renders
the messages with its model's chat template (chat completions endpoint).

The n-shot prefixes are `verilog-example-prefix_spec-to-rtl_{N}-shot.txt`
files: in `icl-examples/` beside the data set folder (the shared copy) or in
`scripts/` of an upstream checkout.
"""

import os

SYSTEM = "\nYou are a Verilog RTL designer that only writes code using correct Verilog syntax.\n"
ENCLOSE = ("\nEnclose your code with [BEGIN] and [DONE]. Only output the code snippet\n"
           "and do NOT output anything else.\n")
SHOTS_FILE = "verilog-example-prefix_spec-to-rtl_{shots}-shot.txt"
MAX_SHOTS = 4
_ICL_DIRS = ("icl-examples", "scripts")


def icl_dir_for(dataset_dir):
    """The folder with the n-shot prefix files beside `dataset_dir`, or None."""
    for name in _ICL_DIRS:
        candidate = os.path.join(os.path.dirname(os.path.abspath(dataset_dir)), name)
        if os.path.isfile(os.path.join(candidate, SHOTS_FILE.format(shots=1))):
            return candidate
    return None


def shots_prefix(shots, icl_dir):
    """The in-context-learning prefix for `shots` examples ('' for 0)."""
    if shots == 0:
        return ""
    if not 0 < shots <= MAX_SHOTS:
        raise ValueError(f"shots must be 0..{MAX_SHOTS}, got {shots}")
    if not icl_dir:
        raise FileNotFoundError("no folder with the n-shot prefix files (icl_dir)")
    with open(os.path.join(icl_dir, SHOTS_FILE.format(shots=shots))) as f:
        return f.read()


def user_message(spec, prefix=""):
    """The user turn: prefix, question, the [BEGIN]/[DONE] instruction, `Answer:`."""
    text = prefix + "\nQuestion:\n" + spec.strip() + "\n"
    return text.rstrip() + "\n" + ENCLOSE + "\nAnswer:\n"


def messages(spec, prefix=""):
    """OpenAI chat messages for one problem."""
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": user_message(spec, prefix)}]
