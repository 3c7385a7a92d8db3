"""bertlab: a test-driven teaching kit for transfer learning with BERT and Sentence-BERT.

Provided (non-exercise) code lives here: the stacked TinyBERT encoder, layer representations, the DAN
baseline, offline models and data, STS evaluation. The exercises are in `exercises/`.

In a notebook, ``import bertlab`` gives the student commands as calls whose result shows under the
cell: ``bertlab.check("pooling")`` (`bertlab check --task pooling`), ``bertlab.check_all()``
(`bertlab check`) and ``bertlab.submit()`` (`bertlab submit`). They are loaded at their first use, so
``import bertlab`` itself stays cheap (no torch, no pytest).
"""

from bertlab.version import __version__  # noqa: F401


def __getattr__(name: str):
    """The notebook calls, imported when first asked for (PEP 562). ``bertlab.check`` is the
    bertlab.check package itself, which is callable (bertlab/check/__init__.py says why)."""
    if name == "check":
        import bertlab.check

        return bertlab.check
    if name == "check_all":
        from bertlab.check.notebook import check_all

        return globals().setdefault(name, check_all)
    if name == "submit":
        from bertlab.handin.notebook import submit

        return globals().setdefault(name, submit)
    raise AttributeError(f"module 'bertlab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "check", "check_all", "submit"})
