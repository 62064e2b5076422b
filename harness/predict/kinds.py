"""The kinds of layer cache the predictor tells apart (one name for the model shape, the pages and the record)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal


class LayerKind(StrEnum):
    """What one decoder layer caches: full attention, MLA's latent, a sliding window, a recurrent state, or nothing."""

    full = "full"
    mla = "mla"
    sliding = "sliding"
    state = "state"
    none = "none"


#: The kinds a record's layer group can have (a layer with no cache makes no group), for its pydantic model.
CachedKind = Literal[LayerKind.full, LayerKind.mla, LayerKind.sliding, LayerKind.state]
