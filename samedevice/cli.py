"""Command line: `python -m samedevice tour | list | show <slug>`.

tour   reproduces every catalogued failure and its fix on the best device present (a real GPU when
       there is one, else the emulated accelerator) and prints one row per scenario.
list   the scenarios and the symptom of each broken module on each device kind.
show   one scenario's lesson: symptom, cause, fix, and the diff between the broken and fixed code.
docs   rewrite the generated parts of the docs pages from the code (--check: only report).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

import torch

from samedevice import devices, registry


def check_broken(scenario: registry.Scenario, device: torch.device, workdir: Path) -> tuple[bool, str]:
    """Run the broken module; True when it shows the symptom the registry records for the device."""
    expected = scenario.expected_error(device.type)
    try:
        result = scenario.case().run(device, workdir)
    except Exception as e:  # the symptom under test is an exception: report whichever one came
        observed = f"{type(e).__name__}: {str(e).splitlines()[0]}"
        ok = expected is not None and isinstance(e, expected[0]) and re.search(expected[1], str(e)) is not None
        return ok, observed
    if scenario.symptom(device.type) == "silent":
        return not _matches(result, reference(scenario, workdir)), "no error, wrong parameters"
    return expected is None, "no error"


def check_fixed(scenario: registry.Scenario, device: torch.device, workdir: Path) -> tuple[bool, str]:
    """Run the fixed module; True when it matches the CPU reference."""
    try:
        result = scenario.fix().run(device, workdir / "fixed")
    except Exception as e:  # reported in the table, not raised: the tour runs every scenario
        return False, f"{type(e).__name__}: {str(e).splitlines()[0]}"
    ok = _matches(result, reference(scenario, workdir / "reference"))
    return ok, "matches the CPU reference" if ok else "differs from the CPU reference"


def reference(scenario: registry.Scenario, workdir: Path) -> dict[str, torch.Tensor]:
    fix = scenario.fix()
    if hasattr(fix, "reference"):
        return fix.reference()
    workdir.mkdir(parents=True, exist_ok=True)
    return fix.run(torch.device("cpu"), workdir)


def _matches(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> bool:
    if actual.keys() != expected.keys():
        return False
    try:
        for key in expected:
            torch.testing.assert_close(actual[key].cpu(), expected[key])
    except AssertionError:
        return False
    return True


def tour(device_name: str | None) -> int:
    name = device_name or devices.best()
    device = devices.resolve(name)
    rows = []
    failures = 0
    for scenario in registry.SCENARIOS:
        reason = scenario.unavailable_reason(device)
        if reason:
            rows.append((scenario.slug, str(device), scenario.symptom(device.type), "skipped", "skipped", reason))
            continue
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "fixed").mkdir()
            broken_ok, observed = check_broken(scenario, device, Path(tmp))
            fixed_ok, detail = check_fixed(scenario, device, Path(tmp))
        failures += (not broken_ok) + (not fixed_ok)
        note = observed if fixed_ok else f"{observed} / fix: {detail}"
        rows.append((scenario.slug, str(device), scenario.symptom(device.type),
                     "yes" if broken_ok else "NO", "yes" if fixed_ok else "NO", note))
    header = ("scenario", "device", "symptom", "reproduced", "fix verified", "observed")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(5)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)) + "  " + header[5])
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)) + "  " + _short(r[5]))
    print(f"\n{len(rows)} scenarios on {device}: "
          + ("every symptom reproduced and every fix verified." if not failures else f"{failures} check(s) failed."))
    return 1 if failures else 0


def _short(text: str, width: int = 110) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def show(slug: str) -> int:
    scenario = registry.get(slug)
    print(f"{scenario.slug}: {scenario.title}  (source: {scenario.source})\n")
    print(scenario.lesson())
    print("\nSymptom of the broken code by device kind: "
          + ", ".join(f"{k}: {v}" for k, v in scenario.symptoms.items()))
    print("\n" + scenario.diff())
    return 0


def list_scenarios() -> int:
    kinds = registry.DEVICE_KINDS
    width = max(len(s.slug) for s in registry.SCENARIOS)
    print(f"{'scenario':{width}} " + " ".join(f"{k:11}" for k in kinds) + " what breaks")
    for s in registry.SCENARIOS:
        print(f"{s.slug:{width}} " + " ".join(f"{s.symptom(k):11}" for k in kinds) + f" {s.title}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m samedevice", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_tour = sub.add_parser("tour", help="reproduce every failure and its fix on the best device here")
    p_tour.add_argument("--device", choices=devices.KNOWN, help="device kind (default: the best present)")
    p_show = sub.add_parser("show", help="print one scenario's lesson")
    p_show.add_argument("slug", help="scenario slug, e.g. sgd_momentum")
    sub.add_parser("list", help="list the scenarios")
    p_docs = sub.add_parser("docs", help="rewrite the generated parts of docs/<slug>.md (captured errors, diffs)")
    p_docs.add_argument("--check", action="store_true", help="only list stale pages; exit 1 if any")
    args = parser.parse_args(argv)
    try:
        if args.command == "tour":
            return tour(args.device)
        if args.command == "show":
            return show(args.slug)
        if args.command == "docs":
            from samedevice import docs

            stale = docs.sync(check=args.check)
            print("stale: " + ", ".join(stale) if stale else "docs are up to date")
            return 1 if stale and args.check else 0
        return list_scenarios()
    except (KeyError, RuntimeError) as e:
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"error: {e}; the catalog runs from a checkout of the repository (pip install -e .)",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
