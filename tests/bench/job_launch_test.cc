// The launcher variables ciuic-bench reads under torchrun and srun (collectives/bootstrap/job_launch.h): rank, world,
// local rank and the store's address from each launcher, Slurm's node-list grammar, and a one-line
// refusal naming the variable when the environment is half set or out of range.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/backends/gloo/communicator.h"
#include "collectives/backends/gloo/tcp_store.h"
#include "collectives/bootstrap/job_launch.h"
#include "core/config.h"
#include "core/error.h"

namespace ciuic {
namespace {

const char* const kVars[] = {"RANK",
                             "WORLD_SIZE",
                             "LOCAL_RANK",
                             "LOCAL_WORLD_SIZE",
                             "MASTER_ADDR",
                             "MASTER_PORT",
                             "CIUIC_STORE_PORT",
                             "SLURM_PROCID",
                             "SLURM_NTASKS",
                             "SLURM_LOCALID",
                             "SLURM_NTASKS_PER_NODE",
                             "SLURM_NODELIST",
                             "SLURM_STEP_NODELIST",
                             "SLURM_JOB_ID"};

// Clears every launcher variable, sets the given ones, restores on destruction.
class Env {
 public:
  explicit Env(const std::vector<std::pair<const char*, const char*>>& set) {
    for (const char* v : kVars) {
      const char* old = std::getenv(v);
      saved_.push_back({v, old ? std::string(old) : std::string("\x01")});
      unsetenv(v);
    }
    for (const auto& [k, v] : set) setenv(k, v, 1);
  }
  ~Env() {
    for (const auto& [k, v] : saved_) {
      if (v == "\x01") {
        unsetenv(k);
      } else {
        setenv(k, v.c_str(), 1);
      }
    }
  }

 private:
  std::vector<std::pair<const char*, std::string>> saved_;
};

TEST(JobLaunch, NoLauncherVariablesMeansNoJob) {
  Env e({});
  EXPECT_FALSE(JobFromEnvironment().has_value());
  Env only_rank(std::vector<std::pair<const char*, const char*>>{
      {"RANK", "0"}});  // RANK alone (another tool's variable) is not a torchrun job
  EXPECT_FALSE(JobFromEnvironment().has_value());
}

TEST(JobLaunch, Torchrun) {
  Env e({{"RANK", "3"},
         {"WORLD_SIZE", "8"},
         {"LOCAL_RANK", "1"},
         {"LOCAL_WORLD_SIZE", "2"},
         {"MASTER_ADDR", "node7"},
         {"MASTER_PORT", "29500"}});
  const auto j = JobFromEnvironment();
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->launcher, "torchrun");
  EXPECT_EQ(j->rank, 3);
  EXPECT_EQ(j->size, 8);
  EXPECT_EQ(j->local_rank, 1);
  EXPECT_EQ(j->local_size, 2);
  EXPECT_EQ(j->store_host, "node7");
  EXPECT_EQ(j->store_port, 29501);  // torchrun's agent serves MASTER_PORT itself
  setenv("CIUIC_STORE_PORT", "4000", 1);
  EXPECT_EQ(JobFromEnvironment()->store_port, 4000);
}

TEST(JobLaunch, Srun) {
  Env e({{"SLURM_PROCID", "5"},
         {"SLURM_NTASKS", "16"},
         {"SLURM_LOCALID", "1"},
         {"SLURM_NTASKS_PER_NODE", "4(x4)"},
         {"SLURM_NODELIST", "gpu[003-006]"},
         {"SLURM_JOB_ID", "123456"}});
  const auto j = JobFromEnvironment();
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->launcher, "srun");
  EXPECT_EQ(j->rank, 5);
  EXPECT_EQ(j->size, 16);
  EXPECT_EQ(j->local_rank, 1);
  EXPECT_EQ(j->local_size, 4);
  EXPECT_EQ(j->store_host, "gpu003");
  EXPECT_EQ(j->store_port, 29400 + 456);
  setenv("SLURM_STEP_NODELIST", "cpu[10-11]", 1);  // the step's nodes win over the allocation's
  EXPECT_EQ(JobFromEnvironment()->store_host, "cpu10");
  setenv("MASTER_PORT", "7000", 1);
  EXPECT_EQ(JobFromEnvironment()->store_port, 7000);
}

TEST(JobLaunch, SlurmNodeLists) {
  EXPECT_EQ(FirstSlurmHost("localhost"), "localhost");
  EXPECT_EQ(FirstSlurmHost("a1,b2"), "a1");
  EXPECT_EQ(FirstSlurmHost("gpu[003-005,010],cpu1"), "gpu003");
  EXPECT_EQ(FirstSlurmHost("rack[7]-n1"), "rack7-n1");
  EXPECT_EQ(FirstSlurmHost("n[12,4]"), "n12");
  for (const char* bad : {"", "[1-2]", "n[", "n[x-1]", "n[]"}) EXPECT_THROW(FirstSlurmHost(bad), UsageError) << bad;
}

TEST(JobLaunch, HalfSetOrOutOfRangeIsOneLineNamingTheVariable) {
  const std::vector<std::pair<std::vector<std::pair<const char*, const char*>>, std::string>> cases = {
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}}, "$MASTER_ADDR is not set"},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, "$RANK='2'"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, "$WORLD_SIZE='0'"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "65535"}}, "$MASTER_PORT"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}, {"CIUIC_STORE_PORT", "70000"}},
       "$CIUIC_STORE_PORT='70000'"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "x"}, {"SLURM_NODELIST", "n1"}}, "$SLURM_NTASKS='x'"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}, "$SLURM_NODELIST is not set"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NODELIST", "n["}}, "Slurm node list 'n['"},
  };
  for (const auto& [vars, want] : cases) {
    Env e(vars);
    try {
      JobFromEnvironment();
      ADD_FAILURE() << "accepted: " << want;
    } catch (const UsageError& err) {
      EXPECT_NE(std::string(err.what()).find(want), std::string::npos) << err.what();
      EXPECT_EQ(std::string(err.what()).find('\n'), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace ciuic

#if CIUIC_HAVE_GLOO
// NCCL's start-up waits in vain for a rank that never joined it; the roll call in the job's store
// names that rank (the NCCL path itself runs on the GPU machine: scripts/device/gpu-check.sh).
TEST(JobLaunch, RollCallNamesTheRanksThatNeverArrived) {
  ciuic::TcpStoreServer server("127.0.0.1");
  const std::string& ep = server.Endpoint();
  const int port = std::stoi(ep.substr(ep.rfind(':') + 1));
  std::vector<ciuic::JobRollCall> calls;
  for (int r = 0; r < 4; ++r) calls.push_back(ciuic::MakeJobRollCall("127.0.0.1", port, r, 4, "nccl-startup"));
  EXPECT_EQ(calls[2].absent(), "rank 0, rank 1, rank 2, rank 3");
  calls[0].arrive();
  calls[2].arrive();
  EXPECT_EQ(calls[0].absent(), "rank 1, rank 3");
  calls[1].arrive();
  calls[3].arrive();
  EXPECT_EQ(calls[3].absent(), "");
  // Another point of start-up is its own roll.
  EXPECT_EQ(ciuic::MakeJobRollCall("127.0.0.1", port, 0, 2, "other").absent(), "rank 0, rank 1");
}
#endif

#if CIUIC_HAVE_GLOO
namespace {

int PortOf(const std::string& endpoint) { return std::stoi(endpoint.substr(endpoint.rfind(':') + 1)); }

int ConnectTo(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// One request in the store's wire format (tcp_store.h), its one-byte answer read.
void Say(int fd, char op, const std::string& key) {
  std::string msg(1, op);
  for (int i = 0; i < 4; ++i) msg.push_back(static_cast<char>((key.size() >> (8 * i)) & 0xff));
  msg += key;
  ASSERT_EQ(write(fd, msg.data(), msg.size()), static_cast<ssize_t>(msg.size()));
  char ok = 0;
  ASSERT_EQ(read(fd, &ok, 1), 1);
  EXPECT_EQ(ok, 1);
}

// What the ranks still there hear: the first answer that lists someone (the server sees a close a
// moment after it happens), or the last.
std::optional<std::vector<int>> Gone(ciuic::TcpStore& s, size_t at_least) {
  std::optional<std::vector<int>> gone;
  for (int i = 0; i < 100; ++i) {
    gone = s.Departed(std::chrono::seconds(2));
    if (!gone || gone->size() >= at_least) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return gone;
}

}  // namespace

// A connection that named its rank and closed without a word is a rank gone (killed, crashed); one
// that said bye (a clean end) or that it saw an error (a survivor ending over it) is not. The list
// keeps the order of the closes.
TEST(TcpStore, NamesTheRanksWhoseConnectionsClosedWithoutAWord) {
  ciuic::TcpStoreServer server("127.0.0.1");
  const int port = PortOf(server.Endpoint());
  ciuic::TcpStore watcher(server.Endpoint(), std::chrono::seconds(5));
  watcher.Identify(0);
  EXPECT_EQ(Gone(watcher, 0), std::vector<int>{});
  {
    ciuic::TcpStore clean(server.Endpoint(), std::chrono::seconds(5));
    clean.Identify(1);
  }  // bye
  const int erred = ConnectTo(port);
  Say(erred, 'I', "3");
  Say(erred, 'W', "error");
  close(erred);
  const int anonymous = ConnectTo(port);  // never identified (a roll call's, a tool's)
  close(anonymous);
  const int dead = ConnectTo(port);
  Say(dead, 'I', "2");
  close(dead);
  EXPECT_EQ(Gone(watcher, 1), std::vector<int>{2});
  const int second = ConnectTo(port);
  Say(second, 'I', "4");
  close(second);
  EXPECT_EQ(Gone(watcher, 2), (std::vector<int>{2, 4}));
  // Asking says nothing: the watcher is still a rank whose silent close would be a death.
  ciuic::TcpStore asker(server.Endpoint(), std::chrono::seconds(5));
  asker.Identify(5);
  EXPECT_EQ(Gone(asker, 2), (std::vector<int>{2, 4}));
  EXPECT_TRUE(asker.Erred(std::chrono::seconds(2)));
}

// A rank's silence counts from its last pulse (or its identify): one that pulses stays near zero,
// one that stopped grows; a rank that said a word or closed is not listed.
TEST(TcpStore, SilenceCountsFromTheLastPulse) {
  ciuic::TcpStoreServer server("127.0.0.1");
  ciuic::TcpStore watcher(server.Endpoint(), std::chrono::seconds(5));
  watcher.Identify(0);
  ciuic::TcpStore beating(server.Endpoint(), std::chrono::seconds(5));
  beating.Identify(1);
  ciuic::TcpStore stopped(server.Endpoint(), std::chrono::seconds(5));
  stopped.Identify(2);
  ciuic::TcpStore said(server.Endpoint(), std::chrono::seconds(5));
  said.Identify(3);
  ASSERT_TRUE(said.Erred(std::chrono::seconds(2)));
  for (int i = 0; i < 12; ++i) {
    beating.Pulse();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  beating.Pulse();
  const auto silences = watcher.Silences(std::chrono::seconds(2));
  ASSERT_TRUE(silences.has_value());
  std::map<int, double> by_rank(silences->begin(), silences->end());
  EXPECT_EQ(by_rank.size(), 3u);  // 0, 1 and 2: rank 3 said a word
  EXPECT_EQ(by_rank.count(3), 0u);
  EXPECT_LT(by_rank[1], 0.5);
  EXPECT_GE(by_rank[2], 1.1);
  EXPECT_LT(by_rank[2], 10.0);
}

// A listening socket on loopback that nobody accepts from (the kernel still completes connections):
// a stopped store. Its endpoint in `endpoint`; -1 on failure.
static int SilentListener(std::string* endpoint) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(listener, 4) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return -1;
  *endpoint = fmt::format("127.0.0.1:{}", ntohs(a.sin_port));
  return listener;
}

// A store that does not answer (rank 0 stopped: the kernel still accepts its connections) is
// nullopt within the timeout, and at once after that; a store that is gone (rank 0 ended) throws.
TEST(TcpStore, ASilentStoreIsNoAnswerAndAGoneOneAnError) {
  std::string endpoint;
  const int listener = SilentListener(&endpoint);
  ASSERT_GE(listener, 0);
  {
    ciuic::TcpStore silent(endpoint, std::chrono::seconds(5));
    const auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(silent.Departed(std::chrono::milliseconds(200)).has_value());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_GE(s, 0.15);
    EXPECT_LT(s, 2.0);
    EXPECT_FALSE(silent.Departed(std::chrono::seconds(60)).has_value());  // not waited again
  }
  close(listener);

  auto server = std::make_unique<ciuic::TcpStoreServer>("127.0.0.1");
  ciuic::TcpStore orphan(server->Endpoint(), std::chrono::seconds(5));
  orphan.Identify(1);
  server.reset();
  EXPECT_THROW(orphan.Departed(std::chrono::seconds(2)), ciuic::RuntimeError);
}

// Another thread's request waiting on a stopped store (a key read mid-run) does not make the
// questions about peers wait past their own timeout: a deadline's report must still come.
TEST(TcpStore, QuestionsAboutPeersDoNotWaitBehindAStuckRequest) {
  std::string endpoint;
  const int listener = SilentListener(&endpoint);
  ASSERT_GE(listener, 0);
  ciuic::TcpStore store(endpoint, std::chrono::seconds(60));
  std::thread reader([&store] {
    try {
      store.get("key");  // never answered: blocks holding the connection
    } catch (const std::exception&) {
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(store.Departed(std::chrono::milliseconds(300)).has_value());
  EXPECT_FALSE(store.Silences(std::chrono::milliseconds(300)).has_value());
  EXPECT_FALSE(store.Erred(std::chrono::milliseconds(300)));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(s, 3.0);
  close(listener);  // the pending connection is reset: the reader's request fails and it ends
  reader.join();
}

// This rank beats when its connection carried a pulse in the last second.
TEST(TcpStore, BeatingMeansAPulseInTheLastSecond) {
  ciuic::TcpStoreServer server("127.0.0.1");
  ciuic::TcpStore watcher(server.Endpoint(), std::chrono::seconds(5));
  watcher.Identify(0);
  ciuic::TcpStore rank(server.Endpoint(), std::chrono::seconds(5));
  rank.Identify(1);
  EXPECT_FALSE(rank.Beating());
  rank.Pulse();
  EXPECT_TRUE(rank.Beating());
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  rank.Pulse();
  rank.Pulse();  // within 50 ms of the last: not sent
  EXPECT_TRUE(rank.Beating());
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_FALSE(rank.Beating());
  EXPECT_FALSE(watcher.Beating());
}
#endif
