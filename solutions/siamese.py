"""Task siamese: Sentence-BERT as a Siamese network around one BERT-shaped encoder.

Both sentences of a pair go through the *same* encoder (shared weights), each on its own: no
attention between the two. Each is mean-pooled into a fixed-size vector, and the pair's score is the
cosine of the two vectors. Because a sentence's vector does not depend on its partner, a whole corpus
can be encoded once and searched later (task retrieval).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from .pooling import masked_mean_pool


class SiameseBert(torch.nn.Module):
    """Mean-pooled sentence embeddings and pairwise cosine similarity from one shared encoder.

    ``encoder`` is any Hugging Face BERT-shaped model: called as
    ``encoder(input_ids=..., attention_mask=...)`` it returns an output whose
    ``last_hidden_state`` is [B, T, D] (``output[0]`` is the same tensor: use either).
    The wrapper holds that very encoder as ``self.encoder`` (never a copy), for both sentences of a
    pair, and ``encode`` and ``forward`` are differentiable: a loss on forward's output trains it.
    """

    def __init__(self, encoder: torch.nn.Module):
        super().__init__()
        ### BEGIN SOLUTION
        self.encoder = encoder  # one module, used for both sides: the weights are shared
        ### END SOLUTION

    def encode(
        self, input_ids: Int[Tensor, "B T"], attention_mask: Int[Tensor, "B T"]
    ) -> Float[Tensor, "B D"]:
        """Sentence embeddings: the masked mean of the encoder's last hidden state.

        Inputs:
            input_ids: [B, T] token ids (padded).
            attention_mask: [B, T], 1 for real tokens, 0 for padding, wherever they are (padding on
                the right or on the left, or holes).
        Returns:
            [B, D] float tensor, one vector per sentence.
        """
        ### BEGIN SOLUTION
        output = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        return masked_mean_pool(output.last_hidden_state, attention_mask)
        ### END SOLUTION

    def forward(
        self,
        input_ids_a: Int[Tensor, "B Ta"],
        attention_mask_a: Int[Tensor, "B Ta"],
        input_ids_b: Int[Tensor, "B Tb"],
        attention_mask_b: Int[Tensor, "B Tb"],
    ) -> Float[Tensor, "B"]:
        """Cosine similarity of sentence a[i] with sentence b[i], for every pair i.

        The two sides may be padded to different lengths Ta and Tb.
        Returns:
            [B] float tensor of cosines in [-1, 1].
        """
        ### BEGIN SOLUTION
        emb_a = self.encode(input_ids_a, attention_mask_a)
        emb_b = self.encode(input_ids_b, attention_mask_b)
        return F.cosine_similarity(emb_a, emb_b, dim=-1)
        ### END SOLUTION


def create_sbert(bert_model: torch.nn.Module) -> SiameseBert:
    """Wrap ``bert_model`` itself (not a copy of it) in a SiameseBert: training the wrapper trains
    ``bert_model``."""
    ### BEGIN SOLUTION
    return SiameseBert(bert_model)
    ### END SOLUTION
