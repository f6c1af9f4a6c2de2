"""The command line as a person reads it: the tour's rows, the lesson, the report and its comparison,
`copy`, and one clear line with exit code 2 for every kind of bad input."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pytest_parametrize_cases import Case, parametrize_cases

from samedevice import cli, emulator, registry, report


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def two_scenarios(monkeypatch: pytest.MonkeyPatch) -> tuple[registry.Scenario, ...]:
    """The catalog cut to two scenarios, to keep the commands that run everything quick."""
    chosen = (registry.get("sgd_momentum"), registry.get("bce_pos_weight"))
    monkeypatch.setattr(registry, "SCENARIOS", chosen)
    return chosen


# ---- tour -------------------------------------------------------------------------------------


@pytest.mark.emulator
def test_tour_rows_fit_the_terminal_and_keep_the_device_pair(
    two_scenarios: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each tour row fits a 72-column terminal and keeps the end of the error, where the devices are named."""
    monkeypatch.setenv("COLUMNS", "72")
    code, out, _ = run(capsys, "tour", "--device", "emulated")
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith(("sgd_momentum", "bce_pos_weight"))]
    assert len(rows) == 2
    for row in rows:
        assert len(row) <= 72
        assert row.endswith("emulated:0 and cpu!")
        assert "RuntimeError: …" in row
    assert "2 scenarios on emulated:0: every symptom reproduced and every fix verified." in out


@pytest.mark.emulator
def test_tour_prints_each_row_as_its_scenario_finishes(
    two_scenarios: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first scenario's row is out before the second scenario starts."""
    seen_before: dict[str, str] = {}
    observe = report.observe

    def watching(scenario: registry.Scenario, device: Any) -> report.Record:
        seen_before[scenario.slug] = capsys.readouterr().out
        sys.stdout.write(seen_before[scenario.slug])  # put it back for the rest of the test
        return observe(scenario, device)

    monkeypatch.setattr(report, "observe", watching)
    assert cli.main(["tour", "--device", "emulated"]) == 0
    assert "sgd_momentum" not in seen_before["sgd_momentum"]
    assert re.search(r"^sgd_momentum +verified +RuntimeError", seen_before["bce_pos_weight"], re.M)


def test_tour_on_cpu_says_the_bug_runs_silently(two_scenarios: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """On CPU each row says the broken code runs silently, as expected, and its fix is verified."""
    code, out, _ = run(capsys, "tour", "--device", "cpu")
    assert code == 0
    assert re.search(r"^sgd_momentum +verified +runs silently \(expected on CPU\)$", out, re.M)
    assert re.search(r"^bce_pos_weight +verified +runs silently \(expected on CPU\)$", out, re.M)


def test_tour_says_why_it_fell_back_to_the_cpu(two_scenarios: Any, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """With no accelerator and an emulator that cannot run here, the tour runs on the CPU and says why first;
    asked for the CPU, it says nothing of the kind."""
    reason = "the emulated accelerator needs its C++ part, which cannot be built here: no C++ compiler found"
    monkeypatch.setattr(emulator, "unavailable_reason", lambda: reason)
    monkeypatch.delenv("SAMEDEVICE_DEVICE", raising=False)
    if cli.devices.best() != "cpu":
        pytest.skip("a real accelerator is present: the tour runs there")
    code, out, _ = run(capsys, "tour")
    assert code == 0
    first = " ".join(out.split("\n\n")[0].split())  # the paragraph, wrapped to the terminal
    assert first == (f"No accelerator here, and the emulated one cannot run: {reason}. On the CPU the broken "
                     "modules run without an error.")
    assert re.search(r"^sgd_momentum +verified +runs silently \(expected on CPU\)$", out, re.M)
    assert "cannot run" not in run(capsys, "tour", "--device", "cpu")[1]
    monkeypatch.setenv("SAMEDEVICE_DEVICE", "cpu")  # chosen, not fallen back to
    assert "cannot run" not in run(capsys, "tour")[1]


@pytest.mark.parametrize(("text", "room", "shown"), [
    ("RuntimeError: short", 40, "RuntimeError: short"),
    ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
     50, "RuntimeError: …least two devices, cuda:0 and cpu!"),
    ("RuntimeError: Expected all tensors to be on the same device, but got index is on cpu, different from other "
     "tensors on cuda:0 (when checking argument in method wrapper_CUDA__index_select)",
     80, "RuntimeError: …but got index is on cpu, different from other tensors on cuda:0"),
], ids=["fits", "device_pair_kept", "checking_tail_dropped"])
def test_long_errors_keep_their_end(text: str, room: int, shown: str) -> None:
    """A long error keeps its type and its end, from a word boundary, within the room it has."""
    assert cli._keep_end(text, room) == shown
    assert len(shown) <= room


# ---- show and list ----------------------------------------------------------------------------


@pytest.mark.parametrize("with_rich", [True, False], ids=["rich", "plain"])
def test_show_renders_the_lesson_markdown(
    with_rich: bool, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`show` prints the lesson's Markdown as text, with or without rich: no ** markers, lines wrapped."""
    if with_rich:
        pytest.importorskip("rich")
    else:
        monkeypatch.setitem(sys.modules, "rich.console", None)  # an import of it fails, as without rich
    monkeypatch.setenv("COLUMNS", "70")
    code, out, _ = run(capsys, "show", "sgd_momentum")
    assert code == 0
    lesson = out.split("Symptom of the broken code")[0]
    assert "**" not in lesson
    assert "Symptom (at " in lesson
    assert max(len(line) for line in lesson.splitlines()[1:]) <= 70
    assert "--- cases/sgd_momentum.py" in out


def test_show_names_the_source_article_by_title(capsys: pytest.CaptureFixture[str]) -> None:
    """`show` names the article a scenario comes from by its title, with an English gloss."""
    out = run(capsys, "show", "sgd_momentum")[1]
    assert out.splitlines()[0].endswith(
        '(source: 《恢复训练重点检查 SGD 动量缓存》 ("when resuming training, check the SGD momentum buffers first"))')


@pytest.mark.parametrize("columns", [80, 100, 160])
def test_list_names_every_scenario_and_fits_the_terminal(
    columns: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`list` names every scenario with its symptom on cpu and on the accelerators, in lines that fit the terminal."""
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, _ = run(capsys, "list")
    assert code == 0
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= columns
    starts = [line.split()[0] for line in lines[1:] if line and not line.startswith(" ")]
    assert starts[:-1] == registry.slugs()  # the last line counts them
    sgd = next(line for line in lines if line.startswith("sgd_momentum "))
    assert sgd.split()[1:3] == ["none", "mismatch"]
    pick = next(line for line in lines if line.startswith("mps_device_pick "))
    assert "mismatch; cuda: none" in pick
    assert lines[-1] == f"{len(registry.SCENARIOS)} scenarios; `samedevice show <scenario>` prints one's lesson."


# ---- report -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def emulated_report() -> dict[str, Any]:
    """A JSON report of sgd_momentum and bce_pos_weight on cpu and the emulated device."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(registry, "SCENARIOS", (registry.get("sgd_momentum"), registry.get("bce_pos_weight")))
        return report.run(["cpu", "emulated"])


@pytest.mark.emulator
def test_report_records_each_scenario_and_device(emulated_report: dict[str, Any]) -> None:
    """The report has a record per scenario and device, with the whole first line observed, and the versions."""
    records = {(r["scenario"], r["device"]): r for r in emulated_report["records"]}
    assert set(records) == {(s, d) for s in ("sgd_momentum", "bce_pos_weight") for d in ("cpu", "emulated:0")}
    assert records["sgd_momentum", "cpu"]["observed"] == "ran"
    assert records["sgd_momentum", "emulated:0"]["observed"] == (
        "RuntimeError: Expected all tensors to be on the same device, "
        "but found at least two devices, emulated:0 and cpu!"
    )
    assert all(r["reproduced"] and r["fix_verified"] and r["agrees"] for r in records.values())
    assert emulated_report["divergences"] == 0
    assert set(emulated_report["versions"]) == {"same-device", "torch", "transformers", "python"}
    assert [d["kind"] for d in emulated_report["devices"]] == ["cpu", "emulated"]


@pytest.mark.emulator
def test_report_command_writes_json_and_markdown(
    two_scenarios: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`report --format json --out` writes a report that `load` accepts; the Markdown has a row per record."""
    code, _, err = run(capsys, "report", "--devices", "emulated", "--format", "json", "--out", str(tmp_path / "r.json"))
    assert code == 0
    assert err == f"wrote {tmp_path / 'r.json'}\n"
    assert len(report.load(tmp_path / "r.json")["records"]) == 2
    code, out, _ = run(capsys, "report", "--devices", "cpu")
    assert code == 0
    assert "| sgd_momentum | cpu | none | ran | yes | yes |" in out
    assert out.endswith("Every observation agrees with the registry.\n")


def test_report_exits_1_when_an_observation_differs(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry entry that expects a mismatch on CPU makes the report exit 1 and mark the row."""
    wrong = registry.Scenario("sgd_momentum", "wrong expectation", "test", {"cpu": "mismatch"})
    monkeypatch.setattr(registry, "SCENARIOS", (wrong,))
    code, out, _ = run(capsys, "report", "--devices", "cpu")
    assert code == 1
    assert "| sgd_momentum | cpu | mismatch | ran | **no** | yes |" in out
    assert "1 observation(s) differ from the registry." in out


def _save(data: dict[str, Any], path: Path) -> str:
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.emulator
def test_compare_agreeing_reports(emulated_report: dict[str, Any], capsys: pytest.CaptureFixture[str],
                                  tmp_path: Path) -> None:
    """Two reports that agree compare with exit 0 and say so."""
    a = _save(emulated_report, tmp_path / "a.json")
    code, out, _ = run(capsys, "report", "--compare", a, a)
    assert code == 0
    assert "The two runners agree on every scenario." in out


@pytest.mark.emulator
@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_compare_reads_a_report_a_windows_shell_wrote(emulated_report: dict[str, Any], encoding: str,
                                                      capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`samedevice report --format json > r.json` in Windows PowerShell writes UTF-16 with a BOM (PowerShell 7:
    UTF-8, and a BOM with some settings); such a report compares as the UTF-8 one does."""
    a = _save(emulated_report, tmp_path / "a.json")
    (tmp_path / "b.json").write_bytes(json.dumps(emulated_report).encode(encoding))
    code, out, _ = run(capsys, "report", "--compare", a, str(tmp_path / "b.json"))
    assert code == 0
    assert "The two runners agree on every scenario." in out


@pytest.mark.emulator
def test_compare_shows_where_runners_disagree(emulated_report: dict[str, Any], capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    """A GPU report whose messages differ only in the device name agrees; a differing observation is shown."""
    gpu = copy.deepcopy(emulated_report)
    gpu["versions"]["torch"] = "2.14.0+cu130"
    for record in gpu["records"]:
        if record["kind"] == "emulated":
            record.update(kind="cuda", device="cuda:0", observed=record["observed"].replace("emulated:0", "cuda:0"))
    gpu["records"][-1].update(observed="ran", reproduced=False)  # bce_pos_weight on cuda:0
    a, b = _save(emulated_report, tmp_path / "emulated.json"), _save(gpu, tmp_path / "gpu.json")
    code, out, _ = run(capsys, "report", "--compare", a, b)
    assert code == 1
    assert f"| torch | {emulated_report['versions']['torch']} | 2.14.0+cu130 |" in out
    assert "Devices compared: cpu, emulated with cuda." in out
    rows = [line for line in out.splitlines() if line.startswith("| bce_pos_weight") or line.startswith("| sgd")]
    assert rows == [
        "| bce_pos_weight | emulated / cuda | reproduced | True | False |",
        "| bce_pos_weight | emulated / cuda | observed | RuntimeError: Expected all tensors to be on the same device, "
        "but found at least two devices, emulated:0 and cpu! | ran |",
    ]


# ---- copy -------------------------------------------------------------------------------------


def _import_as_hinted(out: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Run the import line `copy` printed, from the current folder, as a script started there would."""
    hint = out.splitlines()[1]
    assert hint.startswith("use it with: "), out
    statement = hint.removeprefix("use it with: ").split("  (")[0]
    monkeypatch.syspath_prepend(str(Path.cwd()))
    for name in [m for m in sys.modules if m.split(".")[0] in {"optimizer_to", "checkpoint", "train", "new", "tools"}]:
        monkeypatch.delitem(sys.modules, name)
    namespace: dict[str, Any] = {}
    exec(statement, namespace)  # the very line a user pastes
    return namespace


def test_copy_writes_the_helper_and_says_where(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`copy optimizer_to` writes fixes/optimizer_to.py into the current folder and prints its path and import."""
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "copy", "optimizer_to")
    assert code == 0
    assert out == f"wrote {tmp_path / 'optimizer_to.py'}\nuse it with: from optimizer_to import optimizer_to\n"
    assert (tmp_path / "optimizer_to.py").read_text() == (registry.ROOT / "fixes" / "optimizer_to.py").read_text()
    assert callable(_import_as_hinted(out, monkeypatch)["optimizer_to"])
    (tmp_path / "train").mkdir()
    code, out, _ = run(capsys, "copy", "checkpoint", "train")
    assert code == 0
    assert out.startswith(f"wrote {tmp_path / 'train' / 'checkpoint.py'}\nuse it with: from train.checkpoint import ")
    assert callable(_import_as_hinted(out, monkeypatch)["save_checkpoint"])


@pytest.mark.parametrize("dest", ["new", "new/", "tools/new/"])
def test_copy_into_a_new_folder_creates_it(dest: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A destination that does not exist yet and is not a .py file is a folder: created, the helper put in it,
    and the import printed works."""
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "copy", "optimizer_to", dest)
    assert code == 0
    written = tmp_path / dest / "optimizer_to.py"
    assert written.is_file()
    assert (tmp_path / dest.rstrip("/")).is_dir()
    assert out.splitlines()[0] == f"wrote {written}"
    assert callable(_import_as_hinted(out, monkeypatch)["optimizer_to"])


def test_copy_outside_the_current_folder_says_what_to_put_on_the_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Copied outside the current folder, the hint names the folder the import needs on the path."""
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    code, out, _ = run(capsys, "copy", "optimizer_to", str(tmp_path / "elsewhere"))
    assert code == 0
    assert out.splitlines()[1] == (f"use it with: from optimizer_to import optimizer_to  "
                                   f"(with {tmp_path / 'elsewhere'} on sys.path or PYTHONPATH)")


def test_copy_overwrites_only_with_force(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """An existing file is left alone and named, unless --force is given."""
    target = tmp_path / "mine.py"
    target.write_text("my code\n")
    code, _, err = run(capsys, "copy", "optimizer_to", str(target))
    assert (code, err) == (2, f"error: copy: {target} exists; pass --force to overwrite it\n")
    assert target.read_text() == "my code\n"
    assert run(capsys, "copy", "optimizer_to", str(target), "--force")[0] == 0
    assert "def optimizer_to" in target.read_text()


@pytest.mark.parametrize("name", cli.helpers())
def test_copied_helpers_document_their_functions(name: str) -> None:
    """Every public function of a copyable helper has a docstring, so help() on it says what it does."""
    module = registry.helper(name)
    functions = [f for name, f in vars(module).items()
                 if callable(f) and getattr(f, "__module__", None) == module.__name__ and not name.startswith("_")]
    assert functions
    for function in functions:
        assert function.__doc__, f"{name}.{function.__name__} has no docstring"


# ---- bad input --------------------------------------------------------------------------------


def _report_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "r.json"
    path.write_text(text)
    return str(path)


def _one_device(tmp: Path, name: str, kind: str) -> str:
    record = {"scenario": "sgd_momentum", "device": kind, "kind": kind, "expected": "none", "observed": "ran",
              "reproduced": True, "fix": "matches the CPU reference", "fix_verified": True}
    return _save({**GOOD, "records": [record]}, tmp / f"{name}.json")


GOOD = {"schema": "same-device-report", "schema_version": 1, "versions": {}, "records": []}

BAD_INPUT = parametrize_cases(
    Case("unknown_slug", argv=lambda tmp: ["show", "sgd"],
         message=r"unknown scenario 'sgd'; did you mean sgd_momentum\? `samedevice list` shows all \d+$"),
    Case("mistyped_slug", argv=lambda tmp: ["show", "sdg_momentum"], message="did you mean sgd_momentum?"),
    Case("unknown_slug_nothing_near", argv=lambda tmp: ["show", "xyzzy"],
         message=r"unknown scenario 'xyzzy'; `samedevice list` shows all"),
    Case("empty_report_devices", argv=lambda tmp: ["report", "--devices="],
         message="samedevice report: argument --devices: no device named in ''"),
    Case("copy_below_a_file", argv=lambda tmp: ["copy", "checkpoint", _report_file(tmp, "x") + "/sub/"],
         message=r"copy: cannot create folder .*r\.json/sub \(Not a directory\)"),
    Case("copy_onto_a_file_as_folder", argv=lambda tmp: ["copy", "checkpoint", _report_file(tmp, "x") + "/"],
         message=r"copy: .*r\.json is a file, not a folder"),
    Case("unknown_device", argv=lambda tmp: ["tour", "--device", "gpu"],
         message="samedevice tour: argument --device: invalid choice: 'gpu'"),
    Case("unknown_report_device", argv=lambda tmp: ["report", "--devices", "cpu,tpu"],
         message="samedevice report: argument --devices: unknown device 'tpu'; valid names: cpu, emulated"),
    Case("unknown_format", argv=lambda tmp: ["report", "--format", "html"],
         message="samedevice report: argument --format: invalid choice: 'html'"),
    Case("unknown_helper", argv=lambda tmp: ["copy", "optimiser_to"],
         message="copy: unknown helper 'optimiser_to'; the helpers are: checkpoint, optimizer_to"),
    Case("missing_folder", argv=lambda tmp: ["copy", "checkpoint", str(tmp / "no" / "x.py")],
         message="copy: folder .*no does not exist; name the folder .*no/\\) to have it created"),
    Case("unreadable_report", argv=lambda tmp: ["report", "--compare", str(tmp / "none.json"), str(tmp / "none.json")],
         message=r"none\.json: cannot be read \(No such file or directory\)"),
    Case("not_json", argv=lambda tmp: ["report", "--compare", _report_file(tmp, "<html>"), _report_file(tmp, "")],
         message=r"r\.json: is not JSON \(Expecting value"),
    Case("not_a_report", argv=lambda tmp: ["report", "--compare", *[_report_file(tmp, '{"records": []}')] * 2],
         message=r'r\.json: is not a same-device report \(no "schema": "same-device-report"\)'),
    Case("other_schema_version",
         argv=lambda tmp: ["report", "--compare", *[_report_file(tmp, json.dumps({**GOOD, "schema_version": 9}))] * 2],
         message=r"r\.json: schema_version is 9; this same-device reads version 1"),
    Case("nothing_to_compare", argv=lambda tmp: ["report", "--compare", _one_device(tmp, "a", "cpu"),
                                                  _one_device(tmp, "b", "mps")],
         message=r"a\.json \(cpu\) and .*b\.json \(mps\) have no device kind to compare"),
    Case("record_lacks_fields", argv=lambda tmp: ["report", "--compare", *[_report_file(
        tmp, json.dumps({**GOOD, "records": [{"scenario": "x"}]}))] * 2],
         message=r"r\.json: records\[0\] lacks device, expected, fix, fix_verified, kind, observed, reproduced"),
    Case("report_out_in_no_folder", argv=lambda tmp: ["report", "--devices", "cpu", "--out", str(tmp / "no" / "r.md")],
         message=r"--out .*r\.md: cannot be written \(no folder .*no\)$"),
    Case("report_out_a_folder", argv=lambda tmp: ["report", "--devices", "cpu", "--out", str(tmp)],
         message=r"--out .*: cannot be written \(it is a folder\)$"),
    Case("records_not_a_list", argv=lambda tmp: ["report", "--compare", *[_report_file(
        tmp, json.dumps({**GOOD, "records": None}))] * 2],
         message=r"r\.json: 'records' is NoneType, not a JSON list$"),
    Case("copy_through_a_dangling_link", argv=lambda tmp: ["copy", "checkpoint", _dangling(tmp)],
         message=r"copy: .*dangling\.py cannot be written \(No such file or directory\)$"),
)


def _dangling(tmp: Path) -> str:
    """A link to a file in a folder that does not exist."""
    (tmp / "dangling.py").symlink_to(tmp / "nowhere" / "x.py")
    return str(tmp / "dangling.py")


@BAD_INPUT
def test_bad_input_is_one_line_and_exit_2(argv: Any, message: str, capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    """Bad input prints one line naming the problem, exits 2, and shows no traceback."""
    code, out, err = run(capsys, *argv(tmp_path))
    assert code == 2
    assert len(err.splitlines()) == 1
    assert err.startswith("error: ")
    assert re.search(message, err), err
    assert "Traceback" not in out + err


def test_diagnose_with_stdin_closed_says_so(capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A process started with stdin closed (`samedevice diagnose <&-`; Python's sys.stdin is None) gets exit 2 and
    one line, from a pipe it was told to read or none; it used to stop with an AttributeError."""
    monkeypatch.setattr(sys, "stdin", None)
    assert run(capsys, "diagnose", "--file", "-")[::2] == (
        2, "error: --file: standard input is closed; give the error as an argument or a file\n")
    code, _, err = run(capsys, "diagnose")
    assert code == 2
    assert err.startswith("error: diagnose: no input; paste the error as an argument")


# ---- start-up ---------------------------------------------------------------------------------

NO_TORCH = """
import contextlib, io, sys, tempfile
from samedevice import cli

commands = [["--help"], ["list"], ["show", "sgd_momentum"], ["show", "sgd"], ["tour", "--device", "gpu"],
            ["report", "--devices="], ["copy", "optimizer_to", tempfile.mkdtemp()],
            ["diagnose", "Expected all tensors to be on the same device, but found at least two devices, cuda:0 "
             "and cpu!"]]
for argv in commands:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            cli.main(argv)
        except SystemExit:  # --help
            pass
    loaded = [m for m in ("torch", "numpy", "transformers") if m in sys.modules]
    assert not loaded, f"samedevice {' '.join(argv)} imported {loaded}"
print("ok")
"""


def test_commands_that_run_no_code_do_not_import_torch() -> None:
    """--help, list, show, copy and usage errors answer without importing torch (it takes seconds)."""
    run = subprocess.run([sys.executable, "-c", NO_TORCH], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout == "ok\n"


@pytest.mark.emulator
def test_a_fix_the_device_cannot_run_is_not_called_verified() -> None:
    """Where the registry says the device cannot run a fix (DataParallel's scatter is CUDA's), the report records
    fix_verified as null with the reason, the markdown says n/a, and the record still agrees with the registry."""
    from samedevice import report

    record = report.observe(registry.get("dataparallel_device_ids"), emulator.device())
    assert record.reproduced
    assert record.fix_verified is None
    assert record.fix.startswith(f"{report.NOT_RUN}: DataParallel's scatter and gather are CUDA's own C++")
    assert record.agrees
    data = {"records": [{**dataclasses.asdict(record), "agrees": record.agrees}]}
    assert "| n/a: not run here: DataParallel" in report.markdown({**report.run([]), **data})
