"""The shape lists the bench runs, as logical (N, C, [D,] [H,] W) tuples.

Ordered by priority: when the GPU run hits its time budget, the shapes at the
end are the ones left out.
"""

# ResNet-50's batch-norm layers as (C, H == W).
RESNET50_LAYERS = [
    (64, 112),
    (64, 56), (128, 56), (256, 56),
    (128, 28), (256, 28), (512, 28),
    (256, 14), (512, 14), (1024, 14),
    (512, 7), (1024, 7), (2048, 7),
]

# Layers repeated at tiny batch sizes (inference-like and fine-tuning loads).
SMALL_BATCH_LAYERS = [(64, 56), (256, 14), (2048, 7)]
SMALL_BATCH_SIZES = [1, 2, 8]

# Shapes MIOpen has had trouble with (docs/numerics.md#shapes): C=1 with huge H*W, a huge N with
# C=1, and N > 768 with one channel.
EDGE_SHAPES = [
    (64, 1, 1024, 1024),
    (69328, 1, 22, 22),
    (768, 1, 14, 14),
]

# A fully connected layer's batch norm (N, C) and a 3-D convolution's (N,C,D,H,W).
RANK2_SHAPES = [(8192, 2048)]
RANK5_SHAPES = [(16, 8, 16, 128, 128)]


# Group norm, G = 32: Stable Diffusion's UNet blocks and its VAE decoder.
GN_GROUPS = 32
SD_GN_SHAPES = [(2, 320, 64, 64), (2, 640, 32, 32), (2, 1280, 16, 16), (8, 320, 64, 64)]
VAE_GN_SHAPES = [(1, 512, 64, 64), (1, 256, 256, 256), (1, 128, 512, 512)]
# Issue 19's UNet group: every UNet width at every UNet resolution, batch 1
# and 2 (latency-bound: 0.5-42 MB); its targets are read on these rows.
UNET_GN_SHAPES = [(n, c, hw, hw) for n in (1, 2) for c in (320, 640, 1280) for hw in (64, 32, 16, 8)]
GN_SHAPE_GROUPS = {"sd": SD_GN_SHAPES, "unet": UNET_GN_SHAPES, "vae": VAE_GN_SHAPES}


def group_norm_shapes(quick=False, groups=tuple(GN_SHAPE_GROUPS)):
    """The group-norm shapes of the named groups of GN_SHAPE_GROUPS, in
    that order without repeats (by default all: Stable Diffusion's, the rest
    of the UNet group, the VAE's); two of them for smoke runs."""
    if quick:
        return [SD_GN_SHAPES[0], VAE_GN_SHAPES[0]]
    shapes = []
    for group in groups:
        shapes += [shape for shape in GN_SHAPE_GROUPS[group] if shape not in shapes]
    return shapes


def default_group_norm_shapes(backend, quick=False):
    """Every group on the GPU; the CPU run (2 cores, minutes) keeps to Stable
    Diffusion's and the VAE's shapes, as before the UNet group."""
    return group_norm_shapes(quick, tuple(GN_SHAPE_GROUPS) if backend == "gpu" else ("sd", "vae"))


def resnet50(n):
    return [(n, c, hw, hw) for c, hw in RESNET50_LAYERS]


def full_shapes():
    """Every shape of the GPU run, most important first: ResNet-50 at a
    training batch of 32, small batches (latency-bound), then N=256.  The edge shapes come
    last: cuDNN takes 30-90 ms a call on them, so their anchors alone cost
    tens of seconds of a budgeted device run."""
    small = [(n, c, hw, hw) for n in SMALL_BATCH_SIZES for c, hw in SMALL_BATCH_LAYERS]
    return (resnet50(32) + small + resnet50(256) + RANK2_SHAPES + RANK5_SHAPES
            + EDGE_SHAPES)


def cpu_default_shapes():
    """The CPU run: ResNet-50 at N=32 (2 cores: it has to stay within minutes)."""
    return resnet50(32)


def quick_shapes(backend):
    """A handful of shapes covering the kinds above, for smoke runs."""
    if backend == "cpu":
        return [(32, 64, 56, 56), (32, 256, 14, 14), (32, 2048, 7, 7), (8, 1, 64, 64),
                (512, 256)]
    return [(256, 64, 56, 56), (32, 256, 14, 14), (32, 2048, 7, 7), (64, 1, 1024, 1024),
            (8192, 2048), (2, 8, 16, 64, 64)]


def has_distinct_nhwc(shape):
    """NHWC differs from NCHW in memory only with several channels and pixels."""
    return len(shape) > 2 and shape[1] > 1 and _pixels(shape) > 1


def _pixels(shape):
    count = 1
    for length in shape[2:]:
        count *= length
    return count


def shape_text(shape):
    return "x".join(str(length) for length in shape)


def parse_shape(text):
    """'32x512x7x7' -> (32, 512, 7, 7): shape_text's inverse; ValueError
    for anything else."""
    return tuple(int(length) for length in text.lower().split("x"))
