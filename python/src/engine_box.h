#pragma once
// Shared state of the I/O bindings: the process's pinned pool (strata.io.pinned_empty and the
// offload optimizer's host states come from it) and an I/O engine kept alive by every handle
// that still refers to it, so that Python may drop an AsyncIO before waiting on its handles.
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>

#include "offload/aio_engine.h"
#include "offload/host_buffer.h"

namespace strata::py {

// The pool behind pinned_empty: made at first use with the budget STRATA_PINNED_MEMORY gives
// ("16GiB"), else half the machine's memory. Its pin hook calls the Python functions given to
// set_pin_functions (strata/io.py installs cudaHostRegister when torch has CUDA), if any.
offload::HostPool& pinned_pool();

struct EngineBox {
  explicit EngineBox(offload::AioOptions options) : engine(std::move(options), &pinned_pool()) {}
  offload::AioEngine engine;
};

// A file registered with an engine for the life of the requests that use it.
struct OpenFile {
  OpenFile(std::shared_ptr<EngineBox> box, offload::AioFile f)
      : engine(std::move(box)), file(std::move(f)), id(engine->engine.add_file(file)) {}
  ~OpenFile() { engine->engine.remove_file(id); }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;

  std::shared_ptr<EngineBox> engine;
  offload::AioFile file;
  offload::FileId id;
};

// What Python holds for a request in flight: wait() and done(). Keeps the engine (and the
// file, when the request has its own) alive until it is destroyed.
class IoRequest {
 public:
  IoRequest() = default;  // an empty request: done, wait() returns at once
  IoRequest(std::shared_ptr<EngineBox> engine, offload::AioHandle handle,
            std::shared_ptr<OpenFile> file)
      : engine_(std::move(engine)), handle_(std::move(handle)), file_(std::move(file)) {}
  ~IoRequest();  // waits for a request nobody waited for (its error is printed)
  IoRequest(IoRequest&&) noexcept = default;
  IoRequest& operator=(IoRequest&&) noexcept = default;

  void wait();        // releases the GIL; throws strata::Error for a failed request
  bool done() const;  // never blocks

 private:
  std::shared_ptr<EngineBox> engine_;
  offload::AioHandle handle_;
  std::shared_ptr<OpenFile> file_;
};

void bind_io(nanobind::module_& m);
void bind_swap(nanobind::module_& m);

}  // namespace strata::py
