// Host check of MIOPEN_BN_GPU_ALGORITHM's rules (native/gpu/algorithm_names.hpp),
// built and run by test_algorithm_names.py without a GPU.  Prints one line per
// algorithm ("algorithm NAME OPS") and "N failure(s)".
#include "gpu/algorithm_names.hpp"

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

using namespace mbn;
using namespace mbn::gpu;

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
    if (ok) return;
    ++failures;
    std::printf("FAIL %s\n", what.c_str());
}

constexpr GpuOp kOps[] = {kOpTraining, kOpBackward, kOpInference, kOpGnForward, kOpGnBackward};

// The value must be refused with BadParm, naming the variable, the value and every algorithm.
void expect_refused(const char* text) {
    try {
        parse_algorithm_request(text, kOpTraining);
        expect(false, std::string("'") + text + "' was accepted");
    } catch (const Error& e) {
        const std::string message = e.what();
        expect(e.status() == miopenStatusBadParm, std::string("'") + text + "' gave another status than BadParm");
        expect(message.find(std::string(kAlgorithmVariable) + "=" + text + " names no GPU algorithm") !=
                   std::string::npos,
               "the refusal of '" + std::string(text) + "' does not say what was wrong: " + message);
        for (const AlgorithmEntry& e2 : kAlgorithms)
            expect(message.find(e2.name) != std::string::npos,
                   "the refusal does not list " + std::string(e2.name) + ": " + message);
    }
}

}  // namespace

int main() {
    std::set<std::string> names;
    std::set<int> values;
    for (const AlgorithmEntry& e : kAlgorithms) {
        std::printf("algorithm %s", e.name);
        for (GpuOp op : kOps)
            if (e.ops & op) std::printf(" %d", static_cast<int>(op));
        std::printf("\n");
        expect(names.insert(e.name).second, std::string("duplicate name ") + e.name);
        expect(values.insert(static_cast<int>(e.algorithm)).second, std::string("duplicate value of ") + e.name);
        expect(std::string(algorithm_name(e.algorithm)) == e.name, std::string("name round trip of ") + e.name);
        expect(e.ops != 0, std::string(e.name) + " implements no op");
        for (GpuOp op : kOps) {
            const AlgorithmRequest r = parse_algorithm_request(e.name, op);
            expect(r.forced == ((e.ops & op) != 0),
                   std::string(e.name) + " forced or not where it should not be, op " + op_name(op));
            if (r.forced) expect(r.algorithm == e.algorithm, std::string(e.name) + " parsed to another algorithm");
        }
    }
    // Every op has at least two algorithms to choose among.
    for (GpuOp op : kOps) {
        int count = 0;
        for (const AlgorithmEntry& e : kAlgorithms) count += (e.ops & op) != 0;
        expect(count >= 2, std::string(op_name(op)) + " has fewer than two algorithms");
    }
    for (GpuOp op : kOps) {
        expect(!parse_algorithm_request(nullptr, op).forced, "unset forced something");
        expect(!parse_algorithm_request("", op).forced, "empty forced something");
    }
    for (const char* bad : {"Resident", "resident ", "force", "0", "1", "auto", "channel-tiles", "gn_onchip"})
        expect_refused(bad);

    // The variable itself, read at each call.
    setenv(kAlgorithmVariable, "wave_tiles", 1);
    const AlgorithmRequest forced = requested_algorithm(kOpBackward);
    expect(forced.forced && forced.algorithm == Algorithm::wave_tiles, "the variable's wave_tiles was not read");
    expect(!requested_algorithm(kOpGnForward).forced, "wave_tiles forced a group-norm call");
    setenv(kAlgorithmVariable, "gn_chunks", 1);
    expect(requested_algorithm(kOpGnForward).forced, "a changed value was not read again");
    expect(!requested_algorithm(kOpGnBackward).forced, "gn_chunks forced the group-norm backward");
    setenv(kAlgorithmVariable, "no_such_algorithm", 1);
    bool refused = false;
    try {
        requested_algorithm(kOpInference);
    } catch (const Error& e) {
        refused = e.status() == miopenStatusBadParm;
    }
    expect(refused, "an unknown name in the variable was not refused");
    unsetenv(kAlgorithmVariable);
    expect(!requested_algorithm(kOpTraining).forced, "unsetting the variable did not restore the default");

    std::printf("%d failure(s)\n", failures);
    return failures == 0 ? 0 : 1;
}
