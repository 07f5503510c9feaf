#pragma once
// The KV cache of incremental decoding (models/model.h: prefill, forward_decode): the keys and
// values of every layer, (B, max_T, width) each, in the model's dtype; width = the key/value
// heads times the head size. Each row (sequence) has its own length: a batch of prompts of
// different lengths decodes together.
//
// Two placements, one protocol for the models, which never learn which one they run on:
//  - device: every layer's keys and values in the device arena, for the whole run.
//  - host:   every layer's keys and values in pinned host memory (a HostPool: the inference
//            engine's, so that strata.pinned_memory counts them), brought to the device layer by
//            layer through a ring of 2 device slots on the cache's own copy stream, ahead of the
//            layer's attention; the positions a pass writes go back to the host after it. See
//            Note [KV cache ring] in kv_cache.cpp.
// A forward pass over the cache (one prefill or one decoding step), on the compute stream:
//   begin_pass(compute, T_new, kept);
//   for each layer l: ...; begin_layer(l, compute); attention on keys(l) / values(l);
//                     end_layer(l, compute); ...
//   then the caller sets the lengths (advance / set_length).
// keys(l) / values(l) are valid from begin_layer(l) to end_layer(l) (always, on the device).
//
// Rows in use (continuous batching, serve/batcher.h): a cache is allocated for `capacity()` rows,
// and every pass, length and view above covers the window of rows [first, first + batch()) that
// set_window() chose (all rows by default): row b of the protocol is row first + b of the cache.
// A server decodes its running requests as the window [0, n) and prefills a new request alone as
// the window [n, n + 1); move_row() compacts the rows when a request in the middle finishes.
//
// Ownership: the cache owns its device buffers, its host buffers (returned to the pool, which
// must outlive the cache) and its copy stream; the destructor waits for its copies.
// Threading: used by one thread at a time.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "runtime/device/device.h"

namespace strata::offload {
class HostPool;
}

namespace strata::models {

enum class KvPlacement { device, host };
const char* kv_placement_name(KvPlacement placement);  // the tier's name: "device", "pinned host"

// What a model's cache holds per position: `layers` layers of keys and values of `width` each.
struct KvShape {
  int layers = 0;
  int width = 0;
};

struct KvCacheOptions {
  KvPlacement placement = KvPlacement::device;
  // Host placement: the pinned pool the host memory comes from (borrowed; must outlive the
  // cache). Its budget is checked by the allocation (a strata::Error naming strata.pinned_memory).
  offload::HostPool* pinned = nullptr;
};

// Bytes moved between the host and the device by a host-placed cache since it was made.
struct KvTransfers {
  std::uint64_t h2d_bytes = 0;
  std::uint64_t d2h_bytes = 0;
  std::uint64_t h2d_copies = 0;
  std::uint64_t d2h_copies = 0;
};

class KvCache {
 public:
  KvCache(runtime::device::Device& device, KvShape shape, DType dtype, int batch, int max_T,
          const KvCacheOptions& options = {});
  ~KvCache();
  KvCache(KvCache&&) noexcept;
  KvCache& operator=(KvCache&&) noexcept;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int batch() const { return batch_; }       // rows in the window
  int capacity() const { return capacity_; }  // rows allocated
  int first_row() const { return first_; }
  int max_T() const { return max_T_; }
  int width() const { return shape_.width; }
  int layers() const { return shape_.layers; }
  DType dtype() const { return dtype_; }
  KvPlacement placement() const { return placement_; }
  int length(int row) const { return lengths_[static_cast<std::size_t>(first_ + row)]; }  // positions filled
  int length() const;        // the longest row's
  bool uniform() const;      // every row has the same length
  void reset();              // the window's rows to length 0
  void advance(int n);       // every row
  void set_length(int row, int n);

  // The rows the protocol covers: [first, first + count) of the capacity. Not during a pass.
  void set_window(int first, int count);
  // Copies cache row `from` (keys and values of every layer, positions [0, length)) to row `to`
  // and gives `to` its length; rows are absolute (not window-relative). In stream order on
  // `compute` (the device placement) or on the cache's copy stream after its pending copies (host).
  // Not during a pass.
  void move_row(int from, int to, runtime::device::Stream& compute);

  // The pass protocol (above). `kept`: per row, how many of the T_new positions written at
  // [length(row), + T_new) the pass keeps (a prefill's prompt lengths: the rest is padding);
  // null = all T_new. The lengths must not change during a pass.
  void begin_pass(runtime::device::Stream& compute, int T_new, const int* kept = nullptr);
  void begin_layer(int layer, runtime::device::Stream& compute);
  void end_layer(int layer, runtime::device::Stream& compute);

  // Layer `layer`'s keys / values of the window, (B, max_T, width), on the device; window row
  // `row`'s: (max_T, width).
  void* keys(int layer);
  void* values(int layer);
  void* keys(int layer, int row);
  void* values(int layer, int row);

  KvTransfers transfers() const;  // zero on the device

  // The whole cache's bytes (keys and values of every layer).
  static std::uint64_t bytes(KvShape shape, DType dtype, int batch, int max_T);
  // Device bytes the cache allocates: the whole cache, or the 2 slots of the host placement.
  static std::uint64_t device_bytes(KvShape shape, DType dtype, int batch, int max_T, KvPlacement placement);
  // Pinned host bytes a host-placed cache takes from its pool (each layer's buffer rounded up to
  // the pool's 4 KiB); 0 on the device.
  static std::uint64_t host_bytes(KvShape shape, DType dtype, int batch, int max_T, KvPlacement placement);

 private:
  struct Ring;  // host placement (kv_cache.cpp)
  std::size_t layer_bytes() const;  // keys (or values) of one layer
  std::size_t row_offset(int row) const;  // of window row `row` within a layer's keys (or values)
  void* layer_keys(int layer);             // row 0 of the capacity
  void* layer_values(int layer);

  int capacity_;
  int first_ = 0;
  int batch_;
  int max_T_;
  KvShape shape_;
  DType dtype_;
  KvPlacement placement_;
  std::vector<int> lengths_;
  std::vector<runtime::device::DeviceBuffer> k_, v_;  // device placement: one per layer
  std::unique_ptr<Ring> ring_;                        // host placement
};

}  // namespace strata::models
