"""The kit's version (pyproject.toml says the same), in a module of its own: the package's root re-exports
it, and a module that needs it (the hand-in's manifest) takes it from here, not from the root, whose
notebook calls (bertlab.check_all, bertlab.submit) import those modules: no import cycle."""

__version__ = "0.1.0"
