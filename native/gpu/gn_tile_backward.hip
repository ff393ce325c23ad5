// Backward group norm on chip (gn_tile.hpp), one launch, from the saved
// mean and rstd.  With xhat = (x - mean) * rstd, z = xhat * w + b and
// g = dy * act'(z) (g = dy without activation):
//   dbias[c]   = sum over samples and positions of g
//   dweight[c] = sum over samples and positions of g * xhat
//   dx         = rstd * (w g - mean(w g) - xhat * mean(w g xhat))
// (group means; gn_backward.hip derives them).
//
// Each block loads its part of a tile, x and dy, into registers and sums
// g and g * xhat per channel; the tile's blocks add theirs through the
// cluster's shared memory (rank order), which gives the group means, and
// each block writes dx from its registers: g kept in float (the form of one
// block a multiprocessor) or found again from x and dy (two blocks; the
// planner picks, gn_tile_planner.cpp).  A streamed walk (kStream,
// GnTileWalk::streamed; the two-block form) holds a thread's first
// kGnTileBackwardStreamRegisterSlots slots in registers and reads the rest
// of x and dy twice: in batches for the sums, and again (from L2, newest
// first) for dx.  dweight and dbias add the per-sample sums: the first
// block of each tile stores its sample's sums, and the last tile of the
// same channels to arrive (gn_arrival.h) adds them in sample order; where
// a one-block tile's samples make one cluster, its first block adds them
// from the others' shared memory.  Nothing waits for another cluster;
// every order is fixed, so results are bitwise repeatable.
#include "gpu/gn_activation.h"
#include "gpu/gn_arrival.h"
#include "gpu/gn_launch.hpp"
#include "gpu/gn_stat_io.h"
#include "gpu/gn_tile_device.h"
#include "gpu/gn_tile_launch.h"
#include "gpu/type_dispatch.hpp"

#include <type_traits>

namespace mbn {
namespace gpu {
namespace {

template <typename P>
struct GnTileBackwardArgs {
    GnTileWalk walk;
    const P* weight;  // nullptr: w = 1, and no dweight / dbias
    const P* bias;    // nullptr: b = 0 (only the activation needs it)
    P* dweight;
    P* dbias;
    std::int64_t weight_stride;
    std::int64_t bias_stride;
    std::int64_t dweight_stride;
    std::int64_t dbias_stride;
    GnStatTensor mean;
    GnStatTensor rstd;
    bool swish;
    float swish_beta;
    GnTileBackwardScratch scratch;  // when dweight is wanted
    GnTileShared layout;            // tile_shared(walk, true), set on the host
};

// A group's saved statistics.
struct GnGroupStats {
    float mean, rstd;
};

// A channel's weight and bias (1 and 0 where absent), side by side in
// shared memory: one 8-byte read for both.
struct GnChannelParams {
    float weight, bias;
};

// dx's factors for one channel, made once its group's terms are known:
// with d = x - mean, dx = scaled g + (f_d d + f_c), where scaled = rstd w,
// f_d = -rstd^2 mean(w g xhat) and f_c = -rstd mean(w g).  Taken by the
// two-block form with channels fastest (tile_dx_factors), where each
// element's weight, group statistics and means were otherwise picked lane
// by lane and xhat found again: about 25 instructions an element in dx,
// its longest phase (ncu, 2x320x64x64 bfloat16), against one 16-byte
// shared read and three operations.  The other forms hold their lanes'
// terms in registers, or have no registers to spare (the streamed ones:
// ptxas spilled 48 bytes), and measured at par or slower with them
// (bench/RESULTS.md, forty-second session).
struct alignas(16) GnDxCoefs {
    float scaled, mean, f_d, f_c;
};

// Where channel c's factors lie among the block's: lane j of every column
// together (j * columns + column), so that a wave's threads read
// consecutive 16-byte entries, not entries a vector of channels apart (an
// 8-way bank conflict for 16-bit data, 0.70x-0.91x on channels-last rows).
template <int W>
__device__ __forceinline__ int coef_index(const GnTileWalk& w, int c) {
    return (c % W) * w.columns + c / W;
}

__device__ __forceinline__ float coef_dx(const GnDxCoefs& k, float g, float d) {
    return fmaf(k.scaled, g, fmaf(k.f_d, d, k.f_c));
}

// What an element's gradient takes besides x and dy.
struct GnLaneTerms {
    float mean, rstd;  // its group's saved statistics
    float weight, bias;
};

// xhat of one element, in the element arithmetic A.
template <typename A>
__device__ __forceinline__ A element_xhat(const GnLaneTerms& t, float x) {
    return (static_cast<A>(x) - static_cast<A>(t.mean)) * static_cast<A>(t.rstd);
}

// xhat and the pre-activation gradient g of one element, in the element
// arithmetic A.  The exact walk (A = double) takes the swish's derivative
// exactly too: there dx is a small remainder of w g, and g's float rounding
// (the special-function unit's derivative) showed in it (emulator, float32
// 4x32x2x2 groups of 16 with x within 1e-3 of 3: 1 value in 512 about 2e-5
// off in half the seeds tried).
// kSwish: whether the activation is there, chosen once outside the slot
// loops (kSwishOff, kSwishOn), or tested per element (kSwishTested: the
// two-block form with 16-bit data and channels fastest, where two copies
// of the passes made ptxas spill at 128 registers; kTrim in the kernel).
enum GnSwishChoice { kSwishOff, kSwishOn, kSwishTested };

template <typename A, int kSwish, typename P>
__device__ __forceinline__ void element_gradient(const GnTileBackwardArgs<P>& a, const GnLaneTerms& t, float x,
                                                 float dy, A& xhat, A& g) {
    xhat = element_xhat<A>(t, x);
    if constexpr (kSwish == kSwishOff)
        g = dy;
    else if constexpr (std::is_same<A, double>::value)
        g = kSwish == kSwishOn || a.swish
                ? dy * swish_derivative(xhat * t.weight + t.bias, static_cast<double>(a.swish_beta))
                : dy;
    else
        g = kSwish == kSwishOn || a.swish ? dy * fast_swish_derivative(static_cast<float>(xhat) * t.weight + t.bias,
                                                                      a.swish_beta, swish_exponent_scale(a.swish_beta))
                                          : dy;
}

// dx of one element from its g and xhat, with `means` its group's mean of
// w g and of w g xhat: rstd (w g - mean(w g) - xhat mean(w g xhat)).
template <typename A>
__device__ __forceinline__ A element_dx(const GnLaneTerms& t, const Sums2<A>& means, A g, A xhat) {
    return static_cast<A>(t.rstd) * ((static_cast<A>(t.weight) * g - means.a) - xhat * means.b);
}

// Channels fastest: lane j's sums of g and g * xhat over the thread's
// slots, to its entry (a row of threads per entry row).
template <int W, typename A>
__device__ __forceinline__ void store_lane_sums(const GnTileWalk& w, const GnTileThread& at, int j, A sum_g,
                                                A sum_gx, Sums2<A>* entries) {
    if (at.active())
        entries[at.ty * w.block_channels() + static_cast<std::int64_t>(at.tx) * W + j] = Sums2<A>{sum_g, sum_gx};
}

// Positions fastest: slot a's sums of g and g * xhat, added over the row's
// threads in a wave by shuffles, stored by the wave's first thread of the
// row (every thread of the block calls, for every slot some thread holds).
template <typename A>
__device__ __forceinline__ void store_row_sums(const GnTileWalk& w, const GnTileThread& at, int a, A sum_g,
                                               A sum_gx, Sums2<A>* entries) {
    wave_sum(1, w.columns, sum_g, sum_gx);
    const int row = at.row(w, a);
    if ((at.tx & (MBN_WAVE_SIZE - 1)) == 0 && row < at.part.rows)
        entries[(at.tx / MBN_WAVE_SIZE) * w.block_channels() + row] = Sums2<A>{sum_g, sum_gx};
}

// The block's sums of g and g * xhat per channel (block_channels()) into
// `block_sums`, from the entries (every thread calls, after storing its
// own): a few threads per channel add its entries in a fixed order.
template <typename A>
__device__ void block_channel_sums(const GnTileWalk& w, const Sums2<A>* entries, Sums2<double>* block_sums) {
    const std::int64_t channels = w.block_channels();
    __syncthreads();
    // `team` consecutive threads (a power of two within a wave) per channel,
    // each adding every team-th entry, then among themselves by shuffles.
    const int rows = entry_rows(w, true, MBN_WAVE_SIZE);
    int team = 1;
    while (team < MBN_WAVE_SIZE && 2 * team * channels <= w.threads && team < rows) team *= 2;
    const int member = static_cast<int>(threadIdx.x) % team;
    const std::int64_t per_round = w.threads / team;
    for (std::int64_t first = 0; first < channels; first += per_round) {  // the same rounds for every thread
        const std::int64_t c = first + threadIdx.x / team;
        Sums2<double> sum{0.0, 0.0};
        if (c < channels) {
            // Two entries in flight, not the compiler's four: registers.
#pragma unroll 2
            for (int e = member; e < rows; e += team) {
                const Sums2<A> entry = entries[e * channels + c];
                sum.a += static_cast<double>(entry.a);
                sum.b += static_cast<double>(entry.b);
            }
        }
        wave_sum(1, team, sum);
        if (member == 0 && c < channels) block_sums[c] = sum;
    }
    __syncthreads();
}

// mean(w g) and mean(w g xhat) of each of the tile's groups into `terms`,
// from the tile's per-channel sums and the block's channels' weights, and
// with kFactors each channel's dx factors into `coefs` (every thread
// calls; a wave per group).
template <int W, bool kInner, bool kFactors>
__device__ void group_terms(const GnTileWalk& w, const Sums2<double>* totals, const GnChannelParams* params,
                            const GnGroupStats* stats, Sums2<double>* terms, GnDxCoefs* coefs) {
    const int lane = static_cast<int>(threadIdx.x) % MBN_WAVE_SIZE;
    const int waves = w.threads / MBN_WAVE_SIZE;
    const int channels = static_cast<int>(w.channels);
    for (int group = static_cast<int>(threadIdx.x) / MBN_WAVE_SIZE; group < w.tile_groups; group += waves) {
        Sums2<double> sum{0.0, 0.0};
        for (int k = lane; k < channels; k += MBN_WAVE_SIZE) {
            const int c = (kInner ? group * channels : 0) + k;
            const double weight = params[c].weight;
            sum.a += weight * totals[c].a;
            sum.b += weight * totals[c].b;
        }
        wave_sum(1, MBN_WAVE_SIZE, sum);
        if (lane == 0) terms[group] = Sums2<double>{sum.a * w.inv_group_size, sum.b * w.inv_group_size};
        if constexpr (kFactors) {
            const Sums2<double> means{sum.a * w.inv_group_size, sum.b * w.inv_group_size};
            // Every lane holds the sums (a butterfly): dx's factors of the
            // group's channels, a lane a channel.
            const GnGroupStats st = stats[group];
            const float f_d = -st.rstd * st.rstd * static_cast<float>(means.b);
            const float f_c = -st.rstd * static_cast<float>(means.a);
            for (int k = lane; k < channels; k += MBN_WAVE_SIZE) {
                const int c = group * channels + k;
                coefs[coef_index<W>(w, c)] = GnDxCoefs{st.rstd * params[c].weight, st.mean, f_d, f_c};
            }
        }
    }
}

// Which tile of which sample a block holds, and its rank in the tile's
// cluster (the tile kernel's GnTileThread, or a block a group's own).
struct GnBlockPlace {
    int n, tile, rank;
};

// dweight and dbias of the tile's channels: the cluster's first block
// stores this sample's sums; the last tile of these channels to arrive adds
// every sample's in order (every thread of the block calls).  With one
// sample the first block stores the gradients itself; with a cluster of
// samples (GnTileWalk::sample_cluster) the first block adds them from the
// others' shared memory.
template <typename P>
__device__ void parameter_gradients(const GnTileBackwardArgs<P>& args, const GnBlockPlace& at,
                                    const Sums2<double>* totals, std::int64_t channel0, int* last) {
    const GnTileWalk& w = args.walk;
    const std::int64_t channels = w.tile_channels();
    const std::int64_t samples = w.samples;
    const GnTileBackwardScratch& s = args.scratch;
    if (at.rank != 0) return;  // the same for the whole block
    // One sample: the tile's sums are the gradients, stored in the same loop
    // (a loop of their own cost the two-block form 8 bytes of stack), and
    // the arrival (fences, atomics, reloads) left out; the same values but
    // for a zero's sign (the arrival's adds start at +0.0).
    const bool one_sample = samples == 1;
    auto store_gradients = [&](std::int64_t channel, double g, double gx) {
        args.dbias[channel * args.dbias_stride] = narrow<P>(g);
        args.dweight[channel * args.dweight_stride] = narrow<P>(gx);
    };
#pragma unroll 1
    for (std::int64_t c = threadIdx.x; c < channels; c += w.threads) {
        const std::int64_t at_c = (channel0 + c) * samples + at.n;
        if (one_sample) {
            store_gradients(channel0 + c, totals[c].a, totals[c].b);
        } else {
            s.sum_g[at_c] = totals[c].a;
            s.sum_g_xhat[at_c] = totals[c].b;
        }
    }
    if (one_sample) return;
    if (w.sample_cluster > 1) {
        // The samples are the cluster's blocks, rank n sample n (rank order
        // is sample order): the first adds every block's totals from their
        // shared memory.  cluster_sync publishes them; each block arrives
        // again once done with the others' memory (the first after its
        // reads) and waits before it exits (the kernel's end).
        cluster_sync();
        if (at.n == 0) {
            // One read at a time: x, dy and g stay live in registers across
            // this, and unrolled reads in flight cost up to 36 more.
#pragma unroll 1
            for (std::int64_t c = threadIdx.x; c < channels; c += w.threads) {
                double g = 0.0, gx = 0.0;
#pragma unroll 1
                for (int n = 0; n < w.sample_cluster; ++n) {
                    const Sums2<double> t = *cluster_peer(totals + c, n);
                    g += t.a;
                    gx += t.b;
                }
                store_gradients(channel0 + c, g, gx);
            }
        }
        cluster_arrive_relaxed();
        return;
    }
    // The barrier orders every thread's stores before thread 0's fence in
    // arrive(), which makes them visible with its own (cumulativity, as in a
    // grid barrier): no fence per thread.  Every fence and round trip here
    // is on the path of the last block, before its dx.
    __syncthreads();
    ArrivalCounter* counter = s.arrivals + at.tile;
    if (threadIdx.x == 0) *last = arrive(counter, static_cast<ArrivalCounter>(samples));
    __syncthreads();
    if (!*last) return;
    for (std::int64_t c = threadIdx.x; c < channels; c += w.threads) {
        const std::int64_t channel = channel0 + c;
        const double* sum_g = s.sum_g + channel * samples;
        const double* sum_gx = s.sum_g_xhat + channel * samples;
        double g = 0.0, gx = 0.0;
        // Two samples' loads in flight together, added in sample order.
        std::int64_t n = 0;
#pragma unroll 1
        for (; n + 1 < samples; n += 2) {
            const double g0 = load_coherent(sum_g + n), g1 = load_coherent(sum_g + n + 1);
            const double gx0 = load_coherent(sum_gx + n), gx1 = load_coherent(sum_gx + n + 1);
            g = g + g0 + g1;
            gx = gx + gx0 + gx1;
        }
        if (n < samples) {
            g += load_coherent(sum_g + n);
            gx += load_coherent(sum_gx + n);
        }
        store_gradients(channel, g, gx);
    }
    if (threadIdx.x == 0) reset_counter(counter);
}

// Launched as tile_shared / launch_tile_kernel say.  dx may be x or dy:
// each thread reads its elements before it writes them, and no other
// thread reads them (a streamed slot too: its thread reads it again, before
// it writes it; the one address threads share, the tile's first element,
// which register slots not held load from, is read before the cluster's
// barrier, and every write comes after it).  A: the element arithmetic,
// float, or double where the walk is exact (kGnTileExactGroup).
//
// kBlocks, the form (gn_tile.hpp): blocks a multiprocessor holds at once.
// One: g of every element kept in float for dx (x packed 44 registers, g
// 88; 208-230 in all for 16-bit data, 173-183 for float, and fewer
// instructions than two blocks).  Two: at most 128 registers a thread, of
// which x and dy packed take 88, and g is found again for dx.  Both keep
// the weights and biases in shared memory (channels fastest, the one-block
// form also each lane's in registers) and finish each channel's sums
// before the next begins, but for the one-block form with channels
// fastest, which holds every lane's sums and walks the slots outermost.
// kStream (the walk's streamed > 0, the two-block form's code in float):
// slots past the registers' streamed (the sums of a lane, channels fastest,
// held over every slot); kBlocks 1 there: blocks of
// kGnTileBackwardWideThreads, one a multiprocessor.
template <typename T, typename P, bool kInner, typename A, int kBlocks, bool kStream>
__global__ void __launch_bounds__(kStream && kBlocks == 1 ? kGnTileBackwardWideThreads : kGnTileBackwardThreads,
                                  kBlocks)
    gn_tile_backward(const T* x, const T* dy, T* dx, GnTileBackwardArgs<P> args) {
    static_assert(!kStream || std::is_same<A, float>::value, "the streamed walk is in float");
    constexpr int W = static_cast<int>(16 / sizeof(T));
    constexpr int R = kStream                           ? kGnTileBackwardStreamRegisterSlots
                      : std::is_same<A, double>::value ? kGnTileExactBackwardSlots
                                                       : kGnTileBackwardSlots;
    constexpr int B = kGnTileBackwardStreamBatch;
    constexpr int BD = kGnTileBackwardStreamDxBatch;
    constexpr bool kKeep = kBlocks == 1 && !kStream;
    // dx from per-channel factors (GnDxCoefs; tile_dx_factors on the host).
    constexpr bool kFactors =
        kInner && kBlocks == kGnTileBackwardMostBlocks && !kStream && std::is_same<A, float>::value;
    extern __shared__ double gn_tile_backward_shared[];
    const GnTileWalk& w = args.walk;
    require_cluster_support(w.launch_cluster());
    const GnTileShared& layout = args.layout;
    const GnTileThread at(w, W);
    // The thread holds slots 0 .. slots - 1 (held_slots is a prefix): every
    // loop over slots stops at the first one not held, one branch out of
    // the unrolled loop where a test per slot (or per element) put a branch
    // and its reconvergence around each.
    const int slots = at.slots < R ? at.slots : R;
    const unsigned held = held_slots<R>(at);
    Pack<T, W> raw_x[R], raw_dy[R];
    if constexpr (kKeep) {
        // From slot to slot by a pointer step: one add a slot, not an index
        // product.
        const T* slot_x = x + at.first;
        const T* slot_dy = dy + at.first;
#pragma unroll
        for (int a = 0; a < R; ++a) {
            if (a >= slots) MBN_UNROLLED_EXIT;
            raw_x[a] = load_pack<W>(slot_x);
            raw_dy[a] = load_pack<W>(slot_dy);
            slot_x += at.step;
            slot_dy += at.step;
        }
    } else {
        load_every_slot<R, W>(x, at, held, raw_x);
        load_every_slot<R, W>(dy, at, held, raw_dy);
    }

    // A column past the part's vectors holds nothing (and names no group).
    const bool active = at.active();
    const GnLaneGroups lanes = lane_groups<W, kInner>(w, at.tx);
    const int split = kInner ? lanes.split : W;
    const std::int64_t group0 = static_cast<std::int64_t>(at.tile) * w.tile_groups;
    const std::int64_t channel0 = static_cast<std::int64_t>(at.tile) * w.tile_channels();
    void* shared = gn_tile_backward_shared;
    // The block's channels' weights and biases, for the group terms and for
    // every element of both passes: read from shared memory where an
    // element needs them, not held per slot or lane (22 to 32 registers).
    GnChannelParams* params = shared_at<GnChannelParams>(shared, layout.params);
    for (int c = static_cast<int>(threadIdx.x); c < w.block_channels(); c += w.threads)
        params[c] = GnChannelParams{channel_param(args.weight, args.weight_stride, channel0 + c, 1.0f),
                                    channel_param(args.bias, args.bias_stride, channel0 + c, 0.0f)};
    GnGroupStats lo{0.0f, 0.0f}, hi = lo;
    if (active) {
        lo.mean = static_cast<float>(read_stat(args.mean, at.n, group0 + lanes.lo));
        lo.rstd = static_cast<float>(read_stat(args.rstd, at.n, group0 + lanes.lo));
        if (split < W) {
            hi.mean = static_cast<float>(read_stat(args.mean, at.n, group0 + lanes.lo + 1));
            hi.rstd = static_cast<float>(read_stat(args.rstd, at.n, group0 + lanes.lo + 1));
        }
    }
    // The tile's groups' statistics, for dx's factors (group_terms): each
    // group's from the thread of the first row whose vector holds the
    // group's first channel.
    GnGroupStats* stats = shared_at<GnGroupStats>(shared, layout.stats);
    if constexpr (kFactors) {
        if (active && at.ty == 0) {
            if (lanes.lo * w.channels == static_cast<std::int64_t>(at.tx) * W) stats[lanes.lo] = lo;
            if (split < W) stats[lanes.lo + 1] = hi;
        }
    }
    __syncthreads();  // the weights and biases, for the first pass
    // What element (slot a, lane j) needs besides x and dy: its group's
    // statistics and its channel's (channels fastest: the lane's; positions
    // fastest: the slot's row's) weight and bias.
    auto fetch_terms = [&](int a, int j) {
        const int c = kInner ? at.tx * W + j : at.row(w, a);
        const bool upper = kInner && j >= split;
        const GnChannelParams p = params[c];
        return GnLaneTerms{upper ? hi.mean : lo.mean, upper ? hi.rstd : lo.rstd, p.weight, p.bias};
    };
    // The one-block form has registers to spare: channels fastest, each
    // lane's terms are fetched once (by a thread that holds a column), not
    // per element (half NHWC: 560 selects and 246 shared reads a thread
    // otherwise, 64 and 74 so).
    constexpr bool kLaneTerms = kKeep && kInner;
    GnLaneTerms lane_terms[kLaneTerms ? W : 1];
    if constexpr (kLaneTerms) {
#pragma unroll
        for (int j = 0; j < W; ++j) lane_terms[j] = active ? fetch_terms(0, j) : GnLaneTerms{0.0f, 0.0f, 1.0f, 0.0f};
    }
    auto element_terms = [&](int a, int j) {
        if constexpr (kLaneTerms)
            return lane_terms[j];
        else
            return fetch_terms(a, j);
    };

    // Sums of g and g * xhat per channel of the thread, each finished and
    // stored before the next begins (two registers, not two per channel;
    // the one-block form with channels fastest holds them all, below):
    // channels fastest, a lane's over the slots; positions fastest, a
    // slot's over its lanes, then over the row's threads by shuffles.  The
    // same additions in the same order as one sum per channel held to the end.
    // Each pass widens bfloat16 its own way (widen_in_pass): the compiler
    // keeps the packs between the passes, not the first pass's floats.
    Sums2<A>* entries = shared_at<Sums2<A>>(shared, layout.entries);
    // g of every element for dx, in the one-block form (dy is dead once g
    // is known there).
    A kept[kKeep ? R : 1][kKeep ? W : 1];
    using SwishOff = std::integral_constant<int, kSwishOff>;
    using SwishOn = std::integral_constant<int, kSwishOn>;
    using SwishTested = std::integral_constant<int, kSwishTested>;
    // kTrim: the swish chosen once for each pass, and dx's slot loop
    // stopping at the first slot not held with its pointer stepped.  Not in
    // the two-block form with 16-bit data and channels fastest: there
    // ptxas at 128 registers spilled 88 to 120 bytes with either (the swish
    // is tested per element there, and dx's loop keeps main's form, a held
    // test a slot).  The streamed instances, with fewer register slots, trim.
    constexpr bool kTrim = kKeep || !kInner || sizeof(T) == 4 || kStream;
    // Sums start at -0.0, which g + (-0.0) = g leaves out of the code; a
    // zero's sign never reaches a result (the block's sums start at +0.0).
    // One copy of the pass with the swish and one without (the flag tested
    // per element otherwise).
    auto first_pass = [&](auto with_swish) {
        constexpr int kSwish = decltype(with_swish)::value;
        if constexpr (kLaneTerms) {
            // One block, channels fastest: registers to spare, so every lane's
            // sums are held to the end and the slots walked outermost, one
            // branch out of the slot loop.  The same additions in the same
            // order as one lane at a time.
            A sum_g[W], sum_gx[W];
#pragma unroll
            for (int j = 0; j < W; ++j) sum_g[j] = sum_gx[j] = A(-0.0);
#pragma unroll
            for (int a = 0; a < R; ++a) {
                if (a >= slots) MBN_UNROLLED_EXIT;
#pragma unroll
                for (int j = 0; j < W; ++j) {
                    A xhat, g;
                    element_gradient<A, kSwish>(args, lane_terms[j], widen_in_pass<1>(raw_x[a].lane[j]),
                                                widen_in_pass<1>(raw_dy[a].lane[j]), xhat, g);
                    kept[a][j] = g;
                    sum_g[j] += g;
                    sum_gx[j] += g * xhat;
                }
            }
#pragma unroll
            for (int j = 0; j < W; ++j) store_lane_sums<W>(w, at, j, sum_g[j], sum_gx[j], entries);
        } else if constexpr (kInner && kStream) {
            // Streamed, channels fastest: every lane's sums held over the
            // register slots and then the streamed ones, batch by batch (a
            // batch's loads in flight together), lane by lane within each.
            A sum_g[W], sum_gx[W];
#pragma unroll
            for (int j = 0; j < W; ++j) {
                sum_g[j] = sum_gx[j] = A(-0.0);
                const GnLaneTerms t = fetch_terms(0, j);
#pragma unroll
                for (int a = 0; a < R; ++a) {
                    if (a >= slots) MBN_UNROLLED_EXIT;
                    A xhat, g;
                    element_gradient<A, kSwish>(args, t, widen_in_pass<1>(raw_x[a].lane[j]),
                                                widen_in_pass<1>(raw_dy[a].lane[j]), xhat, g);
                    sum_g[j] += g;
                    sum_gx[j] += g * xhat;
                }
            }
            const T* slot_x = x + at.offset(R);
            const T* slot_dy = dy + at.offset(R);
            for (int a0 = R; a0 < at.slots; a0 += B) {
                const int count = at.slots - a0 < B ? at.slots - a0 : B;
                Pack<T, W> batch_x[B], batch_dy[B];
#pragma unroll
                for (int i = 0; i < B; ++i) {
                    if (i >= count) MBN_UNROLLED_EXIT;
                    batch_x[i] = load_pack<W>(slot_x);
                    batch_dy[i] = load_pack<W>(slot_dy);
                    slot_x += at.step;
                    slot_dy += at.step;
                }
#pragma unroll
                for (int j = 0; j < W; ++j) {
                    const GnLaneTerms t = fetch_terms(0, j);
#pragma unroll
                    for (int i = 0; i < B; ++i) {
                        if (i >= count) MBN_UNROLLED_EXIT;
                        A xhat, g;
                        element_gradient<A, kSwish>(args, t, widen(batch_x[i].lane[j]), widen(batch_dy[i].lane[j]),
                                                    xhat, g);
                        sum_g[j] += g;
                        sum_gx[j] += g * xhat;
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < W; ++j) store_lane_sums<W>(w, at, j, sum_g[j], sum_gx[j], entries);
        } else if constexpr (kInner) {
            // Lane by lane, each over the held slots.
#pragma unroll
            for (int j = 0; j < W; ++j) {
                A sum_g = A(-0.0), sum_gx = A(-0.0);
#pragma unroll
                for (int a = 0; a < R; ++a) {
                    if (a >= slots) MBN_UNROLLED_EXIT;
                    A xhat, g;
                    element_gradient<A, kSwish>(args, element_terms(a, j), widen_in_pass<1>(raw_x[a].lane[j]),
                                                widen_in_pass<1>(raw_dy[a].lane[j]), xhat, g);
                    if constexpr (kKeep) kept[a][j] = g;
                    sum_g += g;
                    sum_gx += g * xhat;
                }
                store_lane_sums<W>(w, at, j, sum_g, sum_gx, entries);
            }
        } else {
            // Positions fastest: slot by slot, over its lanes; every thread
            // of the block adds (shuffles) and stores for every slot some
            // thread holds (the first `rows_slots`, the same for the whole
            // block): the rest are empty in every thread of the block.
            const int row_slots = w.by_row_threads.divide(at.part.rows + w.row_threads - 1);
            // The one-block form holds every slot's sums and adds them over
            // the row's threads together, level by level: a shuffle's latency
            // a level, not one a level and slot (the same additions, each
            // value's in the same order).  The two-block form has no
            // registers for them: slot by slot.
            constexpr int kHeld = kKeep ? R : 1;
            [[maybe_unused]] A held_g[kHeld], held_gx[kHeld];
#pragma unroll
            for (int a = 0; a < R; ++a) {
                if (a >= row_slots) MBN_UNROLLED_EXIT;
                A sum_g = A(-0.0), sum_gx = A(-0.0);
                if (a < slots) {
                    const GnLaneTerms t = element_terms(a, 0);
#pragma unroll
                    for (int j = 0; j < W; ++j) {
                        A xhat, g;
                        element_gradient<A, kSwish>(args, t, widen_in_pass<1>(raw_x[a].lane[j]),
                                                    widen_in_pass<1>(raw_dy[a].lane[j]), xhat, g);
                        if constexpr (kKeep) kept[a][j] = g;
                        sum_g += g;
                        sum_gx += g * xhat;
                    }
                }
                if constexpr (kKeep) {
                    held_g[a] = sum_g;
                    held_gx[a] = sum_gx;
                } else {
                    store_row_sums(w, at, a, sum_g, sum_gx, entries);
                }
            }
            if constexpr (kStream) {
                // The streamed slots some thread holds, batch by batch (the
                // same batches for the whole block: every thread adds and
                // stores each slot's sums; a batch's loads in flight together).
                for (int a0 = R; a0 < row_slots; a0 += B) {
                    Pack<T, W> batch_x[B], batch_dy[B];
#pragma unroll
                    for (int i = 0; i < B; ++i) {
                        if (a0 + i < at.slots) {
                            batch_x[i] = load_pack<W>(x + at.offset(a0 + i));
                            batch_dy[i] = load_pack<W>(dy + at.offset(a0 + i));
                        }
                    }
#pragma unroll
                    for (int i = 0; i < B; ++i) {
                        const int a = a0 + i;
                        if (a >= row_slots) MBN_UNROLLED_EXIT;
                        A sum_g = A(-0.0), sum_gx = A(-0.0);
                        if (a < at.slots) {
                            const GnLaneTerms t = element_terms(a, 0);
#pragma unroll
                            for (int j = 0; j < W; ++j) {
                                A xhat, g;
                                element_gradient<A, kSwish>(args, t, widen(batch_x[i].lane[j]),
                                                            widen(batch_dy[i].lane[j]), xhat, g);
                                sum_g += g;
                                sum_gx += g * xhat;
                            }
                        }
                        store_row_sums(w, at, a, sum_g, sum_gx, entries);
                    }
                }
            }
            if constexpr (kKeep) {
                for (int mask = 1; mask < w.columns && mask < MBN_WAVE_SIZE; mask *= 2) {
#pragma unroll
                    for (int a = 0; a < R; ++a) {
                        if (a >= row_slots) MBN_UNROLLED_EXIT;
                        shuffle_add(held_g[a], mask);
                        shuffle_add(held_gx[a], mask);
                    }
                }
                if ((at.tx & (MBN_WAVE_SIZE - 1)) == 0) {
                    Sums2<A>* wave_entries = entries + (at.tx / MBN_WAVE_SIZE) * w.block_channels();
#pragma unroll
                    for (int a = 0; a < R; ++a) {
                        if (a >= row_slots) MBN_UNROLLED_EXIT;
                        const int row = at.row(w, a);
                        if (row < at.part.rows) wave_entries[row] = Sums2<A>{held_g[a], held_gx[a]};
                    }
                }
            }
        }
    };
    if (kTrim && args.swish)
        first_pass(SwishOn{});
    else if (kTrim)
        first_pass(SwishOff{});
    else
        first_pass(SwishTested{});
    Sums2<double>* block_sums = shared_at<Sums2<double>>(shared, layout.block);
    block_channel_sums(w, entries, block_sums);

    // The tile's sums per channel from every block's, in rank order.
    if (w.cluster > 1) cluster_sync();
    Sums2<double>* totals = shared_at<Sums2<double>>(shared, layout.totals);
    for (std::int64_t c = threadIdx.x; c < w.block_channels(); c += w.threads)
        totals[c] = cluster_total<kKeep ? kGnTileMaxCluster : 2>(block_sums + c, w.cluster);
    __syncthreads();
    // No more reads of other blocks' memory (nothing to publish: relaxed).
    if (w.cluster > 1) cluster_arrive_relaxed();

    Sums2<double>* terms = shared_at<Sums2<double>>(shared, layout.terms);
    GnDxCoefs* coefs = shared_at<GnDxCoefs>(shared, layout.coefs);
    group_terms<W, kInner, kFactors>(w, totals, params, stats, terms, coefs);
    if (args.dweight != nullptr)
        parameter_gradients(args, GnBlockPlace{at.n, at.tile, at.rank}, totals, channel0,
                            shared_at<int>(shared, layout.flag));
    __syncthreads();

    // Each lane's group's mean(w g) and mean(w g xhat), picked per element
    // from the thread's two groups (two blocks: per-lane copies took 2 W
    // registers) or once per lane (one block, channels fastest).
    Sums2<A> lo_means{A(0), A(0)}, hi_means = lo_means;
    if (active) {
        const Sums2<double> lo_terms = terms[lanes.lo];
        lo_means = Sums2<A>{static_cast<A>(lo_terms.a), static_cast<A>(lo_terms.b)};
        if (split < W) {
            const Sums2<double> hi_terms = terms[lanes.lo + 1];
            hi_means = Sums2<A>{static_cast<A>(hi_terms.a), static_cast<A>(hi_terms.b)};
        }
    }
    Sums2<A> means_of[kLaneTerms ? W : 1];
    if constexpr (kLaneTerms) {
#pragma unroll
        for (int j = 0; j < W; ++j) means_of[j] = j >= split ? hi_means : lo_means;
    }
    auto lane_means = [&](int j) {
        if constexpr (kLaneTerms) {
            return means_of[j];
        } else {
            const bool upper = kInner && j >= split;
            return Sums2<A>{upper ? hi_means.a : lo_means.a, upper ? hi_means.b : lo_means.b};
        }
    };
    // dx, with g kept, or found again as the first pass found it (two
    // blocks: a second exponential with the swish, 176 special-function
    // operations a thread for 16-bit data instead of 88).
    auto write_dx = [&](auto with_swish) {
        [[maybe_unused]] constexpr int kSwish = decltype(with_swish)::value;  // (g kept: unused)
        // dx of slot a from its x and dy (g found again; not in the form
        // that keeps g).
        auto dx_of = [&](int a, const Pack<T, W>& in_x, const Pack<T, W>& in_dy, auto widen_pass) {
            constexpr int kPass = decltype(widen_pass)::value;
            Pack<T, W> out;
            if constexpr (kFactors) {
                // Lane j's channel, at.tx * W + j: its factors at
                // coef_index.
#pragma unroll
                for (int j = 0; j < W; ++j) {
                    const int c = at.tx * W + j;
                    const GnDxCoefs k = coefs[j * w.columns + at.tx];
                    const float d = widen_in_pass<kPass>(in_x.lane[j]) - k.mean;
                    const float dy_value = widen_in_pass<kPass>(in_dy.lane[j]);
                    float g = dy_value;
                    if (kSwish == kSwishOn || (kSwish == kSwishTested && args.swish))
                        g = dy_value * fast_swish_derivative(d * k.scaled + params[c].bias, args.swish_beta,
                                                             swish_exponent_scale(args.swish_beta));
                    out.lane[j] = narrow<T>(coef_dx(k, g, d));
                }
            } else {
#pragma unroll
                for (int j = 0; j < W; ++j) {
                    const GnLaneTerms t = element_terms(a, j);
                    const Sums2<A> means = lane_means(j);
                    A xhat, g;
                    element_gradient<A, kSwish>(args, t, widen_in_pass<kPass>(in_x.lane[j]),
                                                widen_in_pass<kPass>(in_dy.lane[j]), xhat, g);
                    out.lane[j] = narrow<T>(element_dx(t, means, g, xhat));
                }
            }
            return out;
        };
        T* slot_dx = dx + at.first;
#pragma unroll
        for (int a = 0; a < R; ++a) {
            if (kTrim ? a >= slots : !(held & (1u << a))) {
                if (kTrim) break;
                continue;
            }
            Pack<T, W> out;
            if constexpr (kKeep) {
#pragma unroll
                for (int j = 0; j < W; ++j) {
                    const GnLaneTerms t = element_terms(a, j);
                    const Sums2<A> means = lane_means(j);
                    const A xhat = element_xhat<A>(t, widen_in_pass<2>(raw_x[a].lane[j]));
                    out.lane[j] = narrow<T>(element_dx(t, means, kept[a][j], xhat));
                }
            } else {
                out = dx_of(a, raw_x[a], raw_dy[a], std::integral_constant<int, 2>{});
            }
            store_pack(kTrim ? slot_dx : dx + at.offset(a), out);
            slot_dx += at.step;
        }
        if constexpr (kStream) {
            // The streamed slots read again in batches, the last slot first
            // (what the sums read last is likeliest still in L2), each
            // written after its own read.  After the register slots' dx, so
            // that their registers are free for the batches (before it,
            // ptxas spilled the register slots, 32 to 264 bytes).
            for (int end = at.slots; end > R; end -= BD) {
                const int count = end - R < BD ? end - R : BD;
                Pack<T, W> batch_x[BD], batch_dy[BD];
                const T* slot_x = x + at.offset(end - 1);
                const T* slot_dy = dy + at.offset(end - 1);
#pragma unroll
                for (int i = 0; i < BD; ++i) {
                    if (i >= count) MBN_UNROLLED_EXIT;
                    batch_x[i] = load_pack_last<W>(slot_x);
                    batch_dy[i] = load_pack_last<W>(slot_dy);
                    slot_x -= at.step;
                    slot_dy -= at.step;
                }
                T* slot_out = dx + at.offset(end - 1);
#pragma unroll
                for (int i = 0; i < BD; ++i) {
                    if (i >= count) MBN_UNROLLED_EXIT;
                    store_pack(slot_out, dx_of(end - 1 - i, batch_x[i], batch_dy[i], std::integral_constant<int, 0>{}));
                    slot_out -= at.step;
                }
            }
        }
    };
    // g kept: no activation here.
    if (kKeep)
        write_dx(SwishOff{});
    else if (kTrim && args.swish)
        write_dx(SwishOn{});
    else if (kTrim)
        write_dx(SwishOff{});
    else
        write_dx(SwishTested{});
    if (w.launch_cluster() > 1) cluster_wait();
}


// ---- a group in one block, channels fastest ----------------------------
//
// Where a channels-fastest tile is small (Stable Diffusion's NHWC rows of
// its 8x8 and 16x16 planes), each group takes a block of its own
// (GnTileWalk::group_blocks), as in the forward's gn_block_forward_group:
// the block holds x and dy of the vectors its group's channels touch,
// columns tx of rows ty, ty + row_threads, ..., sums only its group's
// lanes and writes only them.  There the tile kernel's threads split each
// vector's lanes between two groups and pick each element's terms lane by
// lane: ncu counted 1,131 and 1,314 instructions a warp on 2x320x8x8 and
// 2x320x16x16 half NHWC, against 878 and 785 NCHW (forty-seventh
// session).  A neighbouring group's lanes in a shared vector are read but
// neither summed nor written: that group's block writes them.  The
// group's sums per channel go through block_channel_sums (double, fixed
// order), then every wave forms mean(w g) and mean(w g xhat) alike, and dx
// takes GnDxCoefs' form.  H200, against the tile kernel (run251, best of
// two rounds): 1.05x-1.14x on the NHWC 8x8 and 16x16 UNet rows it takes
// (2x320x16x16 half 11.0 -> 9.8 us, 2x640x16x16 half 11.4 -> 10.0).

// Launched with a backward group_blocks walk (plan_gn_tiles: tile_groups 1,
// so tile t is group t and tile_base its first element; backward_blocks 1)
// and tile_shared(walk, true).  dx may be x or dy: each thread reads its
// vectors before it writes its group's lanes of them, and no other thread
// writes those lanes or reads them for a result.
template <typename T, typename P>
__global__ void __launch_bounds__(kGnTileBackwardThreads)
    gn_block_backward_group(const T* x, const T* dy, T* dx, GnTileBackwardArgs<P> args) {
    constexpr int W = static_cast<int>(16 / sizeof(T));
    constexpr int R = kGnBlockBackwardSlots;
    extern __shared__ double gn_tile_backward_shared[];
    void* shared = gn_tile_backward_shared;
    const GnTileWalk& w = args.walk;
    require_cluster_support(w.launch_cluster());
    const GnTileShared& layout = args.layout;
    const int block = static_cast<int>(blockIdx.x);
    // Clusters of samples: block g N + n holds sample n's group g.
    int n, group;
    if (w.sample_cluster > 1) {
        group = w.by_sample_cluster.divide(block);
        n = block - group * w.sample_cluster;
    } else {
        n = w.by_tiles_per_sample.divide(block);
        group = block - n * static_cast<int>(w.tiles_per_sample);
    }
    const int thread = static_cast<int>(threadIdx.x);
    const int ty = w.by_columns.divide(thread);
    const int tx = thread - ty * w.columns;
    const int channels = static_cast<int>(w.channels);
    const int first_channel = group * channels;
    // This column's first channel; it touches the group where below its end
    // (threads past the block's rows of threads hold nothing).
    const int column_channel = (first_channel / W + tx) * W;
    const bool touches = ty < w.row_threads && tx < w.vectors && column_channel < first_channel + channels;
    const int rows = static_cast<int>(w.rows);
    const int slots = touches && ty < rows ? w.by_row_threads.divide(rows - ty + w.row_threads - 1) : 0;
    const std::int64_t sample = static_cast<std::int64_t>(n) * w.sample_stride;
    const std::int64_t first = sample + ty * w.row_stride + column_channel;
    const std::int64_t step = w.row_threads * w.row_stride;

    Pack<T, W> raw_x[R], raw_dy[R];
    {
        const T* slot_x = x + first;
        const T* slot_dy = dy + first;
#pragma unroll
        for (int a = 0; a < R; ++a) {
            if (a >= slots) MBN_UNROLLED_EXIT;
            raw_x[a] = load_pack<W>(slot_x);
            raw_dy[a] = load_pack<W>(slot_dy);
            slot_x += step;
            slot_dy += step;
        }
    }
    const float mean = static_cast<float>(read_stat(args.mean, n, group));
    const float rstd = static_cast<float>(read_stat(args.rstd, n, group));
    bool in[W];  // lane j is a channel of the group
    const bool whole = group_lanes(touches, column_channel, first_channel, channels, in);  // every lane is
    GnLaneTerms terms[W];
#pragma unroll
    for (int j = 0; j < W; ++j) {
        const int c = column_channel + j;
        terms[j] = GnLaneTerms{mean, rstd, in[j] ? channel_param(args.weight, args.weight_stride, c, 1.0f) : 1.0f,
                               in[j] ? channel_param(args.bias, args.bias_stride, c, 0.0f) : 0.0f};
    }
    // The group's weights, for its terms (a wave's lanes read them).
    GnChannelParams* params = shared_at<GnChannelParams>(shared, layout.params);
    for (int k = thread; k < channels; k += w.threads)
        params[k] = GnChannelParams{channel_param(args.weight, args.weight_stride, first_channel + k, 1.0f), 0.0f};

    // Each lane's sums of g and g * xhat over the slots, to its channel's
    // entry of the thread's row (every row of threads stores each of the
    // group's channels once); g kept in float for dx.
    float kept[R][W];
    float lane_g[W], lane_gx[W];
#pragma unroll
    for (int j = 0; j < W; ++j) lane_g[j] = -0.0f, lane_gx[j] = -0.0f;
    auto first_pass = [&](auto with_swish) {
        constexpr int kSwish = decltype(with_swish)::value;
#pragma unroll
        for (int a = 0; a < R; ++a) {
            if (a >= slots) MBN_UNROLLED_EXIT;
#pragma unroll
            for (int j = 0; j < W; ++j) {
                float xhat, g;
                element_gradient<float, kSwish>(args, terms[j], widen(raw_x[a].lane[j]), widen(raw_dy[a].lane[j]),
                                                xhat, g);
                kept[a][j] = g;
                lane_g[j] += g;
                lane_gx[j] += g * xhat;
            }
        }
    };
    if (args.swish)
        first_pass(std::integral_constant<int, kSwishOn>{});
    else
        first_pass(std::integral_constant<int, kSwishOff>{});
    Sums2<float>* entries = shared_at<Sums2<float>>(shared, layout.entries);
    if (touches) {
#pragma unroll
        for (int j = 0; j < W; ++j)
            if (in[j]) entries[ty * channels + column_channel + j - first_channel] = Sums2<float>{lane_g[j], lane_gx[j]};
    }
    // The group's sums per channel, in a fixed order (block_channel_sums'
    // barriers publish the entries and the weights, then its sums).
    Sums2<double>* totals = shared_at<Sums2<double>>(shared, layout.block);
    block_channel_sums(w, entries, totals);

    // mean(w g) and mean(w g xhat), every wave alike (the same adds in the
    // same order: the same bits), so no barrier waits on one wave.
    Sums2<double> sum{0.0, 0.0};
    const int lane = thread % MBN_WAVE_SIZE;
    for (int k = lane; k < channels; k += MBN_WAVE_SIZE) {
        const double weight = params[k].weight;
        sum.a += weight * totals[k].a;
        sum.b += weight * totals[k].b;
    }
    wave_sum(1, MBN_WAVE_SIZE, sum);
    if (args.dweight != nullptr)
        parameter_gradients(args, GnBlockPlace{n, group, 0}, totals, first_channel, shared_at<int>(shared, layout.flag));

    // dx = rstd w g + f_d (x - mean) + f_c (GnDxCoefs' form).
    const float f_d = -rstd * rstd * static_cast<float>(sum.b * w.inv_group_size);
    const float f_c = -rstd * static_cast<float>(sum.a * w.inv_group_size);
    float scaled[W];
#pragma unroll
    for (int j = 0; j < W; ++j) scaled[j] = rstd * terms[j].weight;
    // 16-bit lanes stored in pairs where the group's channels are even
    // (store_group_lanes).
    const bool pairs = sizeof(T) == 2 && channels % 2 == 0;
    T* slot_dx = dx + first;
#pragma unroll
    for (int a = 0; a < R; ++a) {
        if (a >= slots) MBN_UNROLLED_EXIT;
        Pack<T, W> out;
#pragma unroll
        for (int j = 0; j < W; ++j)
            out.lane[j] = narrow<T>(fmaf(scaled[j], kept[a][j], fmaf(f_d, widen(raw_x[a].lane[j]) - mean, f_c)));
        store_group_lanes(slot_dx, out, in, whole, pairs);
        slot_dx += step;
    }
    if (w.launch_cluster() > 1) cluster_wait();
}

template <typename T, typename P, bool kInner>
void launch_backward(const GnBackward& p, const GnTileWalk& walk, const LaunchTarget& target) {
    GnTileBackwardArgs<P> args{};
    args.walk = walk;
    if (p.affine) {
        args.weight = static_cast<const P*>(p.weight.data);
        args.weight_stride = p.weight.stride[kC];
        args.dweight = static_cast<P*>(p.dweight.data);
        args.dweight_stride = p.dweight.stride[kC];
        args.dbias = static_cast<P*>(p.dbias.data);
        args.dbias_stride = p.dbias.stride[kC];
        if (p.bias.present()) {
            args.bias = static_cast<const P*>(p.bias.data);
            args.bias_stride = p.bias.stride[kC];
        }
        args.scratch = carve_tile_backward_scratch(target.scratch, target.counters, walk);
    }
    args.mean = stat_tensor(p.mean);
    args.rstd = stat_tensor(p.rstd);
    args.swish = p.activation == Activation::swish;
    args.swish_beta = p.swish_beta;
    args.layout = tile_shared(walk, true);
    const auto* x = static_cast<const T*>(p.x.data);
    const auto* dy = static_cast<const T*>(p.dy.data);
    auto* dx = static_cast<T*>(p.dx.data);
    if (walk.group_blocks) {
        if constexpr (kInner)
            launch_tile_kernel(gn_block_backward_group<T, P>, walk, target.stream, "gn_block_backward_group", x, dy, dx,
                               args);
        return;
    }
    auto launch = [&](auto kernel) { launch_tile_kernel(kernel, walk, target.stream, "gn_tile_backward", x, dy, dx, args); };
    if constexpr (std::is_same<T, float>::value) {
        if (walk.exact) return launch(gn_tile_backward<T, P, kInner, double, kGnTileExactBackwardBlocks, false>);
    }
    if (walk.streamed > 0 && walk.backward_blocks == 1)
        launch(gn_tile_backward<T, P, kInner, float, 1, true>);
    else if (walk.streamed > 0)
        launch(gn_tile_backward<T, P, kInner, float, kGnTileBackwardStreamBlocks, true>);
    else if (walk.backward_blocks == 1)
        launch(gn_tile_backward<T, P, kInner, float, 1, false>);
    else
        launch(gn_tile_backward<T, P, kInner, float, kGnTileBackwardMostBlocks, false>);
}

}  // namespace

void run_gn_tile_backward(const GnBackward& p, const GnTileWalk& walk, const LaunchTarget& target) {
    with_element_type(p.x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        if constexpr (std::is_same<T, double>::value) {
            fail(miopenStatusInternalError, "GPU backend: no on-chip group-norm kernel for float64");
        } else {
            const DType param_dtype = p.affine ? p.weight.dtype : DType::f32;
            with_parameter_type<T>(param_dtype, [&](auto p_tag) {
                using P = typename decltype(p_tag)::type;
                if (walk.channels_inner)
                    launch_backward<T, P, true>(p, walk, target);
                else
                    launch_backward<T, P, false>(p, walk, target);
            });
        }
    });
}

int gn_tile_backward_resident_clusters(int blocks, int per_multiprocessor) {
#if MBN_GPU_CUDA
    if (per_multiprocessor == 1)
        return resident_clusters(gn_tile_backward<__half, float, true, float, 1, false>, kGnTileBackwardThreads,
                                 blocks);
    return resident_clusters(gn_tile_backward<__half, float, true, float, kGnTileBackwardMostBlocks, false>,
                             kGnTileBackwardThreads, blocks);
#else
    // No clusters on AMD; naming the kernel here would ask hipcc for a host
    // stub of an instance it never emits (a link error).
    (void)blocks;
    (void)per_multiprocessor;
    return 0;
#endif
}

}  // namespace gpu
}  // namespace mbn
