"""Command line: `samedevice tour | list | show <slug> | report | copy <helper> | docs` (or `python -m samedevice`).

tour    reproduces every catalogued failure and its fix on the best device present (a real GPU when
        there is one, else the emulated accelerator), one row per scenario as each finishes.
list    the scenarios and the symptom of each broken module on each device kind.
show    one scenario's lesson: symptom, cause, fix, and the diff between the broken and fixed code.
report  every scenario on every device, as Markdown or JSON; exit 1 when an observation differs from
        the registry. `report --compare a.json b.json` shows where two runners disagree.
copy    writes a copyable helper (optimizer_to, checkpoint) into your project.
diagnose  reads a pasted error or traceback (an argument, --file, or stdin) and the code (--code), and
        ranks the scenarios that fit, each with why, the check that confirms it and the fix; exit 0 when a
        scenario fits, 1 when none does.
docs    rewrite the generated parts of the docs pages from the code (--check: only report).

Bad input (an unknown scenario, device, format or helper, an unreadable report, a file that exists)
is one line on stderr and exit code 2.

Only the commands that run code (tour, report, docs) import torch: `--help`, list, show, copy,
diagnose and every usage error answer at once.
"""

from __future__ import annotations

import argparse
import ast
import codecs
import io
import json
import os
import re
import shutil
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from samedevice import devices, errors, registry

if TYPE_CHECKING:
    from samedevice import report

EXPECTED_ON_CPU = "runs silently (expected on CPU)"


class UsageError(Exception):
    """Bad input: one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse prints the usage first; one line is enough
        raise UsageError(f"{self.prog}: {message}")


def _device_kinds(value: str) -> list[str]:
    try:
        return devices.parse(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


# ---- tour -------------------------------------------------------------------------------------


def _keep_end(text: str, room: int) -> str:
    """`text` in `room` characters, keeping its exception type and the end of its message, where the
    devices are named (PyTorch's "(when checking argument ...)" tail goes first when it does not fit)."""
    if len(text) > room:
        text = re.sub(r"\s*\(when checking argument[^)]*\)$", "", text)
    if len(text) <= room:
        return text
    kind, sep, message = text.partition(": ")
    prefix = kind + sep if sep and len(kind) + 12 < room else ""
    tail = (message if prefix else text)[-(room - len(prefix) - 1):]
    if " " in tail[:15]:  # start at a word
        tail = tail[tail.index(" ") + 1:]
    return prefix + "…" + tail


def _broken_text(record: report.Record) -> str:
    from samedevice import report

    if not record.reproduced:
        return f"NOT AS RECORDED ({record.expected} expected): {record.observed}"
    if record.observed != report.RAN:
        return record.observed
    if record.expected == "silent":
        return "runs, but the parameters differ from the CPU reference (as recorded)"
    return EXPECTED_ON_CPU if record.kind == "cpu" else f"runs (expected on {record.kind})"


def tour(device_name: str | None) -> int:
    from samedevice import report

    name = device_name or devices.best()
    try:
        reason = devices.unavailable_reason(name)
    except ValueError as e:  # SAMEDEVICE_DEVICE names no device kind
        raise UsageError(f"SAMEDEVICE_DEVICE: {e}") from None
    if reason:
        raise UsageError(f"tour --device {name}: {reason}")
    device = devices.resolve(name)
    width = shutil.get_terminal_size((100, 24)).columns
    fell_back = device_name is None and name == "cpu" and not os.environ.get("SAMEDEVICE_DEVICE")  # not chosen
    emulator_reason = devices.unavailable_reason("emulated") if fell_back else None
    if emulator_reason:  # the tour fell back to the CPU, where no broken module fails: say why, first
        print(textwrap.fill(f"No accelerator here, and the emulated one cannot run: {emulator_reason}. On the CPU "
                            "the broken modules run without an error.", width) + "\n")
    slug_width = max(len(s) for s in registry.slugs())
    fix_width = len("verified")
    room = max(20, width - slug_width - fix_width - 4)
    print(textwrap.fill(f"Each broken module and its fix, on {device}, {devices.describe(name)}:", width) + "\n")
    print(f"{'scenario':{slug_width}}  {'fix':{fix_width}}  broken code", flush=True)
    failures = skipped = fixes_not_run = 0
    for scenario in registry.SCENARIOS:
        reason = scenario.unavailable_reason(device)
        if reason:  # e.g. two devices needed, one present: not run, and said so
            print(f"{scenario.slug:{slug_width}}  {'skipped':{fix_width}}  {_keep_end(reason, room)}", flush=True)
            skipped += 1
            continue
        record = report.observe(scenario, device)
        failures += (not record.reproduced) + (record.fix_verified is False)
        fixes_not_run += record.fix_verified is None
        fix = "n/a" if record.fix_verified is None else "verified" if record.fix_verified else "FAILED"
        print(f"{scenario.slug:{slug_width}}  {fix:{fix_width}}  {_keep_end(_broken_text(record), room)}", flush=True)
        if record.fix_verified is False:
            print(" " * (slug_width + 2) + _keep_end(f"fix: {record.fix}", width - slug_width - 2), flush=True)
    verdict = "every symptom reproduced and every fix verified" if not failures else f"{failures} check(s) failed"
    if fixes_not_run and not failures:
        verdict = f"every symptom reproduced and every fix verified but {fixes_not_run} this device cannot run (n/a)"
    print(f"\n{len(registry.SCENARIOS)} scenarios on {device}: {verdict}"
          + (f"; {skipped} skipped (see above)." if skipped else "."))
    return 1 if failures else 0


# ---- show and list ----------------------------------------------------------------------------


def render_markdown(text: str, width: int) -> str:
    """Markdown for a terminal: through `rich` when it is installed, else plain text wrapped to `width`
    (emphasis markers dropped, code spans kept in backticks, indented blocks left as they are)."""
    try:
        from rich.console import Console
        from rich.markdown import Markdown
    except ImportError:
        paragraphs = []
        for block in re.split(r"\n\s*\n", text):
            if block.startswith(("    ", "```")):
                paragraphs.append(block)
            else:
                plain = re.sub(r"\*\*(.+?)\*\*|\*(\S.*?)\*", lambda m: m.group(1) or m.group(2), block)
                paragraphs.append(textwrap.fill(" ".join(plain.split()), width))
        return "\n\n".join(paragraphs)
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=sys.stdout.isatty()).print(Markdown(text))
    return "\n".join(line.rstrip() for line in out.getvalue().rstrip().splitlines())


# the two articles the catalog started from, by title (docs/guide/sources.md)
ARTICLES = {"000 seed": '《PyTorch 训练恢复时解决设备不一致错误》 ("PyTorch: fixing the device-mismatch error when '
                        'resuming training")',
            "002 seed": '《恢复训练重点检查 SGD 动量缓存》 ("when resuming training, check the SGD momentum buffers '
                        'first")',
            "both seeds": "both source articles"}


def source(scenario: registry.Scenario) -> str:
    """Where the scenario comes from, with the source articles named by title."""
    text = scenario.source
    for short, title in ARTICLES.items():
        text = text.replace(short, title)
    return text


def show(slug: str) -> int:
    scenario = registry.get(slug)
    width = min(100, shutil.get_terminal_size((100, 24)).columns)
    print(f"{scenario.slug}: {scenario.title}  (source: {source(scenario)})\n")
    print(render_markdown(scenario.lesson(), width))
    print("\nSymptom of the broken code by device kind: "
          + ", ".join(f"{k}: {v}" for k, v in scenario.symptoms.items()))
    print("\n" + scenario.diff())
    return 0


def symptoms_in_words(scenario: registry.Scenario) -> tuple[str, str]:
    """What the broken code does on cpu, and on the accelerators (one word where they agree, the
    exceptions named after it), as the registry records it: no device is probed."""
    on_accelerators = {k: v for k, v in scenario.symptoms.items() if k != "cpu"}
    common = max(on_accelerators.values(), key=list(on_accelerators.values()).count)
    others = ", ".join(f"{k}: {v}" for k, v in on_accelerators.items() if v != common)
    return scenario.symptoms["cpu"], common + (f"; {others}" if others else "")


def list_scenarios() -> int:
    width = shutil.get_terminal_size((100, 24)).columns
    rows = [(s.slug, *symptoms_in_words(s), (f"[{s.min_devices} devices] " if s.min_devices > 1 else "") + s.title)
            for s in registry.SCENARIOS]
    header = ("scenario", "cpu", "accelerators", "what breaks")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(3)]
    indent = sum(widths) + 6
    room = width - indent
    for row in [header, *rows]:
        left = "  ".join(f"{cell:{w}}" for cell, w in zip(row, widths))
        if room < 30:  # a narrow terminal: the title on lines of its own
            print(left.rstrip())
            print(textwrap.fill(row[3], width, initial_indent="    ", subsequent_indent="    "))
            continue
        title = textwrap.wrap(row[3], room) or [""]
        print(f"{left}  {title[0]}")
        for more in title[1:]:
            print(" " * indent + more)
    print("\n" + textwrap.fill(f"{len(rows)} scenarios; `samedevice show <scenario>` prints one's lesson.", width))
    return 0


# ---- report -----------------------------------------------------------------------------------


def _unwritable(path: Path) -> str | None:
    """Why a file cannot be written at `path`, or None."""
    if path.is_dir():
        return "it is a folder"
    if not path.parent.is_dir():
        return f"no folder {path.parent}"
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return "permission denied"
    return None


def _write(text: str, out: str | None) -> None:
    if out is None:
        sys.stdout.write(text)
        return
    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"--out {out}: cannot be written ({e.strerror or e})") from None
    print(f"wrote {Path(out).resolve()}", file=sys.stderr)


def run_report(args: argparse.Namespace) -> int:
    from samedevice import report

    if args.compare:
        try:
            a, b = (report.load(path) for path in args.compare)
            text, differ = report.compare(a, b, names=(args.compare[0], args.compare[1]))
        except report.ReportError as e:
            raise UsageError(str(e)) from None
        _write(text, args.out)
        return 1 if differ else 0
    for name in args.require:
        reason = devices.unavailable_reason(name)
        if reason:
            raise UsageError(f"--require={name}: {reason}")
    kinds = sorted(set(args.devices or devices.present()) | set(args.require), key=devices.KNOWN.index)
    for name in kinds:
        reason = devices.unavailable_reason(name)
        if reason:
            raise UsageError(f"--devices: {name}: {reason}")
    if args.out is not None and (why := _unwritable(Path(args.out))):  # before the run of every scenario, not after
        raise UsageError(f"--out {args.out}: cannot be written ({why})")
    data = report.run(kinds)
    _write(json.dumps(data, indent=2) + "\n" if args.format == "json" else report.markdown(data), args.out)
    return 1 if data["divergences"] else 0


# ---- copy -------------------------------------------------------------------------------------


def helpers() -> list[str]:
    """The copyable helpers: the modules in fixes/ that are not a scenario's fix."""
    scenario_fixes = set(registry.slugs())
    return sorted(p.stem for p in (registry.ROOT / "fixes").glob("*.py")
                  if p.stem not in scenario_fixes and p.stem != "__init__")


def _import_hint(target: Path, public: list[str]) -> str:
    """An import of the copied file that works: from the current folder when the file is below it (a
    script run there, `python -m`, pytest's rootdir), else with its folder put on the path."""
    names = ", ".join(public)
    if not target.stem.isidentifier():
        return f"rename it to a valid module name (letters, digits, _) to import it: {target.name} is not one"
    try:
        parts = target.resolve().relative_to(Path.cwd().resolve()).with_suffix("").parts
    except ValueError:
        parts = ()
    if parts and all(part.isidentifier() for part in parts):
        return f"use it with: from {'.'.join(parts)} import {names}"
    return f"use it with: from {target.stem} import {names}  (with {target.resolve().parent} on sys.path or PYTHONPATH)"


def copy(name: str, dest: str | None, force: bool) -> int:
    if name not in helpers():
        raise UsageError(f"copy: unknown helper {name!r}; the helpers are: {', '.join(helpers())}")
    source = registry.ROOT / "fixes" / f"{name}.py"
    target = Path(dest) if dest is not None else Path(f"{name}.py")
    # a folder: one that exists, a trailing slash, or a name that is not a .py file (created if new)
    if dest is not None and (target.is_dir() or dest.endswith(("/", os.sep)) or target.suffix != ".py"):
        if target.exists() and not target.is_dir():
            raise UsageError(f"copy: {target} is a file, not a folder; name a .py file or a folder")
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"copy: cannot create folder {target} ({e.strerror or e})") from None
        target = target / source.name
    if target.exists() and not force:
        raise UsageError(f"copy: {target} exists; pass --force to overwrite it")
    if not target.parent.is_dir():
        raise UsageError(f"copy: folder {target.parent} does not exist; name the folder ({target.parent}/) "
                         "to have it created")
    try:
        shutil.copyfile(source, target)
    except OSError as e:  # a folder not writable, a dangling link, /proc
        raise UsageError(f"copy: {target} cannot be written ({e.strerror or e})") from None
    public = [node.name for node in ast.parse(source.read_text(encoding="utf-8")).body
              if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_")]
    print(f"wrote {target.resolve()}\n{_import_hint(target, public)}")
    return 0


# ---- diagnose ---------------------------------------------------------------------------------


BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),  # before UTF-16 LE's, which starts theirs
        (codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def decode(data: bytes) -> str:
    """A pasted log's text, whatever wrote it: UTF-8 (with or without a BOM), or UTF-16 or UTF-32 with their BOM,
    as Windows PowerShell's `>` writes a log (UTF-16 LE), or UTF-16 without one; what is not valid is replaced."""
    encoding = next((name for bom, name in BOMS if data.startswith(bom)), None)
    if encoding is None:  # no BOM: ASCII text in UTF-16 has a NUL beside each character (after it in LE, before in BE)
        odd, even = data[1::2].count(0), data[0::2].count(0)
        encoding = ("utf-16-le" if odd > len(data) // 4 >= even else
                    "utf-16-be" if even > len(data) // 4 >= odd else "utf-8")
    return data.decode(encoding, errors="replace").replace("\r\n", "\n").replace("\r", "\n")


def _read(path: str, what: str) -> str:
    try:
        if path == "-":
            if sys.stdin is None:  # started with stdin closed (`<&-`)
                raise UsageError(f"{what}: standard input is closed; give the error as an argument or a file")
            stdin = getattr(sys.stdin, "buffer", None)  # bytes where there are any, so a log's BOM is read
            return decode(stdin.read()) if stdin is not None else sys.stdin.read()
        return decode(Path(path).read_bytes())
    except OSError as e:
        raise UsageError(f"{what} {path}: cannot be read ({e.strerror or e})") from None


def run_diagnose(args: argparse.Namespace) -> int:
    from samedevice import diagnose

    if args.text and args.file:
        raise UsageError("diagnose: give the error as an argument or with --file, not both")
    if args.code == "-" and not args.text and (args.file in (None, "-")):
        raise UsageError("diagnose: the error and --code cannot both come from stdin; give one as a file")
    if args.text:
        text = " ".join(args.text)
    elif args.file:
        text = _read(args.file, "--file")
    elif args.code:
        text = ""  # the code alone
    elif sys.stdin is not None and not sys.stdin.isatty():
        text = _read("-", "stdin")
    else:
        raise UsageError("diagnose: no input; paste the error as an argument, or pipe it: "
                         "python train.py 2>&1 | samedevice diagnose")
    code = _read(args.code, "--code") if args.code else ""
    if not text.strip() and not code.strip():
        raise UsageError("diagnose: the input is empty")
    result = diagnose.diagnose(text, code)
    print(diagnose.as_json(result) if args.format == "json" else diagnose.render(result))
    return 0 if result.found else 1


# ---- main -------------------------------------------------------------------------------------


def _parser() -> _Parser:
    parser = _Parser(prog="samedevice", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p_tour = sub.add_parser("tour", help="reproduce every failure and its fix on the best device here")
    p_tour.add_argument("--device", choices=devices.KNOWN, help="device kind (default: the best present)")
    p_show = sub.add_parser("show", help="print one scenario's lesson")
    p_show.add_argument("slug", help="scenario slug, e.g. sgd_momentum")
    sub.add_parser("list", help="list the scenarios")
    p_report = sub.add_parser("report", help="every scenario on every device, as Markdown or JSON")
    p_report.add_argument("--devices", type=_device_kinds, default=[], metavar="KINDS",
                          help="comma-separated device kinds (default: every one present)")
    p_report.add_argument("--require", type=_device_kinds, default=[], metavar="KINDS",
                          help="device kinds that must be present: exit 2 instead of leaving them out")
    p_report.add_argument("--format", choices=("md", "json"), default="md", help="md (default) or json")
    p_report.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")
    p_report.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"),
                          help="show where two JSON reports disagree; exit 1 if they do")
    p_copy = sub.add_parser("copy", help="write a copyable helper (optimizer_to, checkpoint) into your project")
    p_copy.add_argument("helper", help="optimizer_to or checkpoint")
    p_copy.add_argument("dest", nargs="?", help="file or folder (default: ./<helper>.py)")
    p_copy.add_argument("--force", action="store_true", help="overwrite an existing file")
    p_diag = sub.add_parser("diagnose", help="read a pasted device error (and code) and name the scenarios that fit")
    p_diag.add_argument("text", nargs="*", help="the error message or traceback (default: --file, or stdin)")
    p_diag.add_argument("--file", metavar="FILE", help="read the error from FILE ('-': stdin); a notebook (.ipynb) "
                        "gives its errors and the code of its cells")
    p_diag.add_argument("--code", metavar="FILE", help="the script that failed, or the code pasted with the error")
    p_diag.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or json")
    p_docs = sub.add_parser("docs", help="rewrite the generated parts of docs/<slug>.md (captured errors, diffs)")
    p_docs.add_argument("--check", action="store_true", help="only list stale pages; exit 1 if any")
    return parser


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a console or file that cannot show a pasted path's characters (cp1252
        reconfigure = getattr(stream, "reconfigure", None)  # on Windows) gets them escaped, not a UnicodeEncodeError
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    try:
        args = _parser().parse_args(argv)
        if args.command == "tour":
            return tour(args.device)
        if args.command == "show":
            return show(args.slug)
        if args.command == "report":
            return run_report(args)
        if args.command == "copy":
            return copy(args.helper, args.dest, args.force)
        if args.command == "docs":
            return docs(args.check)
        if args.command == "diagnose":
            return run_diagnose(args)
        return list_scenarios()
    except (UsageError, errors.UnsupportedTorchError, errors.EmulatorUnavailableError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyError as e:  # registry.get: an unknown scenario
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `samedevice tour | head`: the reader has gone, which is not an error
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (the interpreter flushes it at exit)
        return 0


def docs(check: bool) -> int:
    from samedevice import docs as pages

    if not check and registry.ROOT.name == "_catalog":
        raise UsageError("docs: the pages of an installed package are not rewritten; run it in a checkout, "
                         "or use --check")
    stale = pages.sync(check=check)
    print("stale: " + ", ".join(stale) if stale else "docs are up to date")
    return 1 if stale and check else 0


if __name__ == "__main__":
    raise SystemExit(main())
