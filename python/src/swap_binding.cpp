// strata.offload's NVMe tier: offload::SwapSpace (checksummed extents in preallocated files
// under nvme_path, read and written by io_uring) with whole-extent transfers to and from
// 4 KiB-aligned host tensors (the pinned pool's). The optimizer keeps one extent per state of
// each parameter and streams them through a few pinned buffers.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>

#include "core/error.h"
#include "engine_box.h"
#include "offload/fault_injection.h"
#include "offload/swap_space.h"
#include "tensor_view.h"

namespace nb = nanobind;

namespace strata::py {
namespace {

class Swap {
 public:
  Swap(const std::vector<std::string>& paths, std::size_t block_size, unsigned queue_depth,
       bool checksum, std::uint64_t reserve_bytes) {
    offload::AioOptions aio;
    aio.block_size = block_size;
    aio.queue_depth = queue_depth;
    aio.completion_hook = offload::fault_hook_from_environment();
    box_ = std::make_shared<EngineBox>(std::move(aio));
    offload::SwapOptions options;
    options.paths = paths;
    options.block_size = block_size;
    options.checksum = checksum;
    options.reserve_bytes = reserve_bytes;
    swap_ = std::make_unique<offload::SwapSpace>(std::move(options), box_->engine);
  }
  ~Swap() {
    swap_.reset();  // waits for its I/O and removes its files before the engine goes
  }

  offload::ExtentId allocate(const std::string& name, std::uint64_t bytes) {
    return swap_->allocate(offload::ExtentKey{name, offload::StateKind::kOther, 0}, bytes);
  }

  IoRequest transfer(bool read, offload::ExtentId extent, MutArray tensor) {
    const TensorView v = host_view(tensor, read ? "swap read's tensor" : "swap write's tensor");
    const std::uint64_t extent_bytes = swap_->extent_bytes(extent);
    if (v.nbytes != extent_bytes) {
      throw Error(fmt::format("the tensor has {} bytes, the extent {}", v.nbytes, extent_bytes),
                  swap_->extent_key(extent).name(), "transfer whole extents");
    }
    if (reinterpret_cast<std::uintptr_t>(v.data) % offload::kDirectIoAlignment != 0) {
      throw Error("the tensor is not 4 KiB-aligned", swap_->extent_key(extent).name(),
                  "use a tensor of strata.io.pinned_empty");
    }
    offload::AioHandle h = read ? swap_->read(extent, v.data, v.nbytes)
                                : swap_->write(extent, v.data, v.nbytes);
    return IoRequest(box_, std::move(h), nullptr);
  }

  nb::dict stats() const {
    const auto s = swap_->stats();
    nb::dict d;
    d["extents"] = s.extents;
    d["used_bytes"] = s.used_bytes;
    d["file_bytes"] = s.file_bytes;
    nb::list dirs;
    for (const auto& p : s.paths) dirs.append(p.run_dir);
    d["run_dirs"] = dirs;
    d["direct"] = !s.paths.empty() && s.paths[0].direct;
    return d;
  }

 private:
  std::shared_ptr<EngineBox> box_;
  std::unique_ptr<offload::SwapSpace> swap_;
};

}  // namespace

void bind_swap(nb::module_& m) {
  nb::class_<Swap>(m, "SwapSpace")
      .def(nb::init<const std::vector<std::string>&, std::size_t, unsigned, bool, std::uint64_t>(),
           nb::arg("paths"), nb::arg("block_size"), nb::arg("queue_depth"), nb::arg("checksum"),
           nb::arg("reserve_bytes"))
      .def("allocate", &Swap::allocate, nb::arg("name"), nb::arg("nbytes"))
      .def("read", [](Swap& s, offload::ExtentId e, MutArray t) { return s.transfer(true, e, std::move(t)); })
      .def("write", [](Swap& s, offload::ExtentId e, MutArray t) { return s.transfer(false, e, std::move(t)); })
      .def("stats", &Swap::stats);
}

}  // namespace strata::py
