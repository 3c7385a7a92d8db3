"""Task cosine_matrix's teaching: the idea to reread when a value is wrong, and its known mistakes."""

from bertlab.teaching.records import Mistake

IDEA = ("A cosine is a dot product of two vectors scaled to length 1: divide each row of a and of b by its "
        "own norm (F.normalize, which leaves a zero row at zero), then one matrix product gives every pair.")

MISTAKES: tuple[Mistake, ...] = (
    Mistake("cosmat_raw_dot", "cosine_matrix", "raw dot products",
            "Your values are raw dot products, not cosines: scale every row of a and of b to length 1 first."),
    Mistake("cosmat_one_side", "cosine_matrix", "only a normalised",
            "Your values change with the length of b's rows: normalise the rows of b as well as those of a."),
)
