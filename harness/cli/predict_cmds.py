"""The prediction commands: `kv` sizes one configuration from config.json and the serve flags, without booting."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from rich.console import Console

from harness.cli import values
from harness.cli.common import USAGE_EXIT, add_command, say_to
from harness.emit import emit
from harness.errors import UsageError
from harness.exitcodes import ExitCode
from harness.predict.platforms import HELP, PLATFORMS
from harness.units import GIB

if TYPE_CHECKING:
    from harness.predict.refusals import Machine



def register(sub: argparse._SubParsersAction) -> dict:
    p = add_command(sub, "kv", "predict a configuration's KV cache from the model's config.json and the vLLM serve "
                    "flags, the way that vLLM version sizes it, without booting",
                    ["boot-harness kv ~/models/tiny-llama --available-bytes 3145728 -- --max-model-len 4096",
                     "boot-harness kv config.json --available-gib 40 --json -- --max-model-len 131072 "
                     "--speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":4}'",
                     "boot-harness kv ~/models/tiny-llama --log server.log"],
                    {0: "predicted; with an available size: it fits (--log: every logged figure agrees)",
                     1: "predicted: vLLM refuses the length (above the model's own max_model_len) or it does not "
                        "fit (--log: a logged figure differs from the prediction)",
                     **USAGE_EXIT},
                    "After `--` come vLLM's own flags as you pass them to `vllm serve`; those that size the KV cache "
                    "are read (--max-model-len, --tensor-parallel-size, --dtype, --kv-cache-dtype, --block-size, "
                    "--speculative-config, --max-num-batched-tokens, --kv-cache-memory-bytes, "
                    "--[no-]enable-prefix-caching, --mamba-cache-mode, --mamba-cache-dtype, --mamba-ssm-cache-dtype, "
                    "...), the rest ignored. A --max-model-len above the model's own (its max-length keys × rope "
                    "scaling, as vLLM derives it) is refused unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is set in this "
                    "environment; when it fits, the largest max_model_len that fits is printed. With --log, the "
                    "release, the flags and the KV memory come from a saved server log, flags after `--` override "
                    "the log's, and every KV figure the log printed is held against the prediction (exit 2 when the "
                    "log states another model than MODEL: its architecture, the KV bytes a token its figures imply; "
                    "--same-model when it states too little). Formulas and their vLLM sources: docs/kv-model.md.")
    p.add_argument("model", metavar="MODEL", help="a model directory with config.json, or the config file")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--available-bytes", metavar="N", type=values.byte_count,
                      help="KV memory per rank in bytes (4294967296, 4G)")
    size.add_argument("--available-gib", metavar="G", type=values.gib, help="KV memory per rank in GiB (as vLLM logs "
                      "'Available KV cache memory')")
    p.add_argument("--vllm-version", default=None, metavar="X.Y.Z", type=values.vllm_version,
                   help="the release whose rules apply (default: what --log names, else 0.32.0)")
    p.add_argument("--platform", choices=PLATFORMS, default=None, help=HELP + " (default: what --log tells, else "
                   "gpu)")
    p.add_argument("--log", metavar="LOG", help="a saved vLLM server log: predict the configuration it states "
                   "(its config line and non-default args) with the KV memory it logged (--available-* replace it), "
                   "and compare each figure")
    p.add_argument("--draft", metavar="DIR", help="the draft model's directory when --speculative-config names a "
                   "path that is not readable here")
    p.add_argument("--gpu", metavar="NAME", help="the GPU the server runs on, by name (\"Tesla T4\", \"A100\"): its "
                   "compute capability decides whether an explicit --dtype bfloat16 boots (default: NVML's first "
                   "GPU here, when it answers)")
    p.add_argument("--same-model", action="store_true", help="with --log: MODEL is the model the log served, "
                   "whatever its name (needed when the log states too little to tell: no architecture line and no "
                   "KV figure)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("serve_flags", nargs="*", metavar="-- FLAGS", help="vLLM serve flags, after `--`")

    p = add_command(sub, "plan", "predict every cell's outcome before booting: each model's config.json and flags, "
                    "the KV pool from --kv-cache-memory-bytes or from what an earlier run logged",
                    ["boot-harness plan --matrix examples/cpu-tiny.yaml --platform cpu",
                     "boot-harness plan --matrix matrix.yaml --from results/<last-night>"],
                    {0: "every predicted outcome is the expected one", 1: "a prediction differs from an "
                     "expectation", **USAGE_EXIT},
                    "Nothing is started. A container cell's model is read through its bind mounts or copied out of "
                    "its image. See docs/kv-model.md.")
    p.add_argument("--matrix", "-m", required=True, help="the matrix file (YAML)")
    p.add_argument("--select", "-s", action="append", metavar="EXPR", help="cells to take (as `run`)")
    p.add_argument("--from", dest="prior", metavar="RUN", help="an earlier run of this matrix: each cell's logged "
                   "KV pool, device and vLLM version")
    p.add_argument("--platform", choices=PLATFORMS, help=HELP + " (default: what --from logged, else the matrix's: "
                   "gpu when it requests GPUs, cpu-local when it requests none; the plan's first line says which)")
    p.add_argument("--vllm-version", metavar="X.Y.Z", type=values.vllm_version,
                   help="the release whose rules apply (default: what --from "
                   "logged, else 0.32.0)")
    p.add_argument("--gpu", metavar="NAME", help="the GPU the server runs on, by name (\"Tesla T4\", \"A100\"): its "
                   "compute capability decides whether an explicit --dtype bfloat16 boots (default: NVML's first "
                   "GPU here, when it answers)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return {"kv": cmd_kv, "plan": cmd_plan}


def cmd_plan(args: argparse.Namespace, out: Console) -> int:
    from harness.matrix.selection import selected
    from harness.predict.plan import Logged, PlanPlatform, plan_cells, plan_output, platform_of_matrix
    from harness.report.kv import render_plan
    from harness.results.store import load_run

    sel = selected(args.matrix, args.select)
    loaded, cells = sel.loaded, sel.cells
    prior = None
    if args.prior:
        run, _ = load_run(args.prior)
        prior = {c.cell_id: Logged(c.kv, c.refusal, c.vllm_version) for c in run.cells}
        if cells and not any(c.id in prior for c in cells):
            raise UsageError(f"--from {args.prior}: a run of matrix {run.matrix.name!r} ({run.matrix.path}); none of "
                             f"the {len(cells)} selected cells of {args.matrix} is in it")
    runtime = args.runtimes(loaded)
    chosen = PlanPlatform(args.platform, "--platform") if args.platform else platform_of_matrix(loaded.matrix)
    planned = plan_cells(cells, runtime.read_server_file, prior, args.platform, args.vllm_version,
                         default_platform=chosen.platform, machine=_machine(args, loaded.matrix))
    said = f"{chosen.platform} ({chosen.why})" + ("" if args.platform or prior is None else
                                                  "; a cell --from logged keeps the device it logged")
    if args.json:
        emit(plan_output(str(args.matrix), chosen, planned))
    else:
        for line in render_plan(planned, said).split("\n"):  # each wrapped at the output's width
            say_to(out)(line)
    return ExitCode.FAILED if any(p.agrees is False for p in planned) else ExitCode.OK


def cmd_kv(args: argparse.Namespace, out: Console) -> int:
    from harness.predict.model import read_model
    from harness.predict.predictor import allows_long_max_model_len, draft_model_path, predict
    from harness.predict.serve_flags import parse_serve_flags
    from harness.predict.versions import DEFAULT_VERSION, parse_version
    from harness.report.kv import render_prediction

    if args.log is not None:
        return _kv_log(args, out)
    if args.same_model:
        raise UsageError("--same-model: only with --log LOG (it says MODEL is the model the log served)")
    args.platform = args.platform or "gpu"
    version = args.vllm_version or DEFAULT_VERSION
    try:
        parse_version(version)
    except ValueError as exc:
        raise UsageError(f"--vllm-version: {exc}") from None
    flags = parse_serve_flags(args.serve_flags)
    shape = read_model(args.model)
    draft = None
    if dp := (args.draft or draft_model_path(flags)):
        try:
            draft = read_model(dp)
        except UsageError:
            if args.draft:
                raise
    available, source = flags.kv_cache_memory_bytes, "--kv-cache-memory-bytes" if flags.kv_cache_memory_bytes else None
    if (given := _available_arg(args)) is not None:
        available, source = given
    p = predict(shape, flags, version=version, platform=args.platform, available_bytes=available,
                available_source=source, draft=draft,
                allow_long_max_model_len=allows_long_max_model_len(os.environ),  # as `vllm serve` here would see it
                machine=_machine(args, None))
    if args.json:
        emit(p)
    else:
        say_to(out)(render_prediction(p))
    return ExitCode.OK if p.fits is not False and p.refused_by is None else ExitCode.FAILED


def _machine(args: argparse.Namespace, matrix) -> Machine:
    """The GPUs a cell gets (the matrix's `gpus_per_cell`, else its `gpus` count or list; unknown for `all` or
    none) and their name (`--gpu`, else NVML's first GPU when NVML answers here)."""
    from harness.predict.refusals import Machine

    count = None
    if matrix is not None:
        if matrix.gpus_per_cell:
            count = matrix.gpus_per_cell
        elif isinstance(matrix.gpus, list):
            count = len(matrix.gpus)
        elif isinstance(matrix.gpus, int) and not isinstance(matrix.gpus, bool):
            count = matrix.gpus
    return Machine(gpus=count, gpu_name=args.gpu if args.gpu else _nvml_name())


def _nvml_name() -> str | None:
    """NVML's name of this machine's first GPU; None where NVML is missing or answers nothing."""
    try:
        from harness.gpu.nvml import NvmlInventory

        inventory = NvmlInventory.open()
        devices = inventory.devices()
        return inventory.info(devices[0]).name if devices else None
    except Exception:  # noqa: BLE001 - no NVML, no driver, no GPU: the dtype check is then not made (plan says so)
        return None


def _available_arg(args: argparse.Namespace) -> tuple[int, str] | None:
    """The KV size given on the command line (already checked by its `type=`: cli/values.py)."""
    if args.available_bytes is not None:
        return args.available_bytes, "--available-bytes"
    if args.available_gib is not None:
        return int(args.available_gib * GIB), "--available-gib"
    return None


def _kv_log(args: argparse.Namespace, out: Console) -> int:
    """`kv MODEL --log LOG`: exit 0 when every figure the log printed agrees with the prediction, 1 when one does
    not, 2 when the log cannot be read or states no configuration and no flags are given."""
    from harness.predict.from_log import check_log, render_log_check
    from harness.report.kv import render_prediction

    checked = check_log(args.model, args.log, args.serve_flags, version=args.vllm_version, platform=args.platform,
                        draft=args.draft, available=_available_arg(args), same_model=args.same_model)
    if args.json:
        emit(checked.output())
    else:
        say = say_to(out)
        say(render_log_check(checked))
        if checked.record.prediction is not None:
            say("")
            say(render_prediction(checked.record.prediction))
    return ExitCode.FAILED if checked.disagreements else ExitCode.OK
