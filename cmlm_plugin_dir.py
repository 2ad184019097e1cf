"""``cmlm-plugin-dir``: print the installed ``cmlm_plugin`` folder, for ``--user-dir``.

    fairseq-train DATA --user-dir "$(cmlm-plugin-dir)" --task cmlm ...

A top-level module so that it finds the package without importing it (importing
the plugin imports fairseq, which is slow and logs to the terminal).
"""

import importlib.util


def plugin_dir() -> str:
    spec = importlib.util.find_spec("cmlm_plugin")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("cmlm_plugin is not installed: run `pip install -e .` in the checkout")
    return list(spec.submodule_search_locations)[0]


def main() -> None:
    print(plugin_dir())


if __name__ == "__main__":
    main()
