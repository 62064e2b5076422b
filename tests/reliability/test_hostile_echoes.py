"""Hostile input: a secret that becomes a name, and a secret the server echoes in another spelling.

A credential flag as an axis (`api_key: {flag: --api-key, values: [sk-live-…]}`) once made the cell id
`ak_sk_live_…`: a file name and a word of every output. Its values are now named for their place (`secret1`), and
neither the secret nor a prefix of it of MIN_PREFIX characters is in any id, file name, file or output: `cells`,
`cells --json`, `run --dry-run`, `repro`, `run`, `report`, and a selector that writes the secret out still selects.

A server that echoes a known secret re-encoded (JSON-escaped, URL-encoded, `\\u`-escaped, split by an SGR code,
upper-cased, base64 alone and inside Basic auth at each alignment, hex, cut to a prefix, split across two and three
lines) has none of it in the saved log, the record or the printed output. The secret has the characters the
encodings change (`/ + " \\` and a non-ASCII letter). Everything runs in this process on the FakeRuntime: one run for
every echo, shared by its cases.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import urllib.parse
from pathlib import Path

import pytest

from harness.masking import MIN_PREFIX
from harness.runtime.fake import FakeRuntime, Script
from tests.builders import write_matrix
from tests.helpers.reliability import only_run

KEY = "sk-live-Q7fZk2Lm9TxW4vB8nR1p"
SECRET = 'hf_Tq7/9+Zk"Üb\\Xw2Rm5Lp8Nv3'  # what JSON, URLs and \u escapes each spell differently
SGR = "\x1b[1;31m"


def main(*args: object, runtime: FakeRuntime | None = None) -> tuple[int, str]:
    """`boot-harness ARGS` in this process on the FakeRuntime, stdout and stderr together."""
    from harness.cli import main as cli_main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        code = cli_main([str(a) for a in args], runtimes=lambda loaded: runtime or FakeRuntime())
    return code, buf.getvalue()


def leaks(text: str, secret: str) -> list[str]:
    """What of `secret` `text` holds: the secret itself, in any case, or a prefix of MIN_PREFIX characters."""
    low = text.lower()
    return [s for s in (secret, secret[:MIN_PREFIX]) if s.lower() in low]


def tree_leaks(root: Path, secret: str) -> dict[str, list[str]]:
    """Every file under `root` whose name or text holds the secret or its prefix."""
    out = {}
    for p in root.rglob("*"):
        found = leaks(str(p.relative_to(root)), secret)
        if p.is_file():
            found += leaks(p.read_bytes().decode("utf-8", errors="replace"), secret)
        if found:
            out[str(p.relative_to(root))] = found
    return out


# ---------------------------------------------------------------------------------------------------- secrets as ids


@pytest.fixture(scope="module")
def key_axis(tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    """A matrix whose axis is `--api-key` with two keys, run on the FakeRuntime; (matrix, results, outputs)."""
    tmp = tmp_path_factory.mktemp("key-axis")
    matrix = write_matrix(tmp / "m.yaml", {
        "name": "keys", "command": ["fake-vllm"], "model": "m", "timeout_s": 10, "linger_s": 0.2,
        "axes": {"api_key": {"flag": "--api-key", "values": [KEY, KEY[::-1]]},
                 "mml": {"flag": "--max-model-len", "values": [1024]}},
        "expect": [{"where": {"api_key": KEY[::-1]}, "outcome": "booted", "within_s": 600},
                   {"outcome": "booted"}]})
    results = tmp / "results"
    outputs = {}
    for name, args in {"cells": ("cells", "--matrix", matrix), "cells --json": ("cells", "--matrix", matrix, "--json"),
                       "validate": ("validate", "--matrix", matrix),
                       "run --dry-run": ("run", "--matrix", matrix, "--dry-run", "--results-dir", tmp / "dry"),
                       "repro": ("repro", "--matrix", matrix, "ak_secret1-mml1024", "--results-dir", tmp / "repro"),
                       "run": ("run", "--matrix", matrix, "--results-dir", results)}.items():
        code, outputs[name] = main(*args)
        assert code == 0, f"{name}: {outputs[name]}"
    code, outputs["report"] = main("report", only_run(results))
    assert code == 0, outputs["report"]
    return matrix, results, outputs


def test_a_secret_axis_value_is_named_for_its_place(key_axis):
    _, _, outputs = key_axis
    assert outputs["cells"].split() == ["ak_secret1-mml1024", "ak_secret2-mml1024"]
    cells = json.loads(outputs["cells --json"])["cells"]
    assert [c["axes"]["api_key"] for c in cells] == ["secret1", "secret2"]
    assert [c["server_args"][-4:-2] for c in cells] == [["--api-key", "***"]] * 2


@pytest.mark.parametrize("output", ["cells", "cells --json", "validate", "run --dry-run", "repro", "run", "report"])
def test_no_output_holds_the_key(key_axis, output):
    assert leaks(key_axis[2][output], KEY) == [] and leaks(key_axis[2][output], KEY[::-1]) == []


def test_no_file_name_or_file_of_the_run_holds_the_key(key_axis):
    _, results, _ = key_axis
    run_dir = only_run(results)
    assert {p.name for p in (run_dir / "cells").iterdir()} == {"ak_secret1-mml1024.json", "ak_secret2-mml1024.json"}
    assert tree_leaks(results, KEY) == {} and tree_leaks(results, KEY[::-1]) == {}


def test_a_selector_that_writes_the_secret_out_selects_its_value(key_axis):
    """The matrix's `expect` names the second key as written; `--select` may too (and says nothing of it)."""
    matrix, results, _ = key_axis
    records = {i: json.loads((only_run(results) / "cells" / f"ak_secret{i}-mml1024.json").read_text()) for i in (1, 2)}
    assert [records[i]["expected"]["within_s"] for i in (1, 2)] == [None, 600]
    code, out = main("cells", "--matrix", matrix, "--select", f"api_key={KEY[::-1]}")
    assert (code, out.split()) == (0, ["ak_secret2-mml1024"])


def test_a_secret_variable_unset_is_named_as_it_will_be_once_set(tmp_path, monkeypatch):
    """`cells` with `${VLLM_API_KEY}` unset shows the id `run` will use once it is set."""
    matrix = write_matrix(tmp_path / "m.yaml", {"name": "keys", "command": ["fake-vllm"], "model": "m",
                                                "axes": {"k": {"flag": "--seed-token", "values": ["${VLLM_API_KEY}"]}}})
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    unset = main("cells", "--matrix", matrix)
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    assert unset[1].split()[-1] == main("cells", "--matrix", matrix)[1].strip() == "k_secret1"


# ---------------------------------------------------------------------------------------------------- echoes


def _b64(prefix: str) -> str:
    return base64.b64encode((prefix + SECRET).encode()).decode()


def _basic(user: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Basic auth of `user:SECRET`: the secret's bytes start at each of base64's three alignments as `user` varies;
    the characters that encode only the secret's bytes must go (the one or two that also encode the user's may stay)."""
    enc, start = _b64(user), -(-8 * len(user.encode()) // 6)
    return (f"Authorization: Basic {enc}",), (enc[start: start + 24],)


#: cell value -> (the lines its server logs, echoing SECRET one way; the pieces of them that must not be kept)
ECHOES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "json": (("request " + json.dumps({"api_key": SECRET}),), (json.dumps(SECRET)[1:-1],)),
    "json_utf8": (("request " + json.dumps({"api_key": SECRET}, ensure_ascii=False),),
                  (json.dumps(SECRET, ensure_ascii=False)[1:-1],)),
    "url": ((f"GET /v1/models?key={urllib.parse.quote(SECRET, safe='')} 200",), (urllib.parse.quote(SECRET, safe=""),)),
    "url_plus": ((f"form key={urllib.parse.quote_plus(SECRET)}&x=1",), (urllib.parse.quote_plus(SECRET),)),
    "u_escaped": (("key=" + "".join(f"\\u{ord(c):04x}" for c in SECRET),),
                  ("".join(f"\\u{ord(c):04x}" for c in SECRET[:MIN_PREFIX]),)),
    "sgr_split": ((f"key={SECRET[:4]}{SGR}{SECRET[4:11]}\x1b[0m{SGR}{SECRET[11:]}\x1b[0m",),
                  (SECRET[4:11], SECRET[11:])),
    "upper": ((f"KEY={SECRET.upper()}",), (SECRET.upper(),)),
    "lower": ((f"key={SECRET.lower()}",), (SECRET.lower(),)),
    "base64": ((f"token {_b64('')}",), (_b64("")[:24],)),
    "basic_auth": _basic("user:"),
    "basic_auth_shift1": _basic("us:"),
    "basic_auth_shift2": _basic("u:"),
    "base64url": ((f"jwt {base64.urlsafe_b64encode(('x:' + SECRET).encode()).decode()}",),
                  (base64.urlsafe_b64encode(("x:" + SECRET).encode()).decode()[3:24],)),
    "hex": ((f"bytes {SECRET.encode().hex()}",), (SECRET.encode().hex(),)),
    "prefix": ((f"key {SECRET[:MIN_PREFIX]}... (truncated)", f"key {SECRET[:MIN_PREFIX + 5]}..."),
               (SECRET[:MIN_PREFIX],)),
    "split_2_lines": ((f"key: {SECRET[:3]}", f"{SECRET[3:]} was refused"), (SECRET[3:],)),
    "split_3_lines": ((f"key: {SECRET[:6]}", SECRET[6:14], f"{SECRET[14:]} end"), (SECRET[6:14], SECRET[14:])),
}


@pytest.fixture(scope="module")
def echo_run(tmp_path_factory) -> tuple[Path, str]:
    """One run whose cells each echo SECRET (the HF_TOKEN it is given) one way; (run dir, run + report output)."""
    tmp = tmp_path_factory.mktemp("echoes")
    matrix = write_matrix(tmp / "m.yaml", {
        "name": "echoes", "command": ["fake-vllm"], "model": "m", "timeout_s": 10, "linger_s": 0.2,
        "env": {"HF_TOKEN": SECRET}, "axes": {"echo": {name: {} for name in ECHOES}}})
    booted = Script.booted()
    runtime = FakeRuntime({f"echo_{name}": Script((*lines, *booted.lines)) for name, (lines, _) in ECHOES.items()})
    code, out = main("run", "--matrix", matrix, "--results-dir", tmp / "results", "--parallel", "4", runtime=runtime)
    assert code == 0, out
    run_dir = only_run(tmp / "results")
    code, report = main("report", run_dir)
    assert code == 0, report
    return run_dir, out + report


def _strings(value) -> list[str]:
    """Every string of a JSON value, keys too, as read (JSON's own escapes undone)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@pytest.mark.parametrize("name", list(ECHOES))
def test_an_echo_is_masked_in_the_log_the_record_and_the_output(echo_run, name):
    run_dir, printed = echo_run
    log = (run_dir / "logs" / f"echo_{name}.log").read_text()
    record = json.loads((run_dir / "cells" / f"echo_{name}.json").read_text())
    tail = "\n".join(record["log_tail"])
    found = {where: [p for p in ECHOES[name][1] if p.lower() in text.lower()] + leaks(text, SECRET)
             for where, text in {"log": log, "record": "\n".join(_strings(record)), "tail": tail,
                                 "output": printed}.items()}
    assert {k: v for k, v in found.items() if v} == {}
    assert "***" in log and "***" in tail, log


def test_a_secret_that_is_a_path_is_masked_whole_and_its_folder_stays():
    """A key file's path under a secret's name: the path is masked, other paths in its folder are the log's own."""
    from harness.masking import Masker

    line = Masker(["/home/user/creds.json"])("loading /home/user/models/m from /home/user/creds.json")
    assert line == "loading /home/user/models/m from ***"
