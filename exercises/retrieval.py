"""Task retrieval: semantic search over pre-computed sentence embeddings.

Offline, every corpus text is encoded once (SemanticIndex.add). Online, a query is encoded and scored
against every corpus vector by cosine similarity; the top_k best come back. Scoring Q queries against
N corpus vectors is a [Q, N] matrix: for a million-text corpus that matrix would not fit in memory, so
semantic_search walks the corpus in blocks and keeps a running top-k.

Ties: equal scores are ordered by ascending corpus index, so results are reproducible.
"""

# Student version of task retrieval, generated from the reference solution.
# Replace each `raise NotImplementedYet(...)` with your code; run `bertlab check --task retrieval`.

from __future__ import annotations

from typing import Callable, List, NamedTuple, Sequence, Union

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from bertlab.errors import NotImplementedYet

# Upper bound on the number of scores materialised at once (a [queries, corpus] block): 2**24
# float32 scores are 64 MiB, small enough for any laptop, large enough to keep BLAS efficient.
MAX_BLOCK_SCORES = 2**24


def semantic_search(
    query_embeddings: Union[Float[Tensor, "Q D"], Float[Tensor, "D"]],
    corpus_embeddings: Float[Tensor, "N D"],
    top_k: int = 10,
) -> tuple[Float[Tensor, "Q k"], Int[Tensor, "Q k"]]:
    """Top-k corpus entries for every query by cosine similarity.

    Inputs:
        query_embeddings: [Q, D], or [D] for a single query (treated as Q = 1).
        corpus_embeddings: [N, D] (always 2-D: a corpus of one vector is [1, D]).
        top_k: how many hits per query (k = min(top_k, N)).
    Returns:
        (scores, indices): two [Q, k] tensors; each row sorted by descending score, ties by ascending
        corpus index. indices are int64. scores are cosines in any float dtype (the reference gives
        float64 when either input is float64, float32 otherwise; only their values are checked, to
        1e-5). A zero vector, query or corpus row, has cosine 0 with everything, never nan (normalise
        with a clamp on the norm, as F.normalize does).
    Raises:
        ValueError: if the embedding sizes D differ, the query is not 1-D or 2-D, the corpus is not
        2-D, or top_k < 1.
    Memory: at most about MAX_BLOCK_SCORES scores are held at once, whatever N is: walk the corpus
    in blocks of about MAX_BLOCK_SCORES // Q rows; a [Q, N] matrix of every score is not allowed.
    The inputs are never modified.
    """
    # TODO: Implement for task retrieval.
    raise NotImplementedYet("retrieval", "semantic_search")


# (Task retrieval: any helper functions you want can go here.)


class Hit(NamedTuple):
    """One search result: the corpus position (a Python int), its cosine score (a Python float: use
    int(...) and float(...), not tensors) and its text."""

    corpus_id: int
    score: float
    text: str


class SemanticIndex:
    """Offline indexing, online search.

    ``encode`` turns a list of n texts into an [n, D] tensor of embeddings (e.g. a SiameseBert's
    encode after tokenising). Each text is encoded once, when it is added.
    """

    def __init__(self, encode: Callable[[List[str]], Float[Tensor, "n D"]]):
        # TODO: Implement for task retrieval.
        raise NotImplementedYet("retrieval", "SemanticIndex.__init__")

    def add(self, texts: Sequence[str]) -> None:
        """Encode ``texts`` (a list of str) once and append them to the index (corpus ids continue from
        len(self)). A bare str is not a list of texts: what add() does with one is left to you (this
        reference treats it as one text; no test passes one)."""
        # TODO: Implement for task retrieval.
        raise NotImplementedYet("retrieval", "SemanticIndex.add")

    def search(self, queries: Union[str, Sequence[str]], top_k: int = 10) -> list[list[Hit]]:
        """The top_k hits for each query, best first: one list of Hit per query (a single str is one
        query, and gives [[hit, ...]]); min(top_k, len(self)) hits each, so none on an empty index."""
        # TODO: Implement for task retrieval.
        raise NotImplementedYet("retrieval", "SemanticIndex.search")

    def __len__(self) -> int:
        # TODO: Implement for task retrieval.
        raise NotImplementedYet("retrieval", "SemanticIndex.__len__")
