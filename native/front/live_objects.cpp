#include "live_objects.hpp"

#include <mutex>
#include <unordered_set>

namespace mbn {
namespace {

// Lookups (every call, every descriptor argument) share the lock; only
// creation and destruction take it alone.
struct LiveSet {
    std::shared_mutex mutex;
    std::unordered_set<const void*> objects;
};

// Never destroyed: a handle may be destroyed from another library's static
// destructor after this one's would have run.
LiveSet& live_set(ObjectKind kind) {
    static LiveSet* sets = new LiveSet[kObjectKinds];
    return sets[static_cast<int>(kind)];
}

}  // namespace

void add_live(ObjectKind kind, const void* object) {
    LiveSet& set = live_set(kind);
    std::unique_lock<std::shared_mutex> lock(set.mutex);
    set.objects.insert(object);
}

bool remove_live(ObjectKind kind, const void* object) {
    LiveSet& set = live_set(kind);
    std::unique_lock<std::shared_mutex> lock(set.mutex);
    return set.objects.erase(object) == 1;
}

std::shared_lock<std::shared_mutex> lock_if_live(ObjectKind kind, const void* object) {
    LiveSet& set = live_set(kind);
    std::shared_lock<std::shared_mutex> lock(set.mutex);
    if (set.objects.count(object) == 0) lock.unlock();
    return lock;
}

}  // namespace mbn
