"""Your implementations of the week-7 exercises: cka, pooling, siamese, retrieval.

Run `bertlab check` to test them, task by task.
"""
