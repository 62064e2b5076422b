"""The typed matrix file: one pydantic model is the validator, the documentation's JSON Schema and the code's API."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from harness.verdict.catalogue import OutcomeName, ReasonName, check_reason

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: An id label is glued to values and joined by '-', so it has none of '-', '=', ',', '|', or spaces.
_LABEL = r"^[A-Za-z0-9][A-Za-z0-9_.+]*$"
#: Axis names appear in `--select axis=v|w`, in `exclude`/`expect` keys and (initials or whole) in ids.
_AXIS_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


#: The largest integer a float holds exactly (2**53): an integral float past it has lost digits.
_EXACT_FLOAT = 2 ** 53


def _argv_item(value: Any) -> str:
    """YAML turns `4` into an int; an argv item is text, but a bool or a mapping there is a mistake, not a number.
    A float is written as Python prints it, except an integral one (`1.0e+9`), which is an integer written in float
    notation: it becomes `1000000000`, never `1000000000.0` (which an integer flag refuses after the run began)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"must be a string or a number, not {type(value).__name__}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, not {value} (quote it if it is text)")
        if value.is_integer():
            if abs(value) > _EXACT_FLOAT:
                raise ValueError(f"{value!r} is an integer past a float's exact range: write its digits")
            return str(int(value))
    return str(value)


def _argv_items(values: list[Any]) -> list[str]:
    """`_argv_item` of each; two items written differently that become one text (`1` and `'1'`, `1.50` and `'1.5'`)
    are a mistake: on an axis, one of its cells would vanish."""
    out: list[str] = []
    written: dict[str, Any] = {}
    for value in values:
        text = _argv_item(value)
        if text in written and written[text] is not value and repr(written[text]) != repr(value):
            raise ValueError(f"values {written[text]!r} and {value!r} are both {text!r}: write one of them")
        written.setdefault(text, value)
        out.append(text)
    return out


#: The spellings YAML 1.2 reads as booleans (a `${VAR:-true}` is one of them once expanded).
_BOOL_WORDS = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}


def _yaml_bool(value: Any) -> Any:
    """Only true or false: pydantic would read `"no"`, `"off"`, `0` or `"1"` as a boolean, so a quoted `"no"` meant
    as text, or a typo, would silently switch a setting."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value in _BOOL_WORDS:
        return _BOOL_WORDS[value]
    raise ValueError("must be a valid boolean: true or false")


YamlBool = Annotated[bool, BeforeValidator(_yaml_bool)]


def _number(value: Any) -> Any:
    """A number, or text that reads as one (a `${VAR}` expands to text): pydantic would read `true` as 1 and `false`
    as 0, so `memory_interval_s: true` would sample every second without a word."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not true/false")
    return value


#: Every number of the matrix file is one of these (tests/reliability/test_hostile_bounds.py walks the models for any
#: int or float field without it).
Seconds = Annotated[float, BeforeValidator(_number)]
Count = Annotated[int, BeforeValidator(_number)]
#: Seconds, or null (the constraints of the field's Field() then still reach the number).
MaybeSeconds = Annotated[float | None, BeforeValidator(_number)]
#: The shortest sampling interval: below it the sampler's own reads (a process tree, a cgroup, NVML) are most of a
#: core — `1e-9` spins — and the curve gains nothing a boot's phases show.
MIN_INTERVAL_S = 0.05


def _check_env(env: dict[str, Any]) -> dict[str, str]:
    out = {}
    for key, value in env.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise ValueError(f"{key!r} is not a valid environment variable name")
        out[str(key)] = _argv_item(value)
    return out


class Mount(_Strict):
    """A bind mount into the container; `source` is relative to the matrix file unless absolute."""

    source: str
    target: str
    read_only: YamlBool = True

    @field_validator("target")
    @classmethod
    def _absolute_target(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError("must be an absolute path inside the container")
        return v


class PatchSpec(_Strict):
    """The seed's APPLY procedure as data: copy `target` out of the image, check, patch -p1, check, mount read-only."""

    target: str = Field(description="absolute path of the file inside the image")
    patch: str = Field(description="patch file, relative to the matrix file; applied like `patch -p1`")
    base_sha256: str
    patched_sha256: str

    @field_validator("target")
    @classmethod
    def _absolute_target(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError("must be an absolute path inside the image")
        return v

    @field_validator("base_sha256", "patched_sha256")
    @classmethod
    def _hex_digest(cls, v: str) -> str:
        if not _SHA256.match(v):
            raise ValueError("must be 64 lowercase hex digits (a sha256)")
        return v


class Fragment(_Strict):
    """What one named axis value adds to a cell: server args, env, and (containers) an image, patches, mounts."""

    args: list[str] = []
    env: dict[str, str] = {}
    image: str | None = None
    patches: list[PatchSpec] = []
    mounts: list[Mount] = []

    _args = field_validator("args", mode="before")(lambda v: [_argv_item(x) for x in v] if isinstance(v, list) else v)
    _env = field_validator("env", mode="before")(lambda v: _check_env(v) if isinstance(v, dict) else v)

    def container_keys(self) -> list[str]:
        """The keys set here that only a container runtime uses (a process server would run without them)."""
        return [k for k in ("image", "patches", "mounts") if getattr(self, k)]


class _Named(_Strict):
    """Value names: as written, except a secret's (harness.matrix.secret_names), which the matrix sets once it is
    whole: ids, `axes` in records and selectors all use the name; only the fragment holds the secret."""

    _renamed: dict[str, str] = PrivateAttr(default_factory=dict)
    _written: dict[str, str] = PrivateAttr(default_factory=dict)

    def _written_values(self) -> list[str]:
        raise NotImplementedError

    def _fragment_of(self, written: str) -> Fragment:
        raise NotImplementedError

    def rename(self, renamed: dict[str, str]) -> None:
        self._renamed = dict(renamed)
        self._written = {name: written for written, name in renamed.items()}

    def value_names(self) -> list[str]:
        return [self._renamed.get(v, v) for v in self._written_values()]

    def name_of(self, written: str) -> str:
        """The name of a value given as written (a secret in a selector): its name; any other text: itself."""
        return self._renamed.get(written, written)

    def fragment(self, value: str) -> Fragment:
        return self._fragment_of(self._written.get(value, value))

    def written(self) -> list[tuple[str, list[str], dict[str, str]]]:
        """(value as written, its args, its env) of each value: what secret_names reads."""
        return [(v, (f := self._fragment_of(v)).args, f.env) for v in self._written_values()]


class FlagAxis(_Named):
    """An axis that passes `flag value` for each value, e.g. `--max-model-len 131072`."""

    flag: str
    values: list[str] = Field(min_length=1)
    label: str | None = Field(None, pattern=_LABEL,
                              description="prefix of this axis in cell ids (default: initials of the axis name)")

    _values = field_validator("values", mode="before")(lambda v: _argv_items(v) if isinstance(v, list) else v)

    @field_validator("flag")
    @classmethod
    def _dashed(cls, v: str) -> str:
        if not v.startswith("-"):
            raise ValueError("must be a command-line flag starting with '-'")
        return v

    def _written_values(self) -> list[str]:
        return list(self.values)

    def _fragment_of(self, written: str) -> Fragment:
        return Fragment(args=[self.flag, written])


class NamedAxis(_Named):
    """An axis whose values are named fragments, e.g. `mtp: {off: {}, mtp4: {args: [...]}}`."""

    values: dict[str, Fragment] = Field(min_length=1)
    label: str | None = Field(None, pattern=_LABEL)

    def _written_values(self) -> list[str]:
        return list(self.values)

    def _fragment_of(self, written: str) -> Fragment:
        return self.values[written]


def _axis_kind(raw: Any) -> str:
    if isinstance(raw, FlagAxis) or (isinstance(raw, dict) and "flag" in raw):
        return "flag"
    return "named"


Axis = Annotated[
    Annotated[FlagAxis, Tag("flag")] | Annotated[NamedAxis, Tag("named")],
    Discriminator(_axis_kind),
]

Selector = dict[str, str | list[str]]


class ExpectRule(_Strict):
    """First matching rule gives a cell's expected outcome (and, optionally, reason)."""

    where: Selector = {}
    outcome: OutcomeName
    reason: ReasonName | None = Field(None, description="one of the catalogue's reasons for `outcome` "
                                                        "(harness.verdict.catalogue; docs/results.md)")
    within_s: MaybeSeconds = Field(None, gt=0, allow_inf_nan=False,
                                   description="the verdict must come within this many seconds of the cell's start: "
                                               "a slower boot (or refusal) does not match")

    _where = field_validator("where", mode="before")(lambda v: _normalize_selector(v))

    @field_validator("within_s", mode="before")
    @classmethod
    def _seconds(cls, v: Any) -> Any:
        if isinstance(v, bool) or (v is not None and not isinstance(v, (int, float))):
            raise ValueError("must be a number of seconds")
        return v

    @field_validator("reason", mode="before")
    @classmethod
    def _known_reason(cls, v: Any, info: ValidationInfo) -> Any:
        if v is None or not isinstance(v, str):
            return v
        return check_reason(v, info.data.get("outcome"))


def _normalize_selector(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for axis, names in value.items():
        if isinstance(names, list):
            out[str(axis)] = [_argv_item(n) for n in names]
        else:
            out[str(axis)] = _argv_item(names)
    return out


GpuRequest = Literal["all"] | int | list[str]

#: Keys only a container runtime reads (`memory` has its own message); a process runtime refuses them when written.
#: Not `gpus`/`gpus_per_cell`: a process matrix's cells wait for (or are handed) those GPUs too.
CONTAINER_ONLY = ("image", "ipc", "shm_size", "mounts", "container_port", "entrypoint", "pull", "engine_timeout_s")
CONTAINER_ONLY_MESSAGE = "is a container setting (runtime docker or podman): runtime process would ignore it"


class Matrix(_Strict):
    """A matrix file: common settings plus axes whose product, less `exclude`, is the set of cells."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    setup: str | None = Field(None, description="the command that sets up what this matrix expands (its ${VARIABLES}); "
                                                "shown, as written, when one of them is not set")
    runtime: Literal["process", "docker", "podman"] = "process"
    command: list[str] = Field(["vllm", "serve"], min_length=1, description="process runtime: argv prefix")
    model: str | None = Field(None, description="passed as `--model MODEL`")
    args: list[str] = []
    env: dict[str, str] = {}
    timeout_s: Seconds = Field(900.0, gt=0, allow_inf_nan=False, description="one deadline per cell: start to verdict")
    probe: YamlBool = Field(True, description="after /health 200, one max_tokens=1 completion must succeed")
    linger_s: Seconds = Field(10.0, ge=0, allow_inf_nan=False,
                            description="after a refusal line, how long to wait for the exit code")
    compile_cache: str = Field("run", pattern=r"^(run|none|.*/.*)$",
                               description="the torch.compile cache the cells share: `run` (one directory per "
                                                  "run: the first cell of a configuration compiles, the rest load), "
                                                  "`none` (every cell cold), or a directory kept across runs (a path "
                                                  "with a `/`, relative to the matrix file)")
    memory_interval_s: MaybeSeconds = Field(
        0.2, ge=MIN_INTERVAL_S, le=10, allow_inf_nan=False,
        description=f"how often the server's memory is sampled while it boots, in seconds, {MIN_INTERVAL_S} to 10 "
                    "(docs/memory.md); null: no memory curve")
    log_max_mb: float | None = Field(
        64.0, ge=1, le=2**20, allow_inf_nan=False,
        description="the most of a server's log kept per cell, in MiB (at least 1): past it the log keeps its head "
                    "and its last lines with a line saying how much was left out, and the lines between are only "
                    "searched for what decides the boot (docs/matrix.md); null: every line kept and read")
    axes: dict[str, Axis] = Field(min_length=1)
    exclude: list[Selector] = []
    expect: list[ExpectRule] = []
    # Container runtimes (docker/podman).
    image: str | None = None
    gpus: GpuRequest | None = None
    ipc: Literal["host", "private", "shareable"] | None = None
    shm_size: str | None = Field(None, pattern=r"^[0-9]+[bkmgBKMG]?$")
    memory: str | None = Field(None, pattern=r"^[0-9]+[bkmgBKMG]?$",
                               description="the container's memory limit (`--memory`, e.g. 64g): a server that eats "
                                           "host memory is OOM-killed inside it (recorded crashed, oom_killed), never "
                                           "the harness or the runner")
    mounts: list[Mount] = []
    container_port: Count = Field(8000, ge=1, le=65535)
    entrypoint: list[str] | None = None
    pull: Literal["never", "missing", "always"] = "never"
    engine_timeout_s: Seconds = Field(30.0, gt=0, allow_inf_nan=False,
                                    description="how long one container-engine call may take before the engine counts "
                                                "as hung (a cell that then dies or never decides is `error "
                                                "(engine_lost)`, not a verdict)")
    gpus_per_cell: Count = Field(0, ge=0)

    _args = field_validator("args", "command", mode="before")(
        lambda v: [_argv_item(x) for x in v] if isinstance(v, list) else v
    )
    _env = field_validator("env", mode="before")(lambda v: _check_env(v) if isinstance(v, dict) else v)
    _exclude = field_validator("exclude", mode="before")(
        lambda v: [_normalize_selector(s) for s in v] if isinstance(v, list) else v
    )

    @field_validator("log_max_mb", mode="before")
    @classmethod
    def _megabytes(cls, v: Any) -> Any:
        if isinstance(v, bool) or (v is not None and not isinstance(v, (int, float))):
            raise ValueError("must be a number of MiB (1 or more), or null for no cap")
        return v

    @field_validator("axes", mode="before")
    @classmethod
    def _axis_names(cls, v: Any) -> Any:
        if isinstance(v, dict):
            for name in v:
                if not _AXIS_NAME.match(str(name)):
                    raise ValueError(f"axis name {name!r}: use letters, digits, '_' and '-' "
                                     "(it goes into ids and --select)")
        return v

    @field_validator("compile_cache", mode="before")
    @classmethod
    def _cache(cls, v: Any) -> Any:
        if not isinstance(v, str) or not v.strip():
            raise ValueError("must be run, none, or a directory path")
        if v not in ("run", "none") and "/" not in v:
            raise ValueError(f"must be run, none, or a directory path with a '/' (write ./{v} for a directory next to "
                             "the matrix)")
        return v

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, v: Any) -> Any:
        if v is None or v == "all":
            return v
        if isinstance(v, bool):
            raise ValueError("must be 'all', a count, or a list of device ids")
        if isinstance(v, int):
            if v < 1:
                raise ValueError("a GPU count must be at least 1")
            return v
        if isinstance(v, list) and v and all(isinstance(x, (str, int)) and not isinstance(x, bool) for x in v):
            ids = [str(x) for x in v]
            twice = sorted({i for i in ids if ids.count(i) > 1}, key=ids.index)
            if twice:  # a cell would hold GPU 0 twice: its own host lock on it, and the device handed in twice
                raise ValueError(f"device id {', '.join(map(repr, twice))} is listed twice: name each GPU once")
            return ids
        raise ValueError("must be 'all', a count, or a non-empty list of device ids")

    @field_validator("memory")
    @classmethod
    def _memory_is_a_container_limit(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and info.data.get("runtime", "process") == "process":
            raise ValueError("is a container's limit (runtime docker or podman); a process server has none — the "
                             "harness raises its oom_score_adj instead, so the kernel takes the server first")
        return v

    @field_validator(*CONTAINER_ONLY)
    @classmethod
    def _container_only(cls, v: Any, info: ValidationInfo) -> Any:
        """Checked only where the file writes the key: on `runtime: process` it would be ignored without a word."""
        if info.data.get("runtime") == "process" and v is not None and v != []:
            raise ValueError(CONTAINER_ONLY_MESSAGE)
        return v

    @model_validator(mode="before")
    @classmethod
    def _named_axis_shorthand(cls, data: Any) -> Any:
        """Named values are written bare in YAML (`mtp: {off: {}, mtp4: {...}}`); `off:` with nothing is `{}`."""
        if isinstance(data, dict) and isinstance(data.get("axes"), dict):
            axes = {}
            for name, raw in data["axes"].items():
                if isinstance(raw, dict) and "flag" not in raw and "values" not in raw:
                    values = {str(k): ({} if v is None else v) for k, v in raw.items() if k != "label"}
                    raw = {"values": values, **({"label": raw["label"]} if "label" in raw else {})}
                elif isinstance(raw, dict) and "flag" not in raw and isinstance(raw.get("values"), dict):
                    raw = {**raw, "values": {str(k): ({} if v is None else v) for k, v in raw["values"].items()}}
                axes[str(name)] = raw
            data = {**data, "axes": axes}
        return data

    @model_validator(mode="after")
    def _secret_names(self, info: ValidationInfo) -> Matrix:
        """Secret values get names (harness.matrix.secret_names); a selector that writes one is read as its name.
        The environment is the one the run's masker reads: the validation context's `environ`, else os.environ."""
        import os

        from harness.matrix.secret_names import secret_names

        environ = (info.context or {}).get("environ") if info.context else None
        args = [*self.command, *(self.entrypoint or []), *(["--model", self.model] if self.model else []), *self.args]
        names = secret_names(args, self.env, {n: a.written() for n, a in self.axes.items()},
                             os.environ if environ is None else environ)
        if names:
            for axis, renamed in names.items():
                self.axes[axis].rename(renamed)
            object.__setattr__(self, "exclude", [self._named(s) for s in self.exclude])
            object.__setattr__(self, "expect", [r.model_copy(update={"where": self._named(r.where)})
                                                for r in self.expect])
        return self

    def _named(self, selector: Selector) -> Selector:
        def name(axis: str, v: str) -> str:
            return self.axes[axis].name_of(v) if axis in self.axes else v
        return {a: [name(a, v) for v in vs] if isinstance(vs, list) else name(a, vs) for a, vs in selector.items()}

    def axis_values(self) -> dict[str, list[str]]:
        return {name: axis.value_names() for name, axis in self.axes.items()}

    def value_name(self, axis: str, value: str) -> str:
        """The name `value` goes by on `axis`: a secret written out selects its value by its name."""
        return self.axes[axis].name_of(value) if axis in self.axes else value
