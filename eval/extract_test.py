from absl.testing import absltest

from eval import extract

MODULE = "module TopModule(output zero);\n  assign zero = 1'b0;\nendmodule"


class StripThinkingTest(absltest.TestCase):

    def test_think_block_removed(self):
        self.assertEqual(extract.strip_thinking("<think>\nplan [BEGIN]\n</think>\nanswer"),
                         "\nanswer")

    def test_gemma4_thought_channel_removed(self):
        text = "<|channel>thought\nmodule TopModule(x) ... endmodule<channel|>final"
        self.assertEqual(extract.strip_thinking(text), "final")

    def test_several_blocks(self):
        self.assertEqual(extract.strip_thinking("a<think>x</think>b<think>y</think>c"), "abc")

    def test_unclosed_block_drops_the_rest(self):
        self.assertEqual(extract.strip_thinking("before<think>ran out of tokens"), "before")

    def test_closing_tag_without_opening_drops_what_precedes(self):
        # Templates that open the thinking block in the prompt.
        self.assertEqual(extract.strip_thinking("reasoning...</think>answer"), "answer")

    def test_text_without_thinking_unchanged(self):
        self.assertEqual(extract.strip_thinking("plain <b>text</b>"), "plain <b>text</b>")


class ExtractTest(absltest.TestCase):

    def test_begin_done(self):
        got = extract.extract(f"Sure.\n[BEGIN]\n{MODULE}\n[DONE]\nBye")
        self.assertEqual(got, extract.Extracted(MODULE + "\n", extract.BEGIN_DONE))

    def test_begin_done_on_the_code_lines(self):
        got = extract.extract("[BEGIN]module TopModule(output zero);\n"
                              "  assign zero = 1'b0;\nendmodule[DONE]")
        self.assertEqual(got.code, MODULE + "\n")
        self.assertEqual(got.method, extract.BEGIN_DONE)

    def test_begin_done_wins_over_fences(self):
        got = extract.extract(
            f"```verilog\nmodule Other;\nendmodule\n```\n[BEGIN]\n{MODULE}\n[DONE]")
        self.assertEqual(got.code, MODULE + "\n")

    def test_unterminated_begin_gives_no_code_as_upstream(self):
        got = extract.extract(f"[BEGIN]\n{MODULE}\n")
        self.assertEqual(got, extract.Extracted("", extract.UNTERMINATED_BEGIN))

    def test_fences_inside_begin_done_are_kept_as_upstream(self):
        got = extract.extract(f"[BEGIN]\n```verilog\n{MODULE}\n```\n[DONE]")
        self.assertTrue(got.code.startswith("```verilog\n"))

    def test_first_fenced_block(self):
        got = extract.extract(f"Here:\n```verilog\n{MODULE}\n```\nand\n```verilog\nmodule B;\n"
                              "endmodule\n```")
        self.assertEqual(got, extract.Extracted(MODULE + "\n", extract.FENCED))

    def test_verilog_block_preferred_over_other_languages(self):
        got = extract.extract(f"```text\nports: zero\n```\n```systemverilog\n{MODULE}\n```")
        self.assertEqual(got.code, MODULE + "\n")

    def test_untagged_block_counts_as_verilog(self):
        got = extract.extract(f"```python\nprint(1)\n```\n```\n{MODULE}\n```")
        self.assertEqual(got.code, MODULE + "\n")

    def test_only_foreign_blocks_take_the_first(self):
        got = extract.extract("```python\nprint(1)\n```\n```bash\nls\n```")
        self.assertEqual(got.code, "print(1)\n")

    def test_indented_fences(self):
        got = extract.extract(f"1. The module:\n   ```verilog\n{MODULE}\n   ```")
        self.assertEqual(got.code, MODULE + "\n")

    def test_module_scan_without_fences(self):
        got = extract.extract(f"The design is:\n{MODULE}\nIt outputs zero.")
        self.assertEqual(got, extract.Extracted(MODULE + "\n", extract.MODULE_SCAN))

    def test_module_scan_with_a_single_fence_line(self):
        got = extract.extract(f"```verilog\n{MODULE}\n")
        self.assertEqual(got.code, MODULE + "\n")

    def test_module_scan_keeps_everything_before_endmodule_without_top_module(self):
        got = extract.extract("module Foo(output y);\nassign y = 1;\nendmodule\nmore text")
        self.assertEqual(got.code, "module Foo(output y);\nassign y = 1;\nendmodule\n")

    def test_thinking_removed_before_extraction(self):
        text = ("<think>\nI will write [BEGIN]\nmodule Wrong;\n[DONE]\n</think>\n"
                f"```verilog\n{MODULE}\n```")
        got = extract.extract(text)
        self.assertEqual(got, extract.Extracted(MODULE + "\n", extract.FENCED))

    def test_codev_style_answer(self):
        text = (f"<think>\nplan\n</think>\n<answer>\nHere it is.\n```verilog\n{MODULE}\n```\n"
                "</answer>")
        self.assertEqual(extract.extract(text).code, MODULE + "\n")

    def test_nothing_to_extract(self):
        self.assertEqual(extract.extract(""), extract.Extracted("", extract.EMPTY))
        self.assertEqual(extract.extract("<think>only thoughts"),
                         extract.Extracted("", extract.EMPTY))
        self.assertEqual(extract.extract("[BEGIN]\n[DONE]"), extract.Extracted("", extract.EMPTY))


if __name__ == "__main__":
    absltest.main()
