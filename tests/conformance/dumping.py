"""Dump upstream's own allocator test table, with upstream's answers, from the module source.

    python -m tests.conformance.dumping v0.36.3 [v0.37.2 ...]

For each version of `k8s.io/dynamic-resource-allocation` (fetched by `go mod download`, from
the Go module proxy only), this copies the module to a temporary directory, adds
`tests/conformance/dump/dump_test.go` to its experimental implementation and runs upstream's
shared table (`structured/internal/allocatortesting`) through it. Every Allocate call is written
with its inputs and upstream's answer; the result is
`tests/data/conformance/<version>/upstream-allocator-cases.jsonl` in the format of
`tests/data/conformance/README.md` (one case per line, sorted by name), and a PROVENANCE.md
naming the module's checksum and the command. The module cache itself is never written to.

The table's claims are passed to the allocator as built, without API defaulting, so every case
has `applyDefaults: false`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
DUMP_TEST = Path(__file__).resolve().parent / "dump" / "dump_test.go"
MODULE = "k8s.io/dynamic-resource-allocation"


def _download(version: str) -> dict[str, Any]:
    info = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{version}"], check=True, capture_output=True, text=True
    )
    result: dict[str, Any] = json.loads(info.stdout)
    return result


def _writable_copy(source: Path, target: Path) -> None:
    shutil.copytree(source, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


def _case(record: dict[str, Any]) -> dict[str, Any]:
    expected: dict[str, Any] = {"status": record["status"], "nodeScopedError": record["nodeScopedError"]}
    if record["status"] == "error":
        expected["error"] = record["error"]
    if record["status"] == "allocated":
        expected["allocations"] = record.get("allocations") or []
    case: dict[str, Any] = {
        "name": record["name"],
        "features": record["features"],
        "applyDefaults": False,
        "deviceClasses": record.get("deviceClasses") or [],
        "resourceSlices": record.get("resourceSlices") or [],
        "claims": record.get("claims") or [],
        "node": record["node"],
    }
    for key in ("allocatedDevices", "allocatedSharedDeviceIDs", "aggregatedCapacity"):
        if record.get(key):
            case[key] = sorted(record[key], key=json.dumps)
    case["expected"] = expected
    return case


def dump(version: str, out_root: Path) -> Path:
    """Run the table of `version` and write its cases; returns the directory written."""
    module = _download(version)
    with tempfile.TemporaryDirectory(prefix="dra-dump-") as tmp:
        copy = Path(tmp) / "module"
        _writable_copy(Path(module["Dir"]), copy)
        shutil.copy(DUMP_TEST, copy / "structured/internal/experimental/dump_test.go")
        records_file = Path(tmp) / "records.jsonl"
        env = {**os.environ, "DRA_DUMP_FILE": str(records_file), "GOFLAGS": "-mod=mod"}
        subprocess.run(
            ["go", "test", "./structured/internal/experimental/", "-run", "^TestDump$", "-count=1"],
            cwd=copy,
            env=env,
            check=True,
        )
        records = [json.loads(line) for line in records_file.read_text().splitlines() if line.strip()]
    cases = sorted((_case(r) for r in records), key=lambda c: c["name"])
    directory = out_root / version
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "upstream-allocator-cases.jsonl"
    target.write_text("".join(json.dumps(c, sort_keys=True) + "\n" for c in cases))
    (directory / "PROVENANCE.md").write_text(
        f"# Provenance of `upstream-allocator-cases.jsonl`\n\n"
        f"Written by `python -m tests.conformance.dumping {version}` from `{MODULE}@{version}` "
        f"(module sum `{module['Sum']}`): upstream's shared allocator test table "
        f"(`structured/internal/allocatortesting`), run through the experimental implementation with "
        f"`tests/conformance/dump/dump_test.go` added to a temporary copy of the module. "
        f"{len(cases)} Allocate calls, each with upstream's answer; see ../README.md for the format.\n"
    )
    return directory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.conformance.dumping", description=__doc__.split("\n")[0]
    )
    parser.add_argument("versions", nargs="+", help="module versions, e.g. v0.36.3 v0.37.2")
    parser.add_argument("--out", type=Path, default=TESTS / "data" / "conformance", help="root of the output")
    args = parser.parse_args(argv)
    for version in args.versions:
        print(dump(version, args.out), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
