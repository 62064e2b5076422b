"""Names for axis values that are secrets: a cell id names files and appears in every output, so it never holds one.

A value is a secret by the same rule that masks records (harness.masking): the value of a credential flag (any
length: `--api-key` makes every value of its axis one), or a text the run's masker would change — it holds a secret
the matrix or the environment gives (an env value, a `KEY=value`, a URL's password), a prefix of one of at least
MIN_PREFIX characters, or an encoding of one. Such a value is named `secret<N>`, N its place among the axis's values
(1 for the first): a name that says nothing of the secret. To choose the names, write the axis as a named axis
(`api_key: {prod: {args: [--api-key, ...]}}`); a name of one's own that holds a secret is replaced all the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from harness.masking import Masker, secret_flag_values, secret_values

#: One axis: (the value as written — a flag axis's value, a named axis's name —, its fragment's args, its env).
AxisValues = list[tuple[str, list[str], dict[str, str]]]


def secret_names(args: Iterable[str], env: Mapping[str, str], axes: Mapping[str, AxisValues],
                 environ: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """For each axis, {value as written: its name} for the values that are secrets (axes with none are left out).
    `args`: the matrix's command, entrypoint, `--model` and args; `environ`: what the run's masker is given."""
    found = secret_values(environ, ()) | secret_values(env, list(args))
    for values in axes.values():
        for _, frag_args, frag_env in values:
            found |= secret_values(frag_env, frag_args)
    masker = Masker(found)
    out: dict[str, dict[str, str]] = {}
    for axis, values in axes.items():
        renamed = {written: f"secret{i}" for i, (written, frag_args, _) in enumerate(values, 1)
                   if written in secret_flag_values(frag_args) or masker.known(written)}
        if renamed:
            out[axis] = renamed
    return out
