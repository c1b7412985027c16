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
