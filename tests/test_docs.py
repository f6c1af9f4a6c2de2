"""The docs pages cannot drift from the code: the registry, the files, the captured errors, the
diffs and the code blocks are checked here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pytest_parametrize_cases import Case, parametrize_cases

from samedevice import docs, registry

PAGES = parametrize_cases(*(Case(s.slug, scenario=s) for s in registry.SCENARIOS))


def _page(scenario: registry.Scenario) -> str:
    return (registry.ROOT / "docs" / f"{scenario.slug}.md").read_text()


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def test_registry_matches_files() -> None:
    """Every slug has a case, a fix and a page, and every case, fix and page has a slug."""
    slugs = set(registry.slugs())
    helpers = {"optimizer_to", "checkpoint"}
    for folder, suffix in (("cases", ".py"), ("fixes", ".py"), ("docs", ".md")):
        found = {p.stem for p in (registry.ROOT / folder).glob(f"*{suffix}")} - helpers - {"__init__", "index"}
        assert found == slugs, f"{folder}/ and the registry disagree: {sorted(found ^ slugs)}"


@PAGES
def test_the_diff_is_the_fix_and_nothing_else(scenario: registry.Scenario) -> None:
    """The broken and the fixed module tell the same lesson: their docstrings are one, so the diff (the page's,
    `show`'s, `--explain`'s) shows the fix alone."""
    import ast

    docstrings = {ast.get_docstring(ast.parse((registry.ROOT / folder / f"{scenario.slug}.py").read_text()))
                  for folder in ("cases", "fixes")}
    assert len(docstrings) == 1, f"cases/{scenario.slug}.py and fixes/{scenario.slug}.py tell it differently"


@PAGES
def test_page_sections(scenario: registry.Scenario) -> None:
    """Each page has Symptom, Cause, Fix and the diff, in that order."""
    headings = re.findall(r"^## (.+)$", _page(scenario), flags=re.M)
    assert headings[:4] == ["Symptom", "Cause", "Fix", "The diff"]


@pytest.mark.emulator
@PAGES
def test_page_generated_parts_are_current(scenario: registry.Scenario) -> None:
    """The error under Symptom, the diff (and the order table) are what the code gives now."""
    text = _page(scenario)
    assert docs.render(scenario, text) == text, (
        f"docs/{scenario.slug}.md is stale: run `python -m samedevice docs`"
    )


@pytest.mark.emulator
@PAGES
def test_page_symptom_quotes_an_error(scenario: registry.Scenario) -> None:
    """The Symptom section quotes the error the emulated device raised, or says nothing raised."""
    symptom = _page(scenario).split("## Cause")[0]
    error = docs.captured_error(scenario)
    if scenario.expected_error("emulated") is None:
        assert error is None
    else:
        assert error is not None
        assert error in _blocks(symptom, "text")[0]


@pytest.mark.emulator
@PAGES
def test_page_code_blocks_run(scenario: registry.Scenario) -> None:
    """Every python block on the page runs as written (the blocks assert what they show)."""
    blocks = _blocks(_page(scenario), "python")
    assert blocks, f"docs/{scenario.slug}.md has no python example"
    for block in blocks:
        namespace: dict[str, object] = {"__name__": f"docs_{scenario.slug}"}
        exec(compile(block, f"docs/{scenario.slug}.md", "exec"), namespace)


def test_site_navigation_lists_every_scenario() -> None:
    """mkdocs.yml lists every scenario page, in registry order, as `samedevice docs` writes it."""
    text = docs.SITE.read_text()
    assert docs.nav(text) == text, "mkdocs.yml is stale: run `python -m samedevice docs`"
    pages = [line.rsplit(": ", 1)[1] for line in text.splitlines() if line.startswith(" " * 6) and line.endswith(".md")]
    assert pages == [f"{slug}.md" for slug in registry.slugs()]


def test_site_needs_no_other_host(tmp_path: Path) -> None:
    """The built site loads no script or stylesheet from another host (it reads offline), highlights its
    code at build time, and wraps long lines such as a captured error instead of hiding their end."""
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    build(load_config(str(docs.SITE), site_dir=str(tmp_path / "site")))
    page = (tmp_path / "site" / "sgd_momentum" / "index.html").read_text()
    fetched = re.findall(r'<(?:script|link)\b[^>]*?(?:src|href)="(https?://[^"]+)"', page)
    assert fetched == []
    assert 'class="codehilite"' in page
    assert re.search(r'<link href="\.\./css/site\.css" rel="stylesheet"', page)
    css = (tmp_path / "site" / "css" / "site.css").read_text()
    assert re.search(r"pre, pre code \{\s*white-space: pre-wrap;", css)


@pytest.mark.parametrize("page", sorted(p.name for p in (registry.ROOT / "docs").glob("*.md")))
def test_article_titles_carry_an_english_gloss(page: str) -> None:
    """A page that names a source article by its Chinese title glosses it in English at the first mention."""
    text = (registry.ROOT / "docs" / page).read_text()
    for title in re.findall(r"《[^》]+》", text):
        first = text.index(title) + len(title)
        assert text[first:].startswith(' ("'), f"docs/{page}: {title} has no English gloss at its first mention"


@pytest.mark.parametrize("page", ["guide/diagnose.md", "guide/frameworks.md"])
@pytest.mark.filterwarnings("ignore::UserWarning:lightning")  # Lightning's notices on a host without a GPU
@pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning")
def test_guide_code_blocks_run(page: str) -> None:
    """Every python block of a guide page runs as written (the blocks assert what they show)."""
    if page == "guide/frameworks.md":
        pytest.importorskip("lightning", reason="lightning is not installed (pip install 'same-device[stacks]')")
    blocks = _blocks((registry.ROOT / "docs" / page).read_text(), "python")
    assert blocks
    for block in blocks:
        exec(compile(block, f"docs/{page}", "exec"), {"__name__": "docs_guide"})
