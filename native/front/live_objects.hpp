// The handles and tensor descriptors this library has created and not yet
// destroyed.  Entry points look an object argument up here before touching
// it, so a destroyed, twice-destroyed or never-created object is BadParm
// instead of a use after free (MIOpen crashes on all three).  The one case no
// registry can catch: a destroyed address that a later create reused.
#pragma once

#include <shared_mutex>

namespace mbn {

enum class ObjectKind { handle, descriptor, activation, fusion_plan, fusion_op, operator_args };
constexpr int kObjectKinds = 6;

// Records a new object; throws std::bad_alloc (the caller then frees it).
void add_live(ObjectKind kind, const void* object);
// Forgets an object; false when it was not live (destroyed twice, or foreign).
bool remove_live(ObjectKind kind, const void* object);

// A lock that holds `object` live while it is held: owns_lock() is false
// when the object is not live.  remove_live waits for every such lock (of
// either kind) to be released, and an object is freed only after its
// removal, so what is read under the lock cannot be freed meanwhile.  Hold
// it briefly (to copy a descriptor, to register a call on a handle).
std::shared_lock<std::shared_mutex> lock_if_live(ObjectKind kind, const void* object);

// Whether `object` is live at this moment; nothing holds it live afterwards.
// Only for objects that calls do not yet guard against a concurrent destroy
// (fusion plans, their ops, operator arguments: destroying one during a call
// that uses it is the caller's error, as in MIOpen).
inline bool is_live_now(ObjectKind kind, const void* object) { return lock_if_live(kind, object).owns_lock(); }

}  // namespace mbn
