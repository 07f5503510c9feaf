#include "core/huge_mapping.h"

#include <sys/mman.h>

#include <cstdint>

namespace strata {

void* map_anonymous(std::size_t bytes, int extra_flags) {
  const bool huge = bytes >= kHugePageBytes;
  const std::size_t span = huge ? bytes + kHugePageBytes : bytes;
  void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  if (!huge) return p;
  auto* base = static_cast<std::byte*>(p);
  const auto addr = reinterpret_cast<std::uintptr_t>(base);
  const std::size_t head = (kHugePageBytes - addr % kHugePageBytes) % kHugePageBytes;
  std::byte* data = base + head;
  // Both cuts are page-aligned and inside the mapping: munmap cannot fail on them.
  if (head > 0) ::munmap(base, head);
  const std::size_t tail = span - head - bytes;
  if (tail > 0) ::munmap(data + bytes, tail);
  (void)::madvise(data, bytes, MADV_HUGEPAGE);  // a hint: fine to be refused
  return data;
}

}  // namespace strata
