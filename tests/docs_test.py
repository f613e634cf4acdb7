"""Documentation names only paths, Bazel labels and Python names that exist.

Modules move and targets get renamed while the prose that points at them stays
behind. This test reads every markdown file of the tree, the docstrings and
comments of every Python and Starlark file (BUILD, .bzl, WORKSPACE,
MODULE.bazel), and the comments of shell scripts, `.in` requirement files and
`.bazelrc`, and reports each reference that no longer resolves:

- path: a path under one of the top-level folders, or a root file such as
  `.bazelrc`, that does not exist (wildcards must match something);
- label: a Bazel label whose package has no BUILD file, or no rule, exported
  file or source file of that name (`//tests:docs_test` is one that exists);
- name: `module.attr` whose module (by file name) does not define `attr`;
- function: a backticked snake_case name that occurs nowhere in the code;
- document: a bare markdown file name (README.md) with no such file in the tree.

The extractors are pure (text in, candidate references out); the checks
against the tree are in `Repo`.
"""

import ast
import collections
import glob
import io
import os
import re
import tokenize

from absl.testing import absltest

from common import repo
from tests import build_files

TOP_LEVEL = ("common", "data", "gemma4", "training", "conversion", "serving", "eval", "report", "tools",
             "tests", "third_party")
_BUILD_NAMES = ("BUILD.bazel", "BUILD")
# Starlark files that are not BUILD files but still define names docs may cite.
_STARLARK_NAMES = ("WORKSPACE", "WORKSPACE.bzlmod", "MODULE.bazel")
# Files whose `#` comments are prose too (shell scripts are found by their shebang).
_COMMENTED_SUFFIXES = (".in", ".sh", ".tpl")
_COMMENTED_NAMES = (".bazelrc",)
# `X.Y` with one of these as Y is a file name, not an attribute.
_EXTENSIONS = {"py", "json", "jsonl", "md", "txt", "safetensors", "bzl", "bazel", "jinja",
               "yaml", "toml", "log", "html", "png", "gz", "tar", "cfg", "sh", "in"}
# Its string literals are fixtures that name missing things on purpose.
_THIS_FILE = os.path.join("tests", "docs_test.py")
# Other projects' API names that our prose explains; they are not in our code.
_OTHER_PROJECTS_NAMES = {
    "preexec_fn",  # subprocess.Popen's argument, which eval/sandbox.py avoids
    "num_items_in_batch",  # the transformers Trainer's loss normalizer
}
# Placeholder words in a path (third_party/requirements/NAME_lock.txt): the part
# before them is a real path, the rest a template.
_PLACEHOLDER = re.compile(r"(?<![A-Za-z0-9])(?:NAME|DIR|FILE|STEP|ID|N)(?![A-Za-z0-9])")

Ref = collections.namedtuple("Ref", "line kind ref")


# ---------------------------------------------------------------- extraction


def _line(text, offset):
    return text.count("\n", 0, offset) + 1


def code_spans(text):
    """(offset, content) of each `inline code` span; fence lines are not spans."""
    # Blank the fences in place so that offsets, hence line numbers, survive, and
    # turn RST's ``x`` into `x` (same length) so that backticks pair up.
    text = re.sub(r"(?m)^[ \t]*```.*$", lambda m: " " * len(m.group()), text)
    text = text.replace("``", " `")
    return [(m.start(1), m.group(1)) for m in re.finditer(r"`([^`]+)`", text)]


# A preceding `/`, `:` or word character means the token is the tail of something
# else: a label (//training/tpu:sft), a URL, RUN_DIR/data/..., out/training.
_PATH = re.compile(r"(?<![\w./:@$<>{}~-])((?:%s)/[\w.*/+-]*)" % "|".join(TOP_LEVEL))
_ROOT_FILE = re.compile(
    r"(?<![\w./:@-])(?:\./)?(MODULE\.bazel|WORKSPACE(?:\.\w+)?|bazelw|\.bazel\w+|\.ci/[\w./-]+)"
    r"(?![\w-])")


def repository_paths(text):
    """Paths relative to the repository root: under a top-level folder, or root files."""
    refs = []
    for m in _PATH.finditer(text):
        path = m.group(1)
        if text[m.end():m.end() + 1] in ("{", "<", "$"):
            # A template such as training/{tpu,gpu}/configs: check its fixed prefix.
            path = path[:path.rfind("/") + 1]
        placeholder = _PLACEHOLDER.search(path)
        if placeholder:
            path = path[:path.rfind("/", 0, placeholder.start()) + 1]
        path = path.rstrip(".,-")
        refs.append(Ref(_line(text, m.start(1)), "path", path))
    for m in _ROOT_FILE.finditer(text):
        refs.append(Ref(_line(text, m.start(1)), "path", m.group(1).rstrip(".,-")))
    return refs


# A flag's value is not part of its label: --//common:accelerator=tpu names the flag.
_LABEL = re.compile(r"(?<![\w@:/])//([^\s`'\"(),;\[\]<>=]*)")


def bazel_labels(text):
    """Labels with or without a target name; target patterns (..., *, all) are not."""
    refs = []
    for m in _LABEL.finditer(text):
        label = m.group(1).rstrip(".,")
        if "..." in label or "*" in label:
            continue
        if label.split(":")[-1] in ("all", "all-targets") and ":" in label:
            continue
        if label in ("", ":"):
            continue
        refs.append(Ref(_line(text, m.start()), "label", "//" + label))
    return refs


_IDENT = r"[A-Za-z_]\w*"
_DOTTED_SPAN = re.compile(r"\s*(%s)\.(%s)(?:\(.*\))?\s*" % (_IDENT, _IDENT), re.S)
_DOTTED_CALL = re.compile(r"(?<![\w.])(%s)\.(%s)\(" % (_IDENT, _IDENT))


def module_attributes(text):
    """`X.Y` in a code span of its own, or `X.Y(` anywhere: (X, Y) candidates."""
    refs = []
    seen = set()
    for offset, span in code_spans(text):
        m = _DOTTED_SPAN.fullmatch(span)
        if m:
            seen.add(offset + m.start(1))
            refs.append((_line(text, offset + m.start(1)), m.group(1), m.group(2)))
    for m in _DOTTED_CALL.finditer(text):
        if m.start(1) not in seen:
            refs.append((_line(text, m.start(1)), m.group(1), m.group(2)))
    return [Ref(line, "name", f"{module}.{attr}") for line, module, attr in refs
            if attr not in _EXTENSIONS]


# Bare snake_case with an inner underscore, with or without (), but not `tp` or
# `Dataset`: ordinary backticked words are left alone.
_FUNCTION_SPAN = re.compile(r"\s*(_?[a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?:\(\))?\s*")


def function_names(text):
    """Backticked bare snake_case names, with or without `()`."""
    refs = []
    for offset, span in code_spans(text):
        m = _FUNCTION_SPAN.fullmatch(span)
        if m:
            refs.append(Ref(_line(text, offset + m.start(1)), "function", m.group(1)))
    return refs


_DOCUMENT = re.compile(r"(?<![\w./-])([\w-]+\.md)(?![\w-])")


def document_names(text):
    """Markdown file names without a folder, outside code spans (where a name is
    usually a file a tool writes, e.g. `report.md`)."""
    prose = text
    for offset, span in code_spans(text):
        prose = prose[:offset] + " " * len(span) + prose[offset + len(span):]
    return [Ref(_line(text, m.start(1)), "document", m.group(1))
            for m in _DOCUMENT.finditer(prose)]


def references(text):
    refs = (repository_paths(text) + bazel_labels(text) + module_attributes(text)
            + function_names(text) + document_names(text))
    return sorted(refs)


# ------------------------------------------------------------------ sources


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _docstring_nodes(tree):
    """The string constants that are module, class or function docstrings."""
    for node in ast.walk(tree):
        if (isinstance(node, (ast.Module,) + _DEFS)
                and ast.get_docstring(node, clean=False) is not None):
            yield node.body[0].value


def python_texts(source):
    """(first line, text) of each module, class and function docstring and comment block."""
    # The source segment, not the string's value, keeps line numbers exact.
    texts = [(node.lineno, ast.get_source_segment(source, node))
             for node in _docstring_nodes(ast.parse(source))]
    # Consecutive comment lines form one text, so a code span may wrap.
    block, start, last = [], 0, -2
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        line = token.start[0]
        if line != last + 1 and block:
            texts.append((start, "\n".join(block)))
            block = []
        if not block:
            start = line
        block.append(token.string)
        last = line
    if block:
        texts.append((start, "\n".join(block)))
    return texts


def comment_blocks(source):
    """(first line, text) of each run of whole-line `#` comments (shebangs are not)."""
    texts, block, start = [], [], 0
    for number, line in enumerate(source.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("#") and not (number == 1 and stripped.startswith("#!")):
            if not block:
                start = number
            block.append(stripped)
        elif block:
            texts.append((start, "\n".join(block)))
            block = []
    if block:
        texts.append((start, "\n".join(block)))
    return texts


def _is_shell(path, source):
    first = source.split("\n", 1)[0]
    return path.endswith(".sh") or (first.startswith("#!") and first.rstrip().endswith(
        ("sh", "bash")))


# ------------------------------------------------------------------- checks


def _bound_names(statements):
    """Names a block of statements binds, through if/try/with but not into defs."""
    names = set()
    for node in statements:
        if isinstance(node, _DEFS):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        for field in ("body", "orelse", "finalbody", "handlers"):
            names |= _bound_names(getattr(node, field, []))
    return names


def module_names(tree):
    """What `module.X` can resolve to: top-level names, and class members."""
    names = _bound_names(tree.body)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            names |= _bound_names(node.body)
            # self.x = ... in a method makes `x` an attribute of the class.
            names |= {n.attr for n in ast.walk(node)
                      if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)}
    return names


def code_identifiers(tree):
    """Every identifier of the code, and every word of its non-docstring strings."""
    docstrings = {id(n) for n in _docstring_nodes(tree)}
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, _DEFS):
            names.add(node.name)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names |= set((node.asname or node.name).split("."))
            names |= set(node.name.split("."))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and id(node) not in docstrings):
            names |= set(re.findall(r"\w+", node.value))
    return names


def attribute_pairs(tree):
    """(X, Y) of every `X.Y` attribute access in the code, X a name or an attribute."""
    pairs = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name):
                pairs.add((node.value.id, node.attr))
            elif isinstance(node.value, ast.Attribute):
                pairs.add((node.value.attr, node.attr))
    return pairs


def build_targets(build_source):
    """Rule names and exported files declared in a BUILD file."""
    names = set()
    for call in ast.walk(ast.parse(build_source)):
        if not isinstance(call, ast.Call):
            continue
        for keyword in call.keywords:
            # `name`, and the second target of a macro such as project_image's push_name.
            if keyword.arg in ("name", "push_name") and isinstance(keyword.value, ast.Constant):
                names.add(keyword.value.value)
        if isinstance(call.func, ast.Name) and call.func.id == "exports_files" and call.args:
            if isinstance(call.args[0], ast.List):
                names |= {e.value for e in call.args[0].elts if isinstance(e, ast.Constant)}
    return names


class Repo:
    """The tree that references are checked against, indexed once."""

    def __init__(self, root):
        self.root = root
        self.files = build_files.repository_files(root)
        self.basenames = {os.path.basename(f) for f in self.files}
        self.modules = collections.defaultdict(set)  # file name without .py -> names
        self.identifiers = set()
        self.attributes = set()
        self.trees = {}
        self.commented = {}  # path -> (first line, text) of files read for comments only
        for path in self.files:
            name = os.path.basename(path)
            is_python = path.endswith(".py")
            is_starlark = (name in _BUILD_NAMES or name in _STARLARK_NAMES
                           or name.endswith(".bzl"))
            if not (is_python or is_starlark or name.endswith(_COMMENTED_SUFFIXES)
                    or name in _COMMENTED_NAMES or "." not in name):
                continue
            try:
                with open(os.path.join(root, path), encoding="utf-8") as f:
                    source = f.read()
            except UnicodeDecodeError:
                continue  # a binary without an extension
            if not (is_python or is_starlark):
                if (name.endswith(_COMMENTED_SUFFIXES) or name in _COMMENTED_NAMES
                        or _is_shell(path, source)):
                    self.commented[path] = comment_blocks(source)
                continue
            try:
                tree = ast.parse(source)
            except SyntaxError:
                # Starlark beyond Python's grammar: its words still count as names.
                self.identifiers |= set(re.findall(r"\w+", source))
                self.commented[path] = comment_blocks(source)
                continue
            if is_starlark:
                self.commented[path] = python_texts(source)
            if is_python:
                self.trees[path] = (source, tree)
                self.modules[name[:-3]] |= module_names(tree)
            if path != _THIS_FILE:
                self.identifiers |= code_identifiers(tree)
                self.attributes |= attribute_pairs(tree)
        self._targets = {}

    def texts(self):
        """(path, first line, text) of every markdown file, docstring and comment block."""
        for path in self.files:
            if path.endswith(".md"):
                with open(os.path.join(self.root, path), encoding="utf-8") as f:
                    yield path, 1, f.read()
            elif path in self.trees:
                for line, text in python_texts(self.trees[path][0]):
                    yield path, line, text
            elif path in self.commented:
                for line, text in self.commented[path]:
                    yield path, line, text

    def _package_targets(self, package):
        if package not in self._targets:
            targets = None
            for build in _BUILD_NAMES:
                path = os.path.join(self.root, package, build)
                if os.path.isfile(path):
                    with open(path, encoding="utf-8") as f:
                        targets = (targets or set()) | build_targets(f.read())
            self._targets[package] = targets
        return self._targets[package]

    def resolves(self, ref):
        if ref.kind == "path":
            path = os.path.join(self.root, ref.ref)
            return bool(glob.glob(path)) if "*" in ref.ref else os.path.exists(path)
        if ref.kind == "label":
            package, _, name = ref.ref[2:].partition(":")
            name = name or os.path.basename(package)
            targets = self._package_targets(package)
            return targets is not None and (
                name in targets or os.path.exists(os.path.join(self.root, package, name)))
        if ref.kind == "name":
            module, attr = ref.ref.split(".")
            # X.Y with no module X is someone else's (`lax.scan`); X.Y that the code
            # itself writes is an attribute (`model.name` of a config), not a module's.
            return (module not in self.modules or attr in self.modules[module]
                    or (module, attr) in self.attributes)
        if ref.kind == "function":
            return ref.ref in self.identifiers or ref.ref in _OTHER_PROJECTS_NAMES
        if ref.kind == "document":
            return ref.ref in self.basenames
        raise ValueError(ref.kind)

    def problems(self):
        """`file:line: kind 'ref'` for every reference that does not resolve."""
        found = []
        for path, first_line, text in self.texts():
            for ref in references(text):
                if not self.resolves(ref):
                    found.append((path, first_line + ref.line - 1, ref.kind, ref.ref))
        return [f"{path}:{line}: {kind} '{ref}'" for path, line, kind, ref in sorted(found)]


# -------------------------------------------------------------------- tests


def _refs(refs):
    return [(r.line, r.ref) for r in refs]


class ExtractionTest(absltest.TestCase):

    def test_repository_paths(self):
        text = ("See `training/tpu/trainer.py`, data/sample/ and serving/configs/*.py.\n"
                "Outputs go to RUN_DIR/server.json, runs/v5p8 and out/training/x.\n"
                "Run //training/tpu:sft or gs://b/data/x, http://h/eval/y.\n"
                "Configs: training/{tpu,gpu}/configs/*.py; `./bazelw`, .bazelrc, .ci/run.\n"
                "Locks: third_party/requirements/NAME_lock.txt, not conversion/README.\n"
                "hparams.py alone is a file name, not a path.")
        self.assertEqual(_refs(repository_paths(text)), [
            (1, "training/tpu/trainer.py"), (1, "data/sample/"), (1, "serving/configs/*.py"),
            (4, "training/"), (5, "third_party/requirements/"), (5, "conversion/README"),
            (4, "bazelw"), (4, ".bazelrc"), (4, ".ci/run"),
        ])

    def test_bazel_labels(self):
        text = ('`//serving:serve`, //training/tpu:sft.\n'
                'deps = ["//data:pipeline", "@pypi_train//:requirements.bzl"]\n'
                'bazel test //... //conversion:* //eval:all //:pipeline //tools\n'
                'http://127.0.0.1:8000/v1 --//common:accelerator=tpu')
        self.assertEqual(_refs(bazel_labels(text)), [
            (1, "//serving:serve"), (1, "//training/tpu:sft"), (2, "//data:pipeline"),
            (3, "//:pipeline"), (3, "//tools"), (4, "//common:accelerator"),
        ])

    def test_module_attributes(self):
        text = ("`mesh_plan.hbm_estimate`, `base_model.resolve(name)` and\n"
                "gemma4_map.nope(x); `jax.distributed.initialize` is a chain,\n"
                "`config.json` a file, `lax.scan` a pair, ``sweep.run``.")
        self.assertEqual(_refs(module_attributes(text)), [
            (1, "mesh_plan.hbm_estimate"), (1, "base_model.resolve"), (3, "lax.scan"),
            (3, "sweep.run"), (2, "gemma4_map.nope"),
        ])

    def test_function_names(self):
        text = ("`nope_to_peft()` and `peft_to_nope`, not `tp`, `Dataset`, `a.b_c`,\n"
                "`--max_rows` or `k_einsum, v`.\n```sh\nx `y_z` \n```")
        self.assertEqual(_refs(function_names(text)), [
            (1, "nope_to_peft"), (1, "peft_to_nope"), (4, "y_z")])

    def test_code_spans_keep_lines_across_fences(self):
        text = "a\n```sh\nrun `x_y`\n```\n`p_q` and\n`r_s\nt`"
        self.assertEqual([(_line(text, o), s) for o, s in code_spans(text)],
                         [(3, "x_y"), (5, "p_q"), (6, "r_s\nt")])

    def test_document_names(self):
        text = "see RECIPE.md, README.md and docs/x.md; writes `report.md`."
        self.assertEqual(_refs(document_names(text)), [(1, "RECIPE.md"), (1, "README.md")])

    def test_comment_blocks(self):
        source = ("#!/usr/bin/env bash\n# one\n  # two\nrun x  # trailing\n\n"
                  "# three\n")
        self.assertEqual(comment_blocks(source), [(2, "# one\n# two"), (6, "# three")])

    def test_python_texts(self):
        source = ('"""Module.\n\nSee `a_b`."""\n\nimport os  # trailing\n\n'
                  '# one\n# two\nclass C:\n    """Class."""\n\n'
                  '    def f(self):\n        """Method."""\n        return "`not_doc`"\n')
        self.assertEqual(python_texts(source), [
            (1, '"""Module.\n\nSee `a_b`."""'), (10, '"""Class."""'), (13, '"""Method."""'),
            (5, "# trailing"), (7, "# one\n# two"),
        ])


class CheckTest(absltest.TestCase):

    def _tree(self, files):
        root = self.create_tempdir().full_path
        for path, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        return root

    def test_reports_every_missing_reference(self):
        readme = ("# Demo\n"
                  "`//serving:serve`, //serving:nope, //serving:configs/cpu.py, //:MODULE.bazel\n"
                  "//nope:x and //serving\n"
                  "gemma4/gemma4_map.py, training/nope.py, serving/configs/*.py,"
                  " serving/configs/*.yaml\n"
                  "`gemma4_map.hf_to_tunix`, `gemma4_map.weight`, `gemma4_map.nope`,"
                  " `gemma4_map.KEYS`, `gemma4_map._os`, `other.nope`, `a.gemma4_map.x`\n"
                  "`hf_to_tunix()`, `nope_to_peft`, `py_binary`, `max_rows` are called;\n"
                  "see README.md and RECIPE.md; `model.name` is a config field, `model.nope`"
                  " is not; `preexec_fn` is Popen's.\n")
        module = ('"""Maps names; see `gemma4_map.gone` and training/gone/."""\n'
                  'import os as _os\nKEYS = {}\n\n'
                  'def hf_to_tunix(max_rows):\n    # kept for `peft_to_nope`\n    pass\n\n'
                  'class Mapper:\n    def __init__(self):\n        self.weight = 1\n')
        root = self._tree({
            "README.md": readme,
            "MODULE.bazel": "module(name = \"demo\")\n",
            "BUILD.bazel": 'exports_files(["MODULE.bazel"])\n',
            "serving/BUILD.bazel": 'py_binary(name = "serve", srcs = ["serve.py"])\n',
            "serving/serve.py": "config.model.name = 'x'\n",
            "training/tpu/model.py": "def build():\n    pass\n",
            "serving/configs/cpu.py": "",
            "gemma4/gemma4_map.py": module,
        })
        self.assertEqual(Repo(root).problems(), [
            "README.md:2: label '//serving:nope'",
            "README.md:3: label '//nope:x'",
            "README.md:3: label '//serving'",
            "README.md:4: path 'serving/configs/*.yaml'",
            "README.md:4: path 'training/nope.py'",
            "README.md:5: name 'gemma4_map.nope'",
            "README.md:6: function 'nope_to_peft'",
            "README.md:7: document 'RECIPE.md'",
            "README.md:7: name 'model.nope'",
            "gemma4/gemma4_map.py:1: name 'gemma4_map.gone'",
            "gemma4/gemma4_map.py:1: path 'training/gone/'",
            "gemma4/gemma4_map.py:6: function 'peft_to_nope'",
        ])

    def test_source_tree(self):
        root = repo.source_root()
        self.assertTrue(os.path.exists(os.path.join(root, "tests", "docs_test.py")),
                        f"{root} is not the source tree")
        problems = Repo(root).problems()
        self.assertEqual(problems, [], "References to things that do not exist:\n"
                         + "\n".join(problems))


if __name__ == "__main__":
    absltest.main()
