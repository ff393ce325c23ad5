"""Hypothesis strategies shared by the property tests, and the helpers that
turn what they draw into arrays.

Each strategy is a small named function so a property reads as a sentence:
``@given(shape=bn_shapes(), dtype=io_dtypes(), layout=layouts())``.  Values are
never drawn element by element (too slow): a strategy draws a seed and the
data comes from NumPy's generator, always non-zero and fresh per example.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
from hypothesis import strategies as st

from miopen_bn import dtypes, reference

# Lengths, weighted towards the awkward: 1 (degenerate), odd primes, a power of two.
DIM_VALUES = (1, 2, 3, 5, 7, 8, 11, 13)
MODES = ("spatial", "per_activation")
IO_DTYPES = (dtypes.FLOAT32, dtypes.FLOAT16, dtypes.BFLOAT16, dtypes.FLOAT64)
MAX_ELEMENTS = 6000
# Every batch-norm activation mode with parameters that exercise it (alpha, beta, gamma).
ACTIVATIONS = {
    "pasthru": (0.0, 0.0, 0.0),
    "logistic": (0.0, 0.0, 0.0),
    "tanh": (0.7, 1.3, 0.0),
    "relu": (0.0, 0.0, 0.0),
    "softrelu": (0.0, 0.0, 0.0),
    "abs": (0.0, 0.0, 0.0),
    "power": (0.5, 0.8, 2.0),
    "clippedrelu": (1.0, 0.0, 0.0),
    "leakyrelu": (0.1, 0.0, 0.0),
    "elu": (0.6, 0.0, 0.0),
    "clamp": (-0.5, 0.8, 0.0),
}


# --------------------------------------------------------------------------- #
# Shapes
# --------------------------------------------------------------------------- #
def dims() -> st.SearchStrategy:
    return st.sampled_from(DIM_VALUES)


@st.composite
def bn_shapes(
    draw, min_rank: int = 2, max_rank: int = 5, mode: Optional[str] = None, training: bool = False
) -> tuple:
    """(N, C[, D][, H][, W]) with at most MAX_ELEMENTS elements.  With
    ``training`` (needs ``mode``), every statistic has M > 1 values."""
    rank = draw(st.integers(min_rank, max_rank))
    shape = tuple(draw(dims()) for _ in range(rank))
    while int(np.prod(shape)) > MAX_ELEMENTS:
        largest = int(np.argmax(shape))
        shape = shape[:largest] + (max(1, shape[largest] // 2),) + shape[largest + 1 :]
    if training and reference.reduction_count(shape, mode) < 2:
        shape = (2,) + shape[1:]  # N = 2 gives M >= 2 in either mode
    return shape


def modes() -> st.SearchStrategy:
    return st.sampled_from(MODES)


# --------------------------------------------------------------------------- #
# Types
# --------------------------------------------------------------------------- #
def io_dtypes() -> st.SearchStrategy:
    return st.sampled_from(IO_DTYPES)


def param_dtypes(x_dtype: str) -> st.SearchStrategy:
    """float32 (mixed precision, the usual case) or x's own type."""
    return st.sampled_from(sorted({dtypes.FLOAT32, x_dtype}))


def grad_dtypes(x_dtype: str) -> st.SearchStrategy:
    """dy/dx: x's type or float32."""
    return st.sampled_from(sorted({dtypes.FLOAT32, x_dtype}))


# --------------------------------------------------------------------------- #
# Layouts
# --------------------------------------------------------------------------- #
@dataclass(frozen=True)
class Layout:
    """How a logical (N, C, ...) tensor lies in memory: ``order`` lists axes
    from outermost to innermost; ``padding`` extra elements after the
    innermost axis's run (a strided, non-packed view)."""

    name: str
    order: Optional[tuple] = None  # None: row-major (NCHW); unused for channels_last
    padding: int = 0

    def axes(self, rank: int) -> tuple:
        if self.name == "channels_last":
            return (0,) + tuple(range(2, rank)) + (1,)
        if self.order is None:
            return tuple(range(rank))
        return self.order


PACKED = Layout("packed")
CHANNELS_LAST = Layout("channels_last")


def layouts(rank: Optional[int] = None) -> st.SearchStrategy:
    """Packed NCHW, channels-last (NHWC/NDHWC), a padded (strided) view, and
    for a known rank any permutation of the axes."""
    choices = [
        st.just(PACKED),
        st.just(CHANNELS_LAST),
        st.integers(1, 3).map(lambda pad: Layout("padded", padding=pad)),
    ]
    if rank is not None:
        choices.append(st.permutations(range(rank)).map(lambda p: Layout("permuted", order=tuple(p))))
    return st.one_of(*choices)


def param_forms() -> st.SearchStrategy:
    """Parameters as (C,) / (C, H, W) ("short") or with the leading 1 ("full")."""
    return st.sampled_from(("short", "full"))


# --------------------------------------------------------------------------- #
# Scalars and NULL patterns
# --------------------------------------------------------------------------- #
def alpha_betas() -> st.SearchStrategy:
    """(alpha, beta): MIOpen's (1, 0) most often, then genuine blends."""
    return st.one_of(
        st.just((1.0, 0.0)), st.sampled_from([(0.5, 0.0), (1.0, 1.0), (0.5, 0.25), (2.0, -1.0), (0.0, 1.0)])
    )


def epsilons() -> st.SearchStrategy:
    return st.sampled_from((1e-5, 1e-3, 0.1, 0.0))


def exp_avg_factors() -> st.SearchStrategy:
    return st.sampled_from((0.1, 1.0, 0.0, 0.5, -0.25))


PAIR_PATTERNS = ("both", "neither", "first_only", "second_only")


def pair_patterns() -> st.SearchStrategy:
    """Which of a (first, second) optional pointer pair is non-NULL."""
    return st.sampled_from(PAIR_PATTERNS)


def seeds() -> st.SearchStrategy:
    return st.integers(0, 2**32 - 1)


# --------------------------------------------------------------------------- #
# Turning draws into arrays
# --------------------------------------------------------------------------- #
def empty(shape: tuple, dtype, layout: Layout = PACKED) -> np.ndarray:
    """An uninitialised array of logical ``shape`` laid out as ``layout``."""
    np_dtype = dtypes.NUMPY_DTYPE[dtypes.name_of(dtype)]
    order = layout.axes(len(shape))
    storage_shape = [shape[axis] for axis in order]
    storage_shape[-1] += layout.padding
    storage = np.empty(storage_shape, dtype=np_dtype)
    if layout.padding:
        storage = storage[..., : shape[order[-1]]]
    return storage.transpose(np.argsort(order))


def filled(values: np.ndarray, dtype, layout: Layout = PACKED) -> np.ndarray:
    """``values`` (any float array) converted to ``dtype`` in ``layout``."""
    out = empty(values.shape, dtype, layout)
    out[...] = np.asarray(values).astype(out.dtype)
    return out


def nan_filled(shape: tuple, dtype, layout: Layout = PACKED) -> np.ndarray:
    out = empty(shape, dtype, layout)
    out[...] = np.nan
    return out


def activations(rng: np.random.Generator, shape: tuple, mode: Optional[str] = None) -> np.ndarray:
    """x-like float64 data: per-channel mean in [-3, 3] and std in [0.5, 2].

    With ``mode``, the noise is standardized over that mode's reduction axes,
    so every statistic has exactly the drawn std: two samples that happen to
    be close would make 1/std huge and turn rounding noise into failures
    (ill-conditioning is the numerics tests' subject, not the properties')."""
    channel_shape = (1, shape[1]) + (1,) * (len(shape) - 2)
    mean = rng.uniform(-3, 3, channel_shape)
    std = rng.uniform(0.5, 2, channel_shape)
    noise = rng.standard_normal(shape)
    if mode is not None and reference.reduction_count(shape, mode) > 1:
        axes = reference.reduction_axes(len(shape), mode)
        noise = (noise - noise.mean(axis=axes, keepdims=True)) / noise.std(axis=axes, keepdims=True)
    return mean + std * noise


def param_shape(x_shape: tuple, mode: str, form: str) -> tuple:
    full = reference.param_shape(x_shape, mode)
    if form == "full":
        return full
    return (x_shape[1],) if mode == "spatial" else full[1:]


def params(
    rng: np.random.Generator, x_shape: tuple, mode: str, form: str, low: float = -2.0, high: float = 2.0
) -> np.ndarray:
    return rng.uniform(low, high, param_shape(x_shape, mode, form))


def positive_params(rng: np.random.Generator, x_shape: tuple, mode: str, form: str) -> np.ndarray:
    return params(rng, x_shape, mode, form, low=0.25, high=4.0)


# --------------------------------------------------------------------------- #
# Group norm
# --------------------------------------------------------------------------- #
GROUP_COUNTS = (1, 2, 3, 4, 8)
CHANNELS_PER_GROUP = (1, 2, 3, 5)
GN_ACTIVATIONS = (None, "swish")
SWISH_BETAS = (1.0, 0.5, 2.0, -1.0, 0.0)


@st.composite
def gn_shapes(draw, min_rank: int = 2, max_rank: int = 5) -> tuple:
    """(shape, num_groups): G and C/G from small values (1 included), at most
    MAX_ELEMENTS elements, and every group of at least two values (fewer is
    bad input, tested on its own)."""
    rank = draw(st.integers(min_rank, max_rank))
    groups = draw(st.sampled_from(GROUP_COUNTS))
    per_group = draw(st.sampled_from(CHANNELS_PER_GROUP))
    shape = [draw(dims()), groups * per_group] + [draw(dims()) for _ in range(rank - 2)]
    while int(np.prod(shape)) > MAX_ELEMENTS:
        largest = max((axis for axis in range(len(shape)) if axis != 1), key=lambda axis: shape[axis])
        shape[largest] = max(1, shape[largest] // 2)
    if per_group * int(np.prod(shape[2:])) < 2:
        if rank == 2:
            shape[1] = 2 * groups
        else:
            shape[-1] = 2
    return tuple(shape), groups


def gn_activation_names() -> st.SearchStrategy:
    return st.sampled_from(GN_ACTIVATIONS)


def swish_betas() -> st.SearchStrategy:
    return st.sampled_from(SWISH_BETAS)


def stats_dtype(x_dtype: str) -> str:
    """Group norm's mean/rstd type: float64 for float64 x, else float32."""
    return dtypes.FLOAT64 if x_dtype == dtypes.FLOAT64 else dtypes.FLOAT32


def group_activations(rng: np.random.Generator, shape: tuple, num_groups: int) -> np.ndarray:
    """x-like float64 data whose every (n, g) group has a mean in [-3, 3] and
    exactly a std in [0.5, 2] (so 1/std stays moderate, as ``activations``
    does per channel), with distinct channel means inside each group."""
    raw = activations(rng, shape)
    n = shape[0]
    grouped = raw.reshape(n, num_groups, -1)
    grouped = (grouped - grouped.mean(axis=2, keepdims=True)) / grouped.std(axis=2, keepdims=True)
    mean = rng.uniform(-3, 3, (n, num_groups, 1))
    std = rng.uniform(0.5, 2, (n, num_groups, 1))
    return (mean + std * grouped).reshape(shape)


# --------------------------------------------------------------------------- #
# C ABI values, ordinary and malformed (the fuzzer's alphabet)
# --------------------------------------------------------------------------- #
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
# cffi passes the header's enums (no negative enumerator) as unsigned int:
# these are the bit patterns of C's -1 and INT_MIN.
ENUM_MINUS_ONE, ENUM_INT_MIN = 2**32 - 1, 2**31
DTYPE_CODES = tuple(dtypes.MIOPEN_CODE.values())  # the four batch norm computes on
OTHER_DTYPE_CODES = (2, 3, 7, 8, 9)  # int32, int8, fp8, bf8, int64: valid, unsupported
BAD_DTYPE_CODES = (4, 10, ENUM_MINUS_ONE, 99, INT_MAX)  # not in miopenDataType_t


def c_lengths() -> st.SearchStrategy:
    """Lengths as a caller might pass them: mostly ordinary, else degenerate or huge."""
    return st.one_of(dims(), st.sampled_from((0, -1, -7, INT_MIN, INT_MAX, 65536, 2**20 + 1)))


def c_strides() -> st.SearchStrategy:
    return st.one_of(
        st.integers(1, 64), st.sampled_from((0, -1, INT_MIN, INT_MAX, 2**31 - 2, 2**24 + 1, 2**20))
    )


def huge_strides() -> st.SearchStrategy:
    """Valid strides that put elements gigabytes apart (64-bit offsets)."""
    return st.sampled_from((1, 7, 2**20, 2**24 + 1, 2**28 - 3, INT_MAX))


def c_counts() -> st.SearchStrategy:
    """nbDims / num_lens: the valid ranks 1 to 5, and what lies around them."""
    return st.sampled_from((-1, 0, 1, 2, 3, 4, 5, 6, 7, 2**30, INT_MAX))


def c_dtype_codes() -> st.SearchStrategy:
    return st.one_of(
        st.sampled_from(DTYPE_CODES), st.sampled_from(OTHER_DTYPE_CODES), st.sampled_from(BAD_DTYPE_CODES)
    )


def c_enum_codes(valid: int) -> st.SearchStrategy:
    """An enum argument: one of its `valid` values 0..valid-1, or not."""
    return st.one_of(
        st.integers(0, valid - 1), st.sampled_from((ENUM_MINUS_ONE, valid, valid + 7, INT_MAX, ENUM_INT_MIN))
    )


def c_scalings() -> st.SearchStrategy:
    """alpha/beta values beyond alpha_betas(): zeros, non-finite, extreme."""
    return st.sampled_from((0.0, -0.0, 1.0, 3.0, float("nan"), float("inf"), -float("inf"), 1e30, 1e-45))


def c_epsilons() -> st.SearchStrategy:
    return st.sampled_from((-1e-5, float("nan"), float("inf"), -0.0, 1e30, 1e-300))


def c_factors() -> st.SearchStrategy:
    return st.sampled_from((float("nan"), float("inf"), -float("inf"), 1e30, -3.0, 2.0))
