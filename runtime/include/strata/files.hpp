#pragma once
/// \file
/// Writing files so that a crash never leaves a half-written one, and checking up front that a
/// file can be created where a program will write later. Used by the trace writer, checkpoints
/// and the command lines of the samples and tools.

#include <filesystem>
#include <string_view>

#include "strata/error.hpp"

namespace strata {

/// Creates (or truncates) `path`, writes all of `bytes`, fsyncs and closes it.
///
/// On failure the error (`errc::runtime_failure`) is one sentence naming `path`, the step that
/// failed and the system's reason, e.g. `cannot create 'run/x.tmp': No such file or directory`;
/// the file may then be partly written. Not atomic: see `write_file_atomically`.
expected<void> write_file_synced(const std::filesystem::path& path, std::string_view bytes);

/// Replaces `path` by `bytes` atomically: writes and fsyncs `temporary` (which must be on the
/// same file system, normally beside `path`), renames it over `path` and fsyncs the directory.
///
/// Readers see the old file or the new one, never a mix, and a crash leaves one of the two. On
/// failure `temporary` is removed, `path` is untouched, and the error (`errc::runtime_failure`)
/// names the file and step that failed with the system's reason. Concurrent writers of the
/// same `path` must use distinct temporaries (e.g. with the process id in the name).
expected<void> write_file_atomically(const std::filesystem::path& path, std::string_view bytes,
                                     const std::filesystem::path& temporary);

/// The same with the temporary `path` + ".tmp".
expected<void> write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

/// Fsyncs the directory `directory`, making renames and creations in it durable. Best effort:
/// a directory that cannot be opened or synced is not an error (the files in it stay valid).
void sync_directory(const std::filesystem::path& directory) noexcept;

/// Whether this process can create a file in `directory`: creates a uniquely named probe file
/// there (exclusively, so no existing file is touched) and removes it again.
///
/// Lets a program refuse a bad output location before a long run rather than after it. The
/// error (`errc::invalid_argument`) is one sentence, e.g. `cannot create a file in 'out':
/// Permission denied`. `directory` empty means the current directory.
expected<void> check_file_creatable_in(const std::filesystem::path& directory);

}  // namespace strata
