"""Every example in README.md and docs/**/*.md runs as written.

What counts as an example (the extraction rule):

* Python: a fenced block opened with ```` ```python ````, or an indented block (four spaces
  or more, after a blank line or a paragraph) whose first line starts with ``import ``,
  ``from `` or ``>>> ``. A block containing ``>>>`` prompts is run with :mod:`doctest`
  (its printed output is checked, ``ELLIPSIS`` and ``NORMALIZE_WHITESPACE`` on); any other
  block is executed with ``exec``. A Python example fails if it raises or if the library
  warns (a ``UserWarning``: the example leaves out something the library asks for).
* Shell: in any other fenced block (``sh``, ``bash``, ``console``, ``text`` or no language)
  or indented block, a line starting with ``fedustat `` or ``$ fedustat `` (continued by a
  trailing backslash) is one command. It runs through ``fedustat.cli.main`` with the words
  after ``fedustat``; ``#`` starts a comment. ``python -m fedustat.runtime.flower ...``
  runs through that module's ``main``. Lines of the other programs the docs show
  (``make``, ``pip``, ``python3.11 -m venv``, ``flwr``, ``flower-superlink``,
  ``flower-supernode``) are collected too and skipped with the reason in
  ``SKIPPED_PROGRAMS``.
* A command followed in its block by a line ``error: MESSAGE`` (console transcript) or
  ``# error: MESSAGE`` (a comment, possibly continued by further ``#`` lines) documents a
  refusal: the command must exit with status 1 and print MESSAGE on stderr; ``...`` in
  MESSAGE stands for any text. Every other command must exit 0.

The examples of one page run in order, as a reader follows the page, sharing one Python
namespace (``__name__`` is ``"__main__"``, as for a script) and one working directory:
a fresh, empty temporary directory of that page alone. Nothing is put there beforehand,
so a file an example reads (``scores.csv``, ``data.csv``, ...) must be written by an
earlier example of the same page; a file another page or test wrote cannot hide a
missing step. Each example is its own test, named ``page:line``, which first runs the
page's earlier examples. Commands that take minutes, need a network, several processes
or a cluster are listed in ``SKIPPED`` with the reason; Python blocks that are not run
(a sketch of signatures, a 10^8-party script, one that needs a Dask scheduler) in
``SKIPPED_PYTHON``.

Install lines: fedustat is not on the public package index, so a ``pip install`` line
installs from the checkout (``.``, ``'.[extra]'``) or a built wheel, never the name
``fedustat``; every extra the docs name exists in ``pyproject.toml``.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import shlex
import textwrap
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fedustat import advisor
from fedustat.protocols import registry

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# (page relative to the repository, command prefix after "fedustat ", reason). A prefix
# matches every command of that page starting with it; "*" matches every page.
SKIPPED: list[tuple[str, str, str]] = [
    ("*", "serve ", "network server: waits for parties over TLS (tests/test_network*.py run it)"),
    ("*", "party ", "network party: needs a running server (tests/test_network*.py run it)"),
    ("*", "service ", "network service role: needs a running server "
     "(tests/test_service_roles_processes.py)"),
    ("*", "enroll-server ", "enrollment service: runs until stopped (tests/test_enrollment.py "
     "runs it)"),
    ("*", "enroll --server", "device enrollment: needs a running enrollment service "
     "(tests/test_enrollment.py)"),
    ("*", "collect ", "collection server: waits for devices until its window closes "
     "(tests/test_collection.py runs it)"),
    ("*", "report ", "device report: needs a running collection server "
     "(tests/test_collection.py)"),
    ("*", "reproduce NAME", "synopsis of the arguments, not a command"),
    ("*", "reproduce all",
     "every experiment: minutes (tests/test_reproduce.py runs each with --quick)"),
    ("*", "compare",
     "every applicable protocol at 4 epsilons x 50 repetitions, with figures: 20 s for one "
     "statistic on 400 rows, minutes for all (tests/test_compare.py)"),
    ("docs/engine.md", "estimate --statistic auc --protocol fedauc-rr --engine tcp://",
     "needs a running Dask scheduler at tcp://scheduler:8786"),
]

# Other programs' command lines: (first word(s), reason). None is run.
SKIPPED_PROGRAMS: list[tuple[str, str]] = [
    ("make run", "creates a virtualenv and runs every comparison: minutes (what this test's "
                 "commands and tests/test_compare.py check piece by piece)"),
    ("make test", "runs the whole test suite, this file included: 10+ minutes"),
    ("make bench", "benchmarks/bench_exact.py at n = 10^6: minutes (tests/test_bench_peers.py)"),
    ("pip ", "installs packages from an index: needs the network"),
    ("python3.11 -m venv", "creates a virtualenv and installs into it: needs the network"),
    ("flwr ", "needs a running Flower SuperLink and SuperNodes (tests/test_flower.py)"),
    ("flower-superlink ", "a long-running Flower server with TLS certificates"),
    ("flower-supernode ", "a long-running Flower node: needs a SuperLink"),
]

# Python blocks that are not run: (page, the block's first line, reason).
SKIPPED_PYTHON: list[tuple[str, str, str]] = [
    ("docs/architecture.md", "class Protocol(ABC):",
     "a sketch of the four method signatures, not runnable code"),
    ("docs/engine.md", "from fedustat.protocols.registry import make",
     "a script for 10^8 parties on a local cluster: 170 s and more (docs/engine.md's table; "
     "tests/test_engine.py runs generated_partitions at small sizes)"),
    ("docs/engine.md", "# Stored data: one Parquet file per partition",
     "needs a running Dask scheduler at tcp://scheduler:8786 (the page writes scores/)"),
]


@dataclass
class Example:
    page: str
    line: int
    kind: str  # "python", "doctest" or "shell"
    text: str
    expect_error: str | None = None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


_PROGRAMS = ("fedustat ", "python -m fedustat.runtime.flower ", "make ", "pip ",
             "python3.11 -m venv", "flwr ", "flower-superlink ", "flower-supernode ")


def _shell_commands(page: str, start: int, lines: list[str]) -> list[Example]:
    out: list[Example] = []
    i = 0
    while i < len(lines):
        raw = lines[i].strip()
        if raw.startswith("$ "):
            raw = raw[2:]
        if not raw.startswith(_PROGRAMS):
            i += 1
            continue
        first = i
        cmd = raw
        while cmd.endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd = cmd[:-1] + " " + lines[i].strip()
        i += 1
        expect = None
        if i < len(lines):
            nxt = lines[i].strip()
            if nxt.startswith("error:"):
                expect = nxt[len("error:"):].strip()
                i += 1
            elif nxt.startswith("# error:"):
                parts = [nxt[len("# error:"):].strip()]
                i += 1
                while i < len(lines) and lines[i].strip().startswith("# "):
                    parts.append(lines[i].strip()[2:].strip())
                    i += 1
                expect = " ".join(parts)
        out.append(Example(page, start + first, "shell", cmd, expect))
    return out


def extract(path: Path) -> list[Example]:
    return extract_text(path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8"))


def extract_text(page: str, markdown: str) -> list[Example]:
    lines = markdown.splitlines()
    examples: list[Example] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = re.match(r"^(\s*)```(\w*)", line)
        if fence:
            lang = fence.group(2)
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith("```"):
                j += 1
            body = [ln[len(fence.group(1)):] for ln in lines[i + 1:j]]
            if lang == "python":
                text = "\n".join(body) + "\n"
                kind = "doctest" if ">>>" in text else "python"
                examples.append(Example(page, i + 2, kind, text))
            elif lang in ("", "sh", "bash", "console", "text", "shell"):
                examples.extend(_shell_commands(page, i + 2, body))
            i = j + 1
            continue
        if line.startswith("    ") and (i == 0 or not lines[i - 1].startswith("    ")):
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            while j > i and not lines[j - 1].strip():
                j -= 1
            block = textwrap.dedent("\n".join(lines[i:j])).splitlines()
            head = block[0]
            if head.startswith(("import ", "from ", ">>> ")):
                text = "\n".join(block) + "\n"
                kind = "doctest" if ">>>" in text else "python"
                examples.append(Example(page, i + 1, kind, text))
            else:
                examples.extend(_shell_commands(page, i + 1, block))
            i = j
            continue
        i += 1
    return examples


ALL: list[Example] = [ex for p in PAGES for ex in extract(p)]


def skip_reason(ex: Example) -> str | None:
    if ex.kind == "shell" and not ex.text.startswith(("fedustat ", "python -m fedustat.")):
        for head, reason in SKIPPED_PROGRAMS:
            if ex.text.startswith(head):
                return reason
        raise AssertionError(f"{ex.id}: no rule runs or skips {ex.text!r}")
    if ex.kind != "shell":
        first = ex.text.lstrip().splitlines()[0]
        for page, head, reason in SKIPPED_PYTHON:
            if page == ex.page and first.startswith(head):
                return reason
        return None
    args = ex.text[len("fedustat "):]
    for page, prefix, reason in SKIPPED:
        if page in ("*", ex.page) and args.startswith(prefix):
            return reason
    return None


@dataclass
class Outcome:
    ok: bool
    message: str


@dataclass
class PageRun:
    """The examples of one page, run in order in one namespace and working directory."""

    workdir: Path
    # Run as a script would be: a page's ``if __name__ == "__main__":`` body runs too.
    namespace: dict[str, Any] = field(default_factory=lambda: {"__name__": "__main__"})
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    done: int = 0

    def run_until(self, examples: list[Example], index: int) -> Outcome:
        while self.done <= index:
            ex = examples[self.done]
            old = os.getcwd()
            os.chdir(self.workdir)
            try:
                self.outcomes[self.done] = run_example(ex, self.namespace)
            finally:
                os.chdir(old)
            self.done += 1
        return self.outcomes[index]


def _matches(expected: str, got: str) -> bool:
    pattern = ".*".join(re.escape(part.strip()) for part in expected.split("..."))
    return re.search(pattern, " ".join(got.split()), flags=re.S) is not None


def _run_python(ex: Example, namespace: dict[str, Any]) -> Outcome:
    if ex.kind == "python":
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                exec(compile(ex.text, ex.id, "exec"), namespace)  # the docs' own code
        except Exception as exc:  # reported as the example's failure
            return Outcome(False, f"{type(exc).__name__}: {exc}")
        return Outcome(True, buf.getvalue())
    test = doctest.DocTestParser().get_doctest(ex.text, namespace, ex.id, ex.page, ex.line)
    out = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, out=out.write, clear_globs=False)
    return Outcome(runner.failures == 0, out.getvalue())


def run_example(ex: Example, namespace: dict[str, Any]) -> Outcome:
    if skip_reason(ex) is not None:
        return Outcome(True, "skipped")
    if ex.kind in ("python", "doctest"):
        # A documented example should run cleanly: the library's warnings (UserWarning and
        # its subclasses) mean the example leaves out something the library asks for.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            outcome = _run_python(ex, namespace)
        warned = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
        if outcome.ok and warned:
            return Outcome(False, "warnings: " + " | ".join(warned))
        return outcome
    from fedustat.cli import main

    argv = shlex.split(ex.text, comments=True)[1:]
    if ex.text.startswith("python -m fedustat.runtime.flower "):
        from fedustat.runtime.flower.__main__ import main

        argv = argv[2:]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: Any = main(argv)
        except SystemExit as exc:
            code = exc.code
    if isinstance(code, str):  # SystemExit("error: ...") is status 1 with the message
        err.write(code + "\n")
        code = 1
    code = 0 if code is None else int(code)
    if ex.expect_error is not None:
        ok = code == 1 and _matches(ex.expect_error, err.getvalue())
        return Outcome(ok, f"exit {code}; stderr: {err.getvalue()[-2000:]}\nexpected error: "
                           f"{ex.expect_error}")
    return Outcome(code == 0, f"exit {code}; stderr: {err.getvalue()[-2000:]}")


@pytest.fixture(scope="module")
def page_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, PageRun]:
    return {}


def _by_page() -> dict[str, list[Example]]:
    pages: dict[str, list[Example]] = {}
    for ex in ALL:
        pages.setdefault(ex.page, []).append(ex)
    return pages


BY_PAGE = _by_page()


def test_extraction_finds_the_examples() -> None:
    # The README's quick start (python), its command lines and the user guide's refusals.
    ids = {(ex.page, ex.kind) for ex in ALL}
    assert ("README.md", "python") in ids
    assert ("README.md", "shell") in ids
    assert any(ex.expect_error and ex.page == "docs/user-guide.md" for ex in ALL)
    assert any(ex.expect_error and ex.page == "docs/budget.md" for ex in ALL)


@pytest.mark.parametrize("ex", ALL, ids=[ex.id for ex in ALL])
def test_doc_example(ex: Example, page_runs: dict[str, PageRun],
                     tmp_path_factory: pytest.TempPathFactory,
                     monkeypatch: pytest.MonkeyPatch) -> None:
    reason = skip_reason(ex)
    if reason is not None:
        pytest.skip(reason)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # Examples may register predictors or protocols (docs/compare.md's "Adding a protocol
    # to the advisor" registers one with placeholder values): each test gets copies of the
    # registries, so nothing an example adds outlives it and reaches other tests.
    for module, name in ((advisor, "_PREDICTORS"), (registry, "_REGISTRY"),
                         (registry, "_CURVES")):
        monkeypatch.setattr(module, name, dict(getattr(module, name)))
    run = page_runs.get(ex.page)
    if run is None:
        where = tmp_path_factory.mktemp(re.sub(r"\W", "_", ex.page))
        assert not any(where.iterdir()), f"{where} is not empty"
        run = page_runs[ex.page] = PageRun(where)
    examples = BY_PAGE[ex.page]
    outcome = run.run_until(examples, examples.index(ex))
    assert outcome.ok, f"{ex.id} ({ex.kind}): {ex.text.strip()}\n{outcome.message}"


SAMPLE = """Prose.

    import math
    r = math.sqrt(4)

```python
>>> r + 1
3.0
```

    $ fedustat advise --statistic auc --epsilon 1
    error: auc needs the class sizes ... --n-neg

```sh
fedustat budget b.json --epsilon 1 \\
    --adjacency score   # create
# error: refused ... nothing
#   was spent
make test
```

    not code
"""


def test_extraction_rule_on_a_sample_page() -> None:
    got = extract_text("sample.md", SAMPLE)
    assert [(ex.line, ex.kind) for ex in got] == [
        (3, "python"), (7, "doctest"), (11, "shell"), (15, "shell"), (19, "shell")]
    assert got[0].text == "import math\nr = math.sqrt(4)\n"
    assert got[2].expect_error == "auc needs the class sizes ... --n-neg"
    assert got[3].text.split() == ["fedustat", "budget", "b.json", "--epsilon", "1",
                                   "--adjacency", "score", "#", "create"]
    assert got[3].expect_error == "refused ... nothing was spent"
    assert skip_reason(got[4]) is not None and skip_reason(got[3]) is None


def test_sample_page_runs_and_a_wrong_doctest_fails() -> None:
    namespace: dict[str, Any] = {}
    python, doc = extract_text("sample.md", SAMPLE)[:2]
    assert run_example(python, namespace).ok
    assert run_example(doc, namespace).ok
    wrong = Example("sample.md", 1, "doctest", ">>> r + 1\n4.0\n")
    assert not run_example(wrong, namespace).ok


def test_documented_refusal_checks_the_message() -> None:
    cmd = "fedustat advise --statistic auc --epsilon 1"
    assert run_example(Example("s.md", 1, "shell", cmd, "auc needs the class sizes"), {}).ok
    assert not run_example(Example("s.md", 1, "shell", cmd, "some other message"), {}).ok
    # A documented refusal that succeeds fails the example.
    ok_cmd = "fedustat protocols"
    assert not run_example(Example("s.md", 1, "shell", ok_cmd, "anything"), {}).ok


def test_a_warning_fails_a_python_example() -> None:
    code = "import warnings\nwarnings.warn('declare bounds')\n"
    outcome = run_example(Example("s.md", 1, "python", code), {})
    assert not outcome.ok and "declare bounds" in outcome.message


# ------------------------------------------------------------------ install lines
_PIP_INSTALL = re.compile(r"pip install ([^`#\n]*)")
_EXTRAS = re.compile(r"\[([\w,\- ]+)\]")


def _install_lines() -> list[tuple[str, str]]:
    found = []
    for page in [*PAGES, *sorted((ROOT / "src").rglob("*.py"))]:
        text = page.read_text(encoding="utf-8")
        for match in _PIP_INSTALL.finditer(text):
            found.append((page.relative_to(ROOT).as_posix(), match.group(1).strip()))
    return found


def _declared_extras() -> set[str]:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return set(project["optional-dependencies"])


def test_every_extra_the_docs_name_is_declared() -> None:
    declared = _declared_extras()
    named = {(page, extra.strip()) for page, line in _install_lines()
             for group in _EXTRAS.findall(line) for extra in group.split(",")}
    assert named, "no install line with an extra found"
    assert not {(p, e) for p, e in named if e not in declared}, declared


def test_docs_install_from_the_checkout_not_the_public_index() -> None:
    # `pip install 'fedustat[network]'` or `pip install fedustat` would look for fedustat
    # on the public index, where it is not published.
    from_index = [(page, line) for page, line in _install_lines()
                  if page.endswith(".md")
                  and re.match(r"""['"]?fedustat(\[|['"]?(\s|$))""", line)]
    assert not from_index, from_index
