#pragma once
// The key-value store gloo's rendezvous reads the ranks' addresses from, over TCP: rank 0 serves it
// on an ephemeral port of the address its gloo device uses, the others reach it there, so ranks on
// different hosts meet without a shared file system (--gloo-store DIR uses gloo's FileStore
// instead). Small: a few keys per communicator, read once each at start-up.
// It also tells who is gone: a connection that names its rank ('I') and later closes without a word
// ('W': a clean end, or an error this rank saw and is ending over) is a rank that was killed or
// crashed; the ranks still there ask for that list ('D') after a failed call, so a job started by
// torchrun or srun, on one host or many, names the rank that died instead of a socket address.
// And who went silent: an identified connection's beats ('P', every 0.1 s from the rank's watchdog)
// stop when its process is stopped or stuck; 'L' lists how long each rank has been silent.
// Wire format, one request at a time per connection: op (1 byte: 'S'et, 'G'et, 'C'heck, 'I'dentify,
// 'W'ord, 'D'eparted, 'P'ulse, 'L'isten), key length (u32, little-endian), key, and for set a value
// length (u32) and the value. Replies: to a set, identify or word one byte; to a check one byte (1:
// present); to a get a byte (1: present) then the value's length and bytes; to departed a count
// (u32) then that many ranks (u32), in the order their connections closed; to a pulse nothing; to
// listen a count (u32) then per connected, identified rank that has not said a word its rank (u32)
// and milliseconds since its last pulse or identify (u32). Identify's key is the rank in decimal,
// word's is "bye" or "error", the others' are empty.
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"

#if CIUIC_HAVE_GLOO
#include <gloo/rendezvous/store.h>

namespace ciuic {

// Serves the store on its own thread until destroyed.
class TcpStoreServer {
 public:
  // Binds host (a numeric address) on `port` (0: an ephemeral one). Throws RuntimeError.
  explicit TcpStoreServer(const std::string& host, int port = 0);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // "HOST:PORT" ("[HOST]:PORT" for IPv6) as the clients connect to it.
  const std::string& Endpoint() const { return endpoint_; }

 private:
  void Serve();

  int listen_fd_ = -1;
  std::vector<uint32_t> departed_;  // the server thread's: ranks gone without a word, in order
  int wake_[2] = {-1, -1};          // a byte written here ends Serve()
  std::string endpoint_;
  std::map<std::string, std::vector<char>> data_;
  std::thread thread_;
};

// One rank's connection to the server. get() waits for its key; wait() polls until every key is
// present or the timeout passes (RuntimeError naming the missing key).
class TcpStore : public gloo::rendezvous::Store {
 public:
  // Connects to "HOST:PORT" (Endpoint()). A refused connection is retried 20 times (the server
  // listens before its endpoint is shared), or, with wait_for_server (a known port the server may not
  // listen on yet), until the timeout. Throws RuntimeError.
  TcpStore(const std::string& endpoint, std::chrono::milliseconds timeout, bool wait_for_server = false);
  ~TcpStore() override;  // says "bye" first: a clean end is not a rank gone

  // This connection speaks for `rank` of the job: if it closes without Bye() or Erred() (the process
  // was killed or crashed), Departed() lists the rank.
  void Identify(int rank);
  // The identified ranks whose connections closed without a word, first first; nullopt when the
  // store does not answer within `timeout` (rank 0 stopped or stuck; this connection is then closed,
  // as a late answer would be read as the next one's). Throws RuntimeError when the store is gone.
  std::optional<std::vector<int>> Departed(std::chrono::milliseconds timeout);
  // After an error this rank saw and may end over, once it asked what it wanted to ask (rank 0 may
  // end as soon as every rank said so): says so, so that its end is not taken for a death. False
  // when the store does not answer within `timeout`; throws RuntimeError when it is gone.
  bool Erred(std::chrono::milliseconds timeout);
  // A sign of life, from the watchdog's thread: never blocks (skipped while another request is in
  // flight or the socket's buffer is full). At most one per 50 ms, however many watchdogs of this
  // process beat through it (a runtime's rules each have one).
  void Pulse();
  // Whether this connection carried a pulse in the last second: this rank beats (a watchdog's thread
  // pulses), so the silence of others means something. Lock-free.
  bool Beating() const;
  // (rank, seconds since its last pulse) of every connected, identified rank that has not said a
  // word; nullopt when the store does not answer within `timeout` (as Departed). Throws
  // RuntimeError when the store is gone.
  std::optional<std::vector<std::pair<int, double>>> Silences(std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  bool Check(const std::string& key);
  // A request and its reply are one exchange under mu_ (the failure path of one thread may ask who
  // is gone while another waits on a key; the questions about peers wait for it no longer than their
  // own timeout).
  void Request(char op, const std::string& key, const std::vector<char>* value);
  void SendAll(const void* data, size_t bytes);
  // With a deadline (not zero): false when it passes first (the connection is then closed).
  bool RecvAll(void* data, size_t bytes, std::chrono::steady_clock::time_point deadline = {});

  std::mutex mu_;
  int fd_ = -1;
  std::atomic<int64_t> last_pulse_ms_{INT64_MIN / 2};  // steady clock, of the last pulse sent
  std::string endpoint_;
  std::chrono::milliseconds timeout_;
};

}  // namespace ciuic
#endif
