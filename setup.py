"""cmlm_plugin: Mask-Predict conditional masked language models as a fairseq plugin."""

import re

from setuptools import find_packages, setup

VERSION = re.search(r'__version__ = "([^"]+)"', open("cmlm_plugin/version.py").read()).group(1)

setup(
    name="cmlm-plugin",
    version=VERSION,
    description="Conditional masked language models and Mask-Predict decoding for fairseq",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11,<3.14",
    packages=find_packages(include=["cmlm_plugin", "cmlm_plugin.*", "cmlm_decoding"]),
    py_modules=["cmlm_plugin_dir"],
    install_requires=[
        # fairseq 0.12.2 on PyPI does not import on Python >= 3.11. ve-fairseq is a wheel
        # build of fairseq's main branch (cp311/cp312 only); fairseq-fixed is the same code
        # as an sdist that compiles on 3.13 (a few minutes). See docs/install.md.
        've-fairseq==0.12.3; python_version < "3.13"',
        'fairseq-fixed==0.12.3.1; python_version >= "3.13"',
        "torch>=2.1",
        "numpy",
        "sacrebleu>=2.0",
        "sentencepiece",
    ],
    extras_require={
        "test": ["pytest", "pytest-xdist", "hypothesis", "matplotlib"],
        "plot": ["matplotlib"],
        "dev": ["black", "isort"],
    },
    entry_points={
        "console_scripts": [
            "cmlm-plugin-dir=cmlm_plugin_dir:main",
            "cmlm-calibrate=cmlm_plugin.cli.calibrate:main",
            "cmlm-average-checkpoints=cmlm_plugin.cli.average:main",
            "cmlm-table=cmlm_plugin.cli.table:main",
            "cmlm-convert=cmlm_plugin.cli.convert:main",
            "cmlm-flags=cmlm_plugin.cli.flags:main",
            "cmlm-diagnose=cmlm_plugin.cli.diagnose:main",
        ]
    },
    classifiers=[
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
