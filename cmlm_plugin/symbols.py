"""The one extra dictionary symbol the CMLM needs, and the lookups around it."""

from .errors import CMLMPluginError

MASK_SYMBOL = "<mask>"


def mask_index(dictionary) -> int:
    """Index of ``<mask>`` in a fairseq dictionary; a clear error if it is absent."""
    if MASK_SYMBOL not in dictionary.indices:
        raise CMLMPluginError(
            f"the dictionary has no {MASK_SYMBOL} symbol: load it through "
            f"--task cmlm, which adds it (never reuse <unk> as the mask)"
        )
    return dictionary.index(MASK_SYMBOL)
