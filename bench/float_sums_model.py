"""Models, in numpy, a channel tile's wave sum in float (each lane's values
in order, then a butterfly over 32 lanes) against the same sum in double,
on many random channels of float32 data, and reports how often each misses
the float32 reduction tolerance (1e-4 + 1e-4 * |ref|):

  stats   the saved mean from sum(x - first value), zero-mean data of
          standard deviation sigma (all-float; deviations double through
          the butterfly, as bn_channel_tile.hip takes them; all-double);
  grads   dscale = sum(dy * (x - mean)) * inv_std and dbias = sum(dy), in
          float, for gradients of rms R.

    python3 bench/float_sums_model.py     (about a minute, numpy only)
"""
import numpy as np

rng = np.random.default_rng(2)
LANES = 32
CHANNELS = 20000


def lanes_of(t):
    """(C, n) -> (C, per_lane, 32): value k * 32 + l on lane l."""
    c, n = t.shape
    per = -(-n // LANES)
    pad = np.zeros((c, per * LANES), t.dtype)
    pad[:, :n] = t
    return pad.reshape(c, per, LANES)


def lane_chain(t):
    """Each lane's values summed in order, in float."""
    lanes = lanes_of(t.astype(np.float32))
    acc = np.zeros(lanes[:, 0].shape, np.float32)
    for k in range(lanes.shape[1]):
        acc = (acc + lanes[:, k]).astype(np.float32)
    return acc


def butterfly(v, dtype):
    v = v.astype(dtype)
    while v.shape[-1] > 1:
        h = v.shape[-1] // 2
        v = (v[..., :h] + v[..., h:]).astype(dtype)
    return v[..., 0].astype(np.float64)


SUMS = {
    "float": lambda t: butterfly(lane_chain(t), np.float32),
    "lanes float, butterfly double": lambda t: butterfly(lane_chain(t), np.float64),
    "double": lambda t: t.astype(np.float64).sum(1),
}


def misses(got, ref):
    ratio = np.abs(got - ref) / (1e-4 * (1 + np.abs(ref)))
    return f"{np.mean(ratio > 1):.1e} missed, worst {ratio.max():.2f} of the bound"


print("saved mean, zero-mean float32 data")
for n in (49, 392):
    for sigma in (1e2, 1e3, 1e4):
        x = (sigma * rng.standard_normal((CHANNELS, n))).astype(np.float32)
        first = x[:, :1]
        ref = x.astype(np.float64).mean(1)
        d = (x - first).astype(np.float32)
        for name, total in SUMS.items():
            mean = (first[:, 0].astype(np.float64) + total(d) / n).astype(np.float32).astype(np.float64)
            print(f"  n {n:4d} sigma {sigma:7.0f} {name:30s} {misses(mean, ref)}")

print("dscale and dbias summed in float (centred at the mean)")
for n in (49, 392, 1024):
    for rms in (1, 10, 100, 1000):
        x = rng.standard_normal((CHANNELS, n)).astype(np.float32)
        dy = (rms * rng.standard_normal((CHANNELS, n))).astype(np.float32)
        mean = x.astype(np.float64).mean(1, keepdims=True)
        inv = 1 / np.sqrt(x.astype(np.float64).var(1, keepdims=True) + 1e-5)
        ref_ds = (dy.astype(np.float64) * (x - mean) * inv).sum(1)
        got_ds = SUMS["float"]((dy * (x - mean.astype(np.float32))).astype(np.float32)) * inv[:, 0]
        ref_db = dy.astype(np.float64).sum(1)
        got_db = SUMS["float"](dy)
        print(f"  n {n:4d} rms(dy) {rms:5d}: dscale {misses(got_ds, ref_ds)}; dbias {misses(got_db, ref_db)}")
