"""The C ABI as C and C++ programs see it.

Compiles tests/c/test_abi.c against <miopen/miopen.h> from this repository and
links it with the libmiopen_bn.so that the installed package loads, then runs
it on the CPU backend.  Skips only when no C compiler is installed.
"""
import subprocess

import pytest
from support.native_programs import INCLUDE, REPO, build_c_program, compiler, run_program

C_TESTS = REPO / "tests" / "c"


@pytest.fixture(scope="module")
def test_abi_binary(tmp_path_factory):
    return build_c_program(C_TESTS / "test_abi.c", tmp_path_factory.mktemp("c_abi") / "test_abi")


def test_c_program_passes_every_check(test_abi_binary):
    result = run_program(test_abi_binary)
    summary = result.stdout.strip().splitlines()[-1]
    assert result.returncode == 0, result.stderr + result.stdout
    passed, failed = (int(part.split()[0]) for part in summary.split(","))
    assert failed == 0 and passed > 200, summary


def test_failed_calls_log_their_reason_at_error_level(test_abi_binary):
    result = run_program(test_abi_binary, MIOPEN_LOG_LEVEL="3")
    assert result.returncode == 0
    assert "Error [miopenBatchNormalizationForwardTraining] miopenStatusBadParm: exactly one of" in result.stderr
    assert "Error [miopenCreate] miopenStatusBadParm: handle is NULL" in result.stderr


def test_quiet_level_silences_errors(test_abi_binary):
    result = run_program(test_abi_binary, MIOPEN_LOG_LEVEL="1")
    assert result.stderr == ""


def test_hipdnn_log_level_is_understood(test_abi_binary):
    assert run_program(test_abi_binary, MIOPEN_LOG_LEVEL="", HIPDNN_LOG_LEVEL="off").stderr == ""
    assert "Error [" in run_program(test_abi_binary, MIOPEN_LOG_LEVEL="", HIPDNN_LOG_LEVEL="error").stderr


def test_api_logging_shows_arguments_and_driver_commands(test_abi_binary, tmp_path):
    log = tmp_path / "calls.log"
    run_program(test_abi_binary, MIOPEN_ENABLE_LOGGING="1", MIOPEN_ENABLE_LOGGING_CMD="1", MIOPEN_BN_LOG_FILE=str(log))
    text = log.read_text()
    assert "[miopenSet4dTensorDescriptor] {tensorDesc = 0x" in text
    assert "xDesc = miopenFloat [3, 4, 5, 7] strides [140, 35, 7, 1]" in text
    assert ("Command [miopenBatchNormalizationForwardTraining] miopen-bn-driver bnorm -n 3 -c 4 -H 5 -W 7 -m 1 "
            "--forw 1 -b 0 -s 1 -r 1 --layout NCHW") in text
    assert "Command [miopenBatchNormalizationBackward] miopen-bn-driver bnorm -n 3 -c 4 -H 5 -W 7 -m 1 --forw 0 -b 1 -s 1" in text


def test_header_compiles_as_cpp_and_strict_c(tmp_path):
    source = tmp_path / "include_check.c"
    source.write_text("#include <miopen/miopen.h>\n#include <miopen_bn.h>\n"
                      "int main(void) { return (int)sizeof(miopenAcceleratorQueue_t) - (int)sizeof(void*); }\n")
    subprocess.run([compiler("cc", "gcc", "clang"), "-std=c99", "-pedantic", "-Wall", "-Werror",
                    f"-I{INCLUDE}", "-fsyntax-only", str(source)], check=True)
    subprocess.run([compiler("c++", "g++", "clang++"), "-x", "c++", "-std=c++11", "-pedantic", "-Wall", "-Werror",
                    f"-I{INCLUDE}", "-fsyntax-only", str(source)], check=True)
