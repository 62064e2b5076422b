"""The kinds of layer cache the predictor tells apart (one name for the model shape, the pages and the record)."""

from __future__ import annotations

from typing import Literal

from harness.names import Named


class LayerKind(Named):
    """What one decoder layer caches: full attention, MLA's latent, a sliding window, a recurrent state, or nothing."""

    full = "full"
    mla = "mla"
    sliding = "sliding"
    state = "state"
    none = "none"


#: The kinds a record's layer group can have (a layer with no cache makes no group), for its pydantic model.
CachedKind = Literal[LayerKind.full, LayerKind.mla, LayerKind.sliding, LayerKind.state]
