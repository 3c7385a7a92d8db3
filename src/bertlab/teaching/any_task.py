"""The kinds of failure any task can show (``task`` None): ``bertlab check`` names them from a
failure's message (check.py's message table), whatever the task."""

from __future__ import annotations

from bertlab.teaching.records import Mistake

MISTAKES: tuple[Mistake, ...] = (
    Mistake("no_value_error", None, "a bad input not rejected",
            "Reread the Raises: section of the docstring: check the inputs at the top of the function and "
            "`raise ValueError(...)` with a message saying what was wrong."),
    Mistake("wrong_type", None, "a result of the wrong type",
            "Check the return type against the Returns: section of the docstring."),
    Mistake("wrong_shape", None, "a result of the wrong shape",
            "Shapes first: the Returns: line of the docstring gives the shape. Check which dimension you "
            "reduced over (dim=...) and whether a dimension was kept (keepdim) or squeezed away."),
    Mistake("wrong_dtype", None, "a result of the wrong dtype",
            "The Returns: line of the docstring says which dtype to return: compute in a wide type if you "
            "like, then cast back at the end."),
    Mistake("nan_result", None, "NaN in a result",
            "A NaN is almost always 0/0: a count, a norm or a variance that can be zero. The docstring says "
            "what such an input should give."),
    Mistake("input_type_not_handled", None, "an allowed input type not handled",
            "A TypeError usually means an input the docstring allows but your code does not handle yet: NumPy "
            "arrays as well as tensors, int, bool or float masks, a single query as well as a batch."),
)
