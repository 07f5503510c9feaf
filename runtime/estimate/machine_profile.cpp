#include "runtime/estimate/machine_profile.h"

#include <cerrno>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"

namespace strata::runtime::estimate {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kVersionKey = "strata_machine_profile";
constexpr std::string_view kRemeasure = "measure it again with `strata bench machine --out FILE`";

// The rates every profile carries: the key and the member, in the order of the JSON form.
struct RateField {
  const char* key;
  double MachineProfile::*member;
};
constexpr RateField kRates[] = {
    {"cpu_adam_elements_per_s", &MachineProfile::cpu_adam_elements_per_s},
    {"memory_bytes_per_s", &MachineProfile::memory_bytes_per_s},
    {"h2d_bytes_per_s", &MachineProfile::h2d_bytes_per_s},
    {"d2h_bytes_per_s", &MachineProfile::d2h_bytes_per_s},
    {"disk_read_bytes_per_s", &MachineProfile::disk_read_bytes_per_s},
    {"disk_write_bytes_per_s", &MachineProfile::disk_write_bytes_per_s},
    {"gemm_flops_per_s", &MachineProfile::gemm_flops_per_s},
    {"step_flops_per_s", &MachineProfile::step_flops_per_s},
};
// Rates a profile may lack (written by an earlier strata): 0 when absent, else positive.
constexpr RateField kOptionalRates[] = {
    {"cpu_matmul_bytes_per_s", &MachineProfile::cpu_matmul_bytes_per_s},
    {"cpu_matmul_flops_per_s", &MachineProfile::cpu_matmul_flops_per_s},
};

// Reads the profile's keys, each error naming the file and the key.
class Reader {
 public:
  Reader(const Json& root, const std::string& path) : root_(root), path_(path) {}

  [[noreturn]] void fail(std::string_view key, const std::string& what) const {
    throw Error(fmt::format("machine profile: {} {}", key, what), fmt::format("{}: {}", path_, key),
                std::string(kRemeasure));
  }

  const Json& at(const Json& object, std::string_view key, std::string_view shown) const {
    const auto it = object.find(std::string(key));
    if (it == object.end()) fail(shown, "is missing");
    return *it;
  }

  std::string text(const Json& object, std::string_view key, std::string_view shown) const {
    const Json& value = at(object, key, shown);
    if (!value.is_string()) fail(shown, fmt::format("is {}, not a string", value.dump()));
    return value.get<std::string>();
  }

  // A positive, finite number.
  double rate(std::string_view key) const {
    const Json& value = at(root_, key, key);
    if (!value.is_number()) fail(key, fmt::format("is {}, not a number", value.dump()));
    const double x = value.get<double>();
    if (!std::isfinite(x) || x <= 0) fail(key, fmt::format("is {}: a rate must be positive", value.dump()));
    return x;
  }

  // A positive integer.
  std::uint64_t count(std::string_view key) const {
    const Json& value = at(root_, key, key);
    if (!value.is_number_integer() || value.get<std::int64_t>() <= 0) {
      fail(key, fmt::format("is {}, not a positive integer", value.dump()));
    }
    return value.get<std::uint64_t>();
  }

  bool has(std::string_view key) const { return root_.contains(std::string(key)); }
  const Json& root() const { return root_; }

 private:
  const Json& root_;
  const std::string& path_;
};

}  // namespace

MachineProfile read_machine_profile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error("cannot read the machine profile: " + errno_text(errno), path,
                "give the file `strata bench machine --out FILE` wrote, or run that first");
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const Json root = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    throw Error("machine profile: not a JSON object", path,
                "give the file `strata bench machine --out FILE` wrote");
  }
  const Reader r(root, path);
  const Json& version = r.at(root, kVersionKey, kVersionKey);
  if (!version.is_number_integer() || version.get<std::int64_t>() != kMachineProfileVersion) {
    r.fail(kVersionKey, fmt::format("is {}; this strata reads version {}", version.dump(),
                                    kMachineProfileVersion));
  }
  MachineProfile p;
  const Json& device = r.at(root, "device", "device");
  if (!device.is_object()) r.fail("device", fmt::format("is {}, not an object", device.dump()));
  p.backend = r.text(device, "backend", "device.backend");
  if (p.backend != "host" && p.backend != "cuda") {
    r.fail("device.backend", fmt::format("is \"{}\", not \"host\" or \"cuda\"", p.backend));
  }
  p.device_name = r.text(device, "name", "device.name");
  p.dtype = r.text(root, "dtype", "dtype");
  if (p.dtype != "bf16" && p.dtype != "fp32") r.fail("dtype", fmt::format("is \"{}\", not bf16 or fp32", p.dtype));
  p.threads = static_cast<int>(r.count("threads"));
  for (const RateField& f : kRates) p.*f.member = r.rate(f.key);
  for (const RateField& f : kOptionalRates) {
    if (r.has(f.key)) p.*f.member = r.rate(f.key);
  }
  p.disk_block_bytes = r.count("disk_block_bytes");
  p.disk_queue_depth = static_cast<int>(r.count("disk_queue_depth"));
  p.disk_dir = r.text(root, "disk_dir", "disk_dir");
  const Json& points = r.at(root, "step_points", "step_points");
  if (!points.is_array() || points.empty()) r.fail("step_points", "is not a list of measured steps");
  for (std::size_t i = 0; i < points.size(); ++i) {
    const std::string at = fmt::format("step_points[{}]", i);
    const Json& point = points[i];
    if (!point.is_object()) r.fail(at, fmt::format("is {}, not an object", point.dump()));
    const Reader pr(point, path);
    auto positive_int = [&](const char* key) {
      const Json& v = pr.at(point, key, at + "." + key);
      if (!v.is_number_integer() || v.get<std::int64_t>() <= 0) r.fail(at + "." + key, "is not a positive integer");
      return v.get<int>();
    };
    StepPoint s;
    s.hidden = positive_int("hidden");
    s.layers = positive_int("layers");
    s.batch = positive_int("batch");
    s.seq_len = positive_int("seq_len");
    const Json& rate = pr.at(point, "flops_per_s", at + ".flops_per_s");
    if (!rate.is_number() || !std::isfinite(rate.get<double>()) || rate.get<double>() <= 0) {
      r.fail(at + ".flops_per_s", "is not a positive rate");
    }
    s.flops_per_s = rate.get<double>();
    if (!p.step_points.empty() && s.hidden <= p.step_points.back().hidden) {
      r.fail(at + ".hidden", "is not larger than the previous point's: list the points by increasing width");
    }
    p.step_points.push_back(s);
  }
  return p;
}

std::string machine_profile_json(const MachineProfile& profile) {
  Json j;
  j[std::string(kVersionKey)] = kMachineProfileVersion;
  j["device"] = {{"backend", profile.backend}, {"name", profile.device_name}};
  j["dtype"] = profile.dtype;
  j["threads"] = profile.threads;
  for (const RateField& f : kRates) j[f.key] = profile.*f.member;
  for (const RateField& f : kOptionalRates) {
    if (profile.*f.member > 0) j[f.key] = profile.*f.member;
  }
  j["disk_block_bytes"] = profile.disk_block_bytes;
  j["disk_queue_depth"] = profile.disk_queue_depth;
  j["disk_dir"] = profile.disk_dir;
  Json points = Json::array();
  for (const StepPoint& s : profile.step_points) {
    points.push_back({{"hidden", s.hidden}, {"layers", s.layers}, {"batch", s.batch}, {"seq_len", s.seq_len},
                      {"flops_per_s", s.flops_per_s}});
  }
  j["step_points"] = points;
  return j.dump(2) + "\n";
}

double model_step_flops(double params, int layers, int hidden, int seq_len, double tokens, bool checkpointing) {
  const double per_token = 6.0 * params + 12.0 * layers * static_cast<double>(hidden) * seq_len;
  return per_token * tokens * (checkpointing ? 8.0 / 6.0 : 1.0);
}

void write_machine_profile(const MachineProfile& profile, const std::string& path) {
  write_file_atomic(path, machine_profile_json(profile));
}

}  // namespace strata::runtime::estimate
