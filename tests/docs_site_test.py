"""The documentation site: MkDocs builds it in strict mode, every page is reachable
from the index, and every command in the docs names a real target with flags it
defines.

- The build: `mkdocs.yml` (the pinned MkDocs and Material of the docs lock) in
  strict mode, every link validated: a link to a missing page or anchor, a page
  left out of the nav, fails it.
- Reachable: every page of docs/ is in the nav and is reached from index.md by
  following the pages' own links.
- Commands (README.md and docs/*.md, code blocks and inline code): each
  `bazel run|test|build` or `./bazelw ...` names a label that exists; a `run`
  names something runnable; every `--flag` after `--` is one the binary
  defines: an absl flag of its own sources or of its first-party dependencies
  (`--config` where it takes a config file, `--config.FIELD` then too), or a
  push target's own flags.
"""

import ast
import glob
import os
import re
import shlex

import yaml
from absl.testing import absltest
from mkdocs.commands import build as mkdocs_build
from mkdocs.config import load_config

from common import repo
from tests import build_files

_DEFINE = re.compile(r"DEFINE_\w+\(\s*\"(\w+)\"")
_CONFIG_FLAG = re.compile(r"define_config_flag\(([^)]*)\)")
_FLAG_NAME = re.compile(r"name\s*=\s*\"(\w+)\"")
# What absl defines for every binary.
_ABSL_FLAGS = {"help", "helpfull", "helpshort", "helpxml", "flagfile", "undefok",
               "verbosity", "v", "logtostderr", "alsologtostderr", "log_dir", "stderrthreshold",
               "only_check_args"}
# Flags of the image push targets (rules_oci's oci_push; the offline stand-in's).
_PUSH_FLAGS = {"repository", "tag"}
_COMMAND = re.compile(r"(?:\./bazelw|\bbazel)\s+(run|test|build)\s+((?:--\S+\s+)*)((?://|@)\S*)"
                      r"(.*)")
_FENCE = re.compile(r"^```")
_INLINE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")


def _root():
    return repo.source_root()


def _docs():
    return sorted(glob.glob(os.path.join(_root(), "docs", "*.md")))


def _commands(text):
    """(line number, command) of every Bazel command in a markdown text: code
    blocks' lines (continuations joined) and inline code spans."""
    found, block, pending, start = [], False, "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line.strip()):
            block = not block
            continue
        if block:
            line = line.split(" # ")[0].rstrip()
            if not pending:
                start = number
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            line, pending = pending + line, ""
            found += [(start, m.group(0)) for m in _COMMAND.finditer(line)]
        else:
            for span in _INLINE.findall(line):
                found += [(number, m.group(0)) for m in _COMMAND.finditer(span)]
    return [(number, " ".join(command.split())) for number, command in found]


_SECTION_REF = re.compile(r"\b(README|docs/[\w-]+\.md),? \"([A-Z][^\"\\\\]*)\"")
# A pointer to a part of the README by description, not heading: the form that went
# stale when the README's tables moved to docs/ ("the README's compile tables").
_VAGUE_README_REF = re.compile(r"\bthe README's [a-z][\w-]*(?: [a-z][\w-]*)? "
                               r"(?:section|sections|table|tables)|\(\S+, README\)")


def _headings(page):
    """The titles of a page's headings (none for a page that does not exist)."""
    path = os.path.join(_root(), page)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.lstrip("#").strip().replace("`", "") for line in f if line.startswith("#")]


def _label(text):
    """A label as written in prose, without the punctuation after it (`//...` kept)."""
    core = text.rstrip("`,;).")
    return core + "..." if text[len(core):].startswith("...") else core


class Tree:
    """The BUILD graph and what each binary's sources define."""

    def __init__(self, root):
        self.root = root
        self.packages = build_files.read_tree(root)
        self.targets = {label: target for _, _, targets in self.packages.values()
                        for label, target in targets.items()}
        self.pushes = set()
        for package in self.packages:
            with open(self._build_file(package)) as f:
                text = f.read()
            self.pushes |= {f"//{package}:{name}"
                            for name in re.findall(r"push_name\s*=\s*\"(\w+)\"", text)}
        self._flags = {}

    def _build_file(self, package):
        directory = os.path.join(self.root, package)
        return next(os.path.join(directory, b) for b in build_files.BUILD_NAMES
                    if os.path.exists(os.path.join(directory, b)))

    def alias_actual(self, label):
        package, name = label[2:].split(":")
        with open(self._build_file(package)) as f:
            tree = ast.parse(f.read())
        for node in tree.body:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                kwargs = {k.arg: k.value for k in node.value.keywords}
                if getattr(kwargs.get("name"), "value", None) == name:
                    return build_files.absolute(kwargs["actual"].value, package)
        return None

    def flags(self, label):
        """The flag names binary `label` defines (its first-party sources and theirs)."""
        if label not in self._flags:
            names = set(_ABSL_FLAGS)
            for dep in build_files.dependencies(self.packages, label):
                target = self.targets.get(dep)
                if not target:
                    continue
                package = dep[2:].split(":")[0]
                for src in target.srcs:
                    if not src.endswith(".py"):
                        continue
                    with open(os.path.join(self.root, package, src)) as f:
                        source = f.read()
                    names |= set(_DEFINE.findall(source))
                    for call in _CONFIG_FLAG.findall(source):
                        named = _FLAG_NAME.search(call)
                        names.add(named.group(1) if named else "config")
            self._flags[label] = names
        return self._flags[label]

    def problems(self, verb, label, args):
        """What is wrong with `bazel VERB LABEL -- ARGS` (empty: nothing)."""
        if label.startswith("@"):
            return []
        package = label[2:].split(":")[0].rstrip("/.")
        if label.endswith("..."):
            exists = os.path.isdir(os.path.join(self.root, package))
            return [] if exists else [f"no package {package}"]
        if ":" not in label:
            label = f"{label}:{label.rsplit('/', 1)[-1]}"
        if label in self.pushes:
            defined = _PUSH_FLAGS
        elif label in self.targets:
            target = self.targets[label]
            if target.kind == "alias":
                label = self.alias_actual(label)
                target = self.targets[label]
            if verb == "run" and target.kind not in ("py_binary", "py_test"):
                return [f"{label} is a {target.kind}, not something `bazel run` runs"]
            if verb == "test" and target.kind != "py_test":
                return [f"{label} is a {target.kind}, not a test"]
            defined = self.flags(label)
        else:
            return [f"no target {label}"]
        wrong = []
        for arg in args:
            if not arg.startswith("--") or arg == "--":
                continue
            name = arg[2:].split("=", 1)[0]
            base = name.split(".", 1)[0]
            if name in defined or base in defined and "." in name:
                continue
            if name.startswith("no") and name[2:] in defined:
                continue
            wrong.append(f"{label} defines no flag --{name}")
        return wrong


class DocsSiteTest(absltest.TestCase):

    def test_the_site_builds_in_strict_mode(self):
        site = self.create_tempdir().full_path
        config = load_config(config_file=os.path.join(_root(), "mkdocs.yml"), site_dir=site,
                             strict=True)
        mkdocs_build.build(config)  # strict: any warning aborts the build
        for page in _docs():
            name = os.path.splitext(os.path.basename(page))[0]
            built = "index.html" if name == "index" else os.path.join(name, "index.html")
            self.assertTrue(os.path.isfile(os.path.join(site, built)), built)

    def test_every_page_is_reachable_from_the_index(self):
        with open(os.path.join(_root(), "mkdocs.yml")) as f:
            config = yaml.safe_load(f)

        def pages(nav):
            for item in nav:
                value = next(iter(item.values())) if isinstance(item, dict) else item
                if isinstance(value, list):
                    yield from pages(value)
                else:
                    yield value
        names = {os.path.basename(p) for p in _docs()}
        self.assertEqual(set(pages(config["nav"])), names)
        reached, todo = set(), ["index.md"]
        while todo:
            page = todo.pop()
            if page in reached:
                continue
            reached.add(page)
            with open(os.path.join(_root(), "docs", page)) as f:
                todo += [link for link in _LINK.findall(f.read()) if "://" not in link]
        self.assertEqual(names - reached, set(), "pages no link from index.md leads to")

    def test_every_command_names_a_real_target_and_its_flags(self):
        tree = Tree(_root())
        problems, checked = [], 0
        for path in [os.path.join(_root(), "README.md"), *_docs()]:
            with open(path) as f:
                text = f.read()
            for number, command in _commands(text):
                match = _COMMAND.match(command)
                verb, label, rest = match.group(1), match.group(3), match.group(4)
                try:
                    words = shlex.split(rest)
                except ValueError:
                    words = rest.split()
                args = words[words.index("--") + 1:] if "--" in words else []
                checked += 1
                problems += [f"{os.path.relpath(path, _root())}:{number}: {p}"
                             for p in tree.problems(verb, _label(label), args)]
        self.assertGreater(checked, 50)
        self.assertEqual(problems, [])

    def test_section_references_name_a_heading(self):
        """`docs/PAGE.md, "Heading"` (or `README, "Heading"`) in code, BUILD files and
        docs names a heading that page has."""
        files = build_files.repository_files(_root())
        problems, checked = [], 0
        for name in files:
            if not name.endswith((".py", ".bzl", ".bazel", ".md", ".sh", ".in")):
                continue
            with open(os.path.join(_root(), name), errors="replace") as f:
                text = f.read()
            if name == "tests/docs_site_test.py":
                continue  # its docstrings show the form with placeholders
            text = re.sub(r"\n\s*(?:#\s*)?", " ", text)  # a reference broken over lines
            for page, heading in _SECTION_REF.findall(text):
                checked += 1
                target = "README.md" if page == "README" else page
                if not any(t.startswith(heading) for t in _headings(target)):
                    problems.append(f"{name}: {page}, \"{heading}\": no such heading")
            problems += [f"{name}: {vague!r}: name the page and heading (docs/PAGE.md, "
                         "\"Heading\")" for vague in _VAGUE_README_REF.findall(text)]
        self.assertGreater(checked, 5)
        self.assertEqual(problems, [])

    def test_pages_with_cloud_commands_say_whether_they_were_run(self):
        """A page showing gcloud or kubectl commands says they were not run here (no
        cloud project or cluster reaches this machine) or how they were checked."""
        unsaid = []
        for name in sorted(os.listdir(os.path.join(_root(), "docs"))):
            if not name.endswith(".md"):
                continue
            with open(os.path.join(_root(), "docs", name)) as f:
                text = f.read()
            commands = re.findall(r"^\s*(?:gcloud|kubectl) \S+", text, re.M)
            if commands and not re.search(r"not\s+run\s+here|were\s+not\s+run", text):
                unsaid.append(f"docs/{name}: {commands[0].strip()}")
        self.assertEqual(unsaid, [])

    def test_a_vague_pointer_into_the_readme_is_caught(self):
        for stale in ("the README's compile tables hold the fit",
                      "compiled ahead of time (//training/tpu:compile, README), the"):
            self.assertTrue(_VAGUE_README_REF.search(stale), stale)
        self.assertFalse(_VAGUE_README_REF.search('docs/build.md, "Images" and the README'))

    def test_the_checks_catch_what_they_should(self):
        tree = Tree(_root())
        self.assertEqual(tree.problems("run", "//training/tpu:sft", ["--config=v5p8.py",
                                                                    "--config.seed=3",
                                                                    "--workdir=x"]), [])
        self.assertEqual(tree.problems("run", "//training/tpu:sft", ["--wrokdir=x"]),
                         ["//training/tpu:sft defines no flag --wrokdir"])
        self.assertEqual(tree.problems("run", "//training/tpu:nope", []),
                         ["no target //training/tpu:nope"])
        self.assertIn("not something `bazel run` runs",
                      tree.problems("run", "//common:cli", [])[0])
        self.assertEqual(tree.problems("run", "//serving:push_tpu_image",
                                       ["--repository=r", "--tag=t"]), [])
        # A flag of a dependency's sources (common/kubernetes.py's) counts.
        self.assertEqual(tree.problems("run", "//serving:k8s", ["--repository=r"]), [])
        self.assertEqual(tree.problems("run", "//:pipeline", []), [])
        self.assertEqual(tree.problems("test", _label("//...`."), []), [])
        self.assertEqual(_label("//serving:serve)."), "//serving:serve")
        self.assertEqual(_commands("text `bazel run //a:b -- --x=1` and\n```sh\n"
                                   "./bazelw run //c:d -- --y \\\n    --z=2  # note\n```\n"),
                         [(1, "bazel run //a:b -- --x=1"), (3, "./bazelw run //c:d -- --y --z=2")])


if __name__ == "__main__":
    absltest.main()
