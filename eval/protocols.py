"""How a problem is asked and how the answer's code is read: two protocols.

  upstream   VerilogEval's own (prompts.py, extract.extract): a system
             message, the optional n-shot prefix, `Question:`, the spec, the
             [BEGIN]/[DONE] instruction, `Answer:`; code from [BEGIN]/[DONE],
             else a fenced block, else a module scan. The default.
  reference  the protocol arXiv 2605.25645 scored its models with, so that
             pass@k compares with its numbers (training/common/recipe.md):
             one user turn and no system message, the spec followed by a few
             hints, the answer asked for in a ```verilog block; code by
             extract.extract_forgiving. Its sampling settings (n 5,
             temperature 0.8, top_p 0.95, 1024 new tokens) are the eval
             config's defaults; it takes no in-context examples.
Both strip thinking (`<think>` and Gemma 4's thought channel) first.
"""

from common import cli
from eval import extract
from eval import prompts

UPSTREAM = "upstream"
REFERENCE = "reference"
PROTOCOLS = (UPSTREAM, REFERENCE)

# The reference study's hints, in our words.
REFERENCE_HINTS = (
    "Write a Verilog implementation of the module described above.\n"
    "- The module must be named TopModule.\n"
    "- Keep the input and output port names exactly as given.\n"
    "- Declare as reg every signal that is assigned inside an always block.\n"
    "- Assign the elements of an array one at a time, not as a whole.\n"
    "- Reply with the code only, in a single ```verilog fenced block.\n")


class ProtocolError(cli.UserError):
    pass


def check(protocol, shots=0):
    if protocol not in PROTOCOLS:
        raise ProtocolError(f"unknown protocol {protocol!r}; one of {', '.join(PROTOCOLS)}")
    if protocol == REFERENCE and shots:
        raise ProtocolError("the reference protocol takes no in-context examples (shots=0)")


def messages(protocol, spec, prefix=""):
    """The chat messages that ask for problem `spec` under `protocol`."""
    check(protocol)
    if protocol == REFERENCE:
        return [{"role": "user", "content": spec.strip() + "\n\n" + REFERENCE_HINTS}]
    return prompts.messages(spec, prefix)


def extractor(protocol):
    """The function reading the code out of a completion under `protocol`."""
    check(protocol)
    return extract.extract_forgiving if protocol == REFERENCE else extract.extract
