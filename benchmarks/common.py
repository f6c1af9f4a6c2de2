"""What the benchmarks share: the command line (--quick, --save) and where a result is written."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def arguments(doc: str, parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """--quick (a small run that checks the script works) and --save, for a script whose docstring is `doc`."""
    parser = parser or argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small, short run: checks the script works")
    parser.add_argument("--save", action="store_true", help="write the committed result file")
    return parser.parse_args()


def write(name: str, result: dict[str, Any], save: bool) -> Path:
    """Write `result` to benchmarks/results/<name>.json with `save`, else to the ignored benchmarks/out/."""
    out = ROOT / "benchmarks" / ("results" if save else "out") / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {out.relative_to(ROOT)}")
    return out
