"""Returns objects that claim to equal anything, to be any number and to be true."""
import torch


class Liar:
    def __eq__(self, other):
        return True

    __ne__ = lambda self, other: False
    __bool__ = lambda self: True
    __float__ = lambda self: 1.0
    __int__ = lambda self: 1
    __index__ = lambda self: 1
    __len__ = lambda self: 3
    __hash__ = lambda self: 0

    def __array__(self, *args, **kwargs):
        raise RuntimeError("never reached in the trusted process")


class LyingTensor(torch.Tensor):
    """A tensor subclass whose comparisons always succeed (only its data crosses the boundary)."""

    def __eq__(self, other):
        return True

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


def linear_cka(X, Y):
    return Liar()


def cka_matrix(reps):
    return torch.zeros(len(reps), len(reps)).as_subclass(LyingTensor)
