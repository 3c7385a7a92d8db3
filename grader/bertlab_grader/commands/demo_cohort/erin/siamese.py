"""Demo cohort, hostile student: kills the process that runs it, and writes outside its folder."""

import os

import torch

try:
    with open("/tmp/erin-was-here", "w") as handle:
        handle.write("overwrite the gradebook?")
except OSError:
    pass


class SiameseBert(torch.nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def encode(self, input_ids, attention_mask):
        os._exit(0)  # pretend everything went fine

    def forward(self, *args):
        os._exit(0)


def create_sbert(bert_model):
    return SiameseBert(bert_model)
