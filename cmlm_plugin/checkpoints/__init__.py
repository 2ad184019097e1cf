"""Checkpoints: weights-only loading (``safety``), failures that name the file
(``errors``), and converters from fairseq's CMLM and the original Mask-Predict code
(``convert``)."""
