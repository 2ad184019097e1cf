"""Decoding with fairseq's commands: the generators ``task.build_generator`` returns.

``generator`` (the glue around ``cmlm_decoding``), ``step`` (one decoder pass as the
core's step function), ``templates`` (infilling), ``hypotheses`` (fairseq's output
format) and ``infill`` (infilling from Python through the hub interface).
"""
