"""What the kit teaches about task cka: linear CKA (exercises/cka.py)."""

from __future__ import annotations

from bertlab.teaching.records import Mistake

#: What a wrong value most often means: the idea to reread (``bertlab check``'s hint).
IDEA = ("Reread the formula in the module docstring of exercises/cka.py: center every column (subtract the "
        "mean over the n rows, dim=0) before any product, compute in float64, and return a Python float.")

MISTAKES: tuple[Mistake, ...] = (
    Mistake("cka_no_centering", "cka", "uncentered CKA",
            "Your CKA matches the formula WITHOUT centering: did you subtract each column's mean (X - "
            "X.mean(dim=0)) from X and Y before the products?"),
    Mistake("cka_center_rows", "cka", "rows centered instead of columns",
            "Your CKA matches centering the ROWS: center each column (feature) over the examples, i.e. X - "
            "X.mean(dim=0, keepdim=True)."),
    Mistake("cka_no_square", "cka", "unsquared numerator",
            "Your CKA matches the formula with an unsquared numerator: it is ||Yc^T Xc||_F ** 2 over "
            "||Xc^T Xc||_F * ||Yc^T Yc||_F."),
    Mistake("cka_wrong_normaliser", "cka", "wrong denominator",
            "Your CKA's denominator looks like ||Xc||_F^2 * ||Yc||_F^2: it should be the norms of the d x "
            "d products, ||Xc^T Xc||_F * ||Yc^T Yc||_F."),
    Mistake("cka_no_float64", "cka", "not computed in float64",
            "Your CKA loses precision on half-precision or large-offset inputs: convert X and Y to float64 "
            "(X.to(torch.float64)) before centering."),
    Mistake("cka_float32", "cka", "computed in float32",
            "Your CKA is computed in float32 (e.g. X.float(), or torch.as_tensor(X, dtype=torch.float32)): "
            "float32 keeps about 7 digits, so around a large column mean the small differences that CKA "
            "compares are lost. Convert X and Y with X.to(torch.float64) and keep every step in float64."),
    Mistake("cka_zscored", "cka", "columns standardised, not only centered",
            "Your CKA divides each column by its standard deviation (z-scores) before the products: linear "
            "CKA only CENTERS the columns (subtracts their means); rescaling each feature changes the "
            "answer. Remove the division by X.std(0)."),
    Mistake("cka_mixed_n", "cka", "n and n - 1 mixed",
            "Your CKA divides the cross term and the two self terms by different counts (n - 1 in one place, "
            "n in another): as covariances they would cancel only with the SAME factor. Either drop the "
            "1/n factors (the formula has none) or use the same one everywhere."),
    Mistake("cka_returns_tensor", "cka", "a tensor instead of a Python float",
            "Your linear_cka returns a tensor: convert the result with .item() (or float(...)) so callers "
            "get a Python float."),
    Mistake("cka_no_row_check", "cka", "no check that X and Y have the same n",
            "Your linear_cka does not check that X and Y have the same number of rows: raise a ValueError "
            "that says so before any matrix product."),
    Mistake("cka_numpy_unsupported", "cka", "NumPy inputs not converted",
            "Your CKA fails on NumPy arrays: convert inputs first with torch.as_tensor(X)."),
    Mistake("cka_no_constant_check", "cka", "no nan for zero variance",
            "Your CKA returns a number (about 0) for a representation whose rows are all equal: CKA is "
            "undefined there (0/0), and the docstring says nan. Detect it (the centered norm is tiny next "
            "to the raw norm) and return float('nan')."),
    Mistake("cka_matrix_upper_only", "cka", "only the upper triangle filled",
            "Your cka_matrix is not symmetric: fill M[j, i] as well as M[i, j]."),
    Mistake("cka_matrix_float32", "cka", "a float32 CKA matrix",
            "Your cka_matrix returns float32: create it with dtype=torch.float64 to keep the float64 "
            "values."),
    Mistake("cka_in_place_centering", "cka", "inputs centered in place",
            "Your CKA changes its inputs: `X -= X.mean(0)` on a float64 tensor (or an array seen through "
            "torch.as_tensor) writes into the caller's data. Center a copy."),
    Mistake("cka_matrix_centers_in_place", "cka", "cka_matrix centers its inputs in place",
            "Your cka_matrix changes its inputs: torch.as_tensor(r, dtype=torch.float64) or r.to(torch.float64) "
            "returns the caller's own tensor when it is float64 already (and shares a float64 NumPy array's "
            "memory), so `r -= r.mean(0)` centers the caller's data. Center a copy: r - r.mean(dim=0, keepdim=True).",
            fingerprinted=False),
    Mistake("cka_matrix_empty", "cka", "an empty list not rejected",
            "Your cka_matrix crashes on an empty list: raise a ValueError that says there is nothing to "
            "compare."),
    Mistake("cka_transposed", "cka", "transposed matrices compared",
            "Your CKA compares the transposed matrices: rows are examples, columns are features."),
    Mistake("cka_constant_float", "cka", "the same number for every input",
            "Your linear_cka returns the same number whatever X and Y are: compute the formula from the "
            "centered inputs (and return that value as a Python float)."),
    Mistake("cka_always_value_error", "cka", "ValueError for valid input",
            "Your linear_cka raises ValueError for valid input too: raise it only for the cases the docstring "
            "lists (X or Y not 2-D, different numbers of rows, n < 2), and otherwise return the CKA."),
)
