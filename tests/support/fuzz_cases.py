"""One fuzz case: a valid call (fuzz_bases.py) with its mutations
(fuzz_mutations.py) applied.  ``Case`` backs every buffer with memory
covering what its final descriptor describes, fills inputs, NaN-poisons
outputs, calls, and offers the checks test_fuzz_abi.py states as properties."""

from __future__ import annotations

from typing import Optional

import numpy as np
from support.entry_points import (
    ACTIVATION_DESC,
    FUZZED_BATCH_NORM,
    FUZZED_INFERENCE,
    FUZZED_TRAINING,
    PARAMETERS,
    buffer_parameters,
    descriptor_of,
    invoke,
    is_output,
)
from support.fuzz_bases import SCALING_PAIRS, SCALINGS, Base
from support.fuzz_memory import Buffer, DescriptorState, element_space, read_state, strided_view
from support.fuzz_mutations import call_setter
from support.strategies import activations

from miopen_bn import reference
from miopen_bn.tolerances import ELEMENTWISE, REDUCTION, check

# Inputs a well-posed call has positive: scales, variances, inverse std.
POSITIVE_INPUTS = {
    "bnScale", "weight", "resultRunningVariance", "estimatedVariance", "savedInvVariance", "rstd",
    "prevResultRunningVariance", "estimatedInvVariance",
}  # fmt: skip
ACTIVATION_MODES = 11  # miopenActivationMode_t


class Case:
    """Arguments and memory of one call; ``close()`` frees what it made.
    With `handle` the call goes through that (shared) handle, else its own."""

    def __init__(self, lib, ffi, base: Base, mutation_list: list, seed: int, handle=None):
        self.lib, self.ffi, self.base = lib, ffi, base
        self.function = base.function
        self.rng = np.random.default_rng(seed)
        self.values: dict = {}
        self.keep: list = []  # cffi objects that must outlive the call
        self.created_descs: list = []
        self.created_activations: list = []
        self.dead: list = []  # objects to destroy once everything is created
        self.numerics = True  # False once a scalar leaves the ordinary range
        self.buffers: dict = {}
        self.states: dict = {}
        self.snapshots: dict = {}
        self.handle = self._new_handle() if handle is None else None
        self.values["handle"] = handle if handle is not None else self.handle
        for name, state in base.states.items():
            self.values[name] = self.ffi.NULL if state is None else self._new_descriptor(state)
        self.activation = None  # (mode, alpha, beta, gamma) of the activation descriptor
        for name, value in base.scalars.items():
            if name == ACTIVATION_DESC:
                self.activation = value
                self.values[name] = self._new_activation(value)
            else:
                self.values[name] = self._scaling(value) if name in SCALINGS else value
        self.null_buffers = set(base.null_buffers)
        self.aliases = dict(base.aliases)
        for mutation in mutation_list:
            self._apply(*mutation)
        self._destroy_dead()
        self._back_buffers()

    # -- objects ---------------------------------------------------------------
    def _new_handle(self):
        created = self.ffi.new("miopenHandle_t*")
        assert self.lib.miopenBNCreateWithBackend(created, self.lib.miopenBNBackendCPU) == 0
        return created[0]

    def _new_descriptor(self, state: Optional[DescriptorState] = None):
        created = self.ffi.new("miopenTensorDescriptor_t*")
        assert self.lib.miopenCreateTensorDescriptor(created) == 0
        self.created_descs.append(created[0])
        if state is not None:
            self._set(created[0], state.dtype_code, state.lens, state.strides)
        return created[0]

    def _new_activation(self, spec: tuple):
        created = self.ffi.new("miopenActivationDescriptor_t*")
        assert self.lib.miopenCreateActivationDescriptor(created) == 0
        self.created_activations.append(created[0])
        assert self.lib.miopenSetActivationDescriptor(created[0], *spec) == 0
        return created[0]

    def _set(self, desc, dtype: int, lens: tuple, strides: Optional[tuple]) -> int:
        dims = self.ffi.new("int[]", list(lens) or [1])
        c_strides = self.ffi.NULL if strides is None else self.ffi.new("int[]", list(strides) or [1])
        return self.lib.miopenSetTensorDescriptor(desc, dtype, len(lens), dims, c_strides)

    def _scaling(self, value: float):
        pointer = self.ffi.new("float*", value)
        self.keep.append(pointer)
        return pointer

    def _foreign(self, kind: str):
        memory = self.ffi.new("char[256]")
        self.keep.append(memory)
        return self.ffi.cast(kind, memory)

    def _destroy_dead(self) -> None:
        # Destroyed only now: a later create could reuse the address, making
        # it live again, which no registry can tell apart.
        for kind, obj in self.dead:
            if kind == "handle":
                assert self.lib.miopenDestroy(obj) == 0
            elif kind == "activation":
                self.created_activations.remove(obj)
                assert self.lib.miopenDestroyActivationDescriptor(obj) == 0
            else:
                self.created_descs.remove(obj)
                assert self.lib.miopenDestroyTensorDescriptor(obj) == 0

    # -- mutations -------------------------------------------------------------
    def _apply(self, kind: str, target: str, payload) -> None:
        lib, ffi = self.lib, self.ffi
        if kind in ("setter", "restride", "retype", "relength"):
            desc = self.values[target]
            if desc == ffi.NULL:
                desc = self.values[target] = self._new_descriptor()
            if kind == "setter":
                call_setter(lib, ffi, desc, payload)
                return
            state = read_state(lib, ffi, desc)
            if state is None:
                return
            if kind == "restride":
                self._set(desc, state.dtype_code, state.lens, payload[: len(state.lens)])
            elif kind == "retype":
                self._set(desc, payload, state.lens, state.strides)
            else:
                change, index = payload
                lens = list(state.lens)
                if change in ("grow", "one"):
                    lens[index % len(lens)] = lens[index % len(lens)] + 1 if change == "grow" else 1
                elif change == "drop" and len(lens) > 1:
                    lens.pop(index % len(lens))
                elif change == "append":
                    lens.append(2)
                self._set(desc, state.dtype_code, tuple(lens), None)
        elif kind == "descriptor":
            if payload == "null":
                self.values[target] = ffi.NULL
            elif payload == "unset":
                self.values[target] = self._new_descriptor()
            elif payload == "dead":
                dead = self._new_descriptor()
                self.dead.append(("descriptor", dead))
                self.values[target] = dead
            else:
                self.values[target] = self._foreign("miopenTensorDescriptor_t")
        elif kind == "null_buffer":
            self.null_buffers.add(target)
        elif kind == "scalar":
            self.values[target] = payload
            self.numerics = False
        elif kind == "handle":
            if payload == "null":
                self.values["handle"] = ffi.NULL
            elif payload == "dead":
                dead = self._new_handle()
                self.dead.append(("handle", dead))
                self.values["handle"] = dead
            else:
                self.values["handle"] = self._foreign("miopenHandle_t")
        elif kind == "scaling":
            self.values[target] = self._scaling(payload)
            self.numerics = False
        elif kind == "null_scaling":
            self.values[target] = ffi.NULL
        elif kind == "pair":
            self.null_buffers.add(target)
        elif kind == "activation":
            if payload == "null":
                self.values[target] = ffi.NULL
            elif payload == "dead":
                dead = self._new_activation((0, 0.0, 0.0, 0.0))
                self.dead.append(("activation", dead))
                self.values[target] = dead
            elif payload == "foreign":
                self.values[target] = self._foreign("miopenActivationDescriptor_t")
            else:  # a mode outside the enumeration is refused by the setter; the descriptor keeps its mode
                assert lib.miopenSetActivationDescriptor(self.values[target], ACTIVATION_MODES, 0.0, 0.0, 0.0) == 3
        else:
            self.aliases[target] = payload

    # -- memory ----------------------------------------------------------------
    def _back_buffers(self) -> None:
        """Memory for every buffer from its final descriptor, then the data."""
        lib, ffi = self.lib, self.ffi
        for name in buffer_parameters(self.function):
            desc = self.values[descriptor_of(self.function, name)]
            self.states[name] = read_state(lib, ffi, desc)
            if name in self.null_buffers or name in self.aliases:
                continue
            self.buffers[name] = Buffer.covering(element_space(lib, ffi, desc), self.states[name])
        for output, source in self.aliases.items():
            if output not in self.null_buffers:
                self.buffers[output] = self.buffers.get(source)
        for name in buffer_parameters(self.function):
            buffer = self.buffers.get(name)
            self.values[name] = ffi.NULL if buffer is None else ffi.cast("void*", buffer.ptr)
        for name, buffer in self.buffers.items():
            if buffer is not None and name not in self.aliases and self.states[name] is not None:
                self._fill(name, buffer, self.states[name])
        for buffer in self.unique_buffers():
            self.snapshots[id(buffer)] = self._snapshot(buffer)

    def _blended(self, name: str) -> bool:
        for beta, (_, outputs) in SCALING_PAIRS.items():
            if name in outputs:
                pointer = self.values.get(beta)
                return pointer is not None and pointer != self.ffi.NULL and pointer[0] != 0.0
        return False

    def _fill(self, name: str, buffer: Buffer, state: DescriptorState) -> None:
        """Inputs (and read-modify-write running statistics, and outputs
        blended with their prior) get data; other outputs stay NaN (0xFF)."""
        written = is_output(self.function, name) and not name.startswith("resultRunning")
        if not state.is_float or (written and not self._blended(name)):
            return  # integer types: the library must refuse them anyway
        buffer.view(state)[...] = self._data(name, state.lens, written).astype(state.numpy_dtype)

    def _data(self, name: str, lens: tuple, written: bool) -> np.ndarray:
        rng = self.rng
        if name == "x" and len(lens) >= 2:
            return activations(rng, lens, self.base.mode if self.function in FUZZED_BATCH_NORM else None)
        if name in POSITIVE_INPUTS:
            return rng.uniform(0.5, 2.0, lens)
        if name in ("x", "dy") or written:
            return rng.standard_normal(lens)
        return rng.uniform(-1.0, 1.0, lens)

    def unique_buffers(self) -> list:
        seen, result = set(), []
        for buffer in self.buffers.values():
            if buffer is not None and id(buffer) not in seen:
                seen.add(id(buffer))
                result.append(buffer)
        return result

    def _snapshot(self, buffer: Buffer) -> np.ndarray:
        if not buffer.sparse:
            return buffer.root.copy()
        # Only the elements of the one tensor a sparse buffer backs are ever touched.
        name = next(n for n, b in self.buffers.items() if b is buffer)
        return buffer.view(self.states[name]).copy()

    # -- the call and its checks -------------------------------------------------
    def call(self) -> int:
        return invoke(self.lib, self.function, self.values)

    def changed_buffers(self) -> list:
        """Names of buffers whose memory differs from before the call."""
        return sorted(
            name
            for name, buffer in self.buffers.items()
            if buffer is not None and self._snapshot(buffer).tobytes() != self.snapshots[id(buffer)].tobytes()
        )

    def outputs(self) -> list:
        return [name for name, b in self.buffers.items() if b is not None and is_output(self.function, name)]

    def output_bytes(self) -> dict:
        """Every output's elements as bytes, in logical order."""
        return {name: self._after(name).tobytes() for name in self.outputs()}

    def stray_writes(self) -> list:
        """Buffers written outside what an output descriptor addresses: inputs
        (unless an output shares them) and the gaps of strided outputs."""
        found = []
        written = {id(self.buffers[name]): name for name in self.outputs()}
        for name, buffer in self.buffers.items():
            if buffer is None or buffer.sparse:
                continue
            before, after = self.snapshots[id(buffer)], buffer.root
            state = self.states.get(written[id(buffer)]) if id(buffer) in written else None
            if state is not None:
                keep = ~buffer.addressed_bytes(state)
                if not np.array_equal(before[keep], after[keep]):
                    found.append(name)
            elif before.tobytes() != after.tobytes():
                found.append(name)
        return sorted(set(found))

    def close(self) -> None:
        for desc in self.created_descs:
            assert self.lib.miopenDestroyTensorDescriptor(desc) == 0
        self.created_descs = []
        for activation in self.created_activations:
            assert self.lib.miopenDestroyActivationDescriptor(activation) == 0
        self.created_activations = []
        if self.handle is not None:
            assert self.lib.miopenDestroy(self.handle) == 0
            self.handle = None
        for buffer in self.unique_buffers():
            buffer.release()
        self.buffers = {}

    # -- batch norm against the reference ----------------------------------------
    def _before(self, name: str):
        buffer = self.buffers.get(name)
        if buffer is None:
            return None
        if buffer.sparse:
            return self.snapshots[id(buffer)]
        return strided_view(self.snapshots[id(buffer)], self.states[name])

    def _after(self, name: str):
        buffer = self.buffers.get(name)
        return None if buffer is None else buffer.view(self.states[name])

    def _scalar(self, name: str) -> float:
        return float(self.values[name][0])

    def well_conditioned(self) -> bool:
        """Ordinary scalars, and every statistic over values that really vary
        (a mutated view of x may make a feature nearly constant, where
        rounding noise divided by its tiny std would dominate)."""
        if not self.numerics or self.function not in FUZZED_BATCH_NORM:
            return False
        x = self._before("x").astype(np.float64)
        _, var = reference.batch_statistics(x, self.base.mode)
        return bool(np.all(var >= 1e-2))

    def check_batch_norm(self) -> None:
        """Outputs of a succeeding batch-norm call against the float64 reference."""
        b, a = self._before, self._after
        mode = "spatial" if self.values["bn_mode"] == 1 else "per_activation"
        epsilon = self.values["epsilon"]
        x, scale = b("x"), b("bnScale")

        def compare(name, expected, kind):
            check(a(name), expected, a(name).dtype, kind, name)

        fused = self.activation  # None: no activation descriptor
        v3 = "prevResultRunningMean" in PARAMETERS[self.function]
        if self.function in FUZZED_TRAINING:
            previous = ("prevResultRunningMean", "prevResultRunningVariance") if v3 else (
                "resultRunningMean", "resultRunningVariance")  # fmt: skip
            ref = reference.batchnorm_forward_training(
                x, scale, b("bnBias"), mode=mode, epsilon=epsilon, exp_avg_factor=self.values["expAvgFactor"],
                running_mean=b(previous[0]), running_var=b(previous[1]),
                alpha=self._scalar("alpha"), beta=self._scalar("beta"), y_prior=b("y"), fused_activation=fused,
            )
            compare("y", ref["y"], ELEMENTWISE)
            for name, key in (("resultSaveMean", "saved_mean"), ("resultSaveInvVariance", "saved_inv_std"),
                              ("resultRunningMean", "running_mean"), ("resultRunningVariance", "running_var"),
                              ("nextResultRunningMean", "running_mean"), ("nextResultRunningVariance", "running_var")):
                if self.buffers.get(name) is not None:
                    compare(name, ref[key], REDUCTION)
        elif self.function in FUZZED_INFERENCE:
            inverse = "estimatedInvVariance" in PARAMETERS[self.function]
            ref = reference.batchnorm_forward_inference(
                x, scale, b("bnBias"), b("estimatedMean"), b("estimatedInvVariance" if inverse else "estimatedVariance"),
                mode=mode, epsilon=1e-5 if inverse else epsilon, alpha=self._scalar("alpha"),
                beta=self._scalar("beta"), y_prior=b("y"), fused_activation=fused, var_is_inv_std=inverse,
            )
            compare("y", ref, ELEMENTWISE)
        else:
            ref = reference.batchnorm_backward(
                x, b("dy"), scale, saved_mean=b("savedMean"), saved_inv_std=b("savedInvVariance"), mode=mode,
                epsilon=epsilon, alpha_data=self._scalar("alphaDataDiff"), beta_data=self._scalar("betaDataDiff"),
                alpha_param=self._scalar("alphaParamDiff"), beta_param=self._scalar("betaParamDiff"),
                dx_prior=b("dx"), dscale_prior=b("resultBnScaleDiff"), dbias_prior=b("resultBnBiasDiff"),
                bias=b("bnBias"), fused_activation=fused,
            )
            compare("dx", ref["dx"], ELEMENTWISE)
            compare("resultBnScaleDiff", ref["dscale"], REDUCTION)
            compare("resultBnBiasDiff", ref["dbias"], REDUCTION)
