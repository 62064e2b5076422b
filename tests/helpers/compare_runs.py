"""A run of the CPU example on another image, for what compare and report say across images."""

from __future__ import annotations

from tests.synthetic import cpu_cell, make_run

MIB = 2**20


def image_run():
    """Two images × two lengths: the new image tips 4096 into a KV refusal and logs a smaller pool at 2048."""
    cells = []
    for image, per_token in (("old", 1024), ("new", 2048)):
        for n in (2048, 4096):
            c = cpu_cell(n, "off", "tight", 6 * MIB, per_token=per_token)
            cells.append(c.model_copy(update={"cell_id": f"mml{n}-image_{image}",
                                              "axes": {"max_model_len": str(n), "image": image}}))
    return make_run("images", cells)
