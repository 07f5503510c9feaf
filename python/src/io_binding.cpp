// strata.io's C++ side: AsyncIO over offload::AioEngine, and pinned host memory from
// offload::HostPool handed to torch by DLPack.
//
// Alignment. The engine wants O_DIRECT segments aligned to 4 KiB (buffer, offset, length). A
// request that is aligned goes through an O_DIRECT descriptor (where the file system allows
// it); any other through a buffered descriptor of the same file, so callers never pad. Linux
// keeps the two coherent (a direct transfer writes back and drops the cached pages it covers).
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <fmt/format.h>

#include "core/error.h"
#include "core/units.h"
#include "engine_box.h"
#include "offload/fault_injection.h"
#include "tensor_view.h"

namespace nb = nanobind;

namespace strata::py {
namespace {

nb::object& pin_fn() {
  static nb::object* f = new nb::object();  // leaked: outlives interpreter teardown order
  return *f;
}
nb::object& unpin_fn() {
  static nb::object* f = new nb::object();
  return *f;
}

std::uint64_t pool_budget() {
  if (const char* env = std::getenv("STRATA_PINNED_MEMORY"); env != nullptr && *env != '\0') {
    auto bytes = parse_bytes(env);
    if (!bytes) {
      throw Error(fmt::format("STRATA_PINNED_MEMORY={} is not a size", env),
                  "STRATA_PINNED_MEMORY", "give a size such as 16GiB or 512MB");
    }
    return *bytes;
  }
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) / 2;
}

offload::PinHook python_pin_hook() {
  offload::PinHook hook;
  // The pool calls these with the GIL held or not (an engine thread never allocates), so they
  // take it; pin's Python exception becomes a strata::Error, unpin's is printed (it must not
  // throw: it runs in destructors).
  hook.pin = [](void* ptr, std::size_t bytes) {
    nb::gil_scoped_acquire gil;
    if (!pin_fn().is_valid() || pin_fn().is_none()) return;
    try {
      pin_fn()(reinterpret_cast<std::uintptr_t>(ptr), bytes);
    } catch (const nb::python_error& e) {
      throw Error(fmt::format("pinning {} bytes of host memory failed: {}", bytes, e.what()),
                  "strata.io pinned pool", "lower STRATA_PINNED_MEMORY or free pinned memory");
    }
  };
  hook.unpin = [](void* ptr) {
    nb::gil_scoped_acquire gil;
    if (!unpin_fn().is_valid() || unpin_fn().is_none()) return;
    try {
      unpin_fn()(reinterpret_cast<std::uintptr_t>(ptr));
    } catch (const nb::python_error& e) {
      std::fprintf(stderr, "strata.io: unpinning host memory failed: %s\n", e.what());
    }
  };
  return hook;
}

offload::DirectIo parse_direct(const std::string& direct) {
  if (direct == "auto") return offload::DirectIo::kAuto;
  if (direct == "on" || direct == "require") return offload::DirectIo::kRequire;
  if (direct == "off") return offload::DirectIo::kOff;
  throw Error(fmt::format("direct='{}' is not one of auto, on, off", direct), "AsyncIO",
              "pass direct='auto' (O_DIRECT where the file system allows it)");
}

class AsyncIO {
 public:
  AsyncIO(std::size_t block_size, unsigned queue_depth, unsigned parallelism,
          const std::string& backend, const std::string& direct,
          const std::optional<std::string>& fault_spec)
      : direct_(parse_direct(direct)) {
    offload::AioOptions options;
    options.block_size = block_size;
    options.queue_depth = queue_depth;
    options.parallelism = parallelism;
    if (backend == "auto") options.backend = offload::AioBackend::kAuto;
    else if (backend == "io_uring") options.backend = offload::AioBackend::kIoUring;
    else if (backend == "threads") options.backend = offload::AioBackend::kThreads;
    else throw Error(fmt::format("backend='{}' is not one of auto, io_uring, threads", backend),
                     "AsyncIO", "pass backend='auto'");
    // Faults as `strata train` takes them (STRATA_FAULT_INJECTION), or the tests' own spec.
    options.completion_hook = fault_spec ? offload::fault_hook(offload::parse_fault_specs(
                                               *fault_spec, "AsyncIO(fault=...)"))
                                         : offload::fault_hook_from_environment();
    box_ = std::make_shared<EngineBox>(std::move(options));
  }

  IoRequest submit(offload::IoOp op, MutArray tensor, const std::string& path,
                   std::uint64_t offset) {
    const bool read = op == offload::IoOp::kRead;
    const TensorView v = host_view(tensor, read ? "pread's tensor" : "pwrite's tensor");
    const bool aligned = reinterpret_cast<std::uintptr_t>(v.data) % offload::kDirectIoAlignment == 0 &&
                         offset % offload::kDirectIoAlignment == 0 &&
                         v.nbytes % offload::kDirectIoAlignment == 0;
    const offload::DirectIo direct = aligned ? direct_ : offload::DirectIo::kOff;
    if (!aligned && direct_ == offload::DirectIo::kRequire) {
      throw Error(fmt::format("{} of {} bytes at offset {} is not aligned to {} bytes, which "
                              "O_DIRECT needs", read ? "read" : "write", v.nbytes, offset,
                              offload::kDirectIoAlignment),
                  path, "use direct='auto', or align the tensor (strata.io.pinned_empty), the "
                        "offset and the length to 4 KiB");
    }
    auto file = offload::AioFile::open(path, read ? O_RDONLY : (O_WRONLY | O_CREAT), direct);
    if (read) {
      const std::uint64_t size = file.size_bytes();
      if (offset + v.nbytes > size) {
        throw Error(fmt::format("the file is too short: reading {} bytes at offset {} needs {} "
                                "bytes, it has {}", v.nbytes, offset, offset + v.nbytes, size),
                    path, "check the path, the offset and the tensor's size");
      }
    }
    if (v.nbytes == 0) return IoRequest();
    auto open = std::make_shared<OpenFile>(box_, std::move(file));
    offload::AioHandle h = read ? box_->engine.read(open->id, offset, v.data, v.nbytes)
                                : box_->engine.write(open->id, offset, v.data, v.nbytes);
    return IoRequest(box_, std::move(h), std::move(open));
  }

  std::string describe() const { return box_->engine.describe(); }
  offload::AioStats stats() const { return box_->engine.stats(); }

 private:
  offload::DirectIo direct_;
  std::shared_ptr<EngineBox> box_;
};

// A 4 KiB-aligned, zeroed, pinned byte buffer of the pool, as a 1-D uint8 DLPack tensor that
// owns it (strata/io.py views it with the dtype and shape asked for).
nb::ndarray<nb::pytorch, std::uint8_t, nb::ndim<1>> pinned_bytes(std::size_t bytes) {
  auto* buffer = new offload::HostBuffer(pinned_pool().allocate(bytes, "strata.io.pinned_empty"));
  nb::capsule owner(buffer, [](void* p) noexcept { delete static_cast<offload::HostBuffer*>(p); });
  std::size_t shape[1] = {bytes};
  return nb::ndarray<nb::pytorch, std::uint8_t, nb::ndim<1>>(buffer->data(), 1, shape, owner);
}

}  // namespace

offload::HostPool& pinned_pool() {
  static offload::HostPool* pool =  // leaked: tensors may outlive module teardown
      new offload::HostPool(pool_budget(), python_pin_hook(), "pinned host (strata.io)",
                            "STRATA_PINNED_MEMORY");
  return *pool;
}

IoRequest::~IoRequest() {
  if (!handle_) return;
  try {
    nb::gil_scoped_release release;
    engine_->engine.wait(handle_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata.io: a request nobody waited for failed: %s\n", e.what());
  }
}

void IoRequest::wait() {
  if (!handle_) return;
  // Taken out first: a failed request is reported once, here, not again by the destructor.
  const offload::AioHandle handle = std::move(handle_);
  handle_ = {};
  nb::gil_scoped_release release;
  engine_->engine.wait(handle);
}

bool IoRequest::done() const { return !handle_ || engine_->engine.poll(handle_); }

void bind_io(nb::module_& m) {
  nb::class_<IoRequest>(m, "IoRequest")
      .def("wait", &IoRequest::wait, "Blocks until done; raises StrataError if it failed.")
      .def("done", &IoRequest::done, "True when finished (successfully or not).");

  nb::class_<offload::AioStats>(m, "AioStats")
      .def_ro("bytes_read", &offload::AioStats::bytes_read)
      .def_ro("bytes_written", &offload::AioStats::bytes_written)
      .def_ro("requests", &offload::AioStats::requests)
      .def_ro("pieces", &offload::AioStats::pieces)
      .def_ro("short_transfers", &offload::AioStats::short_transfers)
      .def_ro("retries", &offload::AioStats::retries);

  nb::class_<AsyncIO>(m, "AsyncIO")
      .def(nb::init<std::size_t, unsigned, unsigned, const std::string&, const std::string&,
                    const std::optional<std::string>&>(),
           nb::arg("block_size"), nb::arg("queue_depth"), nb::arg("parallelism"),
           nb::arg("backend"), nb::arg("direct"), nb::arg("fault") = nb::none())
      .def("submit_read",
           [](AsyncIO& io, MutArray t, const std::string& path, std::uint64_t offset) {
             return io.submit(offload::IoOp::kRead, std::move(t), path, offset);
           })
      .def("submit_write",
           [](AsyncIO& io, MutArray t, const std::string& path, std::uint64_t offset) {
             return io.submit(offload::IoOp::kWrite, std::move(t), path, offset);
           })
      .def("describe", &AsyncIO::describe)
      .def("stats", &AsyncIO::stats);

  m.def("pinned_bytes", &pinned_bytes, nb::arg("nbytes"));
  m.def("set_pin_functions", [](nb::object pin, nb::object unpin) {
    pin_fn() = std::move(pin);
    unpin_fn() = std::move(unpin);
  });
  m.def("pinned_stats", [] {
    const auto s = pinned_pool().stats();
    nb::dict d;
    d["budget_bytes"] = s.budget_bytes;
    d["current_bytes"] = s.current_bytes;
    d["peak_bytes"] = s.peak_bytes;
    d["buffers"] = s.buffers;
    return d;
  });
}

}  // namespace strata::py
