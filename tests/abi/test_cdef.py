"""The cffi declarations come from the header alone, and cannot drift from it."""

from __future__ import annotations

import importlib.metadata

import pytest
from support import REPO

import miopen_bn
from miopen_bn import cdef


def test_integer_defines_kept_other_directives_dropped():
    text = "#include <x.h>\n#define A 3\n#define B -0x10\n#define C(x) x\n#define D\nint f(void);\n"
    assert cdef.generate_cdef(text) == "#define A 3\n#define B -0x10\nint f(void);\n"


def test_comments_stripped_and_continuations_joined():
    text = "/* a\n comment */ int f(void); // tail\n#define LONG \\\n 7\n"
    assert cdef.generate_cdef(text).split() == "int f(void); #define LONG 7".split()


def test_conditionals_take_the_plain_c_branch():
    text = "\n".join(
        [
            "#ifndef GUARD_H_",
            "#define GUARD_H_",
            "#ifdef __cplusplus",
            'extern "C" {',
            "int cplusplus_only(void);",
            "#endif",
            "#if defined(HIP_SOMETHING)",
            "typedef int hip_branch;",
            "#elif defined(CUDART_VERSION)",
            "typedef int cuda_branch;",
            "#else",
            "typedef int plain_c;",
            "#endif",
            "#ifdef __cplusplus",
            "}",
            "#endif",
            "#endif",
        ]
    )
    out = cdef.generate_cdef(text)
    assert "plain_c" in out
    for absent in ("cplusplus_only", "hip_branch", "cuda_branch", "extern", "{", "}"):
        assert absent not in out


def test_export_token_removed():
    out = cdef.generate_cdef("MIOPEN_BN_EXPORT int f(void);\n")
    assert out.strip() == "int f(void);"


def test_enum_base_token_removed():
    out = cdef.generate_cdef("typedef enum MIOPEN_BN_ENUM_BASE { a = 0 } e_t;\n")
    assert "MIOPEN_BN_ENUM_BASE" not in out
    assert out.split() == ["typedef", "enum", "{", "a", "=", "0", "}", "e_t;"]


def test_unbalanced_conditionals_are_errors():
    with pytest.raises(ValueError, match="left open"):
        cdef.generate_cdef("#ifndef X\nint f(void);\n")
    with pytest.raises(ValueError, match="unbalanced"):
        cdef.generate_cdef("#endif\n")


def test_declared_functions_skip_typedefs():
    text = "typedef int (*callback)(int);\nint first(void);\nconst char* second(int a, int b);\n"
    assert cdef.declared_functions(text) == ["first", "second"]


def test_header_version_reads_the_three_defines():
    text = (
        "#define MIOPEN_BN_VERSION_MAJOR 2\n"
        "#define MIOPEN_BN_VERSION_MINOR 10\n"
        "#define MIOPEN_BN_VERSION_PATCH 3\n"
    )
    assert cdef.header_version(text) == "2.10.3"
    with pytest.raises(ValueError, match="PATCH"):
        cdef.header_version(text.rsplit("\n", 2)[0])


# --- drift: the shipped header, the repository's header and the library ----


def test_installed_header_equals_the_repository_header():
    repo_header = REPO / "include" / "miopen_bn.h"
    used = cdef.header_path()
    if not repo_header.is_file():
        pytest.skip("no repository checkout next to the tests")
    assert used.read_bytes() == repo_header.read_bytes(), (
        f"{used} differs from {repo_header}: rebuild/reinstall the package"
    )


def test_every_declared_function_is_exported(library):
    names = cdef.declared_functions(cdef.generate_cdef(cdef.header_path().read_text()))
    assert "miopenBatchNormalizationForwardTraining" in names and len(names) >= 30
    missing = [name for name in names if not hasattr(library.lib, name)]
    assert not missing, f"declared in the header but not exported by {library.path}: {missing}"


def test_enum_values_reach_python_unchanged(lib):
    # A few spot values of MIOpen's enumerations: the cdef carries the header's.
    assert lib.miopenStatusVersionMismatch == 10
    assert lib.miopenBFloat16 == 5 and lib.miopenDouble == 6
    assert lib.miopenTensorNDHWC == 8
    assert lib.miopenBNSpatial == 1 and lib.miopenBNPerActivation == 0


def test_versions_agree(library, lib, ffi):
    assert library.version == miopen_bn.__version__
    header = f"{lib.MIOPEN_BN_VERSION_MAJOR}.{lib.MIOPEN_BN_VERSION_MINOR}.{lib.MIOPEN_BN_VERSION_PATCH}"
    assert header == miopen_bn.__version__
    try:
        installed = importlib.metadata.version("miopen-bn")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("package metadata not installed (running from a source tree)")
    assert installed == miopen_bn.__version__


def test_miopen_api_version_is_3_4_0(lib, ffi):
    parts = ffi.new("size_t[3]")
    assert lib.miopenGetVersion(parts + 0, parts + 1, parts + 2) == lib.miopenStatusSuccess
    assert tuple(parts) == (3, 4, 0)
    assert lib.miopenGetVersion(ffi.NULL, ffi.NULL, ffi.NULL) == lib.miopenStatusSuccess


def test_address_declarations_take_integers_for_data_pointers(library, ffi, lib):
    """Library.by_address declares entry points with uintptr_t for every
    void pointer, void* for every other pointer and int for every enum,
    everything else as the header says; a call through them reaches the
    same functions."""
    name = "miopenGroupNormForward"
    text = cdef.address_declarations({name: ffi.typeof(getattr(lib, name))})
    assert text == (f"int {name}(void*, int, void*, uintptr_t, void*, uintptr_t, void*, "
                    "uintptr_t, uint64_t, float, void*, uintptr_t, void*, uintptr_t, void*, uintptr_t);\n")
    by_address = library.by_address("miopenGetTensorDescriptorSize", "miopenSet4dTensorDescriptor")
    with miopen_bn.TensorDescriptor() as descriptor:
        assert by_address.miopenSet4dTensorDescriptor(descriptor.ptr, lib.miopenHalf, 2, 3, 4, 5) == 0
        rank = ffi.new("int*")
        assert by_address.miopenGetTensorDescriptorSize(descriptor.ptr, rank) == 0
        assert rank[0] == 4 and descriptor.shape == (2, 3, 4, 5) and descriptor.dtype == "float16"
        assert by_address.miopenGetTensorDescriptorSize(ffi.NULL, ffi.NULL) == lib.miopenStatusBadParm
