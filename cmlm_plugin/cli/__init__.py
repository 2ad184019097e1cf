"""Console commands that need fairseq (``cmlm-plugin-dir`` lives outside the package)."""
