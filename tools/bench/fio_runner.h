#pragma once
// fio as the limit of `strata bench nvme`: one job per cell on the benchmark's own scratch
// file, through fio's io_uring engine with O_DIRECT, so that both sides move the same bytes of
// the same file with the same block size, queue depth and parallelism. fio runs as a child
// process (posix_spawnp, no shell); its `--output-format=json` report is parsed with
// nlohmann_json.
//
// A missing or failing fio is a normal answer here, not an exception: FioResult::error says
// why in one line, and the benchmark goes on without the fio column.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::tools {

struct FioJob {
  std::string fio = "fio";        // the binary: a path, or a name looked up in PATH
  std::string path;               // the file, which must exist (allow_file_create=0)
  std::uint64_t bytes = 0;        // bytes the whole job moves: a multiple of block_size * numjobs
  std::size_t block_size = 0;     // bs
  unsigned queue_depth = 1;       // iodepth, per job
  unsigned numjobs = 1;           // job k covers [k * bytes / numjobs, (k + 1) * bytes / numjobs)
  bool write = false;             // write / randwrite, else read / randread
  bool random = false;            // each block of a job's slice once, in random order
  bool fixed = false;             // registered buffers and files (fixedbufs, registerfiles)
};

struct FioResult {
  bool ok = false;
  double gbps = 0;                // bytes / second / 1e9, as fio measured (bw_bytes)
  std::uint64_t io_bytes = 0;     // what fio says it moved
  double runtime_s = 0;
  std::string error;              // when !ok: why, in one line
};

// argv of the fio command line for `job` (argv[0] = job.fio).
std::vector<std::string> fio_command(const FioJob& job);

// The same as one shell line, for reports ("fio --name=... --rw=read ...").
std::string fio_command_line(const FioJob& job);

// Runs the job and parses its report. Never throws for a failure of fio (not installed, a
// non-zero exit, a report without the numbers): the result says so.
FioResult run_fio(const FioJob& job);

// "fio-3.33", or empty with `why` set when `fio --version` cannot be run.
std::string fio_version(const std::string& fio, std::string* why);

}  // namespace strata::tools
