#pragma once
// Whole-file writes and reads whose errors name the path, and the atomic replace that
// checkpoints, saved model folders and machine profiles use: the text goes to a temporary file
// beside the target, is fsynced, renamed over it, and the folder is fsynced, so a crash never
// leaves a half-written file under the real name.
#include <functional>
#include <string>

namespace strata {

// fsync of a file or folder by path; throws strata::Error naming the path. File systems that
// cannot fsync a folder (EINVAL) are accepted.
void fsync_path(const std::string& path);

// Writes `text` to `path` (created or truncated), fsynced when `sync`. Throws strata::Error
// (ENOSPC included) naming the path, and removes the file then.
void write_file(const std::string& path, const std::string& text, bool sync);

// Writes `text` to `path` through a temporary file next to it: write, fsync, rename, fsync the
// folder. Throws strata::Error (ENOSPC included) naming the path; `path` keeps its old content.
// `after` (optional) is called with "write TMP" once the temporary is written and with
// "rename TMP -> PATH" once it is renamed: the checkpoint tests' crash points.
void write_file_atomic(const std::string& path, const std::string& text,
                       const std::function<void(const std::string& step)>& after = {});

// The whole file; throws strata::Error naming the path when it is missing or unreadable.
std::string read_text_file(const std::string& path);

}  // namespace strata
