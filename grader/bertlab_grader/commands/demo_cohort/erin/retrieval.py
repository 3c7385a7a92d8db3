"""Demo cohort, hostile student: leaves processes behind, and allocates without bound."""

import os
import time


def semantic_search(query_embeddings, corpus_embeddings, top_k=10):
    for _ in range(20):  # children that outlive the call, hoping to meddle with the next student
        try:
            if os.fork() == 0:
                time.sleep(3600)
                os._exit(0)
        except OSError:
            break
    return [[1.0]], [[0]]


class SemanticIndex:
    def __init__(self, encode):
        self.hoard = []

    def add(self, texts):
        while True:  # a memory bomb: the sandbox's memory limit must stop it
            self.hoard.append(bytearray(100 * 2**20))

    def search(self, queries, top_k=10):
        return []

    def __len__(self):
        return 0
