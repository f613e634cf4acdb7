from absl.testing import absltest

from common import cli
from eval import extract
from eval import prompts
from eval import protocols

MODULE = "module TopModule(output zero);\n  assign zero = 1'b0;\nendmodule"
CODE = MODULE + "\n"


def both(text):
    """(upstream's extraction, the reference's) of one answer."""
    return (protocols.extractor(protocols.UPSTREAM)(text),
            protocols.extractor(protocols.REFERENCE)(text))


class MessagesTest(absltest.TestCase):

    def test_upstream_is_system_plus_question(self):
        got = protocols.messages(protocols.UPSTREAM, "Build a zero.")
        self.assertEqual(got, prompts.messages("Build a zero."))
        self.assertEqual([m["role"] for m in got], ["system", "user"])

    def test_reference_is_one_user_turn_with_the_hints(self):
        got = protocols.messages(protocols.REFERENCE, "  Build a zero.\n")
        self.assertEqual([m["role"] for m in got], ["user"])
        text = got[0]["content"]
        self.assertTrue(text.startswith("Build a zero.\n\n"))
        for hint in ("TopModule", "port names", "reg", "array", "```verilog"):
            self.assertIn(hint, text)
        self.assertNotIn("[BEGIN]", text)

    def test_bad_protocol_settings_are_user_errors(self):
        with self.assertRaisesRegex(cli.UserError, "unknown protocol 'mine'"):
            protocols.messages("mine", "spec")
        with self.assertRaisesRegex(cli.UserError, "no in-context examples"):
            protocols.check(protocols.REFERENCE, shots=2)


class ExtractionTest(absltest.TestCase):

    def test_verilog_fence_both(self):
        self.assertEqual(both(f"Here:\n```verilog\n{MODULE}\n```\nDone."),
                         (extract.Extracted(CODE, extract.FENCED),) * 2)

    def test_fence_inside_begin_done(self):
        # Upstream keeps the fence lines as code (a compile error); the reference reads
        # the fenced block, and drops stray fence lines of a [BEGIN] block.
        upstream, reference = both(f"[BEGIN]\n```verilog\n{MODULE}\n```\n[DONE]")
        self.assertEqual(upstream, extract.Extracted(f"```verilog\n{MODULE}\n```\n",
                                                     extract.BEGIN_DONE))
        self.assertEqual(reference, extract.Extracted(CODE, extract.FENCED))
        self.assertEqual(both(f"[BEGIN]\n```\n{MODULE}\n[DONE]")[1],
                         extract.Extracted(CODE, extract.BEGIN_DONE))

    def test_begin_without_done(self):
        upstream, reference = both(f"[BEGIN]\n{MODULE}\n")
        self.assertEqual(upstream, extract.Extracted("", extract.UNTERMINATED_BEGIN))
        self.assertEqual(reference, extract.Extracted(CODE, extract.UNTERMINATED_BEGIN))

    def test_unclosed_verilog_fence(self):
        upstream, reference = both(f"```systemverilog\n{MODULE}\n")
        self.assertEqual(reference, extract.Extracted(CODE, extract.UNCLOSED_FENCE))
        self.assertEqual(upstream.method, extract.MODULE_SCAN)

    def test_other_info_strings(self):
        text = (f"```python\nprint('no')\n```\n```text\nnotes\n```\n```sv\n{MODULE}\n```\n"
                "```verilog\nmodule Later; endmodule\n```")
        upstream, reference = both(text)
        self.assertEqual(reference, extract.Extracted(CODE, extract.FENCED))  # first sv/verilog
        self.assertEqual(upstream, extract.Extracted(CODE, extract.FENCED))
        # The reference takes an untagged block only when no verilog one exists.
        self.assertEqual(both(f"```\n{MODULE}\n```")[1], extract.Extracted(CODE, extract.FENCED))

    def test_thinking_is_stripped_first_in_both(self):
        for thinking in ("<think>\n```verilog\nmodule Wrong; endmodule\n```\n</think>\n",
                         "<|channel>thought\n```verilog\nmodule Wrong; endmodule\n```"
                         "<channel|>"):
            with self.subTest(thinking=thinking[:8]):
                self.assertEqual(both(f"{thinking}```verilog\n{MODULE}\n```"),
                                 (extract.Extracted(CODE, extract.FENCED),) * 2)

    def test_plain_module_text(self):
        self.assertEqual(both(f"The answer is\n{MODULE}\nas asked.")[1],
                         extract.Extracted(CODE, extract.MODULE_SCAN))


if __name__ == "__main__":
    absltest.main()
