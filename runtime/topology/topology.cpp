#include "runtime/topology/topology.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/units.h"

#ifdef STRATA_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace strata::runtime::topology {
namespace {

namespace fs = std::filesystem;

// --- small readers of /proc and /sys -----------------------------------------------------

std::optional<std::string> read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

std::optional<long long> read_int(const std::string& path) {
  auto line = read_line(path);
  if (!line) return std::nullopt;
  long long v = 0;
  auto [ptr, ec] = std::from_chars(line->data(), line->data() + line->size(), v);
  if (ec != std::errc{} || ptr == line->data()) return std::nullopt;
  return v;
}

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; empty on a malformed list.
std::vector<int> parse_cpu_list(std::string_view text) {
  std::vector<int> cpus;
  while (!text.empty()) {
    std::size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    while (!item.empty() && (item.back() == '\n' || item.back() == ' ')) item.remove_suffix(1);
    if (item.empty()) continue;
    int lo = 0, hi = 0;
    std::size_t dash = item.find('-');
    auto a = std::from_chars(item.data(), item.data() + item.size(), lo);
    if (a.ec != std::errc{}) return {};
    hi = lo;
    if (dash != std::string_view::npos) {
      auto b = std::from_chars(item.data() + dash + 1, item.data() + item.size(), hi);
      if (b.ec != std::errc{} || hi < lo) return {};
    }
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
  }
  return cpus;
}

// The value in kB of `key` ("MemTotal:") in a meminfo-style file, in bytes; 0 when absent.
std::uint64_t meminfo_bytes(const std::string& path, std::string_view key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::size_t at = line.find(key);
    if (at == std::string::npos) continue;
    std::size_t p = line.find_first_not_of(' ', at + key.size());
    if (p == std::string::npos) return 0;
    std::uint64_t kib = 0;
    std::from_chars(line.data() + p, line.data() + line.size(), kib);
    return kib * 1024;
  }
  return 0;
}

// --- sysfs -------------------------------------------------------------------------------

Topology topology_from_sysfs() {
  Topology t;
  t.source = "sysfs";
  const std::string cpu_root = "/sys/devices/system/cpu/";
  std::vector<int> online;
  if (auto line = read_line(cpu_root + "online")) online = parse_cpu_list(*line);
  if (online.empty()) {
    long n = ::sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < std::max(n, 1L); ++c) online.push_back(static_cast<int>(c));
    t.note = "no /sys/devices/system/cpu/online; counts from sysconf";
  }
  t.logical_cores = static_cast<int>(online.size());

  // A physical core is a distinct (package, die, core) triple: core_id repeats across
  // packages, and on some multi-die parts across dies.
  std::set<long long> packages;
  std::set<std::tuple<long long, long long, long long>> cores;
  bool topology_readable = true;
  for (int c : online) {
    const std::string dir = cpu_root + "cpu" + std::to_string(c) + "/topology/";
    auto pkg = read_int(dir + "physical_package_id");
    auto core = read_int(dir + "core_id");
    if (!pkg || !core) {
      topology_readable = false;
      break;
    }
    long long die = read_int(dir + "die_id").value_or(0);
    packages.insert(*pkg);
    cores.emplace(*pkg, die, *core);
  }
  if (topology_readable && !cores.empty()) {
    t.packages = static_cast<int>(packages.size());
    t.physical_cores = static_cast<int>(cores.size());
  } else {
    t.packages = 1;
    t.physical_cores = t.logical_cores;
    t.note += std::string(t.note.empty() ? "" : "; ") +
              "no sysfs CPU topology; physical cores counted as logical";
  }

  const std::string node_root = "/sys/devices/system/node/";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(node_root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() < 5 || name.compare(0, 4, "node") != 0) continue;
    int index = 0;
    auto r = std::from_chars(name.data() + 4, name.data() + name.size(), index);
    if (r.ec != std::errc{} || r.ptr != name.data() + name.size()) continue;
    NumaNode node;
    node.os_index = index;
    node.memory_bytes = meminfo_bytes(entry.path().string() + "/meminfo", "MemTotal:");
    node.cpus = read_line(entry.path().string() + "/cpulist").value_or("");
    t.numa_nodes.push_back(std::move(node));
  }
  std::sort(t.numa_nodes.begin(), t.numa_nodes.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.os_index < b.os_index; });
  if (t.numa_nodes.empty()) {
    // Kernels without CONFIG_NUMA have no node folder: the whole machine is one node.
    NumaNode node;
    node.memory_bytes = meminfo_bytes("/proc/meminfo", "MemTotal:");
    node.cpus = read_line(cpu_root + "online").value_or("");
    t.numa_nodes.push_back(std::move(node));
  }
  return t;
}

// --- hwloc -------------------------------------------------------------------------------

#ifdef STRATA_HAVE_HWLOC
std::string hwloc_version_text() {
#ifdef HWLOC_VERSION
  return HWLOC_VERSION;
#else
  unsigned v = hwloc_get_api_version();
  return std::to_string(v >> 16) + "." + std::to_string((v >> 8) & 0xff) + "." + std::to_string(v & 0xff);
#endif
}

// Returns nullopt (with the reason) when hwloc cannot load the topology.
std::optional<Topology> topology_from_hwloc(std::string& why_not) {
  hwloc_topology_t topo = nullptr;
  if (hwloc_topology_init(&topo) != 0) {
    why_not = "hwloc_topology_init failed";
    return std::nullopt;
  }
  struct Guard {
    hwloc_topology_t t;
    ~Guard() { hwloc_topology_destroy(t); }
  } guard{topo};
  // The whole machine, not only the CPUs this process may use: the affinity mask is
  // reported on its own line, and sysfs counts the same way.
  hwloc_topology_set_flags(topo, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  if (hwloc_topology_load(topo) != 0) {
    why_not = "hwloc_topology_load failed";
    return std::nullopt;
  }
  Topology t;
  t.source = "hwloc " + hwloc_version_text();
  t.packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  t.physical_cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  t.logical_cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  const int nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < nodes; ++i) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    if (obj == nullptr) continue;
    NumaNode node;
    node.os_index = static_cast<int>(obj->os_index);
    node.memory_bytes = obj->attr != nullptr ? obj->attr->numanode.local_memory : 0;
    char* list = nullptr;
    if (obj->cpuset != nullptr && hwloc_bitmap_list_asprintf(&list, obj->cpuset) >= 0 && list) {
      node.cpus = list;
    }
    std::free(list);
    t.numa_nodes.push_back(std::move(node));
  }
  if (t.logical_cores <= 0) {
    why_not = "hwloc found no processing units";
    return std::nullopt;
  }
  // Some virtual machines expose no package or core objects: count what is certain.
  if (t.packages <= 0) t.packages = 1;
  if (t.physical_cores <= 0) {
    t.physical_cores = t.logical_cores;
    t.note = "hwloc found no core objects; physical cores counted as logical";
  }
  return t;
}
#endif

std::string yes_no(bool b) { return b ? "yes" : "no"; }

std::string pcie_text(const device::CudaDeviceInfo& d) {
  std::string link = d.pcie_generation > 0
                         ? "PCIe Gen" + std::to_string(d.pcie_generation) + " x" + std::to_string(d.pcie_width)
                         : "PCIe link unknown (NVML not available)";
  if (!d.pci_bus_id.empty()) link += " at " + d.pci_bus_id;
  return link;
}

// Text report builder: "  key" padded to one column, then the value.
class Text {
 public:
  void section(const std::string& title) { out_ += (out_.empty() ? "" : "\n") + title + "\n"; }
  void row(const std::string& key, const std::string& value) {
    std::string k = "  " + key;
    if (k.size() < kKeyWidth) k.resize(kKeyWidth, ' ');
    else k += ' ';
    out_ += k + value + "\n";
  }
  std::string take() { return std::move(out_); }

 private:
  static constexpr std::size_t kKeyWidth = 18;
  std::string out_;
};

}  // namespace

Topology detect_topology(TopologySource source) {
  Topology t;
  std::string note;
#ifdef STRATA_HAVE_HWLOC
  if (source == TopologySource::automatic) {
    std::string why_not;
    if (auto h = topology_from_hwloc(why_not)) {
      t = std::move(*h);
    } else {
      note = why_not + "; read from sysfs";
    }
  }
#else
  if (source == TopologySource::automatic) note = "hwloc not built in";
#endif
  if (t.source.empty()) {
    t = topology_from_sysfs();
    if (!note.empty()) t.note = t.note.empty() ? note : note + "; " + t.note;
  }
  t.affinity_cpus = cpu_info().logical_cores_in_affinity_mask;
  return t;
}

MachineReport collect_machine_report(const std::string& dir_for_o_direct) {
  MachineReport r;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) r.hostname = host;
  utsname u{};
  if (::uname(&u) == 0) r.kernel = std::string(u.sysname) + " " + u.release;

  r.cpu_model = cpu_info().model_name;
  r.topology = detect_topology();
  r.simd_detected = detected_simd();
  try {
    r.simd_active = active_simd();
  } catch (const std::exception& e) {
    r.simd_error = e.what();  // a bad STRATA_SIMD is worth reporting, not worth failing on
  }
  r.cuda = device::cuda_availability();
  r.nvidia_driver = read_line("/proc/driver/nvidia/version").value_or("");
  r.io_uring = offload::probe_io_uring();
  r.o_direct = offload::probe_o_direct(dir_for_o_direct);
  try {
    r.launch = launch::detect_launch();
  } catch (const std::exception& e) {
    r.launch_error = e.what();
#ifdef STRATA_HAVE_MPI
    r.launch.mpi_compiled = true;
#endif
  }
#ifdef STRATA_HAVE_HWLOC
  r.hwloc_compiled = true;
  r.hwloc_version = hwloc_version_text();
#endif
  r.memory_total_bytes = meminfo_bytes("/proc/meminfo", "MemTotal:");
  r.memory_available_bytes = meminfo_bytes("/proc/meminfo", "MemAvailable:");
  return r;
}

std::string format_machine_report(const MachineReport& r) {
  Text t;
  t.section("Host");
  t.row("name", r.hostname);
  t.row("kernel", r.kernel);

  const Topology& topo = r.topology;
  t.section("CPU");
  t.row("model", r.cpu_model);
  t.row("packages", std::to_string(topo.packages));
  t.row("physical cores", std::to_string(topo.physical_cores));
  t.row("logical cores", std::to_string(topo.logical_cores));
  t.row("affinity mask", topo.affinity_cpus > 0
                             ? std::to_string(topo.affinity_cpus) + " logical cores usable by this process"
                             : "unknown");
  t.row("SIMD detected", std::string(simd_name(r.simd_detected)));
  t.row("SIMD active", r.simd_active ? std::string(simd_name(*r.simd_active)) : "error: " + r.simd_error);
  t.row("topology from", topo.source + (topo.note.empty() ? "" : " (" + topo.note + ")"));

  t.section("NUMA");
  t.row("nodes", std::to_string(topo.numa_nodes.size()));
  for (const NumaNode& n : topo.numa_nodes) {
    t.row("node " + std::to_string(n.os_index),
          format_bytes(n.memory_bytes) + (n.cpus.empty() ? "" : ", CPUs " + n.cpus));
  }

  // Per-node counts come from the kernel's node meminfo; some virtual machines (memory added
  // by hotplug or a balloon) report less there than in /proc/meminfo. Say so, not hide it.
  std::uint64_t numa_bytes = 0;
  for (const NumaNode& n : topo.numa_nodes) numa_bytes += n.memory_bytes;
  if (r.memory_total_bytes > 0 && numa_bytes > 0 &&
      (numa_bytes < r.memory_total_bytes * 9 / 10 || numa_bytes > r.memory_total_bytes * 11 / 10)) {
    t.row("note", "the nodes account for " + format_bytes(numa_bytes) + " of " +
                      format_bytes(r.memory_total_bytes) + " in /proc/meminfo (per-node counts "
                      "can miss hot-plugged memory)");
  }

  t.section("Memory");
  t.row("total", format_bytes(r.memory_total_bytes));
  t.row("available", format_bytes(r.memory_available_bytes));

  t.section("CUDA");
  t.row("backend", r.cuda.compiled ? "compiled" : "not compiled");
  t.row("driver", r.nvidia_driver.empty() ? "no NVIDIA kernel driver loaded (no /proc/driver/nvidia)"
                                          : r.nvidia_driver);
  if (r.cuda.devices.empty()) {
    t.row("devices", "none: " + r.cuda.why_not);
  } else {
    t.row("devices", std::to_string(r.cuda.devices.size()));
    for (const device::CudaDeviceInfo& d : r.cuda.devices) {
      t.row("device " + std::to_string(d.ordinal),
            d.name + ", " + format_bytes(d.total_bytes) +
                (d.free_bytes != 0 ? " (" + format_bytes(d.free_bytes) + " free)" : std::string()) +
                ", sm_" + std::to_string(d.compute_major) + std::to_string(d.compute_minor) +
                ", " + pcie_text(d));
    }
    if (!r.cuda.why_not.empty()) t.row("note", r.cuda.why_not);
  }

  const offload::IoUringProbe& u = r.io_uring;
  t.section("io_uring");
  t.row("status", u.works ? "works (NOP and a 4 KiB read through a ring)" : "does not work: " + u.reason);
  t.row("kernel", u.kernel);
  if (u.works) {
    t.row("SINGLE_ISSUER", u.single_issuer ? "accepted" : "refused");
    t.row("DEFER_TASKRUN", u.defer_taskrun ? "accepted" : "refused");
    t.row("COOP_TASKRUN", u.coop_taskrun ? "accepted" : "refused");
  }
  if (!u.read_note.empty() && u.works) t.row("note", u.read_note);

  const offload::ODirectProbe& o = r.o_direct;
  t.section("O_DIRECT");
  t.row("folder", o.dir);
  t.row("status", o.works ? "works (4 KiB aligned write and read-back)" : "does not work: " + o.reason);
  if (!o.fs_type.empty()) {
    t.row("file system", o.fs_type + ", " + format_bytes(o.free_bytes) + " free of " +
                             format_bytes(o.total_bytes));
  }

  const launch::LaunchInfo& l = r.launch;
  t.section("MPI");
  t.row("compiled", yes_no(l.mpi_compiled));
  if (!r.launch_error.empty()) {
    t.row("launch", "error: " + r.launch_error);
  } else {
    t.row("launch", l.under_mpirun ? "under mpirun (" + l.launcher + ")" : "not under mpirun");
    t.row("rank / world", std::to_string(l.rank) + " / " + std::to_string(l.world));
    t.row("local rank", std::to_string(l.local_rank));
  }

  t.section("hwloc");
  t.row("compiled", r.hwloc_compiled ? "yes (" + r.hwloc_version + ")" : "no (hwloc not built in)");
  return t.take();
}

std::string machine_report_json(const MachineReport& r, int indent) {
  using nlohmann::json;
  const Topology& topo = r.topology;
  json numa = json::array();
  for (const NumaNode& n : topo.numa_nodes) {
    numa.push_back({{"os_index", n.os_index}, {"memory_bytes", n.memory_bytes}, {"cpus", n.cpus}});
  }
  json devices = json::array();
  for (const device::CudaDeviceInfo& d : r.cuda.devices) {
    devices.push_back({{"ordinal", d.ordinal},
                       {"name", d.name},
                       {"memory_bytes", d.total_bytes},
                       {"free_bytes", d.free_bytes},
                       {"compute_capability", std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor)},
                       {"pci_bus_id", d.pci_bus_id},
                       {"pcie_generation", d.pcie_generation},
                       {"pcie_width", d.pcie_width}});
  }
  const offload::IoUringProbe& u = r.io_uring;
  const offload::ODirectProbe& o = r.o_direct;
  json j = {
      {"host", {{"name", r.hostname}, {"kernel", r.kernel}}},
      {"cpu",
       {{"model", r.cpu_model},
        {"packages", topo.packages},
        {"physical_cores", topo.physical_cores},
        {"logical_cores", topo.logical_cores},
        {"affinity_cpus", topo.affinity_cpus},
        {"simd_detected", std::string(simd_name(r.simd_detected))},
        {"simd_active", r.simd_active ? json(std::string(simd_name(*r.simd_active))) : json(nullptr)},
        {"simd_error", r.simd_error},
        {"topology_source", topo.source},
        {"topology_note", topo.note}}},
      {"numa_nodes", numa},
      {"memory", {{"total_bytes", r.memory_total_bytes}, {"available_bytes", r.memory_available_bytes}}},
      {"cuda",
       {{"compiled", r.cuda.compiled},
        {"driver", r.nvidia_driver},
        {"devices", devices},
        {"why_not", r.cuda.why_not}}},
      {"io_uring",
       {{"works", u.works},
        {"reason", u.reason},
        {"kernel", u.kernel},
        {"nop", u.nop_ok},
        {"read", u.read_ok},
        {"read_note", u.read_note},
        {"setup_flags",
         {{"SINGLE_ISSUER", u.single_issuer}, {"DEFER_TASKRUN", u.defer_taskrun}, {"COOP_TASKRUN", u.coop_taskrun}}}}},
      {"o_direct",
       {{"dir", o.dir},
        {"works", o.works},
        {"reason", o.reason},
        {"fs_type", o.fs_type},
        {"free_bytes", o.free_bytes},
        {"total_bytes", o.total_bytes}}},
      {"mpi",
       {{"compiled", r.launch.mpi_compiled},
        {"under_mpirun", r.launch.under_mpirun},
        {"launcher", r.launch.launcher},
        {"rank", r.launch.rank},
        {"world", r.launch.world},
        {"local_rank", r.launch.local_rank},
        {"error", r.launch_error}}},
      {"hwloc", {{"compiled", r.hwloc_compiled}, {"version", r.hwloc_version}}},
  };
  // Reasons carry errno text and paths, which may hold bytes that are not UTF-8: replace them
  // rather than throw from a report.
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

}  // namespace strata::runtime::topology
