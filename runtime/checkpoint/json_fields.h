#pragma once
// Reading the integers of the JSON files a checkpoint holds (manifest.json, meta.json, a shard
// file's header). nlohmann's get<int>() / get<std::uint64_t>() would convert a float (1e30:
// undefined behaviour), wrap a negative and truncate a large value; strata only ever writes
// integers in range, so anything else is damage, reported by the reader's own error.
//
//   const std::uint64_t step = need_uint(body, "step", kMaxStep, [&](const std::string& why) {
//     return damaged(path, why);  // an Error naming the file and what to do
//   });
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace strata::runtime::checkpoint {

// obj[key] as an integer in [0, max]. Otherwise throws damaged(why), why saying which key held
// what (e.g. `its "step" is -1, not an integer in [0, 4294967295]`). A missing key throws
// nlohmann's out_of_range, which the readers already report as damage.
template <typename Damaged>
std::uint64_t need_uint(const nlohmann::json& obj, const char* key, std::uint64_t max, Damaged damaged) {
  const nlohmann::json& v = obj.at(key);
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() > max) {
    throw damaged(std::string("its \"") + key + "\" is " +
                  v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                  ", not an integer in [0, " + std::to_string(max) + "]");
  }
  return v.get<std::uint64_t>();
}

}  // namespace strata::runtime::checkpoint
