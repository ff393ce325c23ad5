"""Checks one op's outputs against miopen_bn's float64 reference, before the
op is timed.

Spatial batch norm treats every channel on its own, so the check runs the
reference on a sample of whole channels (all of them when the tensor is small)
copied to the host: exact for those channels, and cheap on tensors of
hundreds of millions of elements.  Group norm likewise on a sample of whole
groups (their channels in every sample n), the channels of the picked groups
forming a smaller group-norm problem of their own; its checks work on NumPy
arrays, so they run without torch too.
"""
from bench_data import EPSILON, EXP_AVG_FACTOR

# Elements per op the host reference handles (about 0.1 s of NumPy per
# million); at least one whole channel is always checked.
SAMPLE_ELEMENTS = 1 << 21


def _spread(count, total):
    """`count` indices spread over range(total), the last one always in."""
    if count == 1:
        return [total - 1]
    return sorted({round(i * (total - 1) / (count - 1)) for i in range(count)})


def len_product(shape):
    count = 1
    for length in shape:
        count *= length
    return count


def sample_channels(torch, shape, device):
    """Indices of the channels to check, spread over C, the last one always in
    (it lives at the largest offsets)."""
    channels = shape[1]
    count = max(1, min(channels, SAMPLE_ELEMENTS // (len_product(shape) // channels)))
    return torch.tensor(_spread(count, channels), dtype=torch.long, device=device)


def sample_groups(shape, num_groups, budget=SAMPLE_ELEMENTS):
    """Indices of the groups to check (at least one, the last always in)."""
    per_group = len_product(shape) // num_groups
    return _spread(max(1, min(num_groups, budget // per_group)), num_groups)


def group_channels(groups, channels_per_group):
    """The channels of the given groups, in order."""
    return [g * channels_per_group + i for g in groups for i in range(channels_per_group)]


def _failures(tolerances, checks):
    """Failure messages of (name, got, expected, dtype, kind) comparisons."""
    failures = []
    for name, got, expected, dtype, kind in checks:
        result = tolerances.compare(got, expected, dtype, kind, name=name)
        if not result.passed:
            failures.append(result.message())
    return failures


def groupnorm_forward_failures(reference, tolerances, x, weight, bias, activation, y, mean, rstd, io_dtype,
                               num_groups=None):
    """Group-norm forward outputs on sampled groups (NumPy arrays: x, y of
    the picked channels, weight/bias of those channels, mean/rstd of the
    picked groups' columns) against the reference; float32 statistics.
    mean and rstd may be None (an op that does not return them: y alone is
    checked, `num_groups` then naming the picked groups' count)."""
    groups = mean.shape[1] if mean is not None else num_groups
    ref = reference.groupnorm_forward(x, groups, weight, bias, epsilon=EPSILON, activation=activation)
    checks = [("y", y, ref["y"], io_dtype, tolerances.ELEMENTWISE)]
    if mean is not None:
        checks += [("mean", mean, ref["mean"], "float32", tolerances.REDUCTION),
                   ("rstd", rstd, ref["rstd"], "float32", tolerances.REDUCTION)]
    return _failures(tolerances, checks)


def groupnorm_backward_failures(reference, tolerances, x, dy, weight, mean, rstd, dx, dweight, dbias, io_dtype,
                                param_dtype="float32"):
    """Group-norm backward outputs on sampled groups, as the forward's check;
    dweight and dbias of `param_dtype`."""
    ref = reference.groupnorm_backward(x, dy, mean.shape[1], weight, mean, rstd)
    return _failures(tolerances, [
        ("dx", dx, ref["dx"], io_dtype, tolerances.ELEMENTWISE),
        ("dweight", dweight, ref["dweight"], param_dtype, tolerances.REDUCTION),
        ("dbias", dbias, ref["dbias"], param_dtype, tolerances.REDUCTION),
    ])


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

    def training(self, case, y, saved_mean, saved_inv_std, running_mean, running_var,
                 running_mean_before, running_var_before):
        """saved_mean and saved_inv_std may be None (F.batch_norm does not
        return them): the other outputs are checked."""
        torch, ch = self.torch, sample_channels(self.torch, case.shape, case.x.device)
        ref = self.reference.batchnorm_forward_training(
            _data64(torch, case.x, ch), _param64(torch, case.scale, ch),
            _param64(torch, case.bias, ch), mode="spatial", epsilon=EPSILON,
            exp_avg_factor=EXP_AVG_FACTOR,
            running_mean=_param64(torch, running_mean_before, ch),
            running_var=_param64(torch, running_var_before, ch))
        failures = []
        self._check(failures, "y", y, ref["y"], self.tolerances.ELEMENTWISE, ch, 1)
        for name, out in (("saved_mean", saved_mean), ("saved_inv_std", saved_inv_std),
                          ("running_mean", running_mean), ("running_var", running_var)):
            if out is None:
                continue
            self._check(failures, name, out, ref[name], self.tolerances.REDUCTION, ch, 0)
        return failures

    def backward(self, case, dx, dscale, dbias):
        torch, ch = self.torch, sample_channels(self.torch, case.shape, case.x.device)
        ref = self.reference.batchnorm_backward(
            _data64(torch, case.x, ch), _data64(torch, case.dy, ch),
            _param64(torch, case.scale, ch), saved_mean=_param64(torch, case.saved_mean, ch),
            saved_inv_std=_param64(torch, case.saved_inv_std, ch), mode="spatial",
            epsilon=EPSILON)
        failures = []
        self._check(failures, "dx", dx, ref["dx"], self.tolerances.ELEMENTWISE, ch, 1)
        self._check(failures, "dscale", dscale, ref["dscale"], self.tolerances.REDUCTION, ch, 0)
        self._check(failures, "dbias", dbias, ref["dbias"], self.tolerances.REDUCTION, ch, 0)
        return failures

    # -- group norm ----------------------------------------------------------
    def _group_sample(self, case, num_groups):
        """The picked groups, and their channels as an index tensor."""
        groups = sample_groups(case.shape, num_groups)
        channels = group_channels(groups, case.shape[1] // num_groups)
        return groups, self.torch.tensor(channels, dtype=self.torch.long, device=case.x.device)

    def _columns(self, stats, groups):
        return stats.index_select(1, self.torch.tensor(groups, device=stats.device)).to(
            self.torch.float64).cpu().numpy()

    def groupnorm_forward(self, case, num_groups, activation, y, mean=None, rstd=None, weight=None, bias=None):
        """mean and rstd None: y alone is checked.  weight and bias: the ones
        the op was given, when not the case's (float32) ones."""
        torch = self.torch
        groups, ch = self._group_sample(case, num_groups)
        weight = case.scale if weight is None else weight
        bias = case.bias if bias is None else bias
        return groupnorm_forward_failures(
            self.reference, self.tolerances, _data64(torch, case.x, ch), _param64(torch, weight, ch),
            _param64(torch, bias, ch), activation, _data64(torch, y, ch),
            None if mean is None else self._columns(mean, groups),
            None if rstd is None else self._columns(rstd, groups), case.x.dtype, num_groups=len(groups))

    def groupnorm_backward(self, case, num_groups, dx, dweight, dbias, statistics=None, weight=None):
        """From the case's float64-derived saved statistics and float32
        weight, or from `statistics` (mean, rstd) and `weight`: the ones the
        checked op was given."""
        torch = self.torch
        groups, ch = self._group_sample(case, num_groups)
        mean, rstd = statistics if statistics is not None else case.group_statistics(num_groups)
        weight = case.scale if weight is None else weight
        return groupnorm_backward_failures(
            self.reference, self.tolerances, _data64(torch, case.x, ch), _data64(torch, case.dy, ch),
            _param64(torch, weight, ch), self._columns(mean, groups), self._columns(rstd, groups),
            _data64(torch, dx, ch), _param64(torch, dweight, ch), _param64(torch, dbias, ch),
            case.x.dtype, param_dtype=dweight.dtype)
