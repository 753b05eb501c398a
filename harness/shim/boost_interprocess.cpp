// The boost.interprocess baseline (CXLALLOC §5's cross-process "Boost"): a
// managed_shared_memory segment's allocator behind a C interface, so podkv's benchmarks can
// drive it from every process that opens the segment. Blocks are named by their handle (the
// offset boost computes from its segment base), which every process resolves to its own
// address. boost serialises every allocation and free on one mutex in the segment.
#include <boost/interprocess/managed_shared_memory.hpp>
#include <cstdint>
#include <new>

namespace bip = boost::interprocess;

namespace {
bip::managed_shared_memory* segment(void* s) {
    return static_cast<bip::managed_shared_memory*>(s);
}
}  // namespace

extern "C" {

// A new segment of `bytes` named `name` (an old one of that name is removed first); null on
// failure.
void* podkv_boost_create(const char* name, uint64_t bytes) {
    try {
        bip::shared_memory_object::remove(name);
        return new bip::managed_shared_memory(bip::create_only, name, bytes);
    } catch (...) {
        return nullptr;
    }
}

// The existing segment `name`, mapped in this process; null on failure.
void* podkv_boost_open(const char* name) {
    try {
        return new bip::managed_shared_memory(bip::open_only, name);
    } catch (...) {
        return nullptr;
    }
}

// The segment `name`, created with `bytes` if it does not exist yet (boost settles a race
// between processes creating it at once); null on failure.
void* podkv_boost_open_or_create(const char* name, uint64_t bytes) {
    try {
        return new bip::managed_shared_memory(bip::open_or_create, name, bytes);
    } catch (...) {
        return nullptr;
    }
}

// The handle of the named block `name` of `words` zeroed 8-byte words, made by the first
// process that asks (under the segment's mutex); UINT64_MAX on failure.
uint64_t podkv_boost_named(void* s, const char* name, uint64_t words) {
    try {
        uint64_t* p = segment(s)->find_or_construct<uint64_t>(name)[words](0);
        return static_cast<uint64_t>(segment(s)->get_handle_from_address(p));
    } catch (...) {
        return UINT64_MAX;
    }
}

// Bytes the segment holds in all.
uint64_t podkv_boost_size(void* s) { return segment(s)->get_size(); }

// Unmaps the segment from this process.
void podkv_boost_close(void* s) { delete segment(s); }

// Removes the segment's name (mappings stay valid until closed).
void podkv_boost_remove(const char* name) { bip::shared_memory_object::remove(name); }

// A block of `bytes` aligned to `align` (a power of two), as its handle; UINT64_MAX when the
// segment is full.
uint64_t podkv_boost_alloc(void* s, uint64_t bytes, uint64_t align) {
    void* p = align <= 16 ? segment(s)->allocate(bytes, std::nothrow)
                          : segment(s)->allocate_aligned(bytes, align, std::nothrow);
    if (p == nullptr) return UINT64_MAX;
    return static_cast<uint64_t>(segment(s)->get_handle_from_address(p));
}

// Frees the block of `handle` (allocated by any process).
void podkv_boost_free(void* s, uint64_t handle) {
    segment(s)->deallocate(segment(s)->get_address_from_handle(handle));
}

// This process's address of the block of `handle`.
void* podkv_boost_addr(void* s, uint64_t handle) {
    return segment(s)->get_address_from_handle(handle);
}

}  // extern "C"
