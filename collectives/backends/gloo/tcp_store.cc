#include "collectives/backends/gloo/tcp_store.h"

#if CIUIC_HAVE_GLOO
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace ciuic {

namespace {

// A key or value larger than this is not a rendezvous message: the connection is dropped.
constexpr uint32_t kMaxField = 1u << 20;

std::string Errno() { return std::strerror(errno); }

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Splits "HOST:PORT" or "[HOST]:PORT".
std::pair<std::string, std::string> SplitEndpoint(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos) throw RuntimeError(fmt::format("gloo store: bad endpoint '{}'", endpoint));
  std::string host = endpoint.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, endpoint.substr(colon + 1)};
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
};

}  // namespace

TcpStoreServer::TcpStoreServer(const std::string& host, int port_wanted) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  AddrInfo ai;
  const std::string service = std::to_string(port_wanted);
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &ai.list); rc != 0)
    throw RuntimeError(fmt::format("gloo store: address '{}': {}", host, gai_strerror(rc)));
  listen_fd_ = socket(ai.list->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw RuntimeError("gloo store: socket: " + Errno());
  if (port_wanted != 0) {
    const int one = 1;  // a port a previous job left in TIME_WAIT
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  }
  if (bind(listen_fd_, ai.list->ai_addr, ai.list->ai_addrlen) != 0 || listen(listen_fd_, 128) != 0) {
    const std::string why = Errno();
    close(listen_fd_);
    throw RuntimeError(port_wanted ? fmt::format("the job's store: cannot listen on port {}: {}", port_wanted, why)
                                   : fmt::format("gloo store: cannot listen on {}: {}", host, why));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  const int port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                               : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  endpoint_ = ai.list->ai_family == AF_INET6 ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
  if (pipe2(wake_, O_CLOEXEC) != 0) {
    close(listen_fd_);
    throw RuntimeError("gloo store: pipe: " + Errno());
  }
  thread_ = std::thread([this] { Serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  const char byte = 0;
  (void)!write(wake_[1], &byte, 1);
  thread_.join();
  close(listen_fd_);
  close(wake_[0]);
  close(wake_[1]);
}

void TcpStoreServer::Serve() {
  struct Client {
    int fd;
    std::string in;
    int64_t rank = -1;                              // 'I': the rank this connection speaks for
    bool said_word = false;                         // 'W': a clean end or an error of its own, not a death
    std::chrono::steady_clock::time_point pulse{};  // 'I' or 'P': its last sign of life
  };
  std::vector<Client> clients;
  // Answers every whole request in c.in; false when the client must be dropped.
  const auto handle = [&](Client& c) {
    while (c.in.size() >= 5) {
      const char op = c.in[0];
      const uint32_t klen = GetU32(c.in.data() + 1);
      if (klen > kMaxField || std::strchr("SGCIWDPL", op) == nullptr || op == 0) return false;
      size_t need = 5 + klen;
      if (c.in.size() < need) return true;
      const std::string key = c.in.substr(5, klen);
      std::string reply;
      if (op == 'S') {
        if (c.in.size() < need + 4) return true;
        const uint32_t vlen = GetU32(c.in.data() + need);
        if (vlen > kMaxField) return false;
        if (c.in.size() < need + 4 + vlen) return true;
        data_[key].assign(c.in.data() + need + 4, c.in.data() + need + 4 + vlen);
        need += 4 + vlen;
        reply.push_back(1);
      } else if (op == 'I') {
        if (key.empty() || key.size() > 9 || key.find_first_not_of("0123456789") != std::string::npos) return false;
        c.rank = std::stoll(key);
        c.pulse = std::chrono::steady_clock::now();
        reply.push_back(1);
      } else if (op == 'P') {
        c.pulse = std::chrono::steady_clock::now();  // no reply: a pulse must never wait
      } else if (op == 'L') {
        const auto now = std::chrono::steady_clock::now();
        std::string list;
        uint32_t n = 0;
        for (const Client& o : clients) {
          if (o.fd < 0 || o.rank < 0 || o.said_word) continue;
          PutU32(list, static_cast<uint32_t>(o.rank));
          const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - o.pulse).count();
          PutU32(list, static_cast<uint32_t>(std::clamp<int64_t>(ms, 0, UINT32_MAX)));
          ++n;
        }
        PutU32(reply, n);
        reply += list;
      } else if (op == 'W') {
        c.said_word = true;
        reply.push_back(1);
      } else if (op == 'D') {
        PutU32(reply, static_cast<uint32_t>(departed_.size()));
        for (const uint32_t r : departed_) PutU32(reply, r);
      } else {
        const auto it = data_.find(key);
        reply.push_back(it == data_.end() ? 0 : 1);
        if (op == 'G' && it != data_.end()) {
          PutU32(reply, static_cast<uint32_t>(it->second.size()));
          reply.append(it->second.data(), it->second.size());
        }
      }
      c.in.erase(0, need);
      if (!WriteAll(c.fd, reply.data(), reply.size())) return false;
    }
    return true;
  };
  while (true) {
    std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (const auto& c : clients) fds.push_back({c.fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents) break;
    if (fds[1].revents & POLLIN) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) clients.push_back({fd, {}});
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      Client& c = clients[i - 2];
      char buf[4096];
      const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) c.in.append(buf, static_cast<size_t>(n));
      if (n <= 0 || !handle(c)) {
        close(c.fd);
        c.fd = -1;
        if (c.rank >= 0 && !c.said_word) departed_.push_back(static_cast<uint32_t>(c.rank));
      }
    }
    clients.erase(std::remove_if(clients.begin(), clients.end(), [](const Client& c) { return c.fd < 0; }),
                  clients.end());
  }
  for (const auto& c : clients) close(c.fd);
}

TcpStore::TcpStore(const std::string& endpoint, std::chrono::milliseconds timeout, bool wait_for_server)
    : endpoint_(endpoint), timeout_(timeout) {
  const auto [host, port] = SplitEndpoint(endpoint);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  AddrInfo ai;
  if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &ai.list); rc != 0)
    throw RuntimeError(fmt::format("gloo store: address '{}': {}", endpoint, gai_strerror(rc)));
  // The server listens before its endpoint is shared, so a refusal is a real one; a few retries
  // cover a backlog that is momentarily full.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string why;
  for (int attempt = 0;; ++attempt) {
    fd_ = socket(ai.list->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw RuntimeError("gloo store: socket: " + Errno());
    if (connect(fd_, ai.list->ai_addr, ai.list->ai_addrlen) == 0) break;
    why = Errno();
    close(fd_);
    fd_ = -1;
    if ((attempt >= 20 && !wait_for_server) || std::chrono::steady_clock::now() > deadline)
      throw RuntimeError(fmt::format("gloo store: cannot connect to rank 0's store at {}: {}", endpoint, why));
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_for_server ? 100 : 50));
  }
  const int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

TcpStore::~TcpStore() {
  if (fd_ < 0) return;
  // "bye" without waiting for its answer: the server reads it before it sees the close.
  std::string msg(1, 'W');
  PutU32(msg, 3);
  msg += "bye";
  WriteAll(fd_, msg.data(), msg.size());
  close(fd_);
}

void TcpStore::SendAll(const void* data, size_t bytes) {
  if (fd_ < 0) throw RuntimeError(fmt::format("gloo store: rank 0's store at {} stopped answering", endpoint_));
  if (!WriteAll(fd_, static_cast<const char*>(data), bytes))
    throw RuntimeError(fmt::format("gloo store: rank 0's store at {} is gone: {}", endpoint_, Errno()));
}

bool TcpStore::RecvAll(void* data, size_t bytes, std::chrono::steady_clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    if (deadline != std::chrono::steady_clock::time_point{}) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      pollfd pfd{fd_, POLLIN, 0};
      const int ready = left > 0 ? poll(&pfd, 1, static_cast<int>(left)) : 0;
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) {
        close(fd_);
        fd_ = -1;
        return false;
      }
    }
    const ssize_t n = recv(fd_, p, bytes, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw RuntimeError(fmt::format("gloo store: rank 0's store at {} closed the connection", endpoint_));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

void TcpStore::Request(char op, const std::string& key, const std::vector<char>* value) {
  if (key.size() > kMaxField || (value && value->size() > kMaxField))
    throw RuntimeError(fmt::format("gloo store: key '{}' or its value is over {} bytes", key, kMaxField));
  std::string msg(1, op);
  PutU32(msg, static_cast<uint32_t>(key.size()));
  msg += key;
  if (value) {
    PutU32(msg, static_cast<uint32_t>(value->size()));
    msg.append(value->data(), value->size());
  }
  SendAll(msg.data(), msg.size());
}

void TcpStore::set(const std::string& key, const std::vector<char>& data) {
  std::lock_guard lock(mu_);
  Request('S', key, &data);
  char ok = 0;
  RecvAll(&ok, 1);
}

bool TcpStore::Check(const std::string& key) {
  std::lock_guard lock(mu_);
  Request('C', key, nullptr);
  char found = 0;
  RecvAll(&found, 1);
  return found != 0;
}

std::vector<char> TcpStore::get(const std::string& key) {
  wait({key}, timeout_);
  std::lock_guard lock(mu_);
  Request('G', key, nullptr);
  char found = 0;
  RecvAll(&found, 1);
  if (!found) throw RuntimeError(fmt::format("gloo store: key '{}' vanished from {}", key, endpoint_));
  char len[4];
  RecvAll(len, 4);
  std::vector<char> out(GetU32(len));
  if (!out.empty()) RecvAll(out.data(), out.size());
  return out;
}

void TcpStore::Identify(int rank) {
  std::lock_guard lock(mu_);
  Request('I', std::to_string(rank), nullptr);
  char ok = 0;
  RecvAll(&ok, 1);
}

namespace {

// Takes `lock` within `timeout`, trying every millisecond: for the questions on a failure's path, which
// must not wait behind a request stuck on a stopped store. (Not std::timed_mutex: its timed lock is a
// call ThreadSanitizer does not see, which then reports every unlock.)
bool LockWithin(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!lock.try_lock()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

std::optional<std::vector<int>> TcpStore::Departed(std::chrono::milliseconds timeout) {
  // Another thread's request may be waiting on a stopped store: this one waits as long as it may.
  std::unique_lock lock(mu_, std::defer_lock);
  if (!LockWithin(lock, timeout)) return std::nullopt;
  if (fd_ < 0) return std::nullopt;  // it did not answer before
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Request('D', "", nullptr);
  char count[4];
  if (!RecvAll(count, 4, deadline)) return std::nullopt;
  std::vector<int> out;
  for (uint32_t i = 0, n = GetU32(count); i < n; ++i) {
    char rank[4];
    if (!RecvAll(rank, 4, deadline)) return std::nullopt;
    out.push_back(static_cast<int>(GetU32(rank)));
  }
  return out;
}

bool TcpStore::Erred(std::chrono::milliseconds timeout) {
  // Another thread's request may be waiting on a stopped store: this one waits as long as it may.
  std::unique_lock lock(mu_, std::defer_lock);
  if (!LockWithin(lock, timeout)) return false;
  if (fd_ < 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Request('W', "error", nullptr);
  char ok = 0;
  return RecvAll(&ok, 1, deadline);
}

void TcpStore::Pulse() {
  std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock() || fd_ < 0) return;
  const int64_t now =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
  if (now - last_pulse_ms_.load(std::memory_order_relaxed) < 50) return;
  char msg[5] = {'P', 0, 0, 0, 0};
  const ssize_t w = send(fd_, msg, sizeof(msg), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (w == static_cast<ssize_t>(sizeof(msg))) last_pulse_ms_.store(now, std::memory_order_relaxed);
  if (w > 0 && w < static_cast<ssize_t>(sizeof(msg))) {
    close(fd_);  // half a request would be read as the start of the next: no more requests
    fd_ = -1;
  }
}

bool TcpStore::Beating() const {
  const int64_t now =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
  return now - last_pulse_ms_.load(std::memory_order_relaxed) < 1000;
}

std::optional<std::vector<std::pair<int, double>>> TcpStore::Silences(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_, std::defer_lock);
  if (!LockWithin(lock, timeout)) return std::nullopt;
  if (fd_ < 0) return std::nullopt;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Request('L', "", nullptr);
  char count[4];
  if (!RecvAll(count, 4, deadline)) return std::nullopt;
  std::vector<std::pair<int, double>> out;
  for (uint32_t i = 0, n = GetU32(count); i < n; ++i) {
    char entry[8];
    if (!RecvAll(entry, 8, deadline)) return std::nullopt;
    out.emplace_back(static_cast<int>(GetU32(entry)), GetU32(entry + 4) / 1000.0);
  }
  return out;
}

void TcpStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::milliseconds(1);
  for (const auto& key : keys) {
    while (!Check(key)) {
      if (timeout.count() > 0 && std::chrono::steady_clock::now() - start > timeout)
        throw RuntimeError(fmt::format("gloo store: no key '{}' at {} after {} s (a rank did not arrive)", key,
                                       endpoint_, timeout.count() / 1000.0));
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
  }
}

}  // namespace ciuic
#endif
