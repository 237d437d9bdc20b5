// Sanitizer defaults for this test binary. A failed huge allocation must reach
// ringkv as a null pointer from the nothrow operator new, as it does with the
// real allocator; by default the ASan and TSan allocators abort the process
// instead (allocation-size-too-big, out-of-memory). ASAN_OPTIONS / TSAN_OPTIONS
// from the environment are applied on top.
extern "C" {
// NOLINTBEGIN(bugprone-reserved-identifier)
const char* __asan_default_options();
const char* __tsan_default_options();
const char* __asan_default_options() { return "allocator_may_return_null=1"; }
const char* __tsan_default_options() { return "allocator_may_return_null=1"; }
// NOLINTEND(bugprone-reserved-identifier)
}
