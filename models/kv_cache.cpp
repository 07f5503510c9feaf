#include "models/kv_cache.h"

#include <algorithm>
#include <array>
#include <exception>

#include <fmt/format.h>

#include "core/error.h"
#include "core/shutdown.h"
#include "core/tier_names.h"
#include "offload/host_buffer.h"

namespace strata::models {

// Note [KV cache ring]
// With the host placement, layer l's keys and values live in pinned host memory (one buffer per
// layer: keys (B, max_T, width), then values) and are used on the device from slot l % 2 of a
// ring of 2 device slots, each a whole layer's (B, max_T, width) keys and values (the attention
// kernels index rows by max_T). All copies run in order on the cache's copy stream:
//   begin_pass:     the copy stream waits for the compute stream's work so far (the slots'
//                   last readers), then loads layers 0 and 1.
//   load(l):        per row b, H2D of keys and values [0, length(b)) into slot l % 2, then
//                   `loaded[l % 2]` is recorded. Positions [length(b), + T_new) are not loaded:
//                   the attention writes them before it reads them (attention_decode appends
//                   the new keys and values first), and it reads nothing past them.
//   begin_layer(l): the compute stream waits for `loaded[l % 2]`.
//   end_layer(l):   `used` is recorded on compute after layer l's attention and the copy stream
//                   waits for it; then per row D2H of the kept new positions [length(b),
//                   + kept(b)) from the slot to the host, then load(l + 2) into the same slot.
// So the H2D of layer l + 2 runs while layer l + 1 computes on the other slot, and follows the
// D2H of layer l out of the same slot (one in-order stream: no event is needed between them).
// The next pass's loads follow this pass's last D2H on the same stream, so host memory is
// always up to date when it is read. Only the filled positions cross PCIe: a decoding step
// moves (length(b) + 1) positions of every layer per row, not max_T.
struct KvCache::Ring {
  Ring(runtime::device::Device& device, offload::HostPool& pool, std::size_t layer_bytes, int layers)
      : copy(device.create_stream("kv cache copies")), used(device.create_event()) {
    for (int l = 0; l < layers; ++l) {
      host.push_back(pool.allocate(2 * layer_bytes, fmt::format("KV cache of layer {} (pinned host)", l)));
    }
    for (std::size_t s = 0; s < slots.size(); ++s) {
      slots[s] = device.allocate(2 * layer_bytes, fmt::format("KV cache device slot {}", s));
      loaded[s] = device.create_event();
    }
  }
  ~Ring() {
    drain_for_shutdown("KV cache", [this] { copy->synchronize(); });  // no copy may outlive the buffers
  }

  std::unique_ptr<runtime::device::Stream> copy;
  std::unique_ptr<runtime::device::Event> used;
  std::vector<offload::HostBuffer> host;  // per layer: keys then values
  std::array<runtime::device::DeviceBuffer, 2> slots;
  std::array<std::unique_ptr<runtime::device::Event>, 2> loaded;
  std::vector<int> kept;  // this pass's kept positions per row
  int current = -1;       // the layer between begin_layer and end_layer
  KvTransfers transfers;
};

const char* kv_placement_name(KvPlacement placement) {
  return placement == KvPlacement::device ? tier_names::kDevice : tier_names::kPinned;
}

KvCache::KvCache(runtime::device::Device& device, KvShape shape, DType dtype, int batch, int max_T,
                 const KvCacheOptions& options)
    : capacity_(batch), batch_(batch), max_T_(max_T), shape_(shape), dtype_(dtype), placement_(options.placement) {
  if (batch <= 0 || max_T <= 0) {
    throw Error(fmt::format("KV cache of batch {} and length {}: both must be positive", batch, max_T));
  }
  STRATA_ASSERT(shape.layers > 0 && shape.width > 0, "KV cache shape must be positive");
  const std::size_t bytes = layer_bytes();
  if (placement_ == KvPlacement::device) {
    for (int l = 0; l < shape.layers; ++l) {
      k_.push_back(device.allocate(bytes, fmt::format("KV cache keys of layer {}", l)));
      v_.push_back(device.allocate(bytes, fmt::format("KV cache values of layer {}", l)));
    }
  } else {
    STRATA_ASSERT(options.pinned != nullptr, "a host-placed KV cache needs a pinned pool");
    ring_ = std::make_unique<Ring>(device, *options.pinned, bytes, shape.layers);
  }
  lengths_.assign(static_cast<std::size_t>(batch), 0);
}

KvCache::~KvCache() = default;
KvCache::KvCache(KvCache&&) noexcept = default;
KvCache& KvCache::operator=(KvCache&&) noexcept = default;

std::size_t KvCache::layer_bytes() const {
  return static_cast<std::size_t>(capacity_) * static_cast<std::size_t>(max_T_) * static_cast<std::size_t>(shape_.width) *
         dtype_size(dtype_);
}

std::size_t KvCache::row_offset(int row) const {
  return static_cast<std::size_t>(first_ + row) * static_cast<std::size_t>(max_T_) * static_cast<std::size_t>(shape_.width) *
         dtype_size(dtype_);
}

int KvCache::length() const {
  int longest = 0;
  for (int b = 0; b < batch_; ++b) longest = std::max(longest, length(b));
  return longest;
}

bool KvCache::uniform() const {
  for (int b = 1; b < batch_; ++b) {
    if (length(b) != length(0)) return false;
  }
  return true;
}

void KvCache::reset() {
  for (int b = 0; b < batch_; ++b) lengths_[static_cast<std::size_t>(first_ + b)] = 0;
}

void KvCache::advance(int n) {
  for (int b = 0; b < batch_; ++b) lengths_[static_cast<std::size_t>(first_ + b)] += n;
}

void KvCache::set_length(int row, int n) {
  STRATA_ASSERT(row >= 0 && row < batch_ && n >= 0 && n <= max_T_, "KV cache row length out of range");
  lengths_[static_cast<std::size_t>(first_ + row)] = n;
}

void KvCache::set_window(int first, int count) {
  STRATA_ASSERT(first >= 0 && count >= 1 && first + count <= capacity_, "KV cache window outside its rows");
  STRATA_ASSERT(!ring_ || ring_->current == -1, "KV cache: set_window during a pass");
  first_ = first;
  batch_ = count;
}

void KvCache::move_row(int from, int to, runtime::device::Stream& compute) {
  STRATA_ASSERT(from >= 0 && from < capacity_ && to >= 0 && to < capacity_, "KV cache row outside its rows");
  STRATA_ASSERT(!ring_ || ring_->current == -1, "KV cache: move_row during a pass");
  const int n = lengths_[static_cast<std::size_t>(from)];
  lengths_[static_cast<std::size_t>(to)] = n;
  if (from == to || n == 0) return;
  const std::size_t row_bytes = static_cast<std::size_t>(max_T_) * static_cast<std::size_t>(shape_.width) *
                                dtype_size(dtype_);
  const std::size_t bytes = static_cast<std::size_t>(n) * static_cast<std::size_t>(shape_.width) * dtype_size(dtype_);
  const std::size_t src = static_cast<std::size_t>(from) * row_bytes, dst = static_cast<std::size_t>(to) * row_bytes;
  if (!ring_) {
    for (int l = 0; l < shape_.layers; ++l) {
      auto* k = static_cast<std::byte*>(k_[static_cast<std::size_t>(l)].data());
      auto* v = static_cast<std::byte*>(v_[static_cast<std::size_t>(l)].data());
      compute.copy_async(k + dst, k + src, bytes);
      compute.copy_async(v + dst, v + src, bytes);
    }
    return;
  }
  // The host copies follow the copy stream's pending D2H of the last pass (one in-order stream).
  const std::size_t half = layer_bytes();
  for (int l = 0; l < shape_.layers; ++l) {
    std::byte* h = ring_->host[static_cast<std::size_t>(l)].data();
    ring_->copy->copy_async(h + dst, h + src, bytes);
    ring_->copy->copy_async(h + half + dst, h + half + src, bytes);
  }
}

void KvCache::begin_pass(runtime::device::Stream& compute, int T_new, const int* kept) {
  if (!ring_) return;
  Ring& r = *ring_;
  r.kept.resize(static_cast<std::size_t>(batch_));
  for (int b = 0; b < batch_; ++b) {
    const int k = kept != nullptr ? kept[b] : T_new;
    STRATA_ASSERT(k >= 0 && k <= T_new && length(b) + k <= max_T_, "KV cache pass past the cache");
    r.kept[static_cast<std::size_t>(b)] = k;
  }
  r.current = -1;
  // The slots' last readers (an earlier pass, even one that failed midway) are on compute.
  r.used->record(compute);
  r.copy->wait(*r.used);
  const std::size_t es = dtype_size(dtype_);
  const std::size_t pos_bytes = static_cast<std::size_t>(shape_.width) * es;
  const std::size_t half = layer_bytes();
  auto load = [&](int l) {
    auto* slot = static_cast<std::byte*>(r.slots[static_cast<std::size_t>(l % 2)].data());
    const std::byte* src = r.host[static_cast<std::size_t>(l)].data();
    for (int b = 0; b < batch_; ++b) {
      const std::size_t n = static_cast<std::size_t>(length(b)) * pos_bytes;
      if (n == 0) continue;
      const std::size_t off = row_offset(b);
      r.copy->copy_async(slot + off, src + off, n);                // keys
      r.copy->copy_async(slot + half + off, src + half + off, n);  // values
      r.transfers.h2d_bytes += 2 * n;
      r.transfers.h2d_copies += 2;
    }
    r.loaded[static_cast<std::size_t>(l % 2)]->record(*r.copy);
  };
  load(0);
  if (shape_.layers > 1) load(1);
}

void KvCache::begin_layer(int layer, runtime::device::Stream& compute) {
  if (!ring_) return;
  Ring& r = *ring_;
  STRATA_ASSERT(r.current == -1 && layer >= 0 && layer < shape_.layers && !r.kept.empty(),
                "KV cache: begin_layer out of order");
  compute.wait(*r.loaded[static_cast<std::size_t>(layer % 2)]);
  r.current = layer;
}

void KvCache::end_layer(int layer, runtime::device::Stream& compute) {
  if (!ring_) return;
  Ring& r = *ring_;
  STRATA_ASSERT(r.current == layer, "KV cache: end_layer without its begin_layer");
  r.current = -1;
  r.used->record(compute);
  r.copy->wait(*r.used);
  const std::size_t es = dtype_size(dtype_);
  const std::size_t pos_bytes = static_cast<std::size_t>(shape_.width) * es;
  const std::size_t half = layer_bytes();
  auto* slot = static_cast<std::byte*>(r.slots[static_cast<std::size_t>(layer % 2)].data());
  // The new positions back to the host.
  std::byte* dst = r.host[static_cast<std::size_t>(layer)].data();
  for (int b = 0; b < batch_; ++b) {
    const std::size_t n = static_cast<std::size_t>(r.kept[static_cast<std::size_t>(b)]) * pos_bytes;
    if (n == 0) continue;
    const std::size_t off = row_offset(b) + static_cast<std::size_t>(length(b)) * pos_bytes;
    r.copy->copy_async(dst + off, slot + off, n);
    r.copy->copy_async(dst + half + off, slot + half + off, n);
    r.transfers.d2h_bytes += 2 * n;
    r.transfers.d2h_copies += 2;
  }
  // Layer + 2 into the freed slot.
  const int next = layer + 2;
  if (next >= shape_.layers) return;
  const std::byte* src = r.host[static_cast<std::size_t>(next)].data();
  for (int b = 0; b < batch_; ++b) {
    const std::size_t n = static_cast<std::size_t>(length(b)) * pos_bytes;
    if (n == 0) continue;
    const std::size_t off = row_offset(b);
    r.copy->copy_async(slot + off, src + off, n);
    r.copy->copy_async(slot + half + off, src + half + off, n);
    r.transfers.h2d_bytes += 2 * n;
    r.transfers.h2d_copies += 2;
  }
  r.loaded[static_cast<std::size_t>(layer % 2)]->record(*r.copy);
}

void* KvCache::layer_keys(int layer) {
  if (!ring_) return k_[static_cast<std::size_t>(layer)].data();
  STRATA_ASSERT(ring_->current == layer, "KV cache: keys of a layer outside begin_layer / end_layer");
  return ring_->slots[static_cast<std::size_t>(layer % 2)].data();
}

void* KvCache::layer_values(int layer) {
  if (!ring_) return v_[static_cast<std::size_t>(layer)].data();
  STRATA_ASSERT(ring_->current == layer, "KV cache: values of a layer outside begin_layer / end_layer");
  return static_cast<std::byte*>(ring_->slots[static_cast<std::size_t>(layer % 2)].data()) + layer_bytes();
}

void* KvCache::keys(int layer) { return keys(layer, 0); }

void* KvCache::values(int layer) { return values(layer, 0); }

void* KvCache::keys(int layer, int row) { return static_cast<std::byte*>(layer_keys(layer)) + row_offset(row); }

void* KvCache::values(int layer, int row) { return static_cast<std::byte*>(layer_values(layer)) + row_offset(row); }

KvTransfers KvCache::transfers() const { return ring_ ? ring_->transfers : KvTransfers{}; }

std::uint64_t KvCache::bytes(KvShape shape, DType dtype, int batch, int max_T) {
  return 2ull * static_cast<std::uint64_t>(shape.layers) * static_cast<std::uint64_t>(batch) *
         static_cast<std::uint64_t>(max_T) * static_cast<std::uint64_t>(shape.width) * dtype_size(dtype);
}

std::uint64_t KvCache::device_bytes(KvShape shape, DType dtype, int batch, int max_T, KvPlacement placement) {
  if (placement == KvPlacement::device) return bytes(shape, dtype, batch, max_T);
  return bytes(KvShape{2, shape.width}, dtype, batch, max_T);  // the ring's 2 slots
}

std::uint64_t KvCache::host_bytes(KvShape shape, DType dtype, int batch, int max_T, KvPlacement placement) {
  if (placement == KvPlacement::device) return 0;
  const std::uint64_t layer = bytes(KvShape{1, shape.width}, dtype, batch, max_T);
  const std::uint64_t rounded = (layer + offload::kDirectIoAlignment - 1) / offload::kDirectIoAlignment *
                                offload::kDirectIoAlignment;
  return rounded * static_cast<std::uint64_t>(shape.layers);
}

}  // namespace strata::models
