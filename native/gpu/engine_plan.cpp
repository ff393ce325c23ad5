#include "gpu/engine_plan.hpp"

#include "common/environment.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace mbn {
namespace gpu {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// A thread walks at least this many elements of a split, so that partial
// merges stay cheap against the data.
constexpr std::int64_t kMinThreadElements = 16;
// A feature whose whole reduction takes a thread this many steps or fewer is
// not split: a grid barrier costs about as much as such a walk.
constexpr std::int64_t kUnsplitSteps = 16;

// MIOPEN_BN_GPU_ALGORITHM: one of the names of algorithm_name, else automatic.
bool forced_algorithm(EngineAlgorithm& out) {
    const char* text = std::getenv("MIOPEN_BN_GPU_ALGORITHM");
    if (text == nullptr) return false;
    for (EngineAlgorithm a : {EngineAlgorithm::single_cached, EngineAlgorithm::single_streamed,
                              EngineAlgorithm::split_cached, EngineAlgorithm::split_streamed})
        if (std::strcmp(text, algorithm_name(a)) == 0) {
            out = a;
            return true;
        }
    return false;
}

bool is_cached(EngineAlgorithm a) {
    return a == EngineAlgorithm::single_cached || a == EngineAlgorithm::split_cached;
}

// The layout with `splits` splits (at most; fewer when the chunk rounds up).
BnLayout with_splits(BnLayout layout, std::int64_t splits) {
    const std::int64_t positions = layout.reduce.size;
    splits = std::max<std::int64_t>(1, std::min<std::int64_t>({splits, positions, kMaxSplits}));
    layout.chunk = ceil_div(positions, splits);
    layout.splits = static_cast<int>(ceil_div(positions, layout.chunk));
    return layout;
}

// Splits that fill `resident` blocks, each thread keeping at least
// kMinThreadElements elements (forced: at least 1 and at least 2 splits).
std::int64_t splits_for(const BnLayout& layout, std::int64_t resident, bool forced) {
    const std::int64_t elements = static_cast<std::int64_t>(layout.vector_width) * layout.features_per_thread;
    const std::int64_t min_positions = forced ? 1 : std::max<std::int64_t>(1, kMinThreadElements / elements);
    const std::int64_t by_work = std::max<std::int64_t>(1, layout.reduce.size / (layout.rows * min_positions));
    const std::int64_t by_grid = std::max<std::int64_t>(1, resident / layout.tiles);
    const std::int64_t splits = std::min(by_work, by_grid);
    return forced ? std::max<std::int64_t>(2, splits) : splits;
}

EnginePlan finish(const BnLayout& layout, EngineAlgorithm algorithm, std::int64_t resident) {
    EnginePlan plan;
    plan.layout = layout;
    plan.algorithm = algorithm;
    const std::int64_t items = layout.tiles * layout.splits;
    plan.grid = static_cast<int>(layout.splits > 1 ? items : std::min(items, std::max<std::int64_t>(1, resident)));
    plan.run_positions = static_cast<int>(ceil_div(layout.chunk, layout.rows));
    plan.scratch_bytes = layout.splits > 1 ? engine_scratch_bytes(layout) : 0;
    return plan;
}

// The plan of one algorithm, or false when it cannot run the problem.
bool try_plan(const BnLayout& base, EngineAlgorithm a, const EngineCapacity& c, bool forced, EnginePlan& out) {
    const std::int64_t resident = is_cached(a) ? c.resident_cached : c.resident_streamed;
    if (resident < 1) return false;
    const bool split = a == EngineAlgorithm::split_cached || a == EngineAlgorithm::split_streamed;
    BnLayout layout = with_splits(base, 1);
    if (split) {
        // Every block of a split grid must be resident at once (grid barrier).
        if (base.tiles * 2 > resident) return false;
        layout = with_splits(base, splits_for(base, resident, forced));
        if (layout.splits < 2 || layout.tiles * layout.splits > resident) return false;
    }
    if (is_cached(a) && ceil_div(layout.chunk, layout.rows) > c.cache_positions) return false;
    out = finish(layout, a, resident);
    return true;
}

}  // namespace

const char* algorithm_name(EngineAlgorithm a) {
    switch (a) {
        case EngineAlgorithm::single_cached: return "single-cached";
        case EngineAlgorithm::single_streamed: return "single-streamed";
        case EngineAlgorithm::split_cached: return "split-cached";
        case EngineAlgorithm::split_streamed: return "split-streamed";
    }
    return "?";
}

EnginePlan plan_engine(const BnLayout& layout, const EngineCapacity& capacity) {
    EnginePlan plan;
    EngineAlgorithm forced;
    if (forced_algorithm(forced) && try_plan(layout, forced, capacity, true, plan)) return plan;

    // Few steps per thread: one split, no barrier.  Otherwise split to fill
    // the device when the tiles alone do not, keeping data in registers when
    // the share fits.
    const std::int64_t steps = ceil_div(layout.reduce.size, layout.rows);
    const bool single = steps <= kUnsplitSteps || layout.tiles * 2 > capacity.resident_streamed;
    const EngineAlgorithm order[2][2] = {
        {EngineAlgorithm::split_cached, EngineAlgorithm::split_streamed},
        {EngineAlgorithm::single_cached, EngineAlgorithm::single_streamed}};
    for (EngineAlgorithm a : order[single ? 1 : 0])
        if (try_plan(layout, a, capacity, false, plan)) return plan;
    for (EngineAlgorithm a : order[single ? 0 : 1])
        if (try_plan(layout, a, capacity, false, plan)) return plan;
    // single-streamed takes any problem.
    return finish(with_splits(layout, 1), EngineAlgorithm::single_streamed,
                  std::max<std::int64_t>(1, capacity.resident_streamed));
}

std::string describe(const EnginePlan& plan) {
    std::ostringstream out;
    out << "GPU algorithm " << algorithm_name(plan.algorithm) << ": " << plan.layout.tiles << " tiles x "
        << plan.layout.splits << " splits, grid " << plan.grid << ", block " << plan.layout.tile_features << "x"
        << plan.layout.rows << ", " << plan.run_positions << " positions of " << plan.layout.vector_width * plan.layout.features_per_thread
        << " elements per thread";
    return out.str();
}

std::size_t engine_scratch_bytes(const BnLayout& layout) {
    const std::int64_t per_array = (layout.feature.size * layout.splits + 31) / 32 * 32;
    return static_cast<std::size_t>(5 * per_array + layout.feature.size * kFinalsPerFeature) * sizeof(double);
}

EngineScratch carve_engine_scratch(void* base, const BnLayout& layout) {
    const std::int64_t per_array = (layout.feature.size * layout.splits + 31) / 32 * 32;
    double* p = static_cast<double*>(base);
    return EngineScratch{p, p + per_array, p + 2 * per_array, p + 3 * per_array, p + 4 * per_array,
                         p + 5 * per_array};
}

}  // namespace gpu
}  // namespace mbn
