"""Keep the generated parts of docs/<slug>.md in step with the code.

The prose of a page is written by hand. Three parts come from running the code, and
`python -m samedevice docs` rewrites them (tests/test_docs.py fails while they are stale):
- the first ```text block under "## Symptom": the broken module's error on the emulated device, and
  the same error as CUDA words it;
- the ```diff block under "## The diff": `diff -u cases/<slug>.py fixes/<slug>.py`;
- for wrong_load_order, the markdown table between `<!-- table -->` and `<!-- /table -->`.
The site's navigation (mkdocs.yml, in a checkout) lists the scenarios from the registry, between
`# scenarios` and `# /scenarios`; the same command rewrites it.
"""

from __future__ import annotations

import functools
import json
import re
import tempfile
from pathlib import Path

from samedevice import emulator, registry


def page_path(slug: str) -> Path:
    return registry.ROOT / "docs" / f"{slug}.md"


def captured_error(scenario: registry.Scenario) -> str | None:
    """`Type: first line` of the broken module's error on the emulated device (None if it runs)."""
    return _captured_error(scenario.slug)


@functools.cache  # a run is deterministic; the multi-process scenarios take seconds
def _captured_error(slug: str) -> str | None:
    scenario = registry.get(slug)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            scenario.case().run(emulator.device(), Path(tmp))
        except Exception as e:  # whatever the broken code raises is what the page must quote
            return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return None


def cuda_wording(error: str) -> str:
    """The emulated device's error as CUDA words it: the emulator copies CUDA's checks and messages, and
    only the device's name and the kernel wrapper's dispatch key differ (`wrapper_CUDA_addmm`)."""
    return (re.sub(r"\bemulated(?=:\d)", "cuda", error).replace("wrapper_EMULATED_", "wrapper_CUDA_")
            .replace("'emulated' device type", "'cuda' device type"))


def symptom_block(scenario: registry.Scenario, error: str) -> str:
    """The ```text block under Symptom: the captured error, and CUDA's wording of it where CUDA raises."""
    lines = [f"emulated: {error}"]
    # CUDA's caching allocator words an OOM its own way ("CUDA out of memory ... GPU 0 has a total
    # capacity of ... of which ... is free"), which the emulator's accounting does not copy
    if scenario.expected_error("cuda") is not None and scenario.symptom("cuda") != "oom":
        lines.append(f"CUDA:     {cuda_wording(error)}")
    return "```text\n" + "\n".join(lines) + "\n```"


def order_table() -> str:
    from samedevice import orders

    with tempfile.TemporaryDirectory() as tmp:
        return orders.table(emulator.device(), Path(tmp))


def render(scenario: registry.Scenario, text: str) -> str:
    """The page with its generated parts brought up to date."""
    error = captured_error(scenario)
    if error is not None:
        head, sep, rest = text.partition("## Cause")
        head = re.sub(r"```text\n.*?```", lambda _: symptom_block(scenario, error), head, count=1, flags=re.S)
        text = head + sep + rest
    text = re.sub(r"```diff\n.*?```", lambda _: f"```diff\n{scenario.diff()}```", text, count=1, flags=re.S)
    if "<!-- table -->" in text:
        text = re.sub(r"<!-- table -->\n.*?<!-- /table -->",
                      lambda _: f"<!-- table -->\n{order_table()}<!-- /table -->", text, count=1, flags=re.S)
    return text


SITE = registry.ROOT / "mkdocs.yml"  # only in a checkout: the wheel ships the pages, not the site


def nav(text: str) -> str:
    """mkdocs.yml with its list of scenario pages made from the registry."""
    entries = "".join(f"      - {json.dumps(f'{s.slug}: ' + s.title.replace('`', ''))}: {s.slug}.md\n"
                      for s in registry.SCENARIOS)
    return re.sub(r"(  # scenarios[^\n]*\n  - Scenarios:\n).*?(  # /scenarios)",
                  lambda m: m.group(1) + entries + m.group(2), text, count=1, flags=re.S)


def sync(check: bool = False) -> list[str]:
    """Rewrite every page's generated parts and the site's navigation; with `check`, only list the stale ones."""
    stale = []
    if SITE.exists():
        text = SITE.read_text(encoding="utf-8")
        if nav(text) != text:
            stale.append(SITE.name)
            if not check:
                SITE.write_text(nav(text), encoding="utf-8")
    for scenario in registry.SCENARIOS:
        path = page_path(scenario.slug)
        text = path.read_text(encoding="utf-8")
        new = render(scenario, text)
        if new != text:
            stale.append(scenario.slug)
            if not check:
                path.write_text(new, encoding="utf-8")
    return stale
