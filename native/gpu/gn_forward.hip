// Forward group norm.  Per group (n, g): the mean and biased variance of its
// C/G channels over all positions, then
//     y = act(((x - shift) - mean_offset) * rstd * w[c] + b[c])
// with shift the group's first element (gn_layout.hpp).
//
// Channels-innermost tensors with few channels per group go by slices
// instead (gn_forward_slices.hip).  Otherwise one kernel, gn_forward_chunks:
// each team of threads holds one chunk of a group in registers, so x is read
// once.  Its passes:
//   whole       a group fits one team: statistics and output in one go;
//   resident    a group spans several blocks: each block stores its chunk's
//               moments, the last to arrive merges them in chunk order, the
//               others wait for it, then every block writes its chunk from
//               registers.  Blocks take chunks as tickets in the order they
//               ask, so only the last group taken can be incomplete: at most
//               parts - 1 blocks wait at any time, for chunks that the next
//               free block takes.  The plan takes this pass only when that many
//               blocks are a small share of what the device holds at once
//               (gn_forward_chunk_residency, asked when the call is planned);
//   statistics, apply    groups too large to be resident: the statistics are
//               handed over only, and a second launch normalizes (x read twice).
#include "common/numerics.hpp"
#include "gpu/block_reduce.h"
#include "gpu/gn_activation.h"
#include "gpu/gn_arrival.h"
#include "gpu/gn_launch.hpp"
#include "gpu/gn_stat_io.h"
#include "gpu/gn_walk.h"
#include "gpu/norm_math.h"
#include "gpu/type_dispatch.hpp"

#include <algorithm>

namespace mbn {
namespace gpu {
namespace {

enum class GnPass : int { whole, resident, statistics, apply };

// Larger problems loop over their chunks.
constexpr std::int64_t kMaxGridBlocks = std::int64_t(1) << 20;
// The resident pass needs a group's chunks to be at most this share of the
// blocks the device holds at once.
constexpr std::int64_t kResidentShare = 4;

template <typename P>
struct GnForwardArgs {
    GnForwardWalk walk;
    GnChunks chunks;
    GnPass pass;
    const P* weight;  // nullptr: weight 1 and bias 0
    const P* bias;
    std::int64_t weight_stride;
    std::int64_t bias_stride;
    GnStatTensor mean;  // written when present
    GnStatTensor rstd;
    double epsilon;
    bool swish;
    float swish_beta;
    GnForwardScratch scratch;  // when a group has several chunks
};

// The first chunk of a block's next round; at or past chunks.total when it
// is done.  Static passes stride through the grid; the resident pass takes
// tickets (every thread of the block calls), and the block that takes the
// last ticket of the launch resets the counter for the next one.
template <typename P>
__device__ std::int64_t next_round(const GnForwardArgs<P>& a, std::int64_t previous, std::int64_t teams,
                                   ArrivalCounter* ticket) {
    if (a.pass != GnPass::resident)
        return previous < 0 ? blockIdx.x * teams : previous + gridDim.x * teams;
    __syncthreads();  // every thread has read the previous ticket
    if (threadIdx.x == 0) {
        *ticket = atomicAdd(a.scratch.tickets, 1ull);
        const auto total = static_cast<ArrivalCounter>(a.chunks.total);
        if (*ticket == total + gridDim.x - 1) atomicExch(a.scratch.tickets, 0ull);  // each block fails once
    }
    __syncthreads();
    return static_cast<std::int64_t>(*ticket);
}

// One team's chunk: elements [begin, end) of group (n, g).  A team past the
// last chunk is inactive: it walks nothing but still joins the reductions.
struct GnChunk {
    std::int64_t index;
    std::int64_t group;
    std::int64_t n, g;
    std::int64_t begin, end;
    bool active;
};

__device__ GnChunk chunk_at(const GnForwardWalk& walk, const GnChunks& chunks, std::int64_t index) {
    GnChunk c;
    c.active = index < chunks.total;
    c.index = c.active ? index : 0;
    std::int64_t part;
    divide(c.index, chunks.parts, c.group, part);
    divide(c.group, walk.shape.groups, c.n, c.g);
    c.begin = part * chunks.length;
    c.end = c.active ? min64(walk.shape.size, c.begin + chunks.length) : c.begin;
    return c;
}

// A thread's slots: slot i holds the W elements from begin + (i * team +
// lane) * W, used when that is below end (consecutive lanes, consecutive
// accesses).
struct GnSlots {
    std::int64_t first;
    std::int64_t step;

    __device__ GnSlots(const GnChunk& c, int lane, int team, int width)
        : first(c.begin + static_cast<std::int64_t>(lane) * width), step(static_cast<std::int64_t>(team) * width) {}
    __device__ bool used(const GnChunk& c, int slot) const { return first + slot * step < c.end; }
    __device__ GnElementCursor cursor(const GnGroupShape& shape, bool channels_inner) const {
        GnElementCursor cursor;
        cursor.start(shape, channels_inner, first, step);
        return cursor;
    }
};

template <typename Walk, typename T, int R>
__device__ void load_chunk(const T* x, const GnForwardWalk& walk, const GnChunk& c, const GnSlots& slots,
                           Pack<T, Walk::kWidth> (&raw)[R]) {
    constexpr int W = Walk::kWidth;
    const T* group = x + group_base(walk.shape, walk.x, c.n, c.g);
    GnElementCursor at = slots.cursor(walk.shape, Walk::channels_inner(walk));
#pragma unroll
    for (int i = 0; i < R; ++i) {
        if (slots.used(c, i))
            raw[i] = *reinterpret_cast<const Pack<T, W>*>(
                group + element_offset<Walk::kLinear>(walk.shape, walk.x, at.channel(), at.position()));
        at.advance();
    }
}

// Sum of this thread's values d = (x - shift) - offset, or of their squares.
template <typename A, bool kSquares, int W, int R, typename T>
__device__ A thread_sum(const Pack<T, W> (&raw)[R], A shift, A offset, const GnChunk& c, const GnSlots& slots) {
    A sum = 0;
#pragma unroll
    for (int i = 0; i < R; ++i) {
        if (!slots.used(c, i)) continue;
#pragma unroll
        for (int j = 0; j < W; ++j) {
            const A d = (static_cast<A>(widen(raw[i].lane[j])) - shift) - offset;
            sum += kSquares ? d * d : d;
        }
    }
    return sum;
}

// Count, mean and M2 of the chunk's values minus `shift`: exact two-pass
// over the team's registers.  Every thread of the team gets the same bits.
template <typename A, int W, int R, typename T>
__device__ Moments<double> chunk_moments(const Pack<T, W> (&raw)[R], A shift, const GnChunk& c, const GnSlots& slots,
                                         int team, Total<double>* wave_totals) {
    const double count = static_cast<double>(c.end - c.begin);
    const A sum = thread_sum<A, false>(raw, shift, A(0), c, slots);
    const double total = reduce_team(Total<double>{static_cast<double>(sum)}, team, wave_totals).value;
    const double mean = count > 0.0 ? total / count : 0.0;
    const A squares = thread_sum<A, true>(raw, shift, static_cast<A>(mean), c, slots);
    const double m2 = reduce_team(Total<double>{static_cast<double>(squares)}, team, wave_totals).value;
    return Moments<double>{count, mean, m2};
}

// The moments of a whole group (count = M) as its statistics.
__device__ __forceinline__ GnGroupStats finish_group(const Moments<double>& m, double shift, double epsilon) {
    return GnGroupStats{shift, m.mean, inverse_std(biased_variance(m.m2, m.count), epsilon)};
}

template <typename P>
__device__ void write_group_stats(const GnForwardArgs<P>& a, const GnChunk& c, const GnGroupStats& stats) {
    write_stat(a.mean, c.n, c.g, stats.shift + stats.mean_offset);
    write_stat(a.rstd, c.n, c.g, stats.rstd);
}

// The moments of a group from its chunks' partials, merged in chunk order by
// the whole block: the mean from the weighted chunk means, then M2 as the
// chunks' M2 plus their spread about that mean.
__device__ Moments<double> merge_partials(const double* partials, std::int64_t parts, double count,
                                          Total<double>* wave_totals) {
    const int threads = static_cast<int>(blockDim.x);
    double weighted = 0.0;
    for (std::int64_t i = threadIdx.x; i < parts; i += threads) {
        const double* q = partials + i * kGnPartialFields;
        weighted += load_coherent(q) * load_coherent(q + 1);
    }
    const double mean = reduce_team(Total<double>{weighted}, threads, wave_totals).value / count;
    double m2 = 0.0;
    for (std::int64_t i = threadIdx.x; i < parts; i += threads) {
        const double* q = partials + i * kGnPartialFields;
        const double offset = load_coherent(q + 1) - mean;
        m2 += load_coherent(q + 2) + load_coherent(q) * offset * offset;
    }
    return Moments<double>{count, mean, reduce_team(Total<double>{m2}, threads, wave_totals).value};
}

// Several blocks per group (the team is the block; every thread calls):
// stores this chunk's moments; the last block of the group to arrive merges
// all of them and publishes the statistics.  In the resident pass the other
// blocks wait for them; in the statistics pass they leave (their return
// value is then meaningless).
template <typename P>
__device__ GnGroupStats hand_over(const GnForwardArgs<P>& a, const GnChunk& c, const Moments<double>& moments,
                                  double shift, Total<double>* wave_totals, bool* finalizer) {
    const GnForwardScratch& s = a.scratch;
    const std::int64_t parts = a.chunks.parts;
    ArrivalCounter* counter = s.arrivals + c.group;
    if (threadIdx.x == 0) {
        double* mine = s.partials + c.index * kGnPartialFields;
        mine[0] = moments.count;
        mine[1] = moments.mean;
        mine[2] = moments.m2;
        *finalizer = arrive(counter, static_cast<ArrivalCounter>(parts));
    }
    __syncthreads();
    GnGroupStats stats{shift, 0.0, 0.0};
    if (*finalizer) {
        const Moments<double> group =
            merge_partials(s.partials + c.group * parts * kGnPartialFields, parts,
                           static_cast<double>(a.walk.shape.size), wave_totals);
        stats = finish_group(group, shift, a.epsilon);
        if (threadIdx.x == 0) {
            s.stats[c.group] = stats;
            write_group_stats(a, c, stats);
            release_to_zero(counter);
        }
    } else if (a.pass == GnPass::resident) {
        if (threadIdx.x == 0) await_release(counter);
        __syncthreads();
        const GnGroupStats* published = s.stats + c.group;
        stats = GnGroupStats{load_coherent(&published->shift), load_coherent(&published->mean_offset),
                             load_coherent(&published->rstd)};
    }
    __syncthreads();  // *finalizer is rewritten for the next chunk
    return stats;
}

template <typename Walk, typename T, typename P, typename A, int R>
__device__ void normalize_chunk(T* y, const GnForwardArgs<P>& a, const GnChunk& c, const GnSlots& slots,
                                const GnGroupStats& stats, const Pack<T, Walk::kWidth> (&raw)[R]) {
    constexpr int W = Walk::kWidth;
    const GnGroupShape& shape = a.walk.shape;
    const bool inner = Walk::channels_inner(a.walk);
    const A shift = static_cast<A>(stats.shift);
    const A mean_offset = static_cast<A>(stats.mean_offset);
    const A rstd = static_cast<A>(stats.rstd);
    const A beta = static_cast<A>(a.swish_beta);
    T* group = y + group_base(shape, a.walk.y, c.n, c.g);
    const std::int64_t first_channel = c.g * shape.channels;
    GnElementCursor at = slots.cursor(shape, inner);
#pragma unroll
    for (int i = 0; i < R; ++i) {
        if (slots.used(c, i)) {
            Pack<T, W> out;
            A scale = rstd;
            A bias = 0;
#pragma unroll
            for (int j = 0; j < W; ++j) {
                // Lanes are consecutive channels (channels fastest) or one channel.
                if (a.weight != nullptr && (inner || j == 0)) {
                    const std::int64_t channel = first_channel + at.channel() + j;
                    scale = rstd * static_cast<A>(widen(a.weight[channel * a.weight_stride]));
                    bias = static_cast<A>(widen(a.bias[channel * a.bias_stride]));
                }
                A v = ((static_cast<A>(widen(raw[i].lane[j])) - shift) - mean_offset) * scale + bias;
                if (a.swish) v = swish_of(v, beta);
                out.lane[j] = narrow<T>(v);
            }
            store_pack(group + element_offset<Walk::kLinear>(shape, a.walk.y, at.channel(), at.position()), out);
        }
        at.advance();
    }
}

// Launched with kBlockThreads threads; teams of chunks.team_threads.  x may
// be y: a team reads its whole chunk (and, before any block of the group
// writes, the group's first element) before writing; the apply pass takes
// the shift from scratch.
template <typename T, typename P, typename A, typename Walk>
__global__ void __launch_bounds__(kBlockThreads) gn_forward_chunks(const T* x, T* y, GnForwardArgs<P> a) {
    constexpr int W = Walk::kWidth;
    constexpr int R = gn_slots(W);
    __shared__ Total<double> wave_totals[kBlockThreads / MBN_WAVE_SIZE];
    __shared__ bool finalizer;
    __shared__ ArrivalCounter ticket;
    const int team = a.chunks.team_threads;
    const int lane = static_cast<int>(threadIdx.x) % team;
    const std::int64_t teams = blockDim.x / team;
    // Every thread of a block runs the same rounds (its teams share reductions).
    for (std::int64_t first = next_round(a, -1, teams, &ticket); first < a.chunks.total;
         first = next_round(a, first, teams, &ticket)) {
        const GnChunk c = chunk_at(a.walk, a.chunks, first + threadIdx.x / team);
        const GnSlots slots(c, lane, team, W);
        Pack<T, W> raw[R];
        load_chunk<Walk>(x, a.walk, c, slots, raw);
        GnGroupStats stats;
        if (a.pass == GnPass::apply) {
            stats = a.scratch.stats[c.group];
        } else {
            const double shift = statistics_shift(widen(x[group_base(a.walk.shape, a.walk.x, c.n, c.g)]));
            const Moments<double> moments = chunk_moments(raw, static_cast<A>(shift), c, slots, team, wave_totals);
            if (a.pass == GnPass::whole) {
                stats = finish_group(moments, shift, a.epsilon);
                if (lane == 0 && c.active) write_group_stats(a, c, stats);
            } else {
                if (!c.active) continue;  // the whole block: several-chunk groups have block teams
                stats = hand_over(a, c, moments, shift, wave_totals, &finalizer);
                if (a.pass == GnPass::statistics) continue;
            }
        }
        normalize_chunk<Walk, T, P, A>(y, a, c, slots, stats, raw);
    }
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

template <typename T, typename P, typename Walk>
void launch_passes(const GnForward& p, const GnForwardPlan& plan, const LaunchTarget& target, GnForwardArgs<P> args) {
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(p.x.data);
    T* y = static_cast<T*>(p.y.data);
    const GnChunks& chunks = plan.chunks;
    auto launch = [&](GnPass pass, std::int64_t blocks) {
        args.pass = pass;
        gn_forward_chunks<T, P, A, Walk>
            <<<dim3(static_cast<unsigned>(blocks)), dim3(kBlockThreads), 0, target.stream>>>(x, y, args);
        check_launch("gn_forward_chunks");
    };
    if (chunks.parts == 1) {
        const std::int64_t teams = kBlockThreads / chunks.team_threads;
        launch(GnPass::whole, std::min(ceil_div(chunks.total, teams), kMaxGridBlocks));
        return;
    }
    if (chunk_passes_resident(plan)) {
        launch(GnPass::resident, std::min(chunks.total, plan.resident_blocks));
        return;
    }
    launch(GnPass::statistics, std::min(chunks.total, kMaxGridBlocks));
    launch(GnPass::apply, std::min(chunks.total, kMaxGridBlocks));
}

// Calls body(TypeTag<T>, TypeTag<P>, TypeTag<Walk>) for the plan's instance
// of gn_forward_chunks.
template <typename Body>
void with_chunk_instance(const GnForward& p, const GnForwardPlan& plan, Body&& body) {
    with_element_type(p.x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        const DType param_dtype = p.affine ? p.weight.dtype : DType::f32;
        with_parameter_type<T>(param_dtype, [&](auto p_tag) {
            constexpr int kWide = vector_width_of<T>();
            if (plan.width == 1)
                body(x_tag, p_tag, TypeTag<GnWalkPolicy<1, GnOrder::as_planned>>{});
            else if (plan.width != kWide)
                fail(miopenStatusInternalError, "GPU backend: no group-norm kernel for vector width ", plan.width);
            else if (plan.walk.channels_inner)
                body(x_tag, p_tag, TypeTag<GnWalkPolicy<kWide, GnOrder::channels_fastest>>{});
            else
                body(x_tag, p_tag, TypeTag<GnWalkPolicy<kWide, GnOrder::positions_fastest>>{});
        });
    });
}

}  // namespace

bool chunk_passes_resident(const GnForwardPlan& plan) {
    return plan.chunks.parts * kResidentShare <= plan.resident_blocks;
}

std::int64_t gn_forward_chunk_residency(const GnForward& p, const GnForwardPlan& plan, const DeviceShape& device) {
    std::int64_t blocks = 0;
    with_chunk_instance(p, plan, [&](auto x_tag, auto p_tag, auto walk_tag) {
        using T = typename decltype(x_tag)::type;
        using P = typename decltype(p_tag)::type;
        using Walk = typename decltype(walk_tag)::type;
        int per_multiprocessor = 0;
        check_runtime(hipOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor,
                                                                   gn_forward_chunks<T, P, acc_t<T>, Walk>,
                                                                   kBlockThreads, 0),
                      "hipOccupancyMaxActiveBlocksPerMultiprocessor");
        blocks = static_cast<std::int64_t>(per_multiprocessor) * device.multiprocessors;
    });
    return blocks;
}

void run_gn_forward(const GnForward& p, const GnForwardPlan& plan, const LaunchTarget& target) {
    with_chunk_instance(p, plan, [&](auto x_tag, auto p_tag, auto walk_tag) {
        using T = typename decltype(x_tag)::type;
        using P = typename decltype(p_tag)::type;
        using Walk = typename decltype(walk_tag)::type;
        GnForwardArgs<P> args{};
        args.walk = plan.walk;
        args.chunks = plan.chunks;
        if (p.affine) {
            args.weight = static_cast<const P*>(p.weight.data);
            args.bias = static_cast<const P*>(p.bias.data);
            args.weight_stride = p.weight.stride[kC];
            args.bias_stride = p.bias.stride[kC];
        }
        args.mean = stat_tensor(p.mean);
        args.rstd = stat_tensor(p.rstd);
        args.epsilon = p.epsilon;
        args.swish = p.activation == Activation::swish;
        args.swish_beta = p.swish_beta;
        args.scratch =
            carve_forward_scratch(target.scratch, target.counters, plan.chunks, plan.walk.shape.group_count());
        launch_passes<T, P, Walk>(p, plan, target, args);
    });
}

}  // namespace gpu
}  // namespace mbn
