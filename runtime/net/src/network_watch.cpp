#include "network_watch.hpp"

#include <dirent.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace strata::net::detail {

namespace {

bool is_tcp_socket(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  int domain = 0, type = 0;
  socklen_t len = sizeof domain;
  if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) return false;
  len = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) return false;
  return (domain == AF_INET || domain == AF_INET6) && type == SOCK_STREAM;
}

/// Whether the epoll set `fd` watches a TCP socket (its fdinfo lists one "tfd: N ..." line per
/// watched file, N being that file's descriptor in this process).
bool watches_tcp(int fd) {
  std::ifstream info("/proc/self/fdinfo/" + std::to_string(fd));
  std::string line;
  while (std::getline(info, line)) {
    if (line.rfind("tfd:", 0) != 0) continue;
    if (is_tcp_socket(std::atoi(line.c_str() + 4))) return true;
  }
  return false;
}

/// This process's epoll sets that hold a TCP socket (but `except`).
std::vector<int> epoll_sets_with_tcp(int except) {
  std::vector<int> found;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return found;
  const int own = ::dirfd(dir);
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    if (fd == own || fd == except) continue;
    char target[64] = {};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
    if (n <= 0 || std::strcmp(target, "anon_inode:[eventpoll]") != 0) continue;
    if (watches_tcp(fd)) found.push_back(fd);
  }
  ::closedir(dir);
  return found;
}

}  // namespace

bool network_watch::start(std::atomic<doorbell*>& bell) {
  if (running()) return true;
  epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_ < 0) return false;
  int watched = 0;
  for (int fd : epoll_sets_with_tcp(epoll_)) {
    // Edge-triggered: one wake per arrival (an arrival on a socket of the inner set wakes the
    // outer), not one per poll while the bytes wait for Open MPI to read them.
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLET;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) == 0) ++watched;
  }
  stop_ = watched > 0 ? ::eventfd(0, EFD_CLOEXEC) : -1;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = stop_;
  if (stop_ < 0 || ::epoll_ctl(epoll_, EPOLL_CTL_ADD, stop_, &ev) != 0) {
    stop();
    return false;
  }
  thread_ = std::thread([this, &bell] { watch(bell); });
  return true;
}

void network_watch::watch(std::atomic<doorbell*>& bell) {
  epoll_event events[16];
  for (;;) {
    const int n = ::epoll_wait(epoll_, events, 16, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;
    for (int i = 0; i < n; ++i)
      if (events[i].data.fd == stop_) return;
    rings_.fetch_add(1, std::memory_order_relaxed);
    bell.load(std::memory_order_acquire)->ring();
  }
}

void network_watch::stop() {
  if (thread_.joinable()) {
    const std::uint64_t one = 1;
    (void)!::write(stop_, &one, sizeof one);
    thread_.join();
  }
  for (int* fd : {&stop_, &epoll_})
    if (*fd >= 0) ::close(std::exchange(*fd, -1));
}

}  // namespace strata::net::detail
