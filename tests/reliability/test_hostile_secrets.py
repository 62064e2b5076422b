"""Hostile input: a secret written where the harness does not expect one, in a spelling it did not plan for.

Each case puts one distinctive secret into a matrix the way a person might: another env value that quotes it, a
credential flag in every spelling vLLM's parser reads (`--api_key`, `--api-key=`, the unique prefix `--api-k`,
`--hf_token`), a JSON value under a secret-looking key (`--speculative-config`, dotted too, and malformed), a
`KEY=value` token inside the process `command` (an argv element, a `sh -c` string), a credential flag inside a shell
string, and the password of a `user:password@` URL (the model, an env value). The harness is run as shipped against
the fake server, which echoes its argv and its whole environment into its log as vLLM echoes its args, and the secret
must appear nowhere: not in `run`'s output nor in any file of its run directory (records, the log and its tail, the
argv line), not in `run --dry-run`, `repro` (printed, and the files it keeps), `cells --json`, `report`, nor in the
one-line error of a command that refuses the input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.builders import write_matrix
from tests.helpers.reliability import FAKE, cli, fake_matrix, only_run

SECRET = "hf_SeCrEt1234567890"
PY = sys.executable
ECHO = {"FAKE_VLLM_SCENARIO": "boot", "FAKE_VLLM_ECHO_ENV": "1"}

#: id -> the matrix's top-level keys that carry the secret (args, env, command, model)
CASES: dict[str, dict] = {
    "env value quoting HF_TOKEN's value": {"env": {"HF_TOKEN": SECRET,
                                                   "HF_ENDPOINT": f"https://hub.example/?t={SECRET}"}},
    "env value quoting --api-key's value": {"args": ["--api-key", SECRET],
                                            "env": {"OPENAI_BASE": f"http://x/{SECRET}"}},
    "--api_key V": {"args": ["--api_key", SECRET]},
    "--api_key=V": {"args": [f"--api_key={SECRET}"]},
    "--api-k V (unique prefix)": {"args": ["--api-k", SECRET]},
    "--api-k=V (unique prefix)": {"args": [f"--api-k={SECRET}"]},
    "--hf_token V": {"args": ["--hf_token", SECRET]},
    "--hf-t=V (unique prefix)": {"args": [f"--hf-t={SECRET}"]},
    "--speculative-config JSON with hf_token": {"args": ["--speculative-config", json.dumps(
        {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3, "hf_token": SECRET})]},
    "--speculative-config.hf_token V (dotted)": {"args": ["--speculative-config.hf_token", SECRET]},
    "--speculative-config malformed JSON with hf_token": {"args": ["--speculative-config",
                                                                    '{"hf_token": "' + SECRET + '"']},
    "HF_TOKEN=V argv element of command": {"command": ["env", f"HF_TOKEN={SECRET}", PY, str(FAKE)]},
    "HF_TOKEN=V inside a sh -c command": {"command": ["sh", "-c", f'HF_TOKEN={SECRET} exec "$0" "$@"', PY, str(FAKE)]},
    "--api-key V inside a sh -c command": {"command": ["sh", "-c", f'exec "$0" "$@" --api-key {SECRET}', PY,
                                                       str(FAKE)]},
    "user:password@ in the model URL": {"model": f"https://user:{SECRET}@hub.example/org/model"},
    "user:password@ in an env value": {"env": {"HF_ENDPOINT": f"https://user:{SECRET}@hub.example"}},
    "Authorization: Bearer V in an env value": {"env": {"EXTRA_HEADERS": f"Authorization: Bearer {SECRET}"}},
}


def hostile_matrix(path: Path, top: dict) -> Path:
    """One cell (`case_x`) that boots on the fake server, with `top`'s keys merged into the matrix."""
    import yaml

    base = fake_matrix(path, {"x": ECHO}, timeout_s=15)
    doc = yaml.safe_load(base.read_text())
    for key, value in top.items():
        if key == "env":
            doc["axes"]["case"]["x"]["env"].update(value)
        else:
            doc[key] = value
    return write_matrix(path, doc)


def read_only(capsys, monkeypatch, *args: object) -> tuple[int, str]:
    """A command that boots nothing, run in this process: the same main() and printers as the console script, output
    captured as a pipe gets it (no terminal width), without starting an interpreter per command (`run` itself is
    run as shipped, in a child process)."""
    from harness.cli import main

    for name in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    capsys.readouterr()
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out + out.err


def found_in(text: str) -> bool:
    return SECRET in text


def files_holding_secret(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and found_in(p.read_bytes().decode("utf-8", errors="replace")))


@pytest.mark.parametrize("top", list(CASES.values()), ids=list(CASES))
def test_the_secret_is_nowhere(top, tmp_path, capsys, monkeypatch):
    matrix = hostile_matrix(tmp_path / "m.yaml", top)
    results = tmp_path / "results"
    leaks: dict[str, object] = {}

    ran = cli("run", "--matrix", str(matrix), "--results-dir", str(results))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    if found_in(ran.stdout + ran.stderr):
        leaks["run output"] = True
    run_dir = only_run(results)
    log = (run_dir / "logs" / "case_x.log").read_text()
    assert "args:" in log and "environment:" in log, "the fake echoed its argv and env (else nothing was tested)"
    if files := files_holding_secret(run_dir):
        leaks["run directory"] = files

    if found_in(read_only(capsys, monkeypatch, "report", run_dir)[1]):
        leaks["report"] = True

    for name, args in {"run --dry-run": ("run", "--dry-run", "--results-dir", str(tmp_path / "dry")),
                       "repro": ("repro", "case_x", "--results-dir", str(tmp_path / "repro")),
                       "cells --json": ("cells", "--json")}.items():
        code, printed = read_only(capsys, monkeypatch, *args[:1], "--matrix", matrix, *args[1:])
        assert code == 0, f"{name}: {printed}"
        if found_in(printed):
            leaks[name] = True
    if (tmp_path / "repro").exists() and (files := files_holding_secret(tmp_path / "repro")):
        leaks["repro's files"] = files
    assert leaks == {}


def test_the_printed_command_names_the_variable_that_holds_the_secret(tmp_path):
    """Masked is not enough for a line to paste: a secret the user's environment holds is printed as a reference to
    it, inside another value too."""
    matrix = hostile_matrix(tmp_path / "m.yaml", {"args": ["--api_key", "${VLLM_API_KEY}"],
                                                  "env": {"HF_ENDPOINT": "https://user:${VLLM_API_KEY}@hub"}})
    proc = cli("repro", "--matrix", str(matrix), "case_x", "--results-dir", str(tmp_path / "r"),
               env={"VLLM_API_KEY": SECRET})
    assert proc.returncode == 0, proc.stderr
    assert not found_in(proc.stdout)
    assert '--api_key "$VLLM_API_KEY"' in proc.stdout
    assert 'HF_ENDPOINT="https://user:${VLLM_API_KEY}@hub"' in proc.stdout


KV = "tests/data/kv/models/tiny-draft/config.json"
#: id -> (args, the harness's environment): a refused input whose one-line error quotes the value it refuses
BAD_INPUT: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "kv: malformed --speculative-config JSON with hf_token": (
        ("kv", KV, "--", "--speculative-config", '{"hf_token": "' + SECRET + '"'), {}),
    "kv: --max-model-len $HF_TOKEN (a slip of the shell)": (
        ("kv", KV, "--", "--max-model-len", SECRET), {"HF_TOKEN": SECRET}),
}


@pytest.mark.parametrize("args, env", list(BAD_INPUT.values()), ids=list(BAD_INPUT))
def test_an_error_that_echoes_the_input_does_not_echo_the_secret(args, env):
    proc = cli(*args, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() and not found_in(proc.stdout + proc.stderr), proc.stderr


#: id -> the matrix's `args:` line, refused (exit 2) with an error that quotes what it got
BAD_ARGS = {
    "args: one string with --api-key V": f"args: --api-key {SECRET}",
    "args: one string with --api_key=V": f"args: '--api_key={SECRET} --enforce-eager'",
}


@pytest.mark.parametrize("line", list(BAD_ARGS.values()), ids=list(BAD_ARGS))
def test_a_refused_matrix_does_not_echo_the_secret(line, tmp_path):
    matrix = tmp_path / "m.yaml"
    matrix.write_text(f"name: t\nmodel: m\ncommand: [vllm, serve]\n{line}\naxes: {{a: {{x: {{}}}}}}\n")
    proc = cli("validate", "--matrix", str(matrix))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{matrix}:args:" in proc.stderr and not found_in(proc.stdout + proc.stderr), proc.stderr

#: id -> (env, entrypoint, args) of a container spec: the `docker run` / `podman run` line rendered from it
CONTAINER: dict[str, tuple[dict[str, str], tuple[str, ...], tuple[str, ...]]] = {
    "-e value quoting HF_TOKEN's value": ({"HF_TOKEN": SECRET, "HF_ENDPOINT": f"https://hub/?t={SECRET}"}, (), ()),
    "-e user:password@ URL": ({"HF_ENDPOINT": f"https://user:{SECRET}@hub"}, (), ()),
    "--api-k=V after the image": ({}, (), (f"--api-k={SECRET}",)),
    "HF_TOKEN=V in an entrypoint's sh -c": ({}, ("sh", "-c", f'HF_TOKEN={SECRET} exec vllm serve "$@"', "sh"), ()),
    "entrypoint word with --hf_token=V": ({}, (f"--hf_token={SECRET}",), ()),
}


@pytest.mark.parametrize("engine", ["docker", "podman"])
@pytest.mark.parametrize("env, entrypoint, args", list(CONTAINER.values()), ids=list(CONTAINER))
def test_the_printed_container_line_holds_no_secret(engine, env, entrypoint, args):
    from harness.runtime.container_spec import ContainerSpec, to_cli_tokens
    from harness.shell import format_shell

    spec = ContainerSpec(engine=engine, image="vllm/vllm-openai:v0.11.0", name="c", entrypoint=entrypoint,
                         args=("--model", "m", *args), env=tuple(env.items()), volumes=(), container_port=8000)
    line = format_shell(to_cli_tokens(spec, environ={}))
    assert line.startswith(f"{engine} run") and not found_in(line), line


def test_names_that_only_look_alike_keep_their_values(tmp_path):
    """Not every `token` is a secret: a flag or variable about tokens keeps its value (or the logs lose their numbers),
    while the credential beside it is masked."""
    matrix = hostile_matrix(tmp_path / "m.yaml", {
        "args": ["--api_key", SECRET, "--max-num-batched-tokens", "8192", "--tokenizer", "org/tokenizer-key"],
        "env": {"VLLM_MAX_TOKENS": "40960"}})
    proc = cli("cells", "--matrix", str(matrix), "--json")
    assert proc.returncode == 0, proc.stderr
    (cell,) = json.loads(proc.stdout)["cells"]
    assert cell["server_args"][-6:] == ["--api_key", "***", "--max-num-batched-tokens", "8192", "--tokenizer",
                                        "org/tokenizer-key"]
    assert cell["env"]["VLLM_MAX_TOKENS"] == "40960"
