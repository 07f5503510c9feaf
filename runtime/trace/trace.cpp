#include "runtime/trace/trace.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/log.h"

namespace strata::runtime::trace {
namespace {

// Spans are stored in fixed-capacity chunks so that recording never moves old spans (no
// reallocation copy under the lock) and growth costs one allocation per kChunkSpans spans.
constexpr std::size_t kChunkSpans = 4096;

struct Span {
  std::uint32_t name;   // index into Impl::names
  std::uint32_t track;  // index into Impl::tracks; tid = track + 1
  std::int64_t start_ns;
  std::int64_t end_ns;
  std::uint64_t bytes;
};

// Heterogeneous lookup: find a std::string key from a string_view without building a string.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using InternMap = std::unordered_map<std::string, std::uint32_t, StringHash, std::equal_to<>>;

std::uint32_t intern(InternMap& map, std::vector<std::string>& list, std::string_view s) {
  auto it = map.find(s);
  if (it != map.end()) return it->second;
  auto id = static_cast<std::uint32_t>(list.size());
  list.emplace_back(s);
  map.emplace(list.back(), id);
  return id;
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;  // UTF-8 bytes pass through unchanged
        }
    }
  }
  out += '"';
}

// Chrome trace times are microseconds; print ns / 1000 exactly with three decimals (a double
// would round monotonic timestamps of a long-running host).
void append_us(std::string& out, std::int64_t ns) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000),
                static_cast<long long>(ns % 1000));
  out += buf;
}

}  // namespace

// Per-track busy counters (Note [Busy time] in trace.h), indexed like Impl::tracks.
struct BusyCounters {
  std::int64_t busy_ns = 0;
  std::uint64_t bytes = 0;
  std::uint64_t spans = 0;
};

struct Tracer::Impl {
  std::string process_name;
  int pid = 0;
  bool store_spans = false;   // there is a path to write them to
  bool account_busy = false;
  // Held for a whole flush so that two flushes cannot overlap and rename an older trace over
  // a newer one; recorders never take it.
  std::mutex flush_mutex;
  mutable std::mutex mutex;  // guards everything below
  InternMap name_ids;
  std::vector<std::string> names;
  InternMap track_ids;
  std::vector<std::string> tracks;
  std::vector<std::vector<Span>> chunks;
  std::vector<BusyCounters> busy;  // empty unless account_busy; busy[track] once it is used
  std::size_t span_count = 0;
  std::shared_ptr<const SpanObserver> observer;  // tests only (set_observer); null when none
  bool dirty = true;  // something to write (a tracer with a path writes at least an empty trace)

  std::string to_json() const;
};

std::string Tracer::Impl::to_json() const {
  std::string out;
  out.reserve(256 + span_count * 128);
  const std::string pid_text = std::to_string(pid);
  out += "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid_text + ",\"tid\":0,\"args\":{\"name\":";
  append_json_string(out, process_name);
  out += "}}";
  // One track per stream, in order of first use: thread_name labels it, thread_sort_index
  // keeps Perfetto's order the order in which streams appeared.
  for (std::size_t t = 0; t < tracks.size(); ++t) {
    const std::string tid = std::to_string(t + 1);
    out += ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid_text + ",\"tid\":" + tid +
           ",\"args\":{\"name\":";
    append_json_string(out, tracks[t]);
    out += "}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" + pid_text + ",\"tid\":" +
           tid + ",\"args\":{\"sort_index\":" + tid + "}}";
  }
  for (const auto& chunk : chunks) {
    for (const Span& s : chunk) {
      out += ",\n{\"name\":";
      append_json_string(out, names[s.name]);
      out += ",\"cat\":\"strata\",\"ph\":\"X\",\"pid\":" + pid_text +
             ",\"tid\":" + std::to_string(s.track + 1) + ",\"ts\":";
      append_us(out, s.start_ns);
      out += ",\"dur\":";
      append_us(out, std::max<std::int64_t>(0, s.end_ns - s.start_ns));
      if (s.bytes != 0) out += ",\"args\":{\"bytes\":" + std::to_string(s.bytes) + "}";
      out += '}';
    }
  }
  out += "\n]}\n";
  return out;
}

Tracer::Tracer(std::string path, std::string process_name, bool account_busy)
    : path_(std::move(path)), account_busy_(account_busy) {
  if (path_.empty() && !account_busy_) return;
  impl_ = std::make_unique<Impl>();
  impl_->process_name = std::move(process_name);
  impl_->pid = static_cast<int>(::getpid());
  impl_->store_spans = !path_.empty();
  impl_->account_busy = account_busy_;
  impl_->dirty = impl_->store_spans;
}

Tracer::~Tracer() {
  if (!impl_ || !impl_->store_spans) return;
  try {
    bool dirty;
    {
      std::lock_guard lock(impl_->mutex);
      dirty = impl_->dirty;
    }
    if (dirty) flush();
  } catch (const std::exception& e) {
    log::error("trace not written: {}", e.what());
  }
}

void Tracer::record_enabled(std::string_view name, std::string_view stream, std::int64_t start_ns,
                            std::int64_t end_ns, std::uint64_t bytes) {
  Impl& im = *impl_;
  std::shared_ptr<const SpanObserver> observer;
  {
    std::lock_guard lock(im.mutex);
    const std::uint32_t track = intern(im.track_ids, im.tracks, stream);
    if (im.store_spans) {
      if (im.chunks.empty() || im.chunks.back().size() == kChunkSpans) {
        im.chunks.emplace_back().reserve(kChunkSpans);
      }
      im.chunks.back().push_back(
          Span{intern(im.name_ids, im.names, name), track, start_ns, end_ns, bytes});
      im.dirty = true;
    }
    if (im.account_busy) {
      // Track ids are dense and handed out in order, so a new track is exactly one past the end.
      if (track == im.busy.size()) im.busy.emplace_back();
      BusyCounters& b = im.busy[track];
      b.busy_ns += std::max<std::int64_t>(0, end_ns - start_ns);
      b.bytes += bytes;
      ++b.spans;
    }
    ++im.span_count;
    if (im.observer) observer = im.observer;
  }
  if (observer) (*observer)(name, stream, bytes);
}

void Tracer::set_observer(SpanObserver observer) {
  if (!impl_) return;
  std::lock_guard lock(impl_->mutex);
  impl_->observer = observer ? std::make_shared<const SpanObserver>(std::move(observer)) : nullptr;
}

std::size_t Tracer::span_count() const {
  if (!impl_) return 0;
  std::lock_guard lock(impl_->mutex);
  return impl_->span_count;
}

std::vector<TrackBusy> Tracer::busy() const {
  std::vector<TrackBusy> out;
  if (!impl_ || !impl_->account_busy) return out;
  std::lock_guard lock(impl_->mutex);
  out.reserve(impl_->busy.size());
  for (std::size_t t = 0; t < impl_->busy.size(); ++t) {
    const BusyCounters& b = impl_->busy[t];
    out.push_back(TrackBusy{impl_->tracks[t], b.busy_ns, b.bytes, b.spans});
  }
  return out;
}

void Tracer::flush() {
  if (!impl_ || !impl_->store_spans) return;
  std::lock_guard flush_lock(impl_->flush_mutex);
  std::string text;
  {
    // Formatting under the lock is simpler than copying the spans out, and flushes are rare
    // (end of run, or every N steps); recorders wait for it.
    std::lock_guard lock(impl_->mutex);
    text = impl_->to_json();
    impl_->dirty = false;
  }
  const std::string hint = "check that the folder of the trace path exists and is writable";
  const std::string tmp = path_ + ".tmp." + std::to_string(impl_->pid);
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) throw system_error(errno, "open trace file for writing", path_, hint);
  std::size_t written = std::fwrite(text.data(), 1, text.size(), f);
  int write_errno = written == text.size() ? 0 : errno;
  if (std::fclose(f) != 0 && write_errno == 0) write_errno = errno;
  if (write_errno != 0 || written != text.size()) {
    std::remove(tmp.c_str());
    throw system_error(write_errno != 0 ? write_errno : EIO, "write trace file", path_, hint);
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    int e = errno;
    std::remove(tmp.c_str());
    throw system_error(e, "rename trace file into place", path_, hint);
  }
}

}  // namespace strata::runtime::trace
