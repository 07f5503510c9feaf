// Topology and the machine report: counts that must hold on any machine, and a report that
// covers every subject.
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/topology/topology.h"

namespace strata::runtime {
namespace {

void expect_sane(const topology::Topology& t) {
  EXPECT_GE(t.packages, 1);
  EXPECT_GE(t.physical_cores, t.packages);
  EXPECT_GE(t.logical_cores, t.physical_cores);
  ASSERT_GE(t.numa_nodes.size(), 1u);
  std::uint64_t memory = 0;
  for (const topology::NumaNode& n : t.numa_nodes) memory += n.memory_bytes;
  EXPECT_GT(memory, 0u);
  EXPECT_GE(t.affinity_cpus, 1);
  EXPECT_LE(t.affinity_cpus, t.logical_cores);
  EXPECT_FALSE(t.source.empty());
}

TEST(Topology, CountsAreConsistent) {
  topology::Topology t = topology::detect_topology();
  expect_sane(t);
  // Every online CPU is a processing unit the kernel schedules on.
  EXPECT_EQ(t.logical_cores, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
}

TEST(Topology, SysfsAgreesWithTheDefaultSource) {
  topology::Topology automatic = topology::detect_topology();
  topology::Topology sysfs = detect_topology(topology::TopologySource::sysfs);
  expect_sane(sysfs);
  EXPECT_EQ(sysfs.source, "sysfs");
  EXPECT_EQ(sysfs.logical_cores, automatic.logical_cores);
  EXPECT_EQ(sysfs.physical_cores, automatic.physical_cores);
  EXPECT_EQ(sysfs.packages, automatic.packages);
  EXPECT_EQ(sysfs.numa_nodes.size(), automatic.numa_nodes.size());
}

TEST(MachineReport, IsConsistentAndMentionsEverySection) {
  topology::MachineReport r = topology::collect_machine_report(".");
  expect_sane(r.topology);
  EXPECT_FALSE(r.cpu_model.empty());
  EXPECT_GT(r.memory_total_bytes, 0u);
  EXPECT_LE(r.memory_available_bytes, r.memory_total_bytes);
  EXPECT_GE(r.launch.world, 1);
  EXPECT_LT(r.launch.rank, r.launch.world);
  if (r.cuda.devices.empty()) {
    EXPECT_FALSE(r.cuda.why_not.empty());
  }
  if (!r.io_uring.works) {
    EXPECT_FALSE(r.io_uring.reason.empty());
  }
  if (!r.o_direct.works) {
    EXPECT_FALSE(r.o_direct.reason.empty());
  }
  EXPECT_EQ(r.o_direct.dir, ".");
  if (!r.hwloc_compiled) {
    EXPECT_NE(r.topology.note.find("hwloc not built in"), std::string::npos);
  }

  const std::string text = format_machine_report(r);
  for (const char* section : {"Host\n", "CPU\n", "NUMA\n", "Memory\n", "CUDA\n", "io_uring\n",
                              "O_DIRECT\n", "MPI\n", "hwloc\n"}) {
    EXPECT_NE(text.find(section), std::string::npos) << "no section " << section << " in\n" << text;
  }
  EXPECT_NE(text.find(r.cpu_model), std::string::npos);
  EXPECT_NE(text.find(std::string(simd_name(r.simd_detected))), std::string::npos);
}

TEST(MachineReport, JsonCarriesTheSameFacts) {
  topology::MachineReport r = topology::collect_machine_report("/nonexistent/strata");
  nlohmann::json j = nlohmann::json::parse(machine_report_json(r));
  EXPECT_EQ(j.at("cpu").at("logical_cores"), r.topology.logical_cores);
  EXPECT_EQ(j.at("cpu").at("physical_cores"), r.topology.physical_cores);
  EXPECT_EQ(j.at("numa_nodes").size(), r.topology.numa_nodes.size());
  EXPECT_EQ(j.at("cuda").at("compiled"), r.cuda.compiled);
  EXPECT_EQ(j.at("cuda").at("devices").size(), r.cuda.devices.size());
  EXPECT_EQ(j.at("io_uring").at("works"), r.io_uring.works);
  EXPECT_EQ(j.at("o_direct").at("works"), false);
  EXPECT_NE(j.at("o_direct").at("reason").get<std::string>().find("ENOENT"), std::string::npos);
  EXPECT_EQ(j.at("mpi").at("rank"), r.launch.rank);
  EXPECT_EQ(j.at("mpi").at("world"), r.launch.world);
  EXPECT_EQ(j.at("hwloc").at("compiled"), r.hwloc_compiled);
  // One line when asked.
  EXPECT_EQ(machine_report_json(r, -1).find('\n'), std::string::npos);
}

}  // namespace
}  // namespace strata::runtime
