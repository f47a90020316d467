#include "strata/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace strata {

namespace {

error system_failure(const std::string& what, const std::filesystem::path& path, int errno_value) {
  return error(errc::runtime_failure, what + " '" + path.string() + "': " + std::strerror(errno_value));
}

}  // namespace

expected<void> write_file_synced(const std::filesystem::path& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return system_failure("cannot create", path, errno);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : EIO;
      ::close(fd);
      return system_failure("cannot write", path, e);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    return system_failure("cannot flush to disk", path, e);
  }
  if (::close(fd) != 0) return system_failure("cannot close", path, errno);
  return {};
}

expected<void> write_file_atomically(const std::filesystem::path& path, std::string_view bytes,
                                     const std::filesystem::path& temporary) {
  if (auto written = write_file_synced(temporary, bytes); !written) {
    ::unlink(temporary.c_str());
    return written;
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(temporary.c_str());
    return error(errc::runtime_failure,
                 "cannot rename '" + temporary.string() + "' over '" + path.string() + "': " + std::strerror(e));
  }
  sync_directory(path.has_parent_path() ? path.parent_path() : std::filesystem::path("."));
  return {};
}

expected<void> write_file_atomically(const std::filesystem::path& path, std::string_view bytes) {
  std::filesystem::path temporary = path;
  temporary += ".tmp";
  return write_file_atomically(path, bytes, temporary);
}

void sync_directory(const std::filesystem::path& directory) noexcept {
  const int fd = ::open(directory.empty() ? "." : directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);  // a failure leaves every file valid; only the rename's durability is at stake
  ::close(fd);
}

expected<void> check_file_creatable_in(const std::filesystem::path& directory) {
  const std::filesystem::path dir = directory.empty() ? std::filesystem::path(".") : directory;
  const std::filesystem::path probe = dir / (".strata-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return error(errc::invalid_argument, "cannot create a file in '" + dir.string() + "': " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return {};
}

}  // namespace strata
