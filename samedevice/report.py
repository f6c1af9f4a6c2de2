"""What a runner observes: every scenario's broken and fixed module on every device, as a record.

    samedevice report [--devices cpu,cuda] [--require cuda] [--format md|json] [--out FILE]
    samedevice report --compare a.json b.json

Each record says what the registry expects of the broken module on that device, what it did (the
exception type and the whole first line of its message, or "ran"), whether that is the recorded
symptom, and whether the fixed module reproduced the CPU reference. The report also records the
versions of same-device, torch, transformers and Python, the devices and the host, so that two
runners (a GPU against the emulator, this month's PyTorch against last month's) can be compared
scenario by scenario. The JSON schema is in docs/report.md.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import platform
import re
import tempfile
from pathlib import Path
from typing import Any

import torch

from samedevice import __version__, devices, registry

SCHEMA = "same-device-report"
SCHEMA_VERSION = 1
RAN = "ran"


@dataclasses.dataclass(frozen=True)
class Record:
    """One scenario on one device."""

    scenario: str
    device: str  # "emulated:0", "cuda:0", "cpu"
    kind: str  # the device kind: "emulated", "cuda", "cpu"
    expected: str  # the registry's symptom kind: mismatch, deserialize, rng, generator, oom, silent, none
    observed: str  # "RuntimeError: <the whole first line>", or "ran"
    reproduced: bool  # the observation is the expected symptom
    fix: str  # "matches the CPU reference", "differs from the CPU reference", or the fix's error
    fix_verified: bool | None  # None: the registry says this device cannot run the fix (never "verified")

    @property
    def agrees(self) -> bool:
        """The registry's expectations hold: the symptom reproduced and the fix verified."""
        return self.reproduced and self.fix_verified is not False


NOT_RUN = "not run here"  # a fix the registry says this device cannot run


def _first_line(e: BaseException) -> str:
    lines = str(e).splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"


def _matches(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> bool:
    if actual.keys() != expected.keys():
        return False
    try:
        for key in expected:
            torch.testing.assert_close(actual[key].cpu(), expected[key])
    except AssertionError:
        return False
    return True


def reference(scenario: registry.Scenario, workdir: Path) -> dict[str, torch.Tensor]:
    """The CPU reference parameters of a scenario's fixed module."""
    fix = scenario.fix()
    if hasattr(fix, "reference"):
        return fix.reference()
    workdir.mkdir(parents=True, exist_ok=True)
    return fix.run(torch.device("cpu"), workdir)


def observe(scenario: registry.Scenario, device: torch.device) -> Record:
    """Run the broken and the fixed module of `scenario` on `device` and record what happened."""
    symptom = scenario.symptom(device.type)
    expected = registry.expected(symptom)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "broken").mkdir()
        (workdir / "fixed").mkdir()
        try:
            result = scenario.case().run(device, workdir / "broken")
        except Exception as e:  # the symptom under test is an exception: record whichever one came
            observed = _first_line(e)
            reproduced = (expected is not None and isinstance(e, expected[0])
                          and re.search(expected[1], str(e)) is not None)
        else:
            observed = RAN
            if symptom == "silent":  # no error, but the parameters must differ from the reference
                reproduced = not _matches(result, reference(scenario, workdir / "reference"))
            else:
                reproduced = expected is None
        not_here = scenario.fix_unavailable_reason(device)
        if not_here:  # the registry's own word: the fix needs what this device lacks
            fix, fix_verified = f"{NOT_RUN}: {not_here}", None
        else:
            try:
                fixed = scenario.fix().run(device, workdir / "fixed")
            except Exception as e:  # recorded, not raised: the report covers every scenario
                fix, fix_verified = _first_line(e), False
            else:
                fix_verified = _matches(fixed, reference(scenario, workdir / "reference"))
                fix = "matches the CPU reference" if fix_verified else "differs from the CPU reference"
    return Record(scenario.slug, str(device), device.type, symptom, observed, reproduced, fix, fix_verified)


def versions() -> dict[str, str]:
    try:
        import transformers

        transformers_version = transformers.__version__
    except ImportError:
        transformers_version = "not installed"
    return {"same-device": __version__, "torch": torch.__version__, "transformers": transformers_version,
            "python": platform.python_version()}


def run(kinds: list[str]) -> dict[str, Any]:
    """The whole report, as JSON-ready data: every scenario on every device kind in `kinds`."""
    targets = [(kind, devices.resolve(kind)) for kind in kinds]
    pairs = [(scenario, dev) for scenario in registry.SCENARIOS for _, dev in targets]
    # a scenario that cannot run here (two devices needed, one present) is listed, not recorded
    skipped = [{"scenario": s.slug, "device": str(dev), "reason": s.unavailable_reason(dev)}
               for s, dev in pairs if s.unavailable_reason(dev)]
    records = [observe(s, dev) for s, dev in pairs if not s.unavailable_reason(dev)]
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": {"name": platform.node(), "platform": platform.platform(), "machine": platform.machine()},
        "versions": versions(),
        "devices": [{"kind": kind, "device": str(dev), "name": devices.describe(kind)} for kind, dev in targets],
        "records": [{**dataclasses.asdict(r), "agrees": r.agrees} for r in records],
        "divergences": sum(not r.agrees for r in records),
        "skipped": skipped,
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(report: dict[str, Any]) -> str:
    """The report for a person: versions, devices, then one table row per scenario and device."""
    v, host = report["versions"], report["host"]
    lines = [
        f"# same-device report, {report['created']}",
        "",
        f"Host `{host['name']}` ({host['platform']}); same-device {v['same-device']}, torch {v['torch']}, "
        f"transformers {v['transformers']}, Python {v['python']}.",
        "",
        "Devices: " + "; ".join(f"`{d['device']}` {d['name']}" for d in report["devices"]) + ".",
        "",
        "| scenario | device | expected | observed | as recorded | fix verified |",
        "|---|---|---|---|---|---|",
    ]
    for r in report["records"]:
        fix = ("yes" if r["fix_verified"] else f"n/a: {_cell(r['fix'])}" if r["fix_verified"] is None
               else f"**no**: {_cell(r['fix'])}")
        lines.append(f"| {r['scenario']} | {r['device']} | {r['expected']} | {_cell(r['observed'])} | "
                     f"{'yes' if r['reproduced'] else '**no**'} | {fix} |")
    n = report["divergences"]
    lines += ["", "Every observation agrees with the registry." if n == 0
              else f"{n} observation(s) differ from the registry."]
    return "\n".join(lines) + "\n"


class ReportError(Exception):
    """A report file that cannot be read or is not a same-device report."""


def load(path: str | Path) -> dict[str, Any]:
    """A report written by `samedevice report --format json`, checked; ReportError naming the file."""
    try:
        data = json.loads(Path(path).read_bytes())  # JSON: UTF-8, 16 or 32, told apart by json
    except OSError as e:
        raise ReportError(f"{path}: cannot be read ({e.strerror or e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ReportError(f"{path}: is not JSON ({e})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ReportError(f"{path}: is not a same-device report (no \"schema\": \"{SCHEMA}\")")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ReportError(f"{path}: schema_version is {data.get('schema_version')!r}; "
                          f"this same-device reads version {SCHEMA_VERSION}")
    fields = {f.name for f in dataclasses.fields(Record)}
    for key, kind in (("versions", dict), ("records", list)):
        if key not in data:
            raise ReportError(f"{path}: key {key!r} is missing")
        if not isinstance(data[key], kind):
            raise ReportError(f"{path}: {key!r} is {type(data[key]).__name__}, not a JSON "
                              f"{'object' if kind is dict else 'list'}")
    for i, record in enumerate(data["records"]):
        if not isinstance(record, dict) or not fields <= record.keys():
            missing = sorted(fields - record.keys()) if isinstance(record, dict) else sorted(fields)
            raise ReportError(f"{path}: records[{i}] lacks {', '.join(missing)}")
    return data


_ACCELERATORS = [k for k in devices.KNOWN if k != "cpu"]
# an accelerator's name in a message: a device (`cuda:0`), or the kernel wrapper PyTorch's codegen names
# after the dispatch key (`wrapper_CUDA_addmm`, the emulator's `wrapper_EMULATED_addmm`)
_ACCELERATOR = re.compile(r"\b(?:" + "|".join(_ACCELERATORS) + r")(?=:\d)"
                          r"|(?<=wrapper_)(?:" + "|".join(k.upper() for k in _ACCELERATORS) + r")(?=_)")


def _neutral(message: str) -> str:
    return _ACCELERATOR.sub("<accelerator>", message)


def _pair_devices(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str]]:
    """The device kinds to compare: those both reports have, and, when each has exactly one
    accelerator the other lacks (a GPU runner against the emulator), those two."""
    kinds_a = list(dict.fromkeys(r["kind"] for r in a["records"]))
    kinds_b = list(dict.fromkeys(r["kind"] for r in b["records"]))
    pairs = [(k, k) for k in kinds_a if k in kinds_b]
    only_a = [k for k in kinds_a if k not in kinds_b and k != "cpu"]
    only_b = [k for k in kinds_b if k not in kinds_a and k != "cpu"]
    if len(only_a) == 1 and len(only_b) == 1:
        pairs.append((only_a[0], only_b[0]))
    return pairs


def compare(a: dict[str, Any], b: dict[str, Any], names: tuple[str, str] = ("a", "b")) -> tuple[str, bool]:
    """Where two reports disagree, scenario by scenario, as Markdown; and whether they disagree.
    ReportError when they have no device kind to compare (cpu with mps, say).

    Two records agree when the symptom, its reproduction, the exception type, the message (with the
    accelerator's name set aside: `cuda:0 and cpu` is `emulated:0 and cpu`) and the fix's outcome agree.
    """
    index_a = {(r["scenario"], r["kind"]): r for r in a["records"]}
    index_b = {(r["scenario"], r["kind"]): r for r in b["records"]}
    pairs = _pair_devices(a, b)
    if not pairs:
        kinds = [", ".join(dict.fromkeys(r["kind"] for r in report["records"])) or "none" for report in (a, b)]
        raise ReportError(f"{names[0]} ({kinds[0]}) and {names[1]} ({kinds[1]}) have no device kind to compare")
    rows = []
    for slug in dict.fromkeys([s for s, _ in index_a] + [s for s, _ in index_b]):
        for kind_a, kind_b in pairs:
            ra, rb = index_a.get((slug, kind_a)), index_b.get((slug, kind_b))
            if ra is None or rb is None:
                rows.append((slug, kind_a if ra else kind_b, "only in " + (names[0] if ra else names[1]), "", ""))
                continue
            for field in ("expected", "reproduced", "observed", "fix_verified"):
                left, right = ra[field], rb[field]
                if field == "observed":
                    left, right = _neutral(left), _neutral(right)
                if left != right:
                    label = kind_a if kind_a == kind_b else f"{kind_a} / {kind_b}"
                    rows.append((slug, label, field, str(ra[field]), str(rb[field])))
    va, vb = a["versions"], b["versions"]
    lines = [f"# Comparing {names[0]} with {names[1]}", "", f"| | {names[0]} | {names[1]} |", "|---|---|---|"]
    lines += [f"| {key} | {va.get(key, '')} | {vb.get(key, '')} |" for key in dict.fromkeys([*va, *vb])]
    lines += ["", "Devices compared: " + ", ".join(ka if ka == kb else f"{ka} with {kb}" for ka, kb in pairs) + "."]
    if rows:
        lines += ["", f"| scenario | device | what | {names[0]} | {names[1]} |", "|---|---|---|---|---|"]
        lines += [f"| {' | '.join(_cell(c) for c in row)} |" for row in rows]
    else:
        lines += ["", "The two runners agree on every scenario."]
    return "\n".join(lines) + "\n", bool(rows)
