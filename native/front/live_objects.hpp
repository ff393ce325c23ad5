// The handles and tensor descriptors this library has created and not yet
// destroyed.  Entry points look an object argument up here before touching
// it, so a destroyed, twice-destroyed or never-created object is BadParm
// instead of a use after free (MIOpen crashes on all three).  The one case no
// registry can catch: a destroyed address that a later create reused.
#pragma once

namespace mbn {

enum class ObjectKind { handle, descriptor, activation, fusion_plan, fusion_op, operator_args };
constexpr int kObjectKinds = 6;

// Records a new object; throws std::bad_alloc (the caller then frees it).
void add_live(ObjectKind kind, const void* object);
// Forgets an object; false when it was not live (destroyed twice, or foreign).
bool remove_live(ObjectKind kind, const void* object);
bool is_live(ObjectKind kind, const void* object);

}  // namespace mbn
