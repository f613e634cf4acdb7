import os
from unittest import mock

from absl.testing import absltest

from common import pinned
from common import repo
from eval import problems
from eval import testing


class ProblemsTest(absltest.TestCase):

    def test_all_156_in_problems_txt_order(self):
        loaded = problems.load(testing.dataset_dir())
        self.assertLen(loaded, 156)
        self.assertEqual(loaded[0].id, "Prob001_zero")
        self.assertEqual(loaded[-1].id, "Prob156_review2015_fancytimer")
        self.assertEqual([p.id for p in loaded],
                         sorted(p.id for p in loaded))  # the ids sort as listed
        for p in loaded:
            self.assertTrue(os.path.isfile(p.test_path), p.test_path)

    def test_subset_and_limit(self):
        got = problems.load(testing.dataset_dir(), ["Prob003_step_one", "Prob001_zero"])
        self.assertEqual([p.id for p in got], ["Prob001_zero", "Prob003_step_one"])
        got = problems.load(testing.dataset_dir(), limit=3)
        self.assertEqual([p.id for p in got],
                         ["Prob001_zero", "Prob002_m2014_q4i", "Prob003_step_one"])

    def test_default_dataset_is_the_pinned_data_this_target_carries(self):
        environ = {k: v for k, v in os.environ.items() if k != "VERILOG_EVAL_DIR"}
        with mock.patch.dict(os.environ, environ, clear=True):
            dataset = problems.default_dataset_dir()
        self.assertEqual(dataset, os.path.dirname(pinned.path("verilog_eval")))
        self.assertNotEqual(os.path.realpath(dataset), os.path.realpath(
            os.path.join(os.path.dirname(repo.source_root()), "shared", "verilog-eval",
                         "dataset_spec-to-rtl")))
        self.assertLen(problems.load(dataset), 156)

    def test_default_dataset_is_the_shared_copy_beside_the_checkout(self):
        environ = {k: v for k, v in os.environ.items() if k != "VERILOG_EVAL_DIR"}
        with mock.patch.dict(os.environ, environ, clear=True), \
                mock.patch.object(pinned, "path", return_value=None):
            dataset = problems.default_dataset_dir()
        self.assertEqual(dataset, os.path.join(os.path.dirname(repo.source_root()),
                                               "shared", "verilog-eval", "dataset_spec-to-rtl"))
        with mock.patch.dict(os.environ, {"VERILOG_EVAL_DIR": "/elsewhere/data"}):
            self.assertEqual(problems.default_dataset_dir(), "/elsewhere/data")

    def test_fetched_copy_when_no_shared_one_and_the_command_when_neither(self):
        root = self.create_tempdir().full_path
        checkout = os.path.join(root, "checkout")
        environ = {k: v for k, v in os.environ.items() if k != "VERILOG_EVAL_DIR"}
        with mock.patch.dict(os.environ, environ, clear=True), \
                mock.patch.object(repo, "source_root", return_value=checkout), \
                mock.patch.object(pinned, "path", return_value=None):
            with self.assertRaisesRegex(problems.ProblemsError,
                                        r"python3 tools/verilog_eval.py.*VERILOG_EVAL_DIR"):
                problems.default_dataset_dir()
            fetched = os.path.join(checkout, ".venvs", "verilog-eval", "dataset_spec-to-rtl")
            os.makedirs(fetched)
            open(os.path.join(fetched, "problems.txt"), "w").close()
            self.assertEqual(problems.default_dataset_dir(), fetched)
            shared = os.path.join(root, "shared", "verilog-eval", "dataset_spec-to-rtl")
            os.makedirs(shared)
            open(os.path.join(shared, "problems.txt"), "w").close()
            self.assertEqual(problems.default_dataset_dir(), shared)

    def test_unknown_problem_is_an_error(self):
        with self.assertRaisesRegex(problems.ProblemsError, "Prob999_nothing"):
            problems.load(testing.dataset_dir(), ["Prob001_zero", "Prob999_nothing"])
        with self.assertRaisesRegex(problems.ProblemsError, "not a VerilogEval problem id"):
            problems.problem(testing.dataset_dir(), "../etc/passwd")

    def test_missing_dataset_names_the_folder(self):
        missing = os.path.join(self.create_tempdir().full_path, "nothing")
        with self.assertRaisesRegex(problems.ProblemsError, "dataset_spec-to-rtl"):
            problems.load(missing)

    def test_missing_file_of_a_problem(self):
        d = self.create_tempdir()
        d.create_file("problems.txt", "Prob001_zero\n")
        d.create_file("Prob001_zero_prompt.txt", "spec")
        d.create_file("Prob001_zero_ref.sv", "module RefModule; endmodule")
        with self.assertRaisesRegex(problems.ProblemsError, "Prob001_zero_test.sv"):
            problems.load(d.full_path)

    def test_reference_as_sample_renames_the_module(self):
        p = testing.load_problem("Prob001_zero")
        self.assertIn("module RefModule", open(p.ref_path).read())
        sample = p.reference_as_sample()
        self.assertIn("module TopModule", sample)
        self.assertNotIn("RefModule", sample)

    def test_parse_id_list(self):
        self.assertEqual(problems.parse_id_list(" a, b  c,,"), ["a", "b", "c"])
        self.assertEqual(problems.parse_id_list(""), [])


if __name__ == "__main__":
    absltest.main()
