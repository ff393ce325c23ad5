"""Checks one op's outputs against miopen_bn's float64 reference, before the
op is timed.

Spatial batch norm treats every channel on its own, so the check runs the
reference on a sample of whole channels (all of them when the tensor is small)
copied to the host: exact for those channels, and cheap on tensors of
hundreds of millions of elements.
"""
from bench_data import EPSILON, EXP_AVG_FACTOR

# Elements per op the host reference handles (about 0.1 s of NumPy per
# million); at least one whole channel is always checked.
SAMPLE_ELEMENTS = 1 << 21


def sample_channels(torch, shape, device):
    """Indices of the channels to check, spread over C, the last one always in
    (it lives at the largest offsets)."""
    channels = shape[1]
    per_channel = 1
    for d, length in enumerate(shape):
        if d != 1:
            per_channel *= length
    count = max(1, min(channels, SAMPLE_ELEMENTS // per_channel))
    if count == 1:
        picked = [channels - 1]
    else:
        picked = sorted({round(i * (channels - 1) / (count - 1)) for i in range(count)})
    return torch.tensor(picked, dtype=torch.long, device=device)


def _data64(torch, tensor, channels):
    """The sampled channels of a logical (N, C, ...) tensor as float64 NumPy."""
    return tensor.index_select(1, channels).to(torch.float64).cpu().numpy()


def _param64(torch, vector, channels):
    return vector.index_select(0, channels).to(torch.float64).cpu().numpy()


class Verifier:
    """Binds the package's reference and tolerance table to sampled channels.
    Each method returns the list of failures (empty: verified)."""

    def __init__(self, torch, miopen_bn):
        self.torch = torch
        self.reference = miopen_bn.reference
        self.tolerances = miopen_bn.tolerances

    def _check(self, failures, name, out, expected, kind, picked, dim):
        """Compares the picked channels of `out` (a torch tensor; the table's
        row is its own dtype) with the reference's values."""
        got = out.index_select(dim, picked).to(self.torch.float64).cpu().numpy()
        result = self.tolerances.compare(got, expected, out.dtype, kind, name=name)
        if not result.passed:
            failures.append(result.message())

    def inference(self, case, y):
        torch, ch = self.torch, sample_channels(self.torch, case.shape, case.x.device)
        expected = self.reference.batchnorm_forward_inference(
            _data64(torch, case.x, ch), _param64(torch, case.scale, ch),
            _param64(torch, case.bias, ch), _param64(torch, case.est_mean, ch),
            _param64(torch, case.est_var, ch), mode="spatial", epsilon=EPSILON)
        failures = []
        self._check(failures, "y", y, expected, self.tolerances.ELEMENTWISE, ch, 1)
        return failures

    def training(self, case, y, saved_mean, saved_inv_var, running_mean, running_var,
                 running_mean_before, running_var_before):
        torch, ch = self.torch, sample_channels(self.torch, case.shape, case.x.device)
        ref = self.reference.batchnorm_forward_training(
            _data64(torch, case.x, ch), _param64(torch, case.scale, ch),
            _param64(torch, case.bias, ch), mode="spatial", epsilon=EPSILON,
            exp_avg_factor=EXP_AVG_FACTOR,
            running_mean=_param64(torch, running_mean_before, ch),
            running_var=_param64(torch, running_var_before, ch))
        failures = []
        self._check(failures, "y", y, ref["y"], self.tolerances.ELEMENTWISE, ch, 1)
        for name, out in (("saved_mean", saved_mean), ("saved_inv_var", saved_inv_var),
                          ("running_mean", running_mean), ("running_var", running_var)):
            self._check(failures, name, out, ref[name], self.tolerances.REDUCTION, ch, 0)
        return failures

    def backward(self, case, dx, dscale, dbias):
        torch, ch = self.torch, sample_channels(self.torch, case.shape, case.x.device)
        ref = self.reference.batchnorm_backward(
            _data64(torch, case.x, ch), _data64(torch, case.dy, ch),
            _param64(torch, case.scale, ch), saved_mean=_param64(torch, case.saved_mean, ch),
            saved_inv_var=_param64(torch, case.saved_inv_var, ch), mode="spatial",
            epsilon=EPSILON)
        failures = []
        self._check(failures, "dx", dx, ref["dx"], self.tolerances.ELEMENTWISE, ch, 1)
        self._check(failures, "dscale", dscale, ref["dscale"], self.tolerances.REDUCTION, ch, 0)
        self._check(failures, "dbias", dbias, ref["dbias"], self.tolerances.REDUCTION, ch, 0)
        return failures
