// Manifest: the checkpoint's file list with sizes and checksums.
#include "runtime/checkpoint/manifest.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "core/error.h"
#include "runtime/checkpoint/json_fields.h"

namespace strata::runtime::checkpoint {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "strata.checkpoint";
constexpr int kVersion = 1;

std::uint64_t parse_hex(const std::string& s, const std::string& path) {
  if (s.size() != 16) throw Error("the manifest " + path + " holds a malformed checksum \"" + s + "\"", path);
  std::uint64_t v = 0;
  for (char c : s) {
    v <<= 4;
    if (c >= '0' && c <= '9') v |= static_cast<std::uint64_t>(c - '0');
    else if (c >= 'a' && c <= 'f') v |= static_cast<std::uint64_t>(c - 'a' + 10);
    else throw Error("the manifest " + path + " holds a malformed checksum \"" + s + "\"", path);
  }
  return v;
}

Error damaged(const std::string& path, const std::string& why) {
  return Error("the checkpoint manifest " + path + " is damaged: " + why, path,
               "resume from an earlier checkpoint (a step-NNNNNNNN folder next to it)");
}

// obj[key] as an integer in [0, max] (json_fields.h), else the manifest is damaged.
std::uint64_t need_uint(const json& obj, const char* key, std::uint64_t max, const std::string& path) {
  return checkpoint::need_uint(obj, key, max, [&](const std::string& why) { return damaged(path, why); });
}

json body_of(const Manifest& m) {
  json files = json::array();
  for (const ManifestFile& f : m.files) {
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"xxh3", xxh3_hex(f.xxh3)}});
  }
  return {{"format", kFormat}, {"version", kVersion}, {"step", m.step}, {"shards", m.shards}, {"files", files}};
}

}  // namespace

Xxh3Stream::Xxh3Stream() : state_(XXH3_createState()) {
  STRATA_ASSERT(state_ != nullptr, "XXH3_createState failed");
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}
Xxh3Stream::~Xxh3Stream() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void Xxh3Stream::update(const void* data, std::size_t bytes) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, bytes);
}
std::uint64_t Xxh3Stream::digest() const { return XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_)); }

std::uint64_t xxh3_of(const std::string& bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

std::string xxh3_hex(std::uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

std::string Manifest::to_json() const {
  json j = body_of(*this);
  j["checksum"] = xxh3_hex(xxh3_of(j.dump()));
  return j.dump(1) + "\n";
}

Manifest Manifest::parse(const std::string& text, const std::string& path) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw damaged(path, std::string("it is not JSON (") + e.what() + ")");
  }
  Manifest m;
  try {
    if (!j.is_object() || !j.contains("checksum")) throw damaged(path, "it has no checksum");
    const std::uint64_t stated = parse_hex(j.at("checksum").get<std::string>(), path);
    json body = j;
    body.erase("checksum");
    if (xxh3_of(body.dump()) != stated) throw damaged(path, "its checksum does not match its content");
    if (body.at("format").get<std::string>() != kFormat) {
      throw damaged(path, "its format is not " + std::string(kFormat));
    }
    const std::uint64_t version = need_uint(body, "version", std::numeric_limits<std::uint32_t>::max(), path);
    if (version != kVersion) {
      throw Error("the checkpoint " + path + " has version " + std::to_string(version) +
                      "; this strata reads version " + std::to_string(kVersion),
                  path, "use the strata that wrote it");
    }
    m.step = need_uint(body, "step", std::numeric_limits<std::uint64_t>::max(), path);
    m.shards = static_cast<int>(need_uint(body, "shards", std::numeric_limits<int>::max(), path));
    if (m.shards < 1) throw damaged(path, "it lists " + std::to_string(m.shards) + " shards");
    for (const json& f : body.at("files")) {
      const std::string name = f.at("name").get<std::string>();
      if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
        throw damaged(path, "it names a file \"" + name + "\" outside the checkpoint folder");
      }
      m.files.push_back({name, need_uint(f, "bytes", std::numeric_limits<std::uint64_t>::max(), path),
                         parse_hex(f.at("xxh3").get<std::string>(), path)});
    }
  } catch (const json::exception& e) {
    throw damaged(path, std::string("a field is missing or mistyped (") + e.what() + ")");
  }
  return m;
}

const ManifestFile& Manifest::file(const std::string& name, const std::string& path) const {
  for (const ManifestFile& f : files) {
    if (f.name == name) return f;
  }
  throw Error("the checkpoint manifest " + path + " does not list " + name, path,
              "the checkpoint was not written by this strata; resume from another one");
}

void verify_file(const std::string& path, const ManifestFile& expected) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error("checkpoint file " + path + " is missing or unreadable: " + std::strerror(errno), path,
                "resume from an earlier checkpoint");
  }
  Xxh3Stream hash;
  std::vector<char> buf(1 << 20);
  std::uint64_t total = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize got = in.gcount();
    if (got <= 0) break;
    hash.update(buf.data(), static_cast<std::size_t>(got));
    total += static_cast<std::uint64_t>(got);
  }
  if (total != expected.bytes) {
    throw Error("checkpoint file " + path + " has " + std::to_string(total) + " bytes; its manifest says " +
                    std::to_string(expected.bytes),
                path, "the file was cut short or changed: resume from an earlier checkpoint");
  }
  if (hash.digest() != expected.xxh3) {
    throw Error("checkpoint file " + path + " does not match its checksum (the data was changed or damaged)", path,
                "resume from an earlier checkpoint");
  }
}

}  // namespace strata::runtime::checkpoint
