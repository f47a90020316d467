#include "network_watch.hpp"

#include <dirent.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <utility>

namespace strata::net::detail {

namespace {
bool is_tcp_socket(int fd) {
  int domain = 0, type = 0;
  socklen_t len = sizeof domain;
  if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) return false;
  len = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) return false;
  return (domain == AF_INET || domain == AF_INET6) && type == SOCK_STREAM;
}
}  // namespace

bool network_watch::start_inline() {
  if (epoll_ >= 0) return true;
  epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  stop_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = stop_;
  if (epoll_ < 0 || stop_ < 0 || ::epoll_ctl(epoll_, EPOLL_CTL_ADD, stop_, &ev) != 0) {
    stop();
    return false;
  }
  rescan();
  scanned_ = std::chrono::steady_clock::now();
  return true;
}

bool network_watch::start(std::atomic<doorbell*>& bell, std::atomic<std::uint64_t>& rings) {
  if (running()) return true;
  if (!start_inline()) return false;
  thread_ = std::thread([this, &bell, &rings] { watch(bell, rings); });
  return true;
}

bool network_watch::wait(std::chrono::microseconds up_to) {
  epoll_event events[16];
  const timespec timeout{static_cast<time_t>(up_to.count() / 1'000'000), static_cast<long>(up_to.count() % 1'000'000) * 1000};
  int n = ::epoll_pwait2(epoll_, events, 16, &timeout, nullptr);
  if (n < 0 && errno == ENOSYS)  // a kernel before 5.11: whole milliseconds
    n = ::epoll_wait(epoll_, events, 16, static_cast<int>((up_to.count() + 999) / 1000));
  bool network = false;
  for (int i = 0; i < n; ++i) {
    if (events[i].data.fd != stop_) {
      network = true;
      continue;
    }
    std::uint64_t count = 0;
    (void)!::read(stop_, &count, sizeof count);  // drained: the next write wakes again
  }
  if (const auto now = std::chrono::steady_clock::now(); now - scanned_ >= rescan_every) {
    rescan();
    scanned_ = now;
  }
  return network;
}

void network_watch::rescan() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return;
  const int own = ::dirfd(dir);
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    struct stat st {};
    if (fd == own || fd == epoll_ || fd == stop_ || ::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    auto [at, fresh] = seen_.try_emplace(fd, st.st_ino);
    if (!fresh && at->second == st.st_ino) continue;  // seen: watched already, or not TCP
    at->second = st.st_ino;
    if (!is_tcp_socket(fd)) continue;
    // Edge-triggered: one wake per arrival, not one per poll while the bytes wait for Open MPI
    // to read them. (A descriptor closed since is gone from the set; its number may come back
    // as a new socket, which is added again.)
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLET;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) == 0) sockets_.fetch_add(1, std::memory_order_relaxed);
  }
  ::closedir(dir);
}

void network_watch::watch(std::atomic<doorbell*>& bell, std::atomic<std::uint64_t>& rings) {
  epoll_event events[16];
  auto scanned = std::chrono::steady_clock::now();
  for (;;) {
    const int n = ::epoll_wait(epoll_, events, 16, static_cast<int>(rescan_every.count()));  // the thread's: stop_ ends it
    if (n < 0 && errno != EINTR) return;
    for (int i = 0; i < n; ++i)
      if (events[i].data.fd == stop_) return;
    if (n > 0) {
      rings.fetch_add(1, std::memory_order_relaxed);
      bell.load(std::memory_order_acquire)->ring();
    }
    if (const auto now = std::chrono::steady_clock::now(); now - scanned >= rescan_every) {
      rescan();
      scanned = now;
    }
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
  seen_.clear();
}

}  // namespace strata::net::detail
