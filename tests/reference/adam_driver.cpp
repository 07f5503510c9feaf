// adam_reference_driver: runs strata's CPU Adam (cpu_adam/adam.h) on inputs written by
// adam_vs_torch.py, which runs torch.optim.Adam / AdamW on the same inputs and compares.
//
//   adam_reference_driver [--simd LEVEL] [--threads N] INPUT OUTPUT
//   adam_reference_driver --probe
//
// --simd picks the variant (scalar | avx2 | avx512 | avx512_bf16); without it the driver uses
// active_simd(), i.e. the best the CPU has, lowered by STRATA_SIMD. --threads 0 (the default)
// uses the CPUs of the affinity mask. --probe prints "simd=<level the run would use>
// detected=<best the CPU has> threads=<n>" and exits 0; it exits 77 (skipped) when STRATA_SIMD
// names a real level that this CPU lacks, 1 when it names no level at all.
//
// The file's hyper-parameters for every tensor; step t (1-based) calls adam_step once per
// tensor (a shard each) with step t, the way the ZeRO engine drives it. The moments start at zero,
// as torch's state does.
//
// ---- file formats (little-endian, no padding) ------------------------------------------------
// Input:
//   char[8]  magic "STRADAMI"
//   u32      n_tensors
//   u32      steps
//   u32      mode          0 = adam (L2: g += wd * p), 1 = adamw (decoupled)
//   u32      grad_dtype    0 = fp32, 1 = fp16, 2 = bf16
//   u32      out_dtype     0 = none, 1 = fp16, 2 = bf16 (AdamShard::params_out)
//   u32      misalign      every buffer starts this many elements (0..15) past a 64-byte boundary
//   f32      lr, beta1, beta2, eps, weight_decay, grad_scale
//   u64      numel[n_tensors]
//   f32      params[numel[i]]                          initial params, for i in tensors
//   then for each step, for each tensor i: grads[numel[i]] in grad_dtype (4 or 2 bytes each)
// Output:
//   char[8]  magic "STRADAMO"
//   u32      n_tensors
//   u32      steps
//   u32      out_dtype     as in the input
//   u32      simd          the variant used: 0 scalar, 1 avx2, 2 avx512, 3 avx512_bf16
//   u64      numel[n_tensors]
//   then for each step, for each tensor: f32 params[numel[i]] after that step
//   then for each tensor: f32 exp_avg[numel[i]]
//   then for each tensor: f32 exp_avg_sq[numel[i]]
//   then, when out_dtype != 0, for each tensor: u16 params_out[numel[i]] (after the last step)
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "cpu_adam/adam.h"

namespace {

using strata::DType;
using strata::Error;
using strata::SimdLevel;
namespace adam = strata::cpu_adam;

constexpr char kInputMagic[8] = {'S', 'T', 'R', 'A', 'D', 'A', 'M', 'I'};
constexpr char kOutputMagic[8] = {'S', 'T', 'R', 'A', 'D', 'A', 'M', 'O'};
constexpr std::size_t kAlignBytes = 64;
constexpr std::uint32_t kMaxMisalign = 15;

// std::FILE with checked reads and writes; closes on destruction.
class File {
 public:
  File(const std::string& path, const char* mode) : path_(path), f_(std::fopen(path.c_str(), mode)) {
    if (f_ == nullptr) throw strata::system_error(errno, "fopen", path);
  }
  ~File() {
    if (f_ != nullptr) std::fclose(f_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  void read(void* data, std::size_t bytes) {
    if (bytes != 0 && std::fread(data, 1, bytes, f_) != bytes)
      throw Error("input file is truncated or unreadable", path_,
                  "write it with adam_vs_torch.py (format at the top of adam_driver.cpp)");
  }
  template <typename T>
  T read_value() {
    T value;
    read(&value, sizeof(value));
    return value;
  }
  void write(const void* data, std::size_t bytes) {
    if (bytes != 0 && std::fwrite(data, 1, bytes, f_) != bytes)
      throw strata::system_error(errno, "fwrite", path_);
  }
  template <typename T>
  void write_value(const T& value) {
    write(&value, sizeof(value));
  }
  // Flushes and closes, reporting a failed flush (ENOSPC shows up here).
  void close() {
    std::FILE* f = f_;
    f_ = nullptr;
    if (std::fclose(f) != 0) throw strata::system_error(errno, "fclose", path_);
  }
  bool at_end() { return std::fgetc(f_) == EOF; }

 private:
  std::string path_;
  std::FILE* f_;
};

// numel elements of `elem_bytes` each, starting `misalign` elements past a 64-byte boundary, so
// the kernels' unaligned heads and tails are exercised when the test asks for it.
class Buffer {
 public:
  Buffer(std::size_t numel, std::size_t elem_bytes, std::uint32_t misalign)
      : bytes_(numel * elem_bytes) {
    const std::size_t offset = misalign * elem_bytes;
    std::size_t total = offset + bytes_;
    total = (total + kAlignBytes - 1) / kAlignBytes * kAlignBytes + kAlignBytes;
    base_.reset(static_cast<unsigned char*>(std::aligned_alloc(kAlignBytes, total)));
    if (!base_) throw Error("out of memory allocating " + std::to_string(total) + " bytes", "buffer");
    std::memset(base_.get(), 0, total);  // the moments start at zero, as torch's state does
    data_ = base_.get() + offset;
  }
  void* data() { return data_; }
  float* f32() { return reinterpret_cast<float*>(data_); }
  std::size_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> base_;
  unsigned char* data_ = nullptr;
  std::size_t bytes_;
};

DType dtype_from_code(std::uint32_t code, const std::string& where) {
  switch (code) {
    case 0: return DType::f32;
    case 1: return DType::f16;
    case 2: return DType::bf16;
    default: throw Error("unknown dtype code " + std::to_string(code), where, "0 fp32, 1 fp16, 2 bf16");
  }
}

struct Tensor {
  std::size_t numel;
  Buffer params, grads, exp_avg, exp_avg_sq;
  std::optional<Buffer> params_out;
};

// The variant and thread count a run uses: the requested level (else active_simd(), the best
// the CPU has lowered by STRATA_SIMD) and the requested threads (0 = the CPUs of the affinity
// mask).
struct Run {
  SimdLevel simd;
  int threads;
};

Run resolve_run(std::optional<SimdLevel> simd, int threads) {
  if (threads < 0)
    throw Error(fmt::format("thread count {} is negative", threads), "--threads",
                "use 0 for the CPUs of the affinity mask");
  Run r{simd.value_or(strata::active_simd()), threads};
  if (r.simd > strata::detected_simd())
    throw Error(fmt::format("asked for SIMD level {} but this CPU supports up to {}",
                            strata::simd_name(r.simd), strata::simd_name(strata::detected_simd())),
                "--simd", "leave it unset to use the best level");
  if (r.threads == 0) r.threads = std::max(1, strata::cpu_info().logical_cores_in_affinity_mask);
  return r;
}

void run(const std::string& input_path, const std::string& output_path,
         std::optional<SimdLevel> simd, int threads) {
  File in(input_path, "rb");
  char magic[8];
  in.read(magic, sizeof(magic));
  if (std::memcmp(magic, kInputMagic, sizeof(magic)) != 0)
    throw Error("not an adam reference input (bad magic)", input_path);
  const auto n_tensors = in.read_value<std::uint32_t>();
  const auto steps = in.read_value<std::uint32_t>();
  const auto mode = in.read_value<std::uint32_t>();
  const DType grad_dtype = dtype_from_code(in.read_value<std::uint32_t>(), input_path + ": grad_dtype");
  const auto out_code = in.read_value<std::uint32_t>();
  const auto misalign = in.read_value<std::uint32_t>();
  if (mode > 1) throw Error("mode must be 0 (adam) or 1 (adamw)", input_path);
  if (out_code > 2) throw Error("out_dtype must be 0 (none), 1 (fp16) or 2 (bf16)", input_path);
  if (misalign > kMaxMisalign) throw Error("misalign must be 0..15 elements", input_path);

  adam::AdamHyper hyper;
  hyper.lr = in.read_value<float>();
  hyper.beta1 = in.read_value<float>();
  hyper.beta2 = in.read_value<float>();
  hyper.eps = in.read_value<float>();
  hyper.weight_decay = in.read_value<float>();
  const auto grad_scale = in.read_value<float>();
  hyper.mode = mode == 0 ? adam::AdamMode::adam : adam::AdamMode::adamw;
  hyper.bias_correction = true;

  std::vector<std::uint64_t> numels(n_tensors);
  in.read(numels.data(), numels.size() * sizeof(std::uint64_t));

  const std::size_t grad_bytes = strata::dtype_size(grad_dtype);
  std::vector<Tensor> tensors;
  tensors.reserve(n_tensors);
  for (std::uint64_t numel : numels) {
    Tensor& t = tensors.emplace_back(Tensor{numel, Buffer(numel, 4, misalign),
                                            Buffer(numel, grad_bytes, misalign),
                                            Buffer(numel, 4, misalign), Buffer(numel, 4, misalign),
                                            std::nullopt});
    if (out_code != 0) t.params_out.emplace(numel, 2, misalign);
    in.read(t.params.data(), t.params.bytes());
  }

  const Run variant = resolve_run(simd, threads);

  File out(output_path, "wb");
  out.write(kOutputMagic, sizeof(kOutputMagic));
  out.write_value(n_tensors);
  out.write_value(steps);
  out.write_value(out_code);
  out.write_value(static_cast<std::uint32_t>(variant.simd));
  out.write(numels.data(), numels.size() * sizeof(std::uint64_t));

  for (std::uint32_t step = 0; step < steps; ++step) {
    for (Tensor& t : tensors) {
      in.read(t.grads.data(), t.grads.bytes());
      adam::AdamShard shard;
      shard.params = t.params.f32();
      shard.grads = t.grads.data();
      shard.grad_dtype = grad_dtype;
      shard.exp_avg = t.exp_avg.f32();
      shard.exp_avg_sq = t.exp_avg_sq.f32();
      shard.numel = t.numel;
      if (t.params_out) {
        shard.params_out = t.params_out->data();
        shard.out_dtype = out_code == 1 ? DType::f16 : DType::bf16;
      }
      adam::adam_step(variant.simd, variant.threads, hyper, std::int64_t{step} + 1, shard, grad_scale);
    }
    for (Tensor& t : tensors) out.write(t.params.data(), t.params.bytes());
  }
  if (!in.at_end()) throw Error("input file has bytes after the last step's grads", input_path);

  for (Tensor& t : tensors) out.write(t.exp_avg.data(), t.exp_avg.bytes());
  for (Tensor& t : tensors) out.write(t.exp_avg_sq.data(), t.exp_avg_sq.bytes());
  if (out_code != 0)
    for (Tensor& t : tensors) out.write(t.params_out->data(), t.params_out->bytes());
  out.close();
  std::printf("simd=%s threads=%d\n", std::string(strata::simd_name(variant.simd)).c_str(), variant.threads);
}

// What a run would use, for the test to report and to skip on (see the top of the file).
int probe() {
  const SimdLevel detected = strata::detected_simd();
  const char* request = std::getenv("STRATA_SIMD");
  if (request != nullptr && *request != '\0') {
    try {
      (void)strata::resolve_simd(detected, std::string_view(request));
    } catch (const Error&) {
      // A real level name this CPU lacks is a skip; anything else is the caller's mistake.
      (void)strata::resolve_simd(SimdLevel::avx512_bf16, std::string_view(request));
      std::printf("skipped: STRATA_SIMD=%s, but this CPU supports at most %s\n", request,
                  std::string(strata::simd_name(detected)).c_str());
      return 77;
    }
  }
  const Run variant = resolve_run(std::nullopt, 0);
  std::printf("simd=%s detected=%s threads=%d\n", std::string(strata::simd_name(variant.simd)).c_str(),
              std::string(strata::simd_name(detected)).c_str(), variant.threads);
  return 0;
}

int usage() {
  std::fprintf(stderr,
               "usage: adam_reference_driver [--simd LEVEL] [--threads N] INPUT OUTPUT\n"
               "       adam_reference_driver --probe\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::optional<SimdLevel> simd;
    int threads = 0;
    std::vector<std::string> paths;
    for (int i = 1; i < argc; ++i) {
      const std::string_view arg = argv[i];
      if (arg == "--probe") return probe();
      if (arg == "--simd" && i + 1 < argc) {
        simd = strata::resolve_simd(strata::detected_simd(), std::string_view(argv[++i]));
      } else if (arg == "--threads" && i + 1 < argc) {
        threads = std::atoi(argv[++i]);
      } else if (!arg.starts_with("--")) {
        paths.emplace_back(arg);
      } else {
        return usage();
      }
    }
    if (paths.size() != 2) return usage();
    run(paths[0], paths[1], simd, threads);
  } catch (const Error& e) {
    std::fprintf(stderr, "adam_reference_driver: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
