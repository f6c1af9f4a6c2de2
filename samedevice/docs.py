"""Keep the generated parts of docs/<slug>.md in step with the code.

The prose of a page is written by hand. Three parts come from running the code, and
`python -m samedevice docs` rewrites them (tests/test_docs.py fails while they are stale):
- the first ```text block under "## Symptom": the broken module's error on the emulated device;
- the ```diff block under "## The diff": `diff -u cases/<slug>.py fixes/<slug>.py`;
- for wrong_load_order, the markdown table between `<!-- table -->` and `<!-- /table -->`.
"""

from __future__ import annotations

import functools
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


def order_table() -> str:
    from samedevice import orders

    with tempfile.TemporaryDirectory() as tmp:
        return orders.table(emulator.device(), Path(tmp))


def render(scenario: registry.Scenario, text: str) -> str:
    """The page with its generated parts brought up to date."""
    error = captured_error(scenario)
    if error is not None:
        head, sep, rest = text.partition("## Cause")
        head = re.sub(r"```text\n.*?```", lambda _: f"```text\n{error}\n```", head, count=1, flags=re.S)
        text = head + sep + rest
    text = re.sub(r"```diff\n.*?```", lambda _: f"```diff\n{scenario.diff()}```", text, count=1, flags=re.S)
    if "<!-- table -->" in text:
        text = re.sub(r"<!-- table -->\n.*?<!-- /table -->",
                      lambda _: f"<!-- table -->\n{order_table()}<!-- /table -->", text, count=1, flags=re.S)
    return text


def sync(check: bool = False) -> list[str]:
    """Rewrite every page's generated parts; with `check`, only list the stale pages."""
    stale = []
    for scenario in registry.SCENARIOS:
        path = page_path(scenario.slug)
        text = path.read_text()
        new = render(scenario, text)
        if new != text:
            stale.append(scenario.slug)
            if not check:
                path.write_text(new)
    return stale
