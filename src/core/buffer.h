// Buffer<T>: a std::vector whose allocation failures are kiln::OutOfMemory, not std::bad_alloc.
// Kernels use it for scratch memory sized by element counts (rows, partial sums, index lists),
// so that no standard exception escapes a kiln call however large the tensor.
#pragma once

#include <cstddef>
#include <new>
#include <span>
#include <vector>

namespace kiln::detail {

// The user address space of x86-64 and AArch64 with 4-level page tables: a request past it can
// never succeed, so it is refused before the allocator is asked. Some allocators do not report
// such a request as std::bad_alloc (AddressSanitizer's and ThreadSanitizer's operator new end
// the process), and kiln's OutOfMemory must not depend on which one is linked.
inline constexpr std::size_t kMaxHostAllocationBytes = std::size_t{1} << 47;

// Throws OutOfMemory naming the byte count.
[[noreturn]] void fail_allocation(std::size_t count, std::size_t element_size);

template <class T>
struct GuardedAllocator {
  using value_type = T;

  GuardedAllocator() noexcept = default;
  template <class U>
  GuardedAllocator(const GuardedAllocator<U>&) noexcept {}  // NOLINT: rebinding is implicit

  T* allocate(std::size_t count) {
    if (count > kMaxHostAllocationBytes / sizeof(T)) fail_allocation(count, sizeof(T));
    try {
      return static_cast<T*>(::operator new (count * sizeof(T), std::align_val_t{alignof(T)}));
    } catch (const std::bad_alloc&) {
      fail_allocation(count, sizeof(T));
    }
  }
  void deallocate(T* data, std::size_t) noexcept {
    ::operator delete (data, std::align_val_t{alignof(T)});
  }
  template <class U>
  bool operator==(const GuardedAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using Buffer = std::vector<T, GuardedAllocator<T>>;

// A std::vector<std::byte> of `bytes` bytes (what TensorData holds): a copy of `initial` first
// (at most `bytes` of it), zeros after it; OutOfMemory on failure. Its whole 2 MiB pages are
// advised to transparent huge pages before they are first touched.
std::vector<std::byte> allocate_bytes(std::size_t bytes, std::span<const std::byte> initial = {});
// The size of a transparent huge page on x86-64 Linux.
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;
// Advises the whole 2 MiB pages inside [data, data + bytes) to transparent huge pages (Linux;
// nothing elsewhere): a first touch then faults once per 2 MiB instead of once per 4 KiB. Not
// while a SmallPages lives on the calling thread.
void advise_huge_pages(void* data, std::size_t bytes) noexcept;

// Faults in the whole 4 KiB pages inside [data, data + bytes) for writing, in one call (Linux
// 5.14's MADV_POPULATE_WRITE): memory about to be filled then takes no page fault per 4 KiB as
// it is written. False where the kernel did not (an older one, or another system): the pages then
// fault in as they are written.
bool populate_for_writing(void* data, std::size_t bytes) noexcept;

// While one lives on a thread, memory allocated there (allocate_bytes, the CPU backend's blocks)
// stays in 4 KiB pages: for memory filled once, in order, as bytes arrive (an upload to a
// server). On a virtual machine that hands free memory back to its host, a huge page's first
// touch faults the host in for all of its 2 MiB at once (150-200 ms per 64 MiB on the development
// VM, against 35 ms in 4 KiB pages), and a fill that arrives at network speed gains nothing from
// huge pages; on other machines the 4 KiB faults cost a few ms per 64 MiB.
class SmallPages {
 public:
  SmallPages() noexcept;
  ~SmallPages();
  SmallPages(const SmallPages&) = delete;
  SmallPages& operator=(const SmallPages&) = delete;

 private:
  bool previous_;
};

}  // namespace kiln::detail
