"""`samedevice diagnose` against real reports: top-1 and top-3 accuracy, and how fast it answers.

    python benchmarks/bench_diagnose.py [--quick] [--save] [--show-misses]

The yardstick is tests/data/diagnose_reports.jsonl (and, held out, diagnose_heldout.jsonl): public
reports of device errors (GitHub issues
and pull requests), each with the error text as the reporter pasted it, the code where they pasted
some, the thread's address and the cause the thread established, labelled with a scenario's slug,
"not_in_catalog", "fixed_upstream" or "not_device_error". Each report is diagnosed twice: with what
the reporter pasted (error and code), and with the error text alone.
- covered: the label is a scenario in the registry; a hit is the label in the first 1 (3) answers. A
  verdict that is no scenario ("not in the catalog: PyTorch cannot see the GPU; if the host has none by
  design, the lesson is cuda_checkpoint_on_cpu_host") is the first answer, the scenario it names the second.
- the rest: a label that is no scenario of the registry (not in the catalog, fixed upstream, not a
  device error, or a failure mode the catalog does not teach yet); right when the verdict says so and
  names no lesson ("not_in_catalog" and the slugs the catalog lacks: not_in_catalog). Counted beside it:
  how many of them were given one lesson (the verdict "scenario"), which is wrong; the others were given a
  list of candidates and the question that tells them apart, or another verdict.
- one lesson named: the reports whose verdict is "scenario" (one lesson, not a list of candidates), and how
  often that lesson is the label: what a person who trusts a confident answer can expect of it.
The time is one `samedevice diagnose` process, start to exit, median of 5 (it imports no torch); and the
slowest answer to pastes of 200 KB made to try its patterns (blank lines, one word, brackets, error names):
each is read in one pass, so none should take more than a few seconds; and a log of megabytes piped in.
Results go to benchmarks/out/ (ignored by git) unless --save writes benchmarks/results/diagnose.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import arguments, write  # noqa: E402
from samedevice import diagnose, registry  # noqa: E402

REPORTS = ROOT / "tests" / "data" / "diagnose_reports.jsonl"
# reports gathered later by someone who did not run the diagnosis, the rules written before them: how the rules
# fare on reports they were not written beside
HELD_OUT_PATH = ROOT / "tests" / "data" / "diagnose_heldout.jsonl"
VERDICTS = {"not_in_catalog": "not_in_catalog", "fixed_upstream": "fixed_upstream",
            "not_device_error": "not_device_error"}


def load(path: Path = REPORTS) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def expected_verdict(label: str) -> str:
    """What a right answer says for a label that is no scenario of the registry."""
    return VERDICTS.get(label, "not_in_catalog")


def evaluate(reports: list[dict[str, Any]], with_code: bool) -> dict[str, Any]:
    slugs = set(registry.slugs())
    covered = top1 = top3 = rest = rest_right = rest_named = confident = confident_right = 0
    misses = []
    for r in reports:
        d = diagnose.diagnose(r["error"], (r["code"] or "") if with_code else "")
        if d.verdict == "scenario":  # it names one lesson: is it the one?
            confident += 1
            confident_right += d.matches[0].slug == r["label"]
        # a verdict that is no scenario is the first answer; a scenario it names for another case comes after it
        ranked = [m.slug for m in d.matches] if d.found else [d.verdict] + [m.slug for m in d.matches]
        if r["label"] in slugs:
            covered += 1
            top1 += ranked[:1] == [r["label"]]
            top3 += r["label"] in ranked[:3]
            if ranked[:1] != [r["label"]]:
                misses.append((r["id"], r["label"], d.verdict, ranked[:3]))
        else:
            rest += 1
            right = d.verdict == expected_verdict(r["label"])
            rest_right += right
            rest_named += d.verdict == "scenario"  # a wrong lesson named alone, not a list of candidates
            if not right:
                misses.append((r["id"], r["label"], d.verdict, ranked[:3]))
    # four places: a share printed as a whole percent is rounded once (74 of 235 is 31%, not 0.315's 32%)
    return {"covered": covered, "top1": round(top1 / covered, 4), "top3": round(top3 / covered, 4),
            "rest": rest, "rest_right": round(rest_right / rest, 4) if rest else None, "rest_named": rest_named,
            "confident": confident, "confident_right": round(confident_right / confident, 4) if confident else None,
            "misses": misses}


def ceiling(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The most any ranking could do given only what the diagnosis reads of the error (its wording, op, argument,
    side, devices, frames, the lines a traceback quotes, a release it shows): reports alike in all of these get one
    answer. A ranking that knew each such set's commonest labels in this very set would get top-1 and top-3 of the
    covered below; and of the rest, only those whose set holds no covered report could be answered right without
    hiding a lesson from a covered one, and of those, the commonest verdict. Fitted to the set it scores, so it is an
    upper bound, not a target."""
    slugs = set(registry.slugs())
    groups: dict[tuple[Any, ...], Counter[str]] = defaultdict(Counter)
    for r in reports:
        f = diagnose.read(r["error"])
        key = (f.template, f.op, f.argument, f.side, f.devices, f.frames, f.site, f.code, f.run, f.torch_version)
        groups[key][r["label"]] += 1
    covered = sum(n for labels in groups.values() for label, n in labels.items() if label in slugs)
    rest = sum(n for labels in groups.values() for label, n in labels.items() if label not in slugs)
    top1 = top3 = apart = 0
    for labels in groups.values():
        counts = sorted((n for label, n in labels.items() if label in slugs), reverse=True)
        top1 += sum(counts[:1])
        top3 += sum(counts[:3])
        if not counts:  # one verdict for the set: the commonest of its reports'
            apart += max(Counter(expected_verdict(label) for label in labels.elements()).values())
    return {"groups": len(groups), "top1": round(top1 / covered, 3), "top3": round(top3 / covered, 3),
            "rest_apart": round(apart / rest, 3) if rest else None}


def answer_time(rounds: int) -> dict[str, float]:
    message = ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
               "cuda:0 and cpu!")
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "samedevice", "diagnose", message], cwd=ROOT, capture_output=True,
                       check=True)
        times.append(time.perf_counter() - start)
    return {"median_s": round(statistics.median(times), 3), "min_s": round(min(times), 3),
            "max_s": round(max(times), 3)}


# 200 KB pastes that would make a pattern retried from each of their characters take minutes
HARD_PASTES = {"blank lines": "\n" * 200000, "indented blank lines": " \n" * 100000, "one word": "a" * 200000,
               "one word in brackets": "self.a[" + "x" * 200000, "open brackets": "(" * 200000,
               "error names": "RuntimeError: " * 15000, "dotted names": "x.y." * 50000 + "Error: a",
               "rank prefixes": "[rank0]: \n" * 20000, "frames": 'File "' * 40000,
               "a box's side and spaces": "\u256d\u2500 Traceback\n\u2502" + " " * 200000 + "x",
               "a box's long header": "\u256d\n\u2502" + "a.py:1in" * 25000 + " x\u2502",
               "pytest's places": "a.py:1: in f\n" * 15000 + "E   x",
               "colours": "\x1b[31m[0m" * 20000, "a notebook's brackets": "[" * 200000}
TRACEBACK = ('Traceback (most recent call last):\n  File "train.py", line 120, in <module>\n'
             "    loss = criterion(model(x), y)\nRuntimeError: Expected all tensors to be on the same device, but "
             "found at least two devices, cuda:0 and cpu!\n")
# and what a pipe brings (`python train.py 2>&1 | samedevice diagnose`): a run's log of about 2 MB, then its error
LOGS = {"a 2 MB training log": "".join(f"epoch {i // 100} step {i}: loss=0.{i % 997:03d} 100%|##########| 50/50 "
                                       "[00:01<00:00, 40.1it/s]\n" for i in range(20000)) + TRACEBACK,
        "a traceback 3000 times": TRACEBACK * 3000}


def hard_paste_times() -> dict[str, float]:
    times = {}
    for name, text in {**HARD_PASTES, **LOGS}.items():
        start = time.perf_counter()
        diagnose.diagnose(text)
        times[name] = round(time.perf_counter() - start, 3)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show-misses", action="store_true", help="list each report diagnosed wrongly")
    args = arguments(__doc__, parser)
    reports, held_out = load(), load(HELD_OUT_PATH)
    result: dict[str, Any] = {"reports": len(reports), "with_code": evaluate(reports, True),
                              "error_only": evaluate(reports, False), "held_out_reports": len(held_out),
                              "held_out_with_code": evaluate(held_out, True),
                              "held_out_error_only": evaluate(held_out, False),
                              "held_out_ceiling": ceiling(held_out),
                              "answer": answer_time(1 if args.quick else 5), "hard_pastes_s": hard_paste_times()}
    for name in ("with_code", "error_only", "held_out_with_code", "held_out_error_only"):
        row = result[name]
        print(f"{name:19}: covered {row['covered']}: top-1 {row['top1']:.0%}, top-3 {row['top3']:.0%}; "
              f"the rest {row['rest']}: {row['rest_right']:.0%} answered right, {row['rest_named']} given one (wrong) "
              f"lesson; one lesson named "
              f"{row['confident']} times: {row['confident_right']:.0%} right")
        if args.show_misses:
            for miss in row["misses"]:
                print("    miss:", *miss)
        row["misses"] = [list(m) for m in row["misses"]]
    top = result["held_out_ceiling"]
    print(f"held out, the most any ranking of what is read of the error alone could do ({top['groups']} sets of "
          "facts): "
          f"top-1 {top['top1']:.0%}, top-3 {top['top3']:.0%}; the rest answered right {top['rest_apart']:.0%}")
    print(f"one `samedevice diagnose` process: {result['answer']['median_s']:.2f} s (median)")
    hard = {name: result["hard_pastes_s"][name] for name in HARD_PASTES}
    slowest = max(hard, key=hard.__getitem__)
    print(f"slowest of {len(HARD_PASTES)} pastes of 200 KB: {hard[slowest]:.2f} s ({slowest}); "
          + "; ".join(f"{name}: {result['hard_pastes_s'][name]:.2f} s" for name in LOGS))
    write("diagnose", result, args.save)


if __name__ == "__main__":
    main()
