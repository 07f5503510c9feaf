#pragma once
// The machine as strata sees it: CPU packages, cores and NUMA nodes (from hwloc when built in,
// else from sysfs), and the machine report that `strata info` prints — every fact the runtime
// bases a decision on (SIMD level, GPUs, io_uring, O_DIRECT, MPI launch, memory), each found by
// asking the system, with the reason when something is missing.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "offload/probe.h"
#include "runtime/launch/launch.h"
#include "runtime/device/device.h"

namespace strata::runtime::topology {

struct NumaNode {
  int os_index = 0;
  std::uint64_t memory_bytes = 0;  // local memory of the node
  std::string cpus;                // its logical CPUs as a list, e.g. "0-15,32-47"
};

struct Topology {
  std::string source;        // "hwloc 2.9.0" or "sysfs"
  std::string note;          // why a fallback was used ("hwloc not built in"), or empty
  int packages = 0;          // CPU sockets
  int physical_cores = 0;
  int logical_cores = 0;     // processing units (hardware threads), online
  std::vector<NumaNode> numa_nodes;  // at least one
  int affinity_cpus = 0;     // logical CPUs in this process's affinity mask (0 = unknown)
};

enum class TopologySource {
  automatic,  // hwloc when built in (falls back to sysfs if it fails), else sysfs
  sysfs,      // /sys/devices/system/{cpu,node} only: for tests that compare with hwloc
};

// Never throws for a missing sysfs file: counts it cannot read fall back to sysconf and a
// single NUMA node, with a note.
Topology detect_topology(TopologySource source = TopologySource::automatic);

struct MachineReport {
  std::string hostname;
  std::string kernel;                   // uname sysname + release
  std::string cpu_model;
  Topology topology;
  SimdLevel simd_detected = SimdLevel::scalar;
  std::optional<SimdLevel> simd_active;  // nullopt when STRATA_SIMD is invalid: see simd_error
  std::string simd_error;
  device::CudaAvailability cuda;                // compiled or not; devices, or why none
  // The NVIDIA kernel driver as /proc/driver/nvidia/version names it ("NVRM version: ..."),
  // or empty when none is loaded: cudart's own message for that case ("driver version is
  // insufficient") does not say that there is no driver at all.
  std::string nvidia_driver;
  offload::IoUringProbe io_uring;
  offload::ODirectProbe o_direct;
  launch::LaunchInfo launch;
  std::string launch_error;             // malformed launcher environment, else empty
  bool hwloc_compiled = false;
  std::string hwloc_version;            // "2.9.0" when compiled
  std::uint64_t memory_total_bytes = 0;      // /proc/meminfo MemTotal
  std::uint64_t memory_available_bytes = 0;  // /proc/meminfo MemAvailable
};

// Gathers everything; probes O_DIRECT in `dir_for_o_direct` (where swap files would go).
// Reports failures as facts (a probe that did not work, with its reason) instead of throwing.
MachineReport collect_machine_report(const std::string& dir_for_o_direct);

// Readable text, one section per subject (CPU, NUMA, Memory, CUDA, io_uring, O_DIRECT, MPI,
// hwloc), values aligned in one column.
std::string format_machine_report(const MachineReport& report);

// The same facts as a JSON object (text, indented by `indent` spaces; -1 = one line).
std::string machine_report_json(const MachineReport& report, int indent = 2);

}  // namespace strata::runtime::topology
