#include "tests/bench/cpu/p9_concurrent.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "common/status_macros.h"

ABSL_FLAG(int, p9_clients, 4, "P9: concurrent clients.");
ABSL_FLAG(int, p9_reps, 7, "P9: timed windows of each kind (one client, all clients).");
ABSL_FLAG(int, p9_window_ms, 500, "P9: milliseconds each client issues commands per window.");
ABSL_FLAG(int, p9_warmup, 2000, "P9: untimed commands per client first.");
ABSL_FLAG(bool, p9_threads, true, "P9: also measure the clients as threads of one process (P9t).");
ABSL_FLAG(std::string, p9_worker, "",
          "Internal: run as a P9 worker process against this daemon address.");

namespace cubed::cpubench {
namespace {

int64_t SteadyNs() {
  // steady_clock is CLOCK_MONOTONIC: one clock for every process of the machine.
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Scheduler time of threads (/proc/.../schedstat): on a CPU, and runnable but waiting for one.
struct Sched {
  int64_t run_ns = 0;
  int64_t wait_ns = 0;
  Sched& operator+=(const Sched& o) {
    run_ns += o.run_ns;
    wait_ns += o.wait_ns;
    return *this;
  }
  Sched operator-(const Sched& o) const { return Sched{run_ns - o.run_ns, wait_ns - o.wait_ns}; }
};

Sched ReadSched(const std::string& path) {
  Sched s;
  std::ifstream in(path);
  in >> s.run_ns >> s.wait_ns;
  return in ? s : Sched{};
}

// Per thread of `pid` ("self" for this process): tid -> its schedstat.
std::map<std::string, Sched> ThreadSched(const std::string& pid) {
  std::map<std::string, Sched> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + pid + "/task", ec)) {
    out[e.path().filename().string()] = ReadSched(e.path().string() + "/schedstat");
  }
  return out;
}

// Growth from `before` to `after` of the threads present in both, and (when `busiest` is not
// null) the growth of the thread that ran longest.
Sched Delta(const std::map<std::string, Sched>& before, const std::map<std::string, Sched>& after,
            Sched* busiest) {
  Sched total;
  for (const auto& [tid, s] : after) {
    auto it = before.find(tid);
    if (it == before.end()) continue;
    const Sched d = s - it->second;
    total += d;
    if (busiest != nullptr && d.run_ns > busiest->run_ns) *busiest = d;
  }
  return total;
}

// Open sockets of `pid` (its connections, listeners included).
int SocketCount(pid_t pid) {
  int n = 0;
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"), ec)) {
    std::error_code ec2;
    if (std::filesystem::read_symlink(e.path(), ec2).string().rfind("socket:", 0) == 0) ++n;
  }
  return n;
}

// One client's window.
struct Window {
  int64_t t0_ns = 0;
  int64_t t1_ns = 0;
  int64_t commands = 0;
  Sched sched;  // Of the client's threads in the window (see ClientSet::Run).
  double Rate() const { return commands / ((t1_ns - t0_ns) / 1e9); }
};

// A connected client with its one-element tensor.
class Issuer {
 public:
  static absl::StatusOr<std::unique_ptr<Issuer>> Connect(const std::string& address) {
    std::unique_ptr<Issuer> is(new Issuer());
    ClientOptions options;
    options.address = address;
    ASSIGN_OR_RETURN(is->client_, Client::Connect(options));
    const float zero = 0;
    ASSIGN_OR_RETURN(is->tensor_,
                     is->client_->CreateTensor(
                         absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(&zero), 4), {1},
                         sizeof(float)));
    return is;
  }

  const char* transport() const {
    return client_->transport() == Transport::kStream ? "stream" : "unary";
  }

  absl::Status Issue(int count) {
    for (int i = 0; i < count; ++i) {
      RETURN_IF_ERROR(client_->Execute(fill_, {}, {tensor_}, scalars_));
    }
    return absl::OkStatus();
  }

  // Issues commands for `window` (clock checked every 32), then Sync.
  absl::StatusOr<Window> RunWindow(absl::Duration window) {
    Window w;
    w.t0_ns = SteadyNs();
    const int64_t end = w.t0_ns + absl::ToInt64Nanoseconds(window);
    do {
      RETURN_IF_ERROR(Issue(32));
      w.commands += 32;
    } while (SteadyNs() < end);
    RETURN_IF_ERROR(client_->Sync().get());
    w.t1_ns = SteadyNs();
    return w;
  }

  absl::Status Warm(int commands) {
    RETURN_IF_ERROR(Issue(commands));
    return client_->Sync().get();
  }

 private:
  Issuer() = default;
  std::unique_ptr<Client> client_;
  Tensor tensor_;
  const BuiltinKernel fill_ = Builtin("fill", ElemType::kF32);
  const std::vector<Scalars> scalars_ = {Scalars{ElemType::kF32, {1.0}, {}, {}}};
};

// The clients under test: runs one window on the clients `which`, all starting together. The
// windows' `sched` together cover every thread of the clients' processes.
class ClientSet {
 public:
  virtual ~ClientSet() = default;
  virtual absl::StatusOr<std::vector<Window>> Run(const std::vector<int>& which) = 0;
  virtual std::string transport() const = 0;
};

// Clients as threads of this process: one Issuer each, one std::thread each per window.
class ThreadClients : public ClientSet {
 public:
  static absl::StatusOr<std::unique_ptr<ThreadClients>> Start(const std::string& address,
                                                              const ConcurrentOptions& options) {
    std::unique_ptr<ThreadClients> set(new ThreadClients());
    set->window_ = options.window;
    for (int i = 0; i < options.clients; ++i) {
      ASSIGN_OR_RETURN(std::unique_ptr<Issuer> is, Issuer::Connect(address));
      RETURN_IF_ERROR(is->Warm(options.warmup_commands));
      set->issuers_.push_back(std::move(is));
    }
    return set;
  }

  absl::StatusOr<std::vector<Window>> Run(const std::vector<int>& which) override {
    absl::Notification go;
    std::vector<absl::StatusOr<Window>> got(which.size(), absl::UnknownError("not run"));
    std::vector<Sched> own(which.size());
    std::vector<std::thread> threads;
    // The window threads count their own time (they are gone before the second snapshot); the
    // snapshots count every other thread of this process (the SDK's and gRPC's).
    const std::map<std::string, Sched> before = ThreadSched("self");
    for (size_t k = 0; k < which.size(); ++k) {
      threads.emplace_back([&, k] {
        go.WaitForNotification();
        const Sched s0 = ReadSched("/proc/thread-self/schedstat");
        got[k] = issuers_[which[k]]->RunWindow(window_);
        own[k] = ReadSched("/proc/thread-self/schedstat") - s0;
      });
    }
    go.Notify();
    for (std::thread& t : threads) t.join();
    const Sched rest = Delta(before, ThreadSched("self"), nullptr);
    std::vector<Window> out;
    for (size_t k = 0; k < got.size(); ++k) {
      if (!got[k].ok()) return got[k].status();
      out.push_back(*got[k]);
      out.back().sched = own[k];
    }
    out[0].sched += rest;
    return out;
  }

  std::string transport() const override { return issuers_[0]->transport(); }

 private:
  ThreadClients() = default;
  absl::Duration window_;
  std::vector<std::unique_ptr<Issuer>> issuers_;
};

// One worker process: this program with --p9_worker, stdin and stdout on pipes.
class Worker {
 public:
  static absl::StatusOr<std::unique_ptr<Worker>> Spawn(const std::vector<std::string>& args) {
    int to_child[2], from_child[2];
    if (pipe2(to_child, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
    if (pipe2(from_child, O_CLOEXEC) != 0) {
      close(to_child[0]);
      close(to_child[1]);
      return absl::InternalError("pipe2 failed");
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to_child[0], 0);
    posix_spawn_file_actions_adddup2(&actions, from_child[1], 1);
    std::vector<std::string> copy = args;
    std::vector<char*> argv;
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(to_child[0]);
    close(from_child[1]);
    if (rc != 0) {
      close(to_child[1]);
      close(from_child[0]);
      return absl::InternalError(absl::StrCat("posix_spawn ", args[0], ": ", std::strerror(rc)));
    }
    std::unique_ptr<Worker> w(new Worker());
    w->pid_ = pid;
    w->in_ = to_child[1];
    w->out_ = from_child[0];
    return w;
  }

  // Closes its stdin (the worker exits), then SIGKILL after 10 s.
  ~Worker() {
    if (in_ >= 0) close(in_);
    if (out_ >= 0) close(out_);
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      absl::SleepFor(absl::Milliseconds(5));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }

  absl::Status Send(absl::string_view line) {
    const std::string text = absl::StrCat(line, "\n");
    if (write(in_, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      return absl::UnavailableError(absl::StrCat("P9 worker ", pid_, " is gone"));
    }
    return absl::OkStatus();
  }

  // The next line the worker writes, within `timeout`; its "error ..." lines become errors.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      const size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        if (line.rfind("error ", 0) == 0) {
          return absl::InternalError(absl::StrCat("P9 worker ", pid_, ": ", line.substr(6)));
        }
        return line;
      }
      const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
      if (left <= 0) {
        return absl::DeadlineExceededError(absl::StrCat("P9 worker ", pid_, " did not answer"));
      }
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char chunk[256];
      const ssize_t n = read(out_, chunk, sizeof(chunk));
      if (n <= 0) return absl::UnavailableError(absl::StrCat("P9 worker ", pid_, " exited"));
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  Worker() = default;
  pid_t pid_ = -1;
  int in_ = -1;
  int out_ = -1;
  std::string buffer_;
};

class ProcessClients : public ClientSet {
 public:
  static absl::StatusOr<std::unique_ptr<ProcessClients>> Start(const std::string& address,
                                                               const ConcurrentOptions& options) {
    std::unique_ptr<ProcessClients> set(new ProcessClients());
    for (int i = 0; i < options.clients; ++i) {
      ASSIGN_OR_RETURN(
          std::unique_ptr<Worker> w,
          Worker::Spawn({options.self, "--p9_worker=" + address,
                         absl::StrCat("--p9_window_ms=", absl::ToInt64Milliseconds(options.window)),
                         absl::StrCat("--p9_warmup=", options.warmup_commands)}));
      set->workers_.push_back(std::move(w));
    }
    for (auto& w : set->workers_) {
      ASSIGN_OR_RETURN(std::string ready, w->ReadLine(absl::Seconds(60)));
      std::vector<std::string> parts = absl::StrSplit(ready, ' ');
      if (parts.size() != 2 || parts[0] != "ready") {
        return absl::InternalError(absl::StrCat("P9 worker said '", ready, "', not ready"));
      }
      set->transport_ = parts[1];
    }
    return set;
  }

  absl::StatusOr<std::vector<Window>> Run(const std::vector<int>& which) override {
    for (int i : which) RETURN_IF_ERROR(workers_[i]->Send("go"));
    std::vector<Window> out;
    for (int i : which) {
      ASSIGN_OR_RETURN(std::string line, workers_[i]->ReadLine(absl::Seconds(60)));
      Window w;
      if (std::sscanf(line.c_str(), "%" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNd64,
                      &w.t0_ns, &w.t1_ns, &w.commands, &w.sched.run_ns, &w.sched.wait_ns) != 5 ||
          w.t1_ns <= w.t0_ns) {
        return absl::InternalError(absl::StrCat("P9 worker answered '", line, "'"));
      }
      out.push_back(w);
    }
    return out;
  }

  std::string transport() const override { return transport_; }

 private:
  ProcessClients() = default;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::string transport_;
};

// Scheduler time and wall time summed over the windows of one kind.
struct CpuTally {
  double wall_s = 0;
  Sched daemon;
  Sched clients;
  Sched busiest;  // The daemon's thread that ran longest in each window, summed.
  double commands = 0;
  std::string Describe() const {
    if (wall_s == 0 || commands == 0) return "-";
    auto cores = [&](int64_t ns) { return ns / 1e9 / wall_s; };
    return absl::StrFormat(
        "daemon on a CPU %.2f cores + runnable waiting for one %.2f, clients %.2f + %.2f; "
        "busiest daemon thread on a CPU %.0f%% of the time, waiting for one %.0f%%; %.1f us "
        "CPU/command (daemon %.1f, clients %.1f)",
        cores(daemon.run_ns), cores(daemon.wait_ns), cores(clients.run_ns), cores(clients.wait_ns),
        100 * cores(busiest.run_ns), 100 * cores(busiest.wait_ns),
        (daemon.run_ns + clients.run_ns) / 1e3 / commands, daemon.run_ns / 1e3 / commands,
        clients.run_ns / 1e3 / commands);
  }
};

absl::StatusOr<std::vector<Row>> Measure(ClientSet& set, pid_t daemon_pid,
                                         const ConcurrentOptions& options, const std::string& id,
                                         const std::string& kind, const std::string& one,
                                         const std::string& setup) {
  std::vector<int> all;
  for (int i = 0; i < options.clients; ++i) all.push_back(i);
  std::vector<double> solo, aggregate, slowest, fastest, fairness;
  CpuTally solo_cpu, all_cpu;
  auto window = [&](const std::vector<int>& which, bool record,
                    CpuTally* tally) -> absl::StatusOr<std::vector<Window>> {
    const std::string pid = absl::StrCat(daemon_pid);
    const std::map<std::string, Sched> d0 = ThreadSched(pid);
    ASSIGN_OR_RETURN(std::vector<Window> got, set.Run(which));
    const std::map<std::string, Sched> d1 = ThreadSched(pid);
    if (record) {
      int64_t t0 = got[0].t0_ns, t1 = got[0].t1_ns;
      for (const Window& w : got) {
        t0 = std::min(t0, w.t0_ns);
        t1 = std::max(t1, w.t1_ns);
        tally->clients += w.sched;
        tally->commands += w.commands;
      }
      tally->wall_s += (t1 - t0) / 1e9;
      Sched busiest;
      tally->daemon += Delta(d0, d1, &busiest);
      tally->busiest += busiest;
    }
    return got;
  };
  for (int rep = -1; rep < options.repetitions; ++rep) {  // rep -1: warm-up windows.
    const bool record = rep >= 0;
    const int alone = (rep + 1) % options.clients;  // Rotates through the clients.
    ASSIGN_OR_RETURN(std::vector<Window> one, window({alone}, record, &solo_cpu));
    ASSIGN_OR_RETURN(std::vector<Window> got, window(all, record, &all_cpu));
    if (!record) continue;
    solo.push_back(one[0].Rate());
    int64_t t0 = got[0].t0_ns, t1 = got[0].t1_ns, commands = 0;
    double lo = got[0].Rate(), hi = got[0].Rate();
    for (const Window& w : got) {
      t0 = std::min(t0, w.t0_ns);
      t1 = std::max(t1, w.t1_ns);
      commands += w.commands;
      lo = std::min(lo, w.Rate());
      hi = std::max(hi, w.Rate());
    }
    aggregate.push_back(commands / ((t1 - t0) / 1e9));
    slowest.push_back(lo);
    fastest.push_back(hi);
    fairness.push_back(lo / hi);
  }

  const std::string n = absl::StrCat(options.clients);
  const std::string window_text =
      absl::StrCat(absl::ToInt64Milliseconds(options.window), " ms windows");
  Row agg;
  agg.id = id;
  agg.name = absl::StrCat(n, " ", kind, ", aggregate tiny Execute, session ", set.transport());
  agg.unit = "cmd/s";
  agg.figure = Summarize(aggregate);
  agg.baseline_name = absl::StrCat(one, " alone (same run)");
  agg.baseline = Summarize(solo);
  agg.goal = ">= 0.8x";
  agg.goal_met = agg.Ratio() >= 0.8;
  agg.verdict = agg.goal_met ? "met" : absl::StrFormat("missed (%.2fx < 0.8x)", agg.Ratio());
  agg.note =
      absl::StrCat(setup, "; pipelined fill(1 x f32) for ", window_text,
                   " then Sync, alternating 1 client / ", n, " clients, ", options.repetitions,
                   " of each after a warm-up; aggregate = all commands / "
                   "(last Sync - first start). CPU, 1 client: ",
                   solo_cpu.Describe(), ". CPU, ", n, " clients: ", all_cpu.Describe());

  // Fairness is judged per window (the slowest and the fastest client of the same window); the
  // baseline is that fastest client, so it is 1 in every window.
  Row fair;
  fair.id = id;
  fair.name = absl::StrCat("slowest of ", n, " ", kind, " / fastest, per window");
  fair.unit = "x";
  fair.figure = Summarize(fairness);
  fair.baseline_name = "fastest client of the same window";
  fair.baseline = Summarize(std::vector<double>(fairness.size(), 1.0));
  fair.goal = ">= 0.7x";
  fair.goal_met = fair.Ratio() >= 0.7;
  fair.verdict = fair.goal_met ? "met" : absl::StrFormat("missed (%.2fx < 0.7x)", fair.Ratio());
  const Summary lo = Summarize(slowest), hi = Summarize(fastest);
  fair.note =
      absl::StrFormat("slowest client p50 %.0f cmd/s [%.0f..%.0f], fastest %.0f [%.0f..%.0f]",
                      lo.p50, lo.min, lo.max, hi.p50, hi.min, hi.max);
  return std::vector<Row>{agg, fair};
}

}  // namespace

ConcurrentOptions ConcurrentOptionsFromFlags() {
  ConcurrentOptions o;
  o.clients = std::max(2, absl::GetFlag(FLAGS_p9_clients));
  o.repetitions = std::max(1, absl::GetFlag(FLAGS_p9_reps));
  o.window = absl::Milliseconds(std::max(10, absl::GetFlag(FLAGS_p9_window_ms)));
  o.warmup_commands = std::max(0, absl::GetFlag(FLAGS_p9_warmup));
  o.threads = absl::GetFlag(FLAGS_p9_threads);
  std::error_code ec;
  o.self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  return o;
}

absl::StatusOr<std::vector<Row>> MeasureConcurrentClients(const std::string& daemon_address,
                                                          pid_t daemon_pid,
                                                          const ConcurrentOptions& options) {
  std::vector<Row> rows;
  {
    const int sockets_before = SocketCount(daemon_pid);
    ASSIGN_OR_RETURN(std::unique_ptr<ProcessClients> set,
                     ProcessClients::Start(daemon_address, options));
    const std::string setup =
        absl::StrCat(options.clients,
                     " worker processes (this program, --p9_worker), one Client and session "
                     "each; daemon sockets +",
                     SocketCount(daemon_pid) - sockets_before);
    ASSIGN_OR_RETURN(
        std::vector<Row> got,
        Measure(*set, daemon_pid, options, "P9", "client processes", "one client process", setup));
    rows.insert(rows.end(), got.begin(), got.end());
  }
  if (options.threads) {
    const int sockets_before = SocketCount(daemon_pid);
    ASSIGN_OR_RETURN(std::unique_ptr<ThreadClients> set,
                     ThreadClients::Start(daemon_address, options));
    const std::string setup =
        absl::StrCat(options.clients,
                     " threads of this process, one Client and session each; daemon "
                     "sockets +",
                     SocketCount(daemon_pid) - sockets_before,
                     " (gRPC's global subchannel pool shares one connection)");
    ASSIGN_OR_RETURN(std::vector<Row> got, Measure(*set, daemon_pid, options, "P9t",
                                                   "client threads", "one client thread", setup));
    rows.insert(rows.end(), got.begin(), got.end());
  }
  return rows;
}

bool IsConcurrentWorker() { return !absl::GetFlag(FLAGS_p9_worker).empty(); }

int RunConcurrentWorker() {
  auto fail = [](const absl::Status& s) {
    std::string message(s.ToString());
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::printf("error %s\n", message.c_str());
    std::fflush(stdout);
    return 1;
  };
  absl::StatusOr<std::unique_ptr<Issuer>> issuer = Issuer::Connect(absl::GetFlag(FLAGS_p9_worker));
  if (!issuer.ok()) return fail(issuer.status());
  absl::Status s = (*issuer)->Warm(std::max(0, absl::GetFlag(FLAGS_p9_warmup)));
  if (!s.ok()) return fail(s);
  std::printf("ready %s\n", (*issuer)->transport());
  std::fflush(stdout);
  const absl::Duration window = absl::Milliseconds(absl::GetFlag(FLAGS_p9_window_ms));
  char line[64];
  while (std::fgets(line, sizeof(line), stdin) != nullptr) {
    if (std::strncmp(line, "go", 2) != 0) return fail(absl::InvalidArgumentError(line));
    const std::map<std::string, Sched> before = ThreadSched("self");
    absl::StatusOr<Window> w = (*issuer)->RunWindow(window);
    if (!w.ok()) return fail(w.status());
    const Sched sched = Delta(before, ThreadSched("self"), nullptr);
    std::printf("%" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n", w->t0_ns, w->t1_ns,
                w->commands, sched.run_ns, sched.wait_ns);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace cubed::cpubench
