// GPU-versus-CPU check of every batch-norm entry point, through the C API.
//
// For each case it creates the tensors (fresh random data, outputs poisoned
// with NaN, or a random prior when beta != 0), runs the same call on a CPU
// handle (host buffers) and on a GPU handle (device buffers), and compares
// the GPU's outputs with the CPU's:  |gpu - cpu| <= atol + rtol * |cpu| per
// element, atol and rtol by output type and kind (y/dx, or statistics and
// parameter gradients) from the package's tolerance table,
// python/miopen_bn/tolerances.csv, through the header the build generates
// from it (cmake/tolerances.cmake).  A float64 reference computed here (the
// formulas of python/miopen_bn/reference.py) is printed beside it (ref=...),
// to tell which backend is off when they disagree.
//
// Beside the plain entry points: every fused activation (forward, inference
// from the estimates or the inverse std, backward), V3 training's separate
// running-statistics buffers, and parameter tensors whose types differ from
// each other (float or x's, per descriptor).
//
// Prints one line per case and "N passed, N failed"; exits 1 on any failure.
// Usage: miopen_bn_gpu_vs_cpu [--quick] [--filter SUBSTRING] [--cpu-only] [--huge] | --bench
#include <miopen_bn.h>
#include <miopen_bn_tolerances.h>

#include "common/activation.hpp"
#include "gpu/hip_compat.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

namespace {

// ---------------------------------------------------------------- helpers --

// --cpu-only: the "GPU" side is a second CPU handle on host copies, to check
// this program itself on a machine without a device.
bool g_cpu_only = false;

[[noreturn]] void die(const std::string& what) {
    std::fprintf(stderr, "fatal: %s\n", what.c_str());
    std::exit(2);
}

void check_gpu(hipError_t status, const char* what) {
    if (status != hipSuccess) die(std::string(what) + ": " + hipGetErrorString(status));
}

void check_api(miopenStatus_t status, const char* what) {
    if (status != miopenStatusSuccess)
        die(std::string(what) + " returned " + miopenGetErrorString(status) + ": " + miopenBNGetLastErrorMessage());
}

std::uint16_t float_to_half(float f) {
    std::uint32_t x;
    std::memcpy(&x, &f, 4);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);
    const int exp = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
    std::uint32_t mant = x & 0x7fffffu;
    if (exp >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);
    if (exp <= 0) {
        if (exp < -10) return static_cast<std::uint16_t>(sign);
        mant |= 0x800000u;
        const int shift = 14 - exp;
        std::uint32_t h = mant >> shift;
        const std::uint32_t rem = mant & ((1u << shift) - 1);
        const std::uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (h & 1))) ++h;
        return static_cast<std::uint16_t>(sign | h);
    }
    std::uint32_t h = (static_cast<std::uint32_t>(exp) << 10) | (mant >> 13);
    const std::uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
    return static_cast<std::uint16_t>(sign | h);
}

float half_to_float(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const int exp = (h >> 10) & 0x1f;
    const std::uint32_t mant = h & 0x3ffu;
    float out;
    if (exp == 0) {
        out = std::ldexp(static_cast<float>(mant), -24);
        return sign ? -out : out;
    }
    std::uint32_t bits;
    if (exp == 31)
        bits = sign | 0x7f800000u | (mant << 13);
    else
        bits = sign | (static_cast<std::uint32_t>(exp - 15 + 127) << 23) | (mant << 13);
    std::memcpy(&out, &bits, 4);
    return out;
}

std::uint16_t float_to_bf16(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
    return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float bf16_to_float(std::uint16_t b) {
    const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

std::size_t type_size(miopenDataType_t t) {
    return t == miopenDouble ? 8 : t == miopenFloat ? 4 : 2;
}

const char* type_name(miopenDataType_t t) {
    switch (t) {
        case miopenHalf: return "f16";
        case miopenBFloat16: return "bf16";
        case miopenFloat: return "f32";
        case miopenDouble: return "f64";
        default: return "?";
    }
}

// Fast deterministic random numbers (xorshift64*): large tensors must fill quickly.
struct Random {
    std::uint64_t state;
    explicit Random(std::uint64_t seed) : state(seed * 0x9E3779B97F4A7C15ull + 1) {}
    std::uint64_t next() {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        return state * 2685821657736338717ull;
    }
    double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
    double symmetric() { return 2.0 * uniform() - 1.0; }
};

// ---------------------------------------------------------------- tensors --

// A tensor on both sides: host bytes (its whole element span) and a device
// copy.  Lengths/strides in the API's logical order.
struct Tensor {
    miopenDataType_t dtype = miopenFloat;
    std::vector<int> lens, strides;
    std::size_t lead = 0;  // elements before the tensor's first one (misaligned views)
    std::vector<unsigned char> host;
    void* device = nullptr;
    miopenTensorDescriptor_t desc = nullptr;

    Tensor() = default;
    Tensor(const Tensor&) = delete;
    Tensor& operator=(const Tensor&) = delete;
    ~Tensor() {
        if (device) {
            if (g_cpu_only)
                std::free(device);
            else
                (void)hipFree(device);
        }
        if (desc) miopenDestroyTensorDescriptor(desc);
    }

    std::size_t span() const {
        std::size_t s = lead + 1;
        for (std::size_t i = 0; i < lens.size(); ++i) s += static_cast<std::size_t>(lens[i] - 1) * strides[i];
        return s;
    }
    std::size_t bytes() const { return span() * type_size(dtype); }

    double get(std::size_t i) const {
        switch (dtype) {
            case miopenHalf: { std::uint16_t v; std::memcpy(&v, &host[i * 2], 2); return half_to_float(v); }
            case miopenBFloat16: { std::uint16_t v; std::memcpy(&v, &host[i * 2], 2); return bf16_to_float(v); }
            case miopenFloat: { float v; std::memcpy(&v, &host[i * 4], 4); return v; }
            default: { double v; std::memcpy(&v, &host[i * 8], 8); return v; }
        }
    }
    void set(std::size_t i, double value) {
        switch (dtype) {
            case miopenHalf: { std::uint16_t v = float_to_half(static_cast<float>(value)); std::memcpy(&host[i * 2], &v, 2); break; }
            case miopenBFloat16: { std::uint16_t v = float_to_bf16(static_cast<float>(value)); std::memcpy(&host[i * 2], &v, 2); break; }
            case miopenFloat: { float v = static_cast<float>(value); std::memcpy(&host[i * 4], &v, 4); break; }
            default: std::memcpy(&host[i * 8], &value, 8); break;
        }
    }

    // Offset of logical index (n, c, d, h, w), with the API's rank-2..5
    // meaning: (N,C), (N,C,W), (N,C,H,W), (N,C,D,H,W).
    std::size_t offset(std::int64_t n, std::int64_t c, std::int64_t d, std::int64_t h, std::int64_t w) const {
        const int r = static_cast<int>(lens.size());
        std::int64_t o = static_cast<std::int64_t>(lead) + n * strides[0] + c * strides[1];
        if (r == 3) o += w * strides[2];
        if (r == 4) o += h * strides[2] + w * strides[3];
        if (r == 5) o += d * strides[2] + h * strides[3] + w * strides[4];
        return static_cast<std::size_t>(o);
    }

    void make(miopenDataType_t t, const std::vector<int>& l, const std::vector<int>& s, std::size_t lead_elements = 0) {
        dtype = t;
        lead = lead_elements;
        lens = l;
        strides = s;
        host.assign(bytes(), 0);
        check_api(miopenCreateTensorDescriptor(&desc), "miopenCreateTensorDescriptor");
        check_api(miopenSetTensorDescriptor(desc, dtype, static_cast<int>(lens.size()), lens.data(), strides.data()),
                  "miopenSetTensorDescriptor");
    }
    void fill_random(Random& rng, const std::function<double(std::size_t)>& center, double spread) {
        for (std::size_t i = 0; i < span(); ++i) set(i, center(i) + spread * rng.symmetric());
    }
    void fill_nan() {
        for (std::size_t i = 0; i < span(); ++i) set(i, std::numeric_limits<double>::quiet_NaN());
    }
    void upload() {
        if (g_cpu_only) {
            if (!device) device = std::malloc(bytes());
            std::memcpy(device, host.data(), bytes());
            return;
        }
        if (!device) check_gpu(hipMalloc(&device, bytes()), "hipMalloc");
        check_gpu(hipMemcpy(device, host.data(), bytes(), hipMemcpyHostToDevice), "hipMemcpy to device");
    }
    std::vector<unsigned char> download() const {
        std::vector<unsigned char> out(bytes());
        if (g_cpu_only) {
            std::memcpy(out.data(), device, bytes());
            return out;
        }
        check_gpu(hipMemcpy(out.data(), device, bytes(), hipMemcpyDeviceToHost), "hipMemcpy to host");
        return out;
    }
};

// ---------------------------------------------------------------- layouts --

enum class Layout { nchw, nhwc, strided, mixed, misaligned };
const char* layout_name(Layout l) {
    switch (l) {
        case Layout::nchw: return "nchw";
        case Layout::nhwc: return "nhwc";
        case Layout::strided: return "strided";
        case Layout::mixed: return "mixed";
        case Layout::misaligned: return "misaligned";
    }
    return "?";
}

std::vector<int> packed_strides(const std::vector<int>& lens, bool channels_last) {
    const int r = static_cast<int>(lens.size());
    std::vector<int> order;  // outermost first
    order.push_back(0);
    if (channels_last) {
        for (int i = 2; i < r; ++i) order.push_back(i);
        order.push_back(1);
    } else {
        for (int i = 1; i < r; ++i) order.push_back(i);
    }
    std::vector<int> s(r);
    long long stride = 1;
    for (int k = r - 1; k >= 0; --k) {
        s[order[k]] = static_cast<int>(stride);
        stride *= lens[order[k]];
    }
    return s;
}

// A view into a larger buffer: innermost stride 2, each outer dimension padded.
std::vector<int> view_strides(const std::vector<int>& lens) {
    const int r = static_cast<int>(lens.size());
    std::vector<int> s(r);
    long long stride = 2;
    for (int k = r - 1; k >= 0; --k) {
        s[k] = static_cast<int>(stride);
        stride = stride * lens[k] + 3;
    }
    return s;
}

// Strides of the data tensors: x (role 0), and y/dy/dx (roles 1..2).
std::vector<int> data_strides(const std::vector<int>& lens, Layout layout, int role) {
    switch (layout) {
        case Layout::nchw: return packed_strides(lens, false);
        case Layout::nhwc: return packed_strides(lens, true);
        case Layout::strided: return view_strides(lens);
        case Layout::mixed: return role == 0 ? packed_strides(lens, false) : packed_strides(lens, true);
        case Layout::misaligned: return packed_strides(lens, false);
    }
    return {};
}

// ------------------------------------------------------------------ cases --

enum class Op { train, infer, backward };

// Activation parameters (alpha, beta, gamma) per miopenActivationMode_t.
constexpr double kActivationParams[mbn::kActivationModeCount][3] = {
    {0, 0, 0}, {0, 0, 0}, {0.7, 1.3, 0}, {0, 0, 0}, {0, 0, 0},    {0, 0, 0},
    {0.5, 0.8, 2}, {1, 0, 0}, {0.1, 0, 0}, {0.6, 0, 0}, {-0.5, 0.8, 0}};

mbn::ActivationSpec activation_spec(int mode) {
    mbn::ActivationSpec a;
    a.mode = static_cast<mbn::ActivationMode>(mode);
    a.alpha = kActivationParams[mode][0];
    a.beta = kActivationParams[mode][1];
    a.gamma = kActivationParams[mode][2];
    return a;
}

struct Case {
    Op op = Op::train;
    bool v2 = false;
    miopenBatchNormMode_t mode = miopenBNSpatial;
    miopenDataType_t x_type = miopenFloat, param_type = miopenFloat, grad_type = miopenFloat;
    std::vector<int> lens;
    Layout layout = Layout::nchw;
    bool stats_a = false;  // train: running stats; infer: estimates; backward: saved stats
    bool stats_b = false;  // train: saved stats
    float alpha = 1, beta = 0, alpha_param = 1, beta_param = 0;
    bool in_place = false;
    double epsilon = 1e-5;
    double factor = 0.1;
    std::uint64_t seed = 1;
    int activation = -1;        // a fused activation's miopenActivationMode_t, -1 for none
    bool v3 = false;            // train: running statistics read from one pair of buffers, written to another
    bool inv_variance = false;  // infer: the estimate of the variance given as 1 / sqrt(var + eps)
    unsigned mixed = 0;         // bit g: parameter group g in the other type (see group_type); V2 and later only

    // The type of parameter group g (0 scale and dscale, 1 bias and dbias,
    // 2 the means, 3 the variances): param_type, or with bit g of `mixed`
    // the other type the API takes beside x's (float <-> x's type).
    miopenDataType_t group_type(int g) const {
        if ((mixed >> g & 1u) == 0) return param_type;
        return param_type == miopenFloat ? x_type : miopenFloat;
    }

    std::string describe() const {
        std::string s = op == Op::train ? "train" : op == Op::infer ? "infer" : "backward";
        s += v2 ? "_v2" : "_v1";
        s += mode == miopenBNSpatial ? " spatial" : " peract";
        s += std::string(" x=") + type_name(x_type) + " p=" + type_name(param_type);
        if (op == Op::backward) s += std::string(" g=") + type_name(grad_type);
        s += " ";
        for (std::size_t i = 0; i < lens.size(); ++i) s += (i ? "x" : "") + std::to_string(lens[i]);
        s += std::string(" ") + layout_name(layout);
        if (op == Op::train) s += std::string(stats_a ? " +running" : "") + (stats_b ? " +saved" : "");
        if (op == Op::infer) s += stats_a ? " estimates" : " batchstats";
        if (op == Op::backward) s += stats_a ? " saved" : " recompute";
        if (alpha != 1 || beta != 0) s += " a/b=" + std::to_string(alpha).substr(0, 4) + "/" + std::to_string(beta).substr(0, 4);
        if (in_place) s += " inplace";
        if (activation >= 0) s += " act=" + std::to_string(activation);
        if (v3) s += " v3";
        if (inv_variance) s += " invvar";
        if (mixed != 0) {
            s += " types=";
            for (int g = 0; g < 4; ++g) s += std::string(g ? "/" : "") + type_name(group_type(g));
        }
        return s;
    }
};

// How far a value is off, in units of its bound: 1 is at the bound.
double tolerance_ratio(double got, double want, const MbnTolerance& tol) {
    return std::fabs(got - want) / (tol.atol + tol.rtol * std::fabs(want));
}

// Worst |a - b| / (atol + rtol |b|) over the logical elements; NaN agreement counts as equal.
struct Comparison {
    double worst = 0;
    std::string where;
};

void compare_into(Comparison& cmp, const char* name, const Tensor& t, const std::vector<unsigned char>& got,
                  const std::function<double(std::size_t)>& expected, bool reduction) {
    Tensor view;
    view.dtype = t.dtype;
    view.lens = t.lens;
    view.strides = t.strides;
    view.lead = t.lead;
    view.host = got;
    const MbnTolerance tol = mbn_tolerance(t.dtype, reduction);
    const int r = static_cast<int>(t.lens.size());
    const std::int64_t n = t.lens[0], c = t.lens[1];
    const std::int64_t d = r == 5 ? t.lens[2] : 1;
    const std::int64_t h = r >= 4 ? t.lens[r - 2] : 1;
    const std::int64_t w = r >= 3 ? t.lens[r - 1] : 1;
    for (std::int64_t in = 0; in < n; ++in)
        for (std::int64_t ic = 0; ic < c; ++ic)
            for (std::int64_t id = 0; id < d; ++id)
                for (std::int64_t ih = 0; ih < h; ++ih)
                    for (std::int64_t iw = 0; iw < w; ++iw) {
                        const std::size_t o = t.offset(in, ic, id, ih, iw);
                        const double a = view.get(o), b = expected(o);
                        double ratio;
                        if (std::isnan(a) || std::isnan(b))
                            ratio = (std::isnan(a) && std::isnan(b)) ? 0.0 : std::numeric_limits<double>::infinity();
                        else
                            ratio = tolerance_ratio(a, b, tol);
                        if (ratio > cmp.worst) {
                            cmp.worst = ratio;
                            cmp.where = std::string(name) + "[" + std::to_string(o) + "] got " + std::to_string(a) +
                                        " want " + std::to_string(b);
                        }
                    }
}

// ------------------------------------------------------ float64 reference --

// Features of the problem and the element offsets of each (used for the
// reference and the statistics): spatial -> channels, per activation -> (c,d,h,w).
struct Geometry {
    std::int64_t n, c, d, h, w;
    bool spatial;
    explicit Geometry(const std::vector<int>& lens, bool spatial_mode) : spatial(spatial_mode) {
        const int r = static_cast<int>(lens.size());
        n = lens[0];
        c = lens[1];
        d = r == 5 ? lens[2] : 1;
        h = r >= 4 ? lens[r - 2] : 1;
        w = r >= 3 ? lens[r - 1] : 1;
    }
    std::int64_t features() const { return spatial ? c : c * d * h * w; }
    std::int64_t reduction() const { return spatial ? n * d * h * w : n; }
    // Calls fn(element offset in t) for each element of feature f.
    template <typename Fn>
    void for_each(const Tensor& t, std::int64_t f, Fn&& fn) const {
        if (spatial) {
            for (std::int64_t in = 0; in < n; ++in)
                for (std::int64_t id = 0; id < d; ++id)
                    for (std::int64_t ih = 0; ih < h; ++ih)
                        for (std::int64_t iw = 0; iw < w; ++iw) fn(t.offset(in, f, id, ih, iw));
        } else {
            const std::int64_t iw = f % w, ih = (f / w) % h, id = (f / (w * h)) % d, ic = f / (w * h * d);
            for (std::int64_t in = 0; in < n; ++in) fn(t.offset(in, ic, id, ih, iw));
        }
    }
    std::size_t param_offset(const Tensor& p, std::int64_t f) const {
        if (spatial) return p.offset(0, f, 0, 0, 0);
        const std::int64_t iw = f % w, ih = (f / w) % h, id = (f / (w * h)) % d, ic = f / (w * h * d);
        return p.offset(0, ic, id, ih, iw);
    }
};

// ------------------------------------------------------------------ runner --

struct Handles {
    miopenHandle_t cpu = nullptr, gpu = nullptr;
};

struct Outcome {
    bool pass;
    double worst_cpu;
    double worst_ref;
    std::string where;
};

// Both sides' buffers of one tensor role.
struct Buffers {
    Tensor* t;
    void* cpu;  // host pointer for the CPU handle (its own copy)
    std::vector<unsigned char> cpu_copy;
};

Outcome run_case(const Case& k, Handles& handles) {
    Random rng(k.seed);
    const bool spatial = k.mode == miopenBNSpatial;
    const Geometry g(k.lens, spatial);
    const std::int64_t features = g.features();
    const bool training_like = k.op == Op::train || (k.op == Op::infer && !k.stats_a);

    // Per-feature data centre and spread, so statistics differ per feature.
    std::vector<double> centre(static_cast<std::size_t>(features)), spread(static_cast<std::size_t>(features));
    for (std::int64_t f = 0; f < features; ++f) {
        centre[f] = 2.0 * rng.symmetric();
        spread[f] = 0.5 + 1.5 * rng.uniform();
    }

    const int rank = static_cast<int>(k.lens.size());
    std::vector<int> param_lens(rank, 1);
    param_lens[1] = k.lens[1];
    if (!spatial)
        for (int i = 2; i < rank; ++i) param_lens[i] = k.lens[i];
    const std::vector<int> param_strides =
        k.layout == Layout::strided ? view_strides(param_lens) : packed_strides(param_lens, false);

    // ---- tensors
    Tensor x, y, dy, dx;
    const miopenDataType_t out_type = k.op == Op::backward ? k.grad_type : k.x_type;
    const std::size_t lead = k.layout == Layout::misaligned ? 1 : 0;
    x.make(k.x_type, k.lens, data_strides(k.lens, k.layout, 0), lead);
    x.fill_random(rng, [](std::size_t) { return 0.0; }, 1.0);
    // Overwrite the logical elements with per-feature distributions.
    for (std::int64_t f = 0; f < features; ++f)
        g.for_each(x, f, [&](std::size_t o) { x.set(o, centre[f] + spread[f] * 1.7 * rng.symmetric()); });

    Tensor* out = nullptr;  // y or dx
    if (k.op != Op::backward) {
        if (!k.in_place) {
            y.make(k.x_type, k.lens, data_strides(k.lens, k.layout, 1), lead);
            if (k.beta != 0)
                y.fill_random(rng, [](std::size_t) { return 0.5; }, 1.0);
            else
                y.fill_nan();
        }
        out = k.in_place ? &x : &y;
    } else {
        dy.make(k.grad_type, k.lens, data_strides(k.lens, k.layout, 1), lead);
        dy.fill_random(rng, [](std::size_t) { return 0.1; }, 1.0);
        if (!k.in_place) {
            dx.make(k.grad_type, k.lens, data_strides(k.lens, k.layout, 2), lead);
            if (k.beta != 0)
                dx.fill_random(rng, [](std::size_t) { return -0.3; }, 1.0);
            else
                dx.fill_nan();
        }
        out = k.in_place ? &dy : &dx;
    }
    (void)out_type;

    // Parameters: one descriptor each (V2 uses them separately; V1 passes
    // scale's), each of its group's type (Case::group_type).
    Tensor scale, bias, mean, var, saved_mean, saved_inv, dscale, dbias, next_mean, next_var;
    auto make_param = [&](Tensor& t, int group, double c, double s) {
        t.make(k.group_type(group), param_lens, param_strides);
        t.fill_random(rng, [c](std::size_t) { return c; }, s);
    };
    make_param(scale, 0, 1.0, 0.5);
    if (k.op != Op::backward) make_param(bias, 1, 0.0, 1.0);
    if (k.op == Op::train && k.stats_a) {
        make_param(mean, 2, 0.0, 1.0);
        make_param(var, 3, 1.5, 0.5);
        if (k.v3) {  // written; mean and var are only read
            make_param(next_mean, 2, 0.0, 0.0);
            next_mean.fill_nan();
            make_param(next_var, 3, 0.0, 0.0);
            next_var.fill_nan();
        }
    }
    if (k.op == Op::train && k.stats_b) {
        make_param(saved_mean, 2, 0.0, 0.0);
        saved_mean.fill_nan();
        make_param(saved_inv, 3, 0.0, 0.0);
        saved_inv.fill_nan();
    }
    if (k.op == Op::infer && k.stats_a) {
        make_param(mean, 2, 0.0, 1.0);
        make_param(var, 3, 1.5, 0.5);
        for (std::int64_t f = 0; f < features; ++f) {  // estimates near the data
            mean.set(g.param_offset(mean, f), centre[f] + 0.1 * rng.symmetric());
            const double estimate = spread[f] * spread[f] * (1.0 + 0.2 * rng.uniform());
            var.set(g.param_offset(var, f), k.inv_variance ? 1.0 / std::sqrt(estimate + k.epsilon) : estimate);
        }
    }
    if (k.op == Op::backward) {
        make_param(dscale, 0, 0.0, 1.0);
        make_param(dbias, 1, 0.0, 1.0);
        if (k.beta_param == 0) {
            dscale.fill_nan();
            dbias.fill_nan();
        }
        if (k.stats_a) {
            make_param(saved_mean, 2, 0.0, 1.0);
            make_param(saved_inv, 3, 1.0, 0.1);
            for (std::int64_t f = 0; f < features; ++f) {
                saved_mean.set(g.param_offset(saved_mean, f), centre[f] + 0.05 * rng.symmetric());
                saved_inv.set(g.param_offset(saved_inv, f), 1.0 / (spread[f] * (1.0 + 0.1 * rng.uniform())));
            }
        }
        if (k.activation >= 0) make_param(bias, 1, 0.0, 1.0);  // z = scale * xhat + bias needs it
    }
    const bool fused = k.activation >= 0;
    const mbn::ActivationSpec spec = fused ? activation_spec(k.activation) : mbn::ActivationSpec{};

    // ---- float64 reference, from the inputs as stored
    const std::int64_t m = g.reduction();
    std::vector<double> ref_out(out->span(), std::numeric_limits<double>::quiet_NaN());
    std::vector<double> ref_mean(features), ref_var(features), ref_inv(features), ref_ds(features), ref_db(features);
    const Tensor& data_in = x;
    auto batch_stats = [&](std::int64_t f) {
        double s = 0;
        g.for_each(data_in, f, [&](std::size_t o) { s += data_in.get(o); });
        const double mu = s / static_cast<double>(m);
        double q = 0;
        g.for_each(data_in, f, [&](std::size_t o) { q += (data_in.get(o) - mu) * (data_in.get(o) - mu); });
        ref_mean[f] = mu;
        ref_var[f] = q / static_cast<double>(m);
        ref_inv[f] = 1.0 / std::sqrt(ref_var[f] + k.epsilon);
    };
    for (std::int64_t f = 0; f < features; ++f) {
        const double sc = scale.get(g.param_offset(scale, f));
        if (k.op == Op::backward) {
            if (k.stats_a) {
                ref_mean[f] = saved_mean.get(g.param_offset(saved_mean, f));
                ref_inv[f] = saved_inv.get(g.param_offset(saved_inv, f));
            } else {
                batch_stats(f);
            }
            double sdy = 0, sdyx = 0;
            std::vector<std::size_t> offs;
            g.for_each(x, f, [&](std::size_t o) { offs.push_back(o); });
            std::vector<std::size_t> goffs;
            g.for_each(dy, f, [&](std::size_t o) { goffs.push_back(o); });
            if (fused) {
                // dy becomes g = dy * f'(z).  Where z sits within 1e-4 of a
                // kink of f' (relu's 0, clamp's bounds), the backends' float
                // z may fall on either side: dy = 0 there, so both agree.
                const double bi = bias.get(g.param_offset(bias, f));
                for (std::size_t i = 0; i < offs.size(); ++i) {
                    const double z = sc * (x.get(offs[i]) - ref_mean[f]) * ref_inv[f] + bi;
                    const double step = 1e-4 * std::max(1.0, std::fabs(z));
                    if (std::fabs(mbn::activation_derivative(spec, z + step) -
                                  mbn::activation_derivative(spec, z - step)) > 1e-2)
                        dy.set(goffs[i], 0.0);
                }
            }
            // g per element: dy, or dy * f'(z).
            std::vector<double> gv(offs.size());
            for (std::size_t i = 0; i < offs.size(); ++i) {
                gv[i] = dy.get(goffs[i]);
                if (fused) {
                    const double bi = bias.get(g.param_offset(bias, f));
                    gv[i] *= mbn::activation_derivative(spec, sc * (x.get(offs[i]) - ref_mean[f]) * ref_inv[f] + bi);
                }
            }
            for (std::size_t i = 0; i < offs.size(); ++i) {
                const double xh = (x.get(offs[i]) - ref_mean[f]) * ref_inv[f];
                sdy += gv[i];
                sdyx += gv[i] * xh;
            }
            ref_db[f] = sdy;
            ref_ds[f] = sdyx;
            std::vector<std::size_t> ooffs;
            g.for_each(*out, f, [&](std::size_t o) { ooffs.push_back(o); });
            for (std::size_t i = 0; i < offs.size(); ++i) {
                const double xh = (x.get(offs[i]) - ref_mean[f]) * ref_inv[f];
                const double r = sc * ref_inv[f] / static_cast<double>(m) *
                                 (static_cast<double>(m) * gv[i] - sdy - xh * sdyx);
                const double prior = k.beta != 0 ? out->get(ooffs[i]) : 0.0;
                ref_out[ooffs[i]] = k.alpha * r + (k.beta != 0 ? k.beta * prior : 0.0);
            }
        } else {
            double mu, inv;
            if (training_like) {
                batch_stats(f);
                mu = ref_mean[f];
                inv = ref_inv[f];
            } else {
                mu = mean.get(g.param_offset(mean, f));
                const double v = var.get(g.param_offset(var, f));
                inv = k.inv_variance ? v : 1.0 / std::sqrt(v + k.epsilon);
            }
            const double bi = bias.get(g.param_offset(bias, f));
            std::vector<std::size_t> offs;
            g.for_each(x, f, [&](std::size_t o) { offs.push_back(o); });
            std::vector<std::size_t> ooffs;
            g.for_each(*out, f, [&](std::size_t o) { ooffs.push_back(o); });
            for (std::size_t i = 0; i < offs.size(); ++i) {
                double r = sc * (x.get(offs[i]) - mu) * inv + bi;
                if (fused) r = mbn::activation_forward(spec, r);
                const double prior = k.beta != 0 ? out->get(ooffs[i]) : 0.0;
                ref_out[ooffs[i]] = k.alpha * r + (k.beta != 0 ? k.beta * prior : 0.0);
            }
        }
    }

    // ---- CPU copies of every buffer (host pointers), GPU copies (device)
    std::vector<Tensor*> all = {&x,         &y,         &dy,     &dx,     &scale,     &bias,    &mean,
                                &var,       &saved_mean, &saved_inv, &dscale, &dbias, &next_mean, &next_var};
    std::vector<std::vector<unsigned char>> cpu_data(all.size());
    for (std::size_t i = 0; i < all.size(); ++i) {
        if (!all[i]->desc) continue;
        cpu_data[i] = all[i]->host;
        all[i]->upload();
    }
    auto ptr = [&](Tensor& t, bool gpu) -> void* {
        if (!t.desc) return nullptr;
        for (std::size_t i = 0; i < all.size(); ++i)
            if (all[i] == &t) {
                unsigned char* base = gpu ? static_cast<unsigned char*>(t.device) : cpu_data[i].data();
                return static_cast<void*>(base + t.lead * type_size(t.dtype));
            }
        return nullptr;
    };

    miopenActivationDescriptor_t activation = nullptr;
    if (fused) {
        check_api(miopenCreateActivationDescriptor(&activation), "miopenCreateActivationDescriptor");
        check_api(miopenSetActivationDescriptor(activation, static_cast<miopenActivationMode_t>(k.activation),
                                                spec.alpha, spec.beta, spec.gamma),
                  "miopenSetActivationDescriptor");
    }
    auto call = [&](miopenHandle_t handle, bool gpu) {
        const float a = k.alpha, b = k.beta, ap = k.alpha_param, bp = k.beta_param;
        void* px = ptr(x, gpu);
        void* pout = k.op == Op::backward ? (k.in_place ? ptr(dy, gpu) : ptr(dx, gpu)) : (k.in_place ? px : ptr(y, gpu));
        miopenTensorDescriptor_t out_desc = k.op == Op::backward ? (k.in_place ? dy.desc : dx.desc) : (k.in_place ? x.desc : y.desc);
        if (k.op == Op::train) {
            void* rm = k.stats_a ? ptr(mean, gpu) : nullptr;
            void* rv = k.stats_a ? ptr(var, gpu) : nullptr;
            void* sm = k.stats_b ? ptr(saved_mean, gpu) : nullptr;
            void* si = k.stats_b ? ptr(saved_inv, gpu) : nullptr;
            miopenTensorDescriptor_t mean_desc = k.stats_a ? mean.desc : (k.stats_b ? saved_mean.desc : nullptr);
            miopenTensorDescriptor_t var_desc = k.stats_a ? var.desc : (k.stats_b ? saved_inv.desc : nullptr);
            // V3 and the activation's _V2: read from mean/var, write next_mean/next_var.
            void* nm = k.v3 && k.stats_a ? ptr(next_mean, gpu) : rm;
            void* nv = k.v3 && k.stats_a ? ptr(next_var, gpu) : rv;
            if (fused && k.v3)
                return miopenBatchNormForwardTrainingActivation_V2(
                    handle, k.mode, (void*)&a, (void*)&b, x.desc, px, out_desc, pout, scale.desc, bias.desc, mean_desc,
                    var_desc, ptr(scale, gpu), ptr(bias, gpu), k.factor, rm, rv, nm, nv, k.epsilon, sm, si, activation);
            if (fused)
                return miopenBatchNormForwardTrainingActivation(
                    handle, k.mode, (void*)&a, (void*)&b, x.desc, px, out_desc, pout, scale.desc, bias.desc, mean_desc,
                    var_desc, ptr(scale, gpu), ptr(bias, gpu), k.factor, rm, rv, k.epsilon, sm, si, activation);
            if (k.v3)
                return miopenBatchNormalizationForwardTraining_V3(
                    handle, k.mode, (void*)&a, (void*)&b, x.desc, px, out_desc, pout, scale.desc, bias.desc, mean_desc,
                    var_desc, ptr(scale, gpu), ptr(bias, gpu), k.factor, rm, rv, nm, nv, k.epsilon, sm, si);
            if (k.v2)
                return miopenBatchNormalizationForwardTraining_V2(
                    handle, k.mode, (void*)&a, (void*)&b, x.desc, px, out_desc, pout, scale.desc, bias.desc,
                    k.stats_a ? mean.desc : (k.stats_b ? saved_mean.desc : nullptr),
                    k.stats_a ? var.desc : (k.stats_b ? saved_inv.desc : nullptr), ptr(scale, gpu), ptr(bias, gpu),
                    k.factor, rm, rv, k.epsilon, sm, si);
            return miopenBatchNormalizationForwardTraining(handle, k.mode, (void*)&a, (void*)&b, x.desc, px, out_desc,
                                                           pout, scale.desc, ptr(scale, gpu), ptr(bias, gpu), k.factor,
                                                           rm, rv, k.epsilon, sm, si);
        }
        if (k.op == Op::infer) {
            void* em = k.stats_a ? ptr(mean, gpu) : nullptr;
            void* ev = k.stats_a ? ptr(var, gpu) : nullptr;
            miopenTensorDescriptor_t mean_desc = k.stats_a ? mean.desc : nullptr;
            miopenTensorDescriptor_t var_desc = k.stats_a ? var.desc : nullptr;
            if (fused && k.inv_variance)
                return miopenBatchNormForwardInferenceActivationInvVariance(
                    handle, k.mode, (void*)&a, (void*)&b, x.desc, px, out_desc, pout, scale.desc, bias.desc, mean_desc,
                    var_desc, ptr(scale, gpu), ptr(bias, gpu), em, ev, activation);
            if (fused)
                return miopenBatchNormForwardInferenceActivation(
                    handle, k.mode, (void*)&a, (void*)&b, x.desc, px, out_desc, pout, scale.desc, bias.desc, mean_desc,
                    var_desc, ptr(scale, gpu), ptr(bias, gpu), em, ev, k.epsilon, activation);
            if (k.inv_variance)
                return miopenBatchNormalizationForwardInferenceInvVariance(
                    handle, k.mode, (void*)&a, (void*)&b, x.desc, px, out_desc, pout, scale.desc, bias.desc, mean_desc,
                    var_desc, ptr(scale, gpu), ptr(bias, gpu), em, ev);
            if (k.v2)
                return miopenBatchNormalizationForwardInference_V2(
                    handle, k.mode, (void*)&a, (void*)&b, x.desc, px, out_desc, pout, scale.desc, bias.desc,
                    k.stats_a ? mean.desc : nullptr, k.stats_a ? var.desc : nullptr, ptr(scale, gpu), ptr(bias, gpu),
                    em, ev, k.epsilon);
            return miopenBatchNormalizationForwardInference(handle, k.mode, (void*)&a, (void*)&b, x.desc, px, out_desc,
                                                            pout, scale.desc, ptr(scale, gpu), ptr(bias, gpu), em, ev,
                                                            k.epsilon);
        }
        const void* sm = k.stats_a ? ptr(saved_mean, gpu) : nullptr;
        const void* si = k.stats_a ? ptr(saved_inv, gpu) : nullptr;
        if (fused)
            return miopenBatchNormBackwardActivation(
                handle, k.mode, &a, &b, &ap, &bp, x.desc, px, dy.desc, ptr(dy, gpu), out_desc, pout, scale.desc,
                bias.desc, k.stats_a ? saved_mean.desc : nullptr, k.stats_a ? saved_inv.desc : nullptr,
                ptr(scale, gpu), ptr(bias, gpu), ptr(dscale, gpu), ptr(dbias, gpu), k.epsilon, sm, si, activation);
        if (k.v2)
            return miopenBatchNormalizationBackward_V2(
                handle, k.mode, &a, &b, &ap, &bp, x.desc, px, dy.desc, ptr(dy, gpu), out_desc, pout, scale.desc,
                dbias.desc, k.stats_a ? saved_mean.desc : nullptr, k.stats_a ? saved_inv.desc : nullptr,
                ptr(scale, gpu), ptr(dscale, gpu), ptr(dbias, gpu), k.epsilon, sm, si);
        return miopenBatchNormalizationBackward(handle, k.mode, &a, &b, &ap, &bp, x.desc, px, dy.desc, ptr(dy, gpu),
                                                out_desc, pout, scale.desc, ptr(scale, gpu), ptr(dscale, gpu),
                                                ptr(dbias, gpu), k.epsilon, sm, si);
    };

    const miopenStatus_t cpu_status = call(handles.cpu, false);
    const std::string cpu_message = miopenBNGetLastErrorMessage();
    const miopenStatus_t gpu_status = call(handles.gpu, true);
    const std::string gpu_message = miopenBNGetLastErrorMessage();
    if (activation != nullptr) miopenDestroyActivationDescriptor(activation);
    if (!g_cpu_only) check_gpu(hipDeviceSynchronize(), "hipDeviceSynchronize after the GPU call");
    if (cpu_status == gpu_status && cpu_status != miopenStatusSuccess)  // e.g. training with M == 1
        return Outcome{true, 0.0, 0.0, std::string("both rejected: ") + miopenGetErrorString(cpu_status)};
    if (cpu_status != miopenStatusSuccess || gpu_status != miopenStatusSuccess) {
        return Outcome{false, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(),
                       std::string("status cpu=") + miopenGetErrorString(cpu_status) + " (" + cpu_message +
                           ") gpu=" + miopenGetErrorString(gpu_status) + " (" + gpu_message + ")"};
    }

    // ---- compare every output
    Comparison vs_cpu, vs_ref;
    auto index_of = [&](Tensor& t) {
        for (std::size_t i = 0; i < all.size(); ++i)
            if (all[i] == &t) return i;
        return std::size_t(0);
    };
    auto compare_output = [&](const char* name, Tensor& t, bool reduction, const std::function<double(std::size_t)>& ref) {
        const std::vector<unsigned char> got = t.download();
        Tensor cpu_view;
        cpu_view.dtype = t.dtype;
        cpu_view.lens = t.lens;
        cpu_view.strides = t.strides;
        cpu_view.lead = t.lead;
        cpu_view.host = cpu_data[index_of(t)];
        compare_into(vs_cpu, name, t, got, [&](std::size_t o) { return cpu_view.get(o); }, reduction);
        compare_into(vs_ref, name, t, got, ref, reduction);
    };
    compare_output(k.op == Op::backward ? "dx" : "y", *out, false, [&](std::size_t o) { return ref_out[o]; });
    auto per_feature_ref = [&](Tensor& t, const std::function<double(std::int64_t)>& fn) {
        std::vector<double> r(t.span(), std::numeric_limits<double>::quiet_NaN());
        for (std::int64_t f = 0; f < features; ++f) r[g.param_offset(t, f)] = fn(f);
        return r;
    };
    if (k.op == Op::train && k.stats_a) {
        // Written to next_mean/next_var with V3 (mean/var must keep their values), else in place.
        Tensor& written_mean = k.v3 ? next_mean : mean;
        Tensor& written_var = k.v3 ? next_var : var;
        const auto rm = per_feature_ref(written_mean, [&](std::int64_t f) {
            return (1 - k.factor) * mean.get(g.param_offset(mean, f)) + k.factor * ref_mean[f];
        });
        const auto rv = per_feature_ref(written_var, [&](std::int64_t f) {
            const double unbiased = m > 1 ? ref_var[f] * m / (m - 1) : ref_var[f];
            return (1 - k.factor) * var.get(g.param_offset(var, f)) + k.factor * unbiased;
        });
        compare_output("running_mean", written_mean, true, [&](std::size_t o) { return rm[o]; });
        compare_output("running_var", written_var, true, [&](std::size_t o) { return rv[o]; });
        if (k.v3) {
            compare_output("previous running_mean", mean, true, [&](std::size_t o) { return mean.get(o); });
            compare_output("previous running_var", var, true, [&](std::size_t o) { return var.get(o); });
        }
    }
    if (k.op == Op::train && k.stats_b) {
        const auto sm = per_feature_ref(saved_mean, [&](std::int64_t f) { return ref_mean[f]; });
        const auto si = per_feature_ref(saved_inv, [&](std::int64_t f) { return ref_inv[f]; });
        compare_output("saved_mean", saved_mean, true, [&](std::size_t o) { return sm[o]; });
        compare_output("saved_inv", saved_inv, true, [&](std::size_t o) { return si[o]; });
    }
    if (k.op == Op::backward) {
        const auto ds = per_feature_ref(dscale, [&](std::int64_t f) {
            const double prior = k.beta_param != 0 ? dscale.get(g.param_offset(dscale, f)) : 0.0;
            return k.alpha_param * ref_ds[f] + (k.beta_param != 0 ? k.beta_param * prior : 0.0);
        });
        const auto db = per_feature_ref(dbias, [&](std::int64_t f) {
            const double prior = k.beta_param != 0 ? dbias.get(g.param_offset(dbias, f)) : 0.0;
            return k.alpha_param * ref_db[f] + (k.beta_param != 0 ? k.beta_param * prior : 0.0);
        });
        compare_output("dscale", dscale, true, [&](std::size_t o) { return ds[o]; });
        compare_output("dbias", dbias, true, [&](std::size_t o) { return db[o]; });
    }
    const bool pass = vs_cpu.worst <= 1.0;
    return Outcome{pass, vs_cpu.worst, vs_ref.worst, pass ? vs_ref.where : vs_cpu.where};
}

// ---------------------------------------------------------- case matrix --

struct TypeCombo {
    miopenDataType_t x, param;
};
const TypeCombo kForwardTypes[] = {{miopenFloat, miopenFloat},   {miopenHalf, miopenFloat},
                                   {miopenHalf, miopenHalf},     {miopenBFloat16, miopenFloat},
                                   {miopenBFloat16, miopenBFloat16}, {miopenDouble, miopenDouble},
                                   {miopenDouble, miopenFloat}};

std::vector<Case> build_cases(bool quick) {
    std::vector<Case> cases;
    std::uint64_t seed = 1000;
    const std::vector<std::vector<int>> small_shapes = {
        {2, 3, 5, 7}, {13, 79}, {3, 5, 7}, {4, 16, 9, 11}, {1, 8, 61, 67}, {1031, 24, 1, 1}, {2, 3, 4, 5, 6},
        {3, 6, 8, 8}, {2, 3, 2, 4, 8}};  // the last two take the 16-byte vector path when aligned
    const Layout layouts[] = {Layout::nchw, Layout::nhwc, Layout::strided, Layout::mixed, Layout::misaligned};
    const miopenBatchNormMode_t modes[] = {miopenBNSpatial, miopenBNPerActivation};

    for (const auto& shape : small_shapes) {
        for (auto mode : modes) {
            for (Layout layout : layouts) {
                if (quick && (layout == Layout::mixed || layout == Layout::misaligned)) continue;
                for (const TypeCombo& tc : kForwardTypes) {
                    Case base;
                    base.mode = mode;
                    base.lens = shape;
                    base.layout = layout;
                    base.x_type = tc.x;
                    base.param_type = tc.param;
                    // Training: every combination of the optional pairs, V1 and V2.
                    for (int variant = 0; variant < 4; ++variant) {
                        Case k = base;
                        k.op = Op::train;
                        k.v2 = variant % 2 == 1;
                        k.stats_a = variant == 0 || variant == 2;
                        k.stats_b = variant == 0 || variant == 3;
                        if (variant == 2) { k.alpha = 0.75f; k.beta = 0.5f; }
                        if (variant == 3 && layout == Layout::nchw) k.in_place = true;
                        k.factor = variant == 2 ? -0.25 : 0.1;
                        k.seed = seed++;
                        cases.push_back(k);
                    }
                    // Inference: estimates and the batch-statistics fallback, V1 and V2.
                    for (int variant = 0; variant < 4; ++variant) {
                        Case k = base;
                        k.op = Op::infer;
                        k.v2 = variant >= 2;
                        k.stats_a = variant % 2 == 0;
                        if (variant == 2) { k.alpha = 1.5f; k.beta = -0.5f; }
                        if (variant == 1 && layout == Layout::nchw) k.in_place = true;
                        k.seed = seed++;
                        cases.push_back(k);
                    }
                    // Backward: saved / recomputed statistics, dy of x's type or float.
                    for (int g = 0; g < 2; ++g) {
                        if (g == 1 && tc.x == miopenFloat) continue;
                        for (int variant = 0; variant < 3; ++variant) {
                            Case k = base;
                            k.op = Op::backward;
                            k.grad_type = g == 0 ? tc.x : miopenFloat;
                            k.v2 = variant == 1;
                            k.stats_a = variant != 1;
                            if (variant == 2) { k.alpha = 0.5f; k.beta = 0.25f; k.alpha_param = 2.0f; k.beta_param = 1.0f; }
                            if (variant == 0 && layout == Layout::nchw) k.in_place = true;
                            k.seed = seed++;
                            cases.push_back(k);
                        }
                    }
                }
            }
        }
    }

    // Issue 25: every fused activation (and none) through training (V3
    // every other mode, and both ways without one), inference (the batch
    // fallback, the estimates, the inverse std) and backward (saved and
    // recomputed statistics); then each parameter group in float or x's
    // type on its own.  The
    // last shape's features are split over several blocks (multi-launch
    // kernels) even without MIOPEN_BN_GPU_ALGORITHM=multi_pass.
    const TypeCombo kActivationTypes[] = {{miopenFloat, miopenFloat},
                                          {miopenHalf, miopenFloat},
                                          {miopenBFloat16, miopenBFloat16},
                                          {miopenDouble, miopenDouble}};
    const std::vector<std::vector<int>> activation_shapes =
        quick ? std::vector<std::vector<int>>{{2, 3, 5, 7}}
              : std::vector<std::vector<int>>{{2, 3, 5, 7}, {3, 6, 8, 8}, {2, 3, 64, 80}};
    for (const auto& shape : activation_shapes) {
        const bool large = shape[2] == 64;
        for (auto mode : modes) {
            if (large && mode != miopenBNSpatial) continue;
            for (int act = -1; act < mbn::kActivationModeCount; ++act) {
                for (std::size_t t = 0; t < std::size(kActivationTypes); ++t) {
                    if (large && t != 0 && t != 1) continue;
                    Case base;
                    base.mode = mode;
                    base.lens = shape;
                    base.layout = layouts[(act + 1 + t) % 3];  // nchw, nhwc, strided in turn
                    base.x_type = kActivationTypes[t].x;
                    base.param_type = kActivationTypes[t].param;
                    base.grad_type = base.x_type;
                    base.activation = act;
                    base.v2 = true;
                    Case k;
                    for (int v3 = 0; v3 < 2; ++v3) {
                        if (act >= 0 && v3 != (act % 2)) continue;  // both without an activation
                        k = base;
                        k.op = Op::train;
                        k.stats_a = k.stats_b = true;
                        k.v3 = v3 == 1;
                        k.alpha = 0.75f;
                        k.seed = seed++;
                        cases.push_back(k);
                    }
                    for (int estimates = 0; estimates < 3; ++estimates) {
                        k = base;
                        k.op = Op::infer;
                        k.stats_a = estimates > 0;  // else the batch-statistics fallback
                        k.inv_variance = estimates == 2;
                        k.seed = seed++;
                        cases.push_back(k);
                    }
                    for (int saved = 0; saved < 2; ++saved) {
                        k = base;
                        k.op = Op::backward;
                        k.stats_a = saved == 1;
                        k.alpha = 0.5f;
                        k.beta = act < 0 ? 0.25f : 0.0f;  // a blend beside an activation is NotImplemented
                        k.alpha_param = 2.0f;
                        k.beta_param = 1.0f;
                        k.seed = seed++;
                        cases.push_back(k);
                    }
                }
            }
        }
    }
    // Parameter groups of mixed types (bit g of `mixed`: group g in the other
    // type), through the V2 entry points, each op and statistics pattern.
    const TypeCombo kMixedBases[] = {
        {miopenHalf, miopenFloat}, {miopenBFloat16, miopenFloat}, {miopenDouble, miopenDouble}};
    for (const TypeCombo& tc : kMixedBases) {
        for (unsigned mixed = 1; mixed < 16; ++mixed) {
            if (quick && mixed % 5 != 0) continue;
            for (auto mode : modes) {
                Case base;
                base.mode = mode;
                base.lens = mode == miopenBNSpatial ? std::vector<int>{4, 16, 9, 11} : std::vector<int>{2, 3, 5, 7};
                base.layout = mixed % 2 ? Layout::nhwc : Layout::nchw;
                base.x_type = base.grad_type = tc.x;
                base.param_type = tc.param;
                base.v2 = true;
                base.mixed = mixed;
                for (Op op : {Op::train, Op::infer, Op::backward}) {
                    for (int stats = 0; stats < 2; ++stats) {
                        Case k = base;
                        k.op = op;
                        k.stats_a = stats == 1 || op == Op::train;
                        k.stats_b = op == Op::train;
                        k.v3 = op == Op::train && stats == 1;
                        k.inv_variance = op == Op::infer && stats == 1 && mixed % 3 == 0;
                        const bool fused = (stats == 0 || op == Op::infer) && mixed % 4 == 1;
                        k.activation = fused ? static_cast<int>(mixed % mbn::kActivationModeCount) : -1;
                        k.seed = seed++;
                        cases.push_back(k);
                    }
                }
            }
        }
    }

    // docs/numerics.md#shapes, spatial (and a per-activation one), fewer type/layout combinations.
    const std::vector<std::vector<int>> big_shapes = quick
        ? std::vector<std::vector<int>>{{16, 96, 35, 35}, {2048, 64, 1, 1}}
        : std::vector<std::vector<int>>{{64, 1, 1024, 1024}, {69328, 1, 22, 22}, {16, 80, 73, 73},
                                         {16, 96, 35, 35}, {1, 32, 512, 512}, {2048, 64, 1, 1}, {32, 256, 14, 14}};
    // Per shape: float32 NCHW and float16 (float params) NHWC through every op,
    // bfloat16 NCHW training; tensors over 2^24 elements (seconds of host work
    // each) get float32 NCHW training and backward, float16 NHWC training.
    struct BigVariant {
        TypeCombo types;
        Layout layout;
        Op op;
        bool saved;
        bool for_huge;
    };
    const BigVariant big_variants[] = {
        {{miopenFloat, miopenFloat}, Layout::nchw, Op::train, false, true},
        {{miopenFloat, miopenFloat}, Layout::nchw, Op::infer, false, false},
        {{miopenFloat, miopenFloat}, Layout::nchw, Op::backward, true, false},
        {{miopenFloat, miopenFloat}, Layout::nchw, Op::backward, false, true},
        {{miopenHalf, miopenFloat}, Layout::nhwc, Op::train, false, true},
        {{miopenHalf, miopenFloat}, Layout::nhwc, Op::infer, false, false},
        {{miopenHalf, miopenFloat}, Layout::nhwc, Op::backward, true, false},
        {{miopenHalf, miopenFloat}, Layout::nhwc, Op::backward, false, false},
        {{miopenBFloat16, miopenFloat}, Layout::nchw, Op::train, false, false},
    };
    for (const auto& shape : big_shapes) {
        long long elements = 1;
        for (int l : shape) elements *= l;
        const bool huge = elements > (1LL << 24);
        for (const BigVariant& v : big_variants) {
            if (huge && !v.for_huge) continue;
            Case k;
            k.lens = shape;
            k.layout = v.layout;
            k.x_type = v.types.x;
            k.param_type = v.types.param;
            k.grad_type = v.types.x;
            k.op = v.op;
            k.stats_a = v.op == Op::backward ? v.saved : true;
            k.stats_b = v.op == Op::train;
            k.seed = seed++;
            cases.push_back(k);
        }
    }
    const std::vector<std::vector<int>> big_peract = {{64, 16, 32, 32}, {2, 2, 3, 224, 224}};
    for (const auto& shape : big_peract) {
        for (Layout layout : {Layout::nchw, Layout::nhwc}) {
            for (Op op : {Op::train, Op::infer, Op::backward}) {
                Case k;
                k.mode = miopenBNPerActivation;
                k.lens = shape;
                k.layout = layout;
                k.op = op;
                k.stats_a = op != Op::backward;
                k.stats_b = op == Op::train;
                k.seed = seed++;
                cases.push_back(k);
            }
        }
    }
    return cases;
}

// A host pointer given to the GPU handle must give BadParm, not a crash.
bool host_pointer_is_rejected(Handles& h) {
    Tensor x, y, p;
    x.make(miopenFloat, {2, 3, 4, 5}, packed_strides({2, 3, 4, 5}, false));
    y.make(miopenFloat, {2, 3, 4, 5}, packed_strides({2, 3, 4, 5}, false));
    p.make(miopenFloat, {1, 3, 1, 1}, packed_strides({1, 3, 1, 1}, false));
    y.upload();
    p.upload();
    const float a = 1, b = 0;
    const miopenStatus_t status = miopenBatchNormalizationForwardInference(
        h.gpu, miopenBNSpatial, (void*)&a, (void*)&b, x.desc, x.host.data(), y.desc, y.device, p.desc, p.device,
        p.device, p.device, p.device, 1e-5);
    std::printf("%-4s host pointer to the GPU handle -> %s (%s)\n", status == miopenStatusBadParm ? "ok" : "FAIL",
                miopenGetErrorString(status), miopenBNGetLastErrorMessage());
    return status == miopenStatusBadParm;
}

// The calls must be capturable in a graph (no allocation, no host wait):
// training and backward on a non-default stream, captured and replayed, give
// bit-identical results to the same calls made directly.
bool graph_replay_matches(Handles& h) {
    const std::vector<int> lens = {8, 32, 17, 19};
    const std::vector<int> plens = {1, 32, 1, 1};
    Random rng(99);
    Tensor x, y, dy, dx, scale, bias, sm, si, ds, db;
    x.make(miopenFloat, lens, packed_strides(lens, false));
    x.fill_random(rng, [](std::size_t) { return 1.0; }, 2.0);
    dy.make(miopenFloat, lens, packed_strides(lens, false));
    dy.fill_random(rng, [](std::size_t) { return 0.1; }, 1.0);
    for (Tensor* t : {&y, &dx}) {
        t->make(miopenFloat, lens, packed_strides(lens, true));
        t->fill_nan();
    }
    for (Tensor* t : {&scale, &bias, &sm, &si, &ds, &db}) {
        t->make(miopenFloat, plens, packed_strides(plens, false));
        t->fill_random(rng, [](std::size_t) { return 1.0; }, 0.5);
    }
    for (Tensor* t : {&x, &y, &dy, &dx, &scale, &bias, &sm, &si, &ds, &db}) t->upload();
    hipStream_t stream = nullptr;
    check_gpu(hipStreamCreate(&stream), "hipStreamCreate");
    check_api(miopenSetStream(h.gpu, reinterpret_cast<miopenAcceleratorQueue_t>(stream)), "miopenSetStream");
    const float one = 1, zero = 0;
    auto calls = [&] {
        miopenStatus_t st = miopenBatchNormalizationForwardTraining(
            h.gpu, miopenBNSpatial, (void*)&one, (void*)&zero, x.desc, x.device, y.desc, y.device, scale.desc,
            scale.device, bias.device, 0.1, nullptr, nullptr, 1e-5, sm.device, si.device);
        if (st != miopenStatusSuccess) return st;
        return miopenBatchNormalizationBackward(h.gpu, miopenBNSpatial, &one, &zero, &one, &zero, x.desc, x.device,
                                                dy.desc, dy.device, dx.desc, dx.device, scale.desc, scale.device,
                                                ds.device, db.device, 1e-5, nullptr, nullptr);
    };
    bool ok = calls() == miopenStatusSuccess;
    check_gpu(hipStreamSynchronize(stream), "hipStreamSynchronize");
    std::vector<std::vector<unsigned char>> direct;
    for (Tensor* t : {&y, &dx, &sm, &si, &ds, &db}) direct.push_back(t->download());
    for (Tensor* t : {&y, &dx, &sm, &si, &ds, &db}) {
        t->fill_nan();
        t->upload();
    }
    hipGraph_t graph = nullptr;
    hipGraphExec_t exec = nullptr;
    check_gpu(hipStreamBeginCapture(stream, hipStreamCaptureModeGlobal), "hipStreamBeginCapture");
    const miopenStatus_t captured = calls();
    const std::string message = miopenBNGetLastErrorMessage();
    const hipError_t end = hipStreamEndCapture(stream, &graph);
    ok = ok && captured == miopenStatusSuccess && end == hipSuccess;
    if (ok) {
        check_gpu(hipGraphInstantiateWithFlags(&exec, graph, 0), "hipGraphInstantiateWithFlags");
        check_gpu(hipGraphLaunch(exec, stream), "hipGraphLaunch");
        check_gpu(hipStreamSynchronize(stream), "hipStreamSynchronize");
        std::size_t i = 0;
        for (Tensor* t : {&y, &dx, &sm, &si, &ds, &db}) ok = ok && t->download() == direct[i++];
        (void)hipGraphExecDestroy(exec);
    }
    if (graph) (void)hipGraphDestroy(graph);
    (void)hipGetLastError();
    check_api(miopenSetStream(h.gpu, nullptr), "miopenSetStream");
    (void)hipStreamDestroy(stream);
    std::printf("%-4s graph capture of training + backward on a stream, replayed: %s%s\n", ok ? "ok" : "FAIL",
                ok ? "bit-identical to direct calls" : "differs or failed: ", ok ? "" : message.c_str());
    return ok;
}

// --huge: one training call on a float16 tensor of more than 2^31 elements
// (64-bit indexing on the device): saved mean, saved inverse std and running
// variance against float64 values from the host, and y on samples that
// include the tensor's last elements.  Values come from a 4096-entry table
// per channel, so the host's statistics are exact histogram sums.
bool huge_tensor_check(Handles& h) {
    const std::vector<int> lens = {1, 2, 32768, 32769};
    const std::size_t plane = std::size_t(32768) * 32769;
    const std::size_t count = 2 * plane;  // 2^31 + 65536 elements
    constexpr int kTable = 4096;
    std::vector<std::uint16_t> table_bits[2];
    std::vector<double> table_value[2];
    Random rng(4242);
    for (int c = 0; c < 2; ++c)
        for (int k = 0; k < kTable; ++k) {
            const std::uint16_t bits = float_to_half(static_cast<float>(3.0 * c - 1.0 + 2.0 * rng.symmetric()));
            table_bits[c].push_back(bits);
            table_value[c].push_back(half_to_float(bits));
        }
    auto pick = [](std::size_t i) { return static_cast<int>(((i * 0x9E3779B97F4A7C15ull) >> 40) % kTable); };
    std::vector<std::uint16_t> host(count);
    std::vector<double> histogram[2] = {std::vector<double>(kTable, 0.0), std::vector<double>(kTable, 0.0)};
    for (std::size_t i = 0; i < count; ++i) {
        const int c = i < plane ? 0 : 1;
        const int k = pick(i);
        host[i] = table_bits[c][k];
        histogram[c][k] += 1.0;
    }
    double mean[2], var[2];
    for (int c = 0; c < 2; ++c) {
        double s = 0, q = 0;
        for (int k = 0; k < kTable; ++k) s += histogram[c][k] * table_value[c][k];
        mean[c] = s / static_cast<double>(plane);
        for (int k = 0; k < kTable; ++k) q += histogram[c][k] * (table_value[c][k] - mean[c]) * (table_value[c][k] - mean[c]);
        var[c] = q / static_cast<double>(plane);
    }

    void *x = nullptr, *y = nullptr;
    const std::size_t bytes = count * 2;
    if (hipMalloc(&x, bytes) != hipSuccess || hipMalloc(&y, bytes) != hipSuccess) {
        std::printf("FAIL huge tensor: cannot allocate 2 x %zu bytes on the device\n", bytes);
        return false;
    }
    check_gpu(hipMemcpy(x, host.data(), bytes, hipMemcpyHostToDevice), "hipMemcpy huge x");
    check_gpu(hipMemset(y, 0xff, bytes), "hipMemset huge y");  // 0xffff is a float16 NaN
    miopenTensorDescriptor_t xd, pd;
    check_api(miopenCreateTensorDescriptor(&xd), "create");
    check_api(miopenCreateTensorDescriptor(&pd), "create");
    check_api(miopenSet4dTensorDescriptor(xd, miopenHalf, 1, 2, 32768, 32769), "set x");
    check_api(miopenSet4dTensorDescriptor(pd, miopenFloat, 1, 2, 1, 1), "set param");
    const float params[5][2] = {{1.5f, 0.5f}, {0.25f, -1.0f}, {0.0f, 0.0f}, {1.0f, 1.0f}, {0.0f, 0.0f}};
    void* p[6];
    for (int i = 0; i < 6; ++i) {
        check_gpu(hipMalloc(&p[i], 8), "hipMalloc param");
        check_gpu(hipMemcpy(p[i], params[i < 5 ? i : 4], 8, hipMemcpyHostToDevice), "hipMemcpy param");
    }
    const float one = 1, zero = 0;
    const double factor = 0.5, eps = 1e-5;
    const miopenStatus_t st = miopenBatchNormalizationForwardTraining(
        h.gpu, miopenBNSpatial, (void*)&one, (void*)&zero, xd, x, xd, y, pd, p[0], p[1], factor, p[2], p[3], eps, p[4],
        p[5]);
    check_gpu(hipDeviceSynchronize(), "hipDeviceSynchronize");
    bool ok = st == miopenStatusSuccess;
    double worst = 0;
    std::string where;
    auto note = [&](double got, double want, const MbnTolerance& tol, const std::string& what) {
        const double ratio = std::isnan(got) ? 1e30 : tolerance_ratio(got, want, tol);
        if (ratio > worst) {
            worst = ratio;
            where = what + " got " + std::to_string(got) + " want " + std::to_string(want);
        }
    };
    if (ok) {
        float out[4][2];
        for (int i = 0; i < 4; ++i) check_gpu(hipMemcpy(out[i], p[2 + i], 8, hipMemcpyDeviceToHost), "read stats");
        const MbnTolerance statistic = mbn_tolerance(miopenFloat, 1);
        for (int c = 0; c < 2; ++c) {
            const double inv = 1.0 / std::sqrt(var[c] + eps);
            const double m = static_cast<double>(plane);
            note(out[0][c], factor * mean[c], statistic, "running_mean");
            note(out[1][c], (1 - factor) + factor * var[c] * m / (m - 1), statistic, "running_var");
            note(out[2][c], mean[c], statistic, "saved_mean");
            note(out[3][c], inv, statistic, "saved_inv");
        }
        // y on 64 windows of 4096 elements spread over the tensor, the last at its very end.
        std::vector<std::uint16_t> window(4096);
        const MbnTolerance element = mbn_tolerance(miopenHalf, 0);
        for (int w = 0; w < 64; ++w) {
            const std::size_t start = w == 63 ? count - window.size() : (count / 63) * w;
            check_gpu(hipMemcpy(window.data(), static_cast<std::uint16_t*>(y) + start, window.size() * 2,
                                hipMemcpyDeviceToHost),
                      "read y window");
            for (std::size_t i = 0; i < window.size(); ++i) {
                const std::size_t at = start + i;
                const int c = at < plane ? 0 : 1;
                const double want = params[0][c] * (half_to_float(host[at]) - mean[c]) / std::sqrt(var[c] + eps) +
                                    params[1][c];
                note(half_to_float(window[i]), want, element, "y[" + std::to_string(at) + "]");
            }
        }
    }
    for (void* q : p) (void)hipFree(q);
    (void)hipFree(x);
    (void)hipFree(y);
    miopenDestroyTensorDescriptor(xd);
    miopenDestroyTensorDescriptor(pd);
    ok = ok && worst <= 1.0;
    std::printf("%-4s huge tensor: training, float16 1x2x32768x32769 (%zu elements > 2^31): worst %.3g %s%s\n",
                ok ? "ok" : "FAIL", count, worst, where.c_str(),
                st == miopenStatusSuccess ? "" : miopenBNGetLastErrorMessage());
    return ok;
}

// ------------------------------------------------------------------ timing --

// --bench: median device time of each op (profiling events through
// miopenEnableProfiling / miopenGetKernelTime) on training-sized shapes, and
// the effective bandwidth counting each tensor read or written once (the
// ideal byte count), beside a device-to-device copy's.
float median_ms(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

void run_bench(Handles& h) {
    check_api(miopenEnableProfiling(h.gpu, true), "miopenEnableProfiling");
    {
        const std::size_t bytes = std::size_t(1) << 30;
        void *a = nullptr, *b = nullptr;
        check_gpu(hipMalloc(&a, bytes), "hipMalloc");
        check_gpu(hipMalloc(&b, bytes), "hipMalloc");
        check_gpu(hipMemset(a, 1, bytes), "hipMemset");
        hipEvent_t start, stop;
        check_gpu(hipEventCreate(&start), "hipEventCreate");
        check_gpu(hipEventCreate(&stop), "hipEventCreate");
        std::vector<float> times;
        for (int i = 0; i < 12; ++i) {
            check_gpu(hipEventRecord(start, nullptr), "hipEventRecord");
            check_gpu(hipMemcpyAsync(b, a, bytes, hipMemcpyDeviceToDevice, nullptr), "hipMemcpyAsync");
            check_gpu(hipEventRecord(stop, nullptr), "hipEventRecord");
            check_gpu(hipEventSynchronize(stop), "hipEventSynchronize");
            float ms = 0;
            check_gpu(hipEventElapsedTime(&ms, start, stop), "hipEventElapsedTime");
            if (i >= 2) times.push_back(ms);
        }
        std::printf("device-to-device copy: %.1f GB/s (read + write)\n", 2.0 * bytes / (median_ms(times) * 1e6));
        (void)hipEventDestroy(start);
        (void)hipEventDestroy(stop);
        (void)hipFree(a);
        (void)hipFree(b);
    }
    struct Shape {
        std::vector<int> lens;
        miopenDataType_t type;
        Layout layout;
    };
    const std::vector<Shape> shapes = {
        {{32, 64, 112, 112}, miopenFloat, Layout::nchw},   {{32, 256, 56, 56}, miopenFloat, Layout::nchw},
        {{32, 512, 28, 28}, miopenFloat, Layout::nchw},    {{32, 1024, 14, 14}, miopenFloat, Layout::nchw},
        {{32, 2048, 7, 7}, miopenFloat, Layout::nchw},     {{256, 64, 112, 112}, miopenFloat, Layout::nchw},
        {{32, 64, 112, 112}, miopenFloat, Layout::nhwc},   {{32, 256, 56, 56}, miopenFloat, Layout::nhwc},
        {{32, 2048, 7, 7}, miopenFloat, Layout::nhwc},     {{32, 64, 112, 112}, miopenHalf, Layout::nchw},
        {{32, 256, 56, 56}, miopenHalf, Layout::nhwc},     {{64, 1, 1024, 1024}, miopenFloat, Layout::nchw},
        {{69328, 1, 22, 22}, miopenFloat, Layout::nchw},   {{4096, 1024, 1, 1}, miopenFloat, Layout::nchw},
    };
    std::printf("%-26s %-5s %-5s %10s %10s %10s   GB/s: %7s %7s %7s\n", "shape", "type", "lay", "train ms",
                "infer ms", "bwd ms", "train", "infer", "bwd");
    for (const Shape& sh : shapes) {
        Random rng(7);
        Tensor x, y, dy, dx, scale, bias, rm, rv, sm, si, ds, db;
        x.make(sh.type, sh.lens, data_strides(sh.lens, sh.layout, 0));
        x.fill_random(rng, [](std::size_t) { return 0.5; }, 1.5);
        x.upload();
        y.make(sh.type, sh.lens, data_strides(sh.lens, sh.layout, 0));
        y.upload();
        dy.make(sh.type, sh.lens, data_strides(sh.lens, sh.layout, 0));
        dy.fill_random(rng, [](std::size_t) { return 0.0; }, 1.0);
        dy.upload();
        dx.make(sh.type, sh.lens, data_strides(sh.lens, sh.layout, 0));
        dx.upload();
        std::vector<int> plens(sh.lens.size(), 1);
        plens[1] = sh.lens[1];
        for (Tensor* p : {&scale, &bias, &rm, &rv, &sm, &si, &ds, &db}) {
            p->make(miopenFloat, plens, packed_strides(plens, false));
            p->fill_random(rng, [](std::size_t) { return 1.0; }, 0.5);
            p->upload();
        }
        const float one = 1, zero = 0;
        auto time_op = [&](const std::function<miopenStatus_t()>& op) {
            std::vector<float> times;
            for (int i = 0; i < 23; ++i) {
                check_api(op(), "timed op");
                float ms = 0;
                check_api(miopenGetKernelTime(h.gpu, &ms), "miopenGetKernelTime");
                if (i >= 3) times.push_back(ms);
            }
            return median_ms(times);
        };
        const float t_train = time_op([&] {
            return miopenBatchNormalizationForwardTraining(h.gpu, miopenBNSpatial, (void*)&one, (void*)&zero, x.desc,
                                                           x.device, y.desc, y.device, scale.desc, scale.device,
                                                           bias.device, 0.1, rm.device, rv.device, 1e-5, sm.device,
                                                           si.device);
        });
        const float t_infer = time_op([&] {
            return miopenBatchNormalizationForwardInference(h.gpu, miopenBNSpatial, (void*)&one, (void*)&zero, x.desc,
                                                            x.device, y.desc, y.device, scale.desc, scale.device,
                                                            bias.device, rm.device, rv.device, 1e-5);
        });
        const float t_bwd = time_op([&] {
            return miopenBatchNormalizationBackward(h.gpu, miopenBNSpatial, &one, &zero, &one, &zero, x.desc, x.device,
                                                    dy.desc, dy.device, dx.desc, dx.device, scale.desc, scale.device,
                                                    ds.device, db.device, 1e-5, sm.device, si.device);
        });
        double elements = 1;
        for (int l : sh.lens) elements *= l;
        const double bytes = elements * type_size(sh.type);
        std::string name;
        for (std::size_t i = 0; i < sh.lens.size(); ++i) name += (i ? "x" : "") + std::to_string(sh.lens[i]);
        std::printf("%-26s %-5s %-5s %10.4f %10.4f %10.4f   GB/s: %7.0f %7.0f %7.0f\n", name.c_str(),
                    type_name(sh.type), layout_name(sh.layout), t_train, t_infer, t_bwd, 2 * bytes / (t_train * 1e6),
                    2 * bytes / (t_infer * 1e6), 3 * bytes / (t_bwd * 1e6));
        std::fflush(stdout);
    }
    check_api(miopenEnableProfiling(h.gpu, false), "miopenEnableProfiling");
}

}  // namespace

int main(int argc, char** argv) {
    bool quick = false, bench = false, huge = false;
    std::string filter;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--quick") == 0) quick = true;
        else if (std::strcmp(argv[i], "--filter") == 0 && i + 1 < argc) filter = argv[++i];
        else if (std::strcmp(argv[i], "--cpu-only") == 0) g_cpu_only = true;
        else if (std::strcmp(argv[i], "--bench") == 0) bench = true;
        else if (std::strcmp(argv[i], "--huge") == 0) huge = true;
    }
    Handles handles;
    check_api(miopenBNCreateWithBackend(&handles.cpu, miopenBNBackendCPU), "create CPU handle");
    if (g_cpu_only) {
        check_api(miopenBNCreateWithBackend(&handles.gpu, miopenBNBackendCPU), "create second CPU handle");
    } else {
        if (!miopenBNHasGpuSupport()) die("this library was built without a GPU backend");
        check_api(miopenBNCreateWithBackend(&handles.gpu, miopenBNBackendGPU), "create GPU handle");
    }

    if (bench) {
        run_bench(handles);
        miopenDestroy(handles.gpu);
        miopenDestroy(handles.cpu);
        return 0;
    }

    int passed = 0, failed = 0, ref_off = 0;
    std::vector<std::string> failures;
    if (!g_cpu_only) {
        if (host_pointer_is_rejected(handles)) ++passed; else ++failed;
        if (graph_replay_matches(handles)) ++passed; else ++failed;
        if (huge) {
            if (huge_tensor_check(handles)) ++passed; else ++failed;
        }
    }

    for (const Case& k : build_cases(quick)) {
        const std::string name = k.describe();
        if (!filter.empty() && name.find(filter) == std::string::npos) continue;
        const Outcome o = run_case(k, handles);
        if (o.pass) ++passed; else ++failed;
        if (o.worst_ref > 1.0) ++ref_off;
        const bool quiet = o.pass && o.worst_ref <= 1.0 && o.where.rfind("both", 0) != 0;
        char line[1024];
        std::snprintf(line, sizeof line, "%-4s %-86s cpu=%.3g ref=%.3g%s%s", o.pass ? "ok" : "FAIL", name.c_str(),
                      o.worst_cpu, o.worst_ref, quiet ? "" : "  ", quiet ? "" : o.where.c_str());
        std::printf("%s\n", line);
        if (!o.pass && failures.size() < 40) failures.push_back(line);
        std::fflush(stdout);
    }
    miopenDestroy(handles.gpu);
    miopenDestroy(handles.cpu);
    if (!failures.empty()) {
        std::printf("first failures:\n");
        for (const auto& f : failures) std::printf("  %s\n", f.c_str());
    }
    std::printf("GPU vs float64 reference: %d case(s) outside tolerance\n", ref_off);
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
