"""bertlab: a test-driven teaching kit for transfer learning with BERT and Sentence-BERT.

Provided (non-exercise) code lives here: the stacked TinyBERT encoder, layer representations, the DAN
baseline, offline models and data, STS evaluation. The exercises are in `exercises/`.
"""

__version__ = "0.1.0"
