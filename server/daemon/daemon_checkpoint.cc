// Daemon: checkpoint on drain and SIGTERM, restore at start (Note [Checkpoint and restore],
// server/channel/device.h).

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "server/channel/device_loop.h"
#include "server/daemon/auth_config.h"
#include "server/daemon/checkpoint_file.h"
#include "server/daemon/daemon.h"
#include "server/service/compute_service.h"
#include "spdlog/spdlog.h"

namespace cubed {
namespace {

// How long one device may take to finish its queued work and read back every handle.
constexpr absl::Duration kCaptureTimeout = absl::Minutes(5);

// A result handed from a loop task to the thread waiting for it; shared, so that a wait that
// times out leaves nothing dangling.
template <typename T>
struct Handoff {
  absl::Notification done;
  absl::StatusOr<T> result = absl::InternalError("not run");
};

// Runs `work` (void(Device&, Handoff<T>&)) on `loop` and waits for it to fill the handoff.
template <typename T, typename Work>
absl::StatusOr<T> RunOnLoop(DeviceLoop& loop, absl::Duration timeout, Work work) {
  auto handoff = std::make_shared<Handoff<T>>();
  const bool posted = loop.Post(
      [handoff, work = std::move(work)](Device& device) mutable { work(device, handoff); },
      [handoff](absl::Status status) {
        if (handoff->done.HasBeenNotified()) return;
        handoff->result = std::move(status);
        handoff->done.Notify();
      });
  if (!posted) return absl::UnavailableError("the device loop is stopping");
  if (!handoff->done.WaitForNotificationWithTimeout(timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("the device did not finish in ", absl::FormatDuration(timeout)));
  }
  return std::move(handoff->result);
}

}  // namespace

absl::Status Daemon::LoadPolicy() {
  policy_ = DefaultAuthPolicy();
  if (!config_.auth_config.empty()) {
    ASSIGN_OR_RETURN(policy_, LoadAuthConfig(config_.auth_config));
    spdlog::info("--auth_config {}: {} principals", config_.auth_config, policy_.principals.size());
  }
  if (!config_.insecure_tcp) policy_.anonymous_tcp = nullptr;
  return absl::OkStatus();
}

absl::Status Daemon::RestoreSessions() {
  if (config_.restore_dir.empty()) return absl::OkStatus();
  const std::string manifest = config_.restore_dir + "/manifest";
  const std::string data = config_.restore_dir + "/data";
  if (access(manifest.c_str(), F_OK) != 0 && access(data.c_str(), F_OK) != 0) {
    spdlog::info("--restore {}: no checkpoint there; starting empty", config_.restore_dir);
    return absl::OkStatus();
  }
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(
      std::shared_ptr<CheckpointReader> reader,
      CheckpointReader::Open(config_.restore_dir, policy_, static_cast<uint32_t>(loops_.size()),
                             DeviceOptions{}.max_lease, RequestLimits{}));
  const size_t sessions = reader->sessions().size();
  uint64_t handles = 0;
  uint64_t graphs = 0;
  uint64_t imported = 0;
  uint64_t bytes = 0;
  for (const CheckpointedSession& s : reader->sessions()) {
    handles += s.handles.size();
    graphs += s.graphs.size();
    for (const CheckpointedHandle& h : s.handles) {
      bytes += h.size;  // The data file's size bounds the sum: it was checked to tile it.
      imported += h.imported ? 1 : 0;
    }
    for (const CheckpointedOrphan& o : s.orphans) bytes += o.size;
  }
  // Each session's bytes are read and verified as its allocations fill (Note [Checkpoint I/O]);
  // any fault fails the start, so a half-restored daemon never serves.
  for (size_t i = 0; i < sessions; ++i) {
    const uint64_t id = reader->sessions()[i].id.value();
    DeviceLoop& loop = *loops_[reader->sessions()[i].device];  // The reader checked the device.
    absl::StatusOr<bool> restored = RunOnLoop<bool>(
        loop, kCaptureTimeout, [reader, i, now = absl::Now()](Device& d, auto handoff) mutable {
          std::unique_ptr<CheckpointSource> source = reader->Source(i);
          absl::Status status = d.RestoreSession(std::move(reader->sessions()[i]), *source, now);
          if (status.ok()) {
            handoff->result = true;
          } else {
            handoff->result = std::move(status);
          }
          handoff->done.Notify();
        });
    if (!restored.ok()) {
      return absl::Status(restored.status().code(),
                          absl::StrCat("--restore ", config_.restore_dir, ": session ", id, ": ",
                                       restored.status().message()));
    }
  }
  // Restored once: a later start with the same --restore does not bring back stale sessions.
  const std::string consumed = manifest + ".restored";
  if (std::rename(manifest.c_str(), consumed.c_str()) != 0) {
    spdlog::warn("--restore: cannot rename {} to {}", manifest, consumed);
  }
  spdlog::info("restored {} sessions ({} handles, {} graphs, {} bytes) from {} in {}", sessions,
               handles, graphs, bytes, config_.restore_dir,
               absl::FormatDuration(absl::Now() - start));
  if (imported > 0) {  // Note [Checkpoint and restore].
    spdlog::warn(
        "--restore: {} handles were imported memory; restored as daemon memory holding "
        "the bytes they had, no longer shared with their producers",
        imported);
  }
  return absl::OkStatus();
}

namespace {

// Freezes every device after its queued work; returns their sessions' tables.
absl::StatusOr<std::vector<CheckpointedSession>> FreezeDevices(
    const std::vector<std::unique_ptr<DeviceLoop>>& loops) {
  std::vector<CheckpointedSession> all;
  for (const auto& loop : loops) {
    absl::StatusOr<std::vector<CheckpointedSession>> tables =
        RunOnLoop<std::vector<CheckpointedSession>>(*loop, kCaptureTimeout,
                                                    [](Device& d, auto handoff) {
                                                      d.Freeze();
                                                      handoff->result = d.CaptureTables();
                                                      handoff->done.Notify();
                                                    });
    if (!tables.ok()) return tables.status();
    for (CheckpointedSession& s : *tables) all.push_back(std::move(s));
  }
  return all;
}

// Has every device hand its sessions' bytes to `writer` (Note [Checkpoint I/O]); returns the
// sessions written. Each device's tables are taken again with its bytes: a session may have
// ended (lease, stream) since FreezeDevices, which only sized the checkpoint.
absl::StatusOr<std::vector<CheckpointedSession>> CaptureSessions(
    const std::vector<std::unique_ptr<DeviceLoop>>& loops,
    const std::shared_ptr<CheckpointWriter>& writer) {
  std::vector<CheckpointedSession> all;
  for (const auto& loop : loops) {
    absl::StatusOr<std::vector<CheckpointedSession>> sessions =
        RunOnLoop<std::vector<CheckpointedSession>>(
            *loop, kCaptureTimeout, [writer](Device& d, auto handoff) {
              handoff->result = d.Capture(
                  [&writer](absl::Span<const HostChunk> chunks) { return writer->Write(chunks); });
              handoff->done.Notify();
            });
    if (!sessions.ok()) return sessions.status();
    for (CheckpointedSession& s : *sessions) all.push_back(std::move(s));
  }
  return all;
}

// Writes the checkpoint of the frozen devices' sessions to `dir`.
absl::StatusOr<CheckpointStats> WriteSessions(const std::vector<std::unique_ptr<DeviceLoop>>& loops,
                                              const std::string& dir, uint64_t max_bytes) {
  ASSIGN_OR_RETURN(const std::vector<CheckpointedSession> tables, FreezeDevices(loops));
  ASSIGN_OR_RETURN(std::shared_ptr<CheckpointWriter> writer,
                   CheckpointWriter::Create(dir, tables, max_bytes));
  ASSIGN_OR_RETURN(std::vector<CheckpointedSession> sessions, CaptureSessions(loops, writer));
  // What ran is what the freeze saw: a command refused after it still takes its stream seq
  // number (stream_runner.cc), and may poison the id it would have created; a resuming client
  // must learn that it did not run. Only the handles (unchanged while frozen) come from Capture.
  absl::flat_hash_map<uint64_t, const CheckpointedSession*> at_freeze;
  for (const CheckpointedSession& s : tables) at_freeze[s.id.value()] = &s;
  for (CheckpointedSession& s : sessions) {
    auto it = at_freeze.find(s.id.value());
    if (it == at_freeze.end()) {
      return absl::InternalError(
          absl::StrCat("checkpoint: session ", s.id.value(), " appeared while frozen"));
    }
    s.stream_seq = it->second->stream_seq;
    s.poisons = it->second->poisons;
  }
  return writer->Commit(sessions);
}

}  // namespace

absl::StatusOr<DrainSummary> Daemon::WriteCheckpointLocked() {
  const absl::Time start = absl::Now();
  absl::StatusOr<CheckpointStats> stats =
      WriteSessions(loops_, config_.checkpoint_dir, config_.checkpoint_max_bytes);
  if (!stats.ok()) {
    for (auto& loop : loops_) loop->Post([](Device& d) { d.Thaw(); });
    spdlog::error("checkpoint to {} failed: {}", config_.checkpoint_dir,
                  std::string(stats.status().message()));
    return stats.status();
  }
  checkpoint_done_ = true;
  spdlog::info("checkpoint: {} sessions ({} handles, {} graphs, {} bytes) written to {} in {}",
               stats->sessions, stats->handles, stats->graphs, stats->bytes, config_.checkpoint_dir,
               absl::FormatDuration(absl::Now() - start));
  return DrainSummary{stats->sessions, stats->handles, stats->bytes, config_.checkpoint_dir};
}

void Daemon::OnDrain(bool checkpoint, absl::AnyInvocable<void(absl::StatusOr<DrainSummary>)> done) {
  if (checkpoint && config_.checkpoint_dir.empty()) {
    return done(absl::FailedPreconditionError(
        "Drain: checkpoint asked for, but the daemon runs without --checkpoint_dir"));
  }
  absl::MutexLock lock(&drain_mu_);
  if (stopping_ || drain_thread_.joinable()) {
    return done(absl::UnavailableError("Drain: the daemon is draining or shutting down already"));
  }
  drain_thread_ = std::thread(
      [this, checkpoint, done = std::move(done)]() mutable { Drain(checkpoint, std::move(done)); });
}

void Daemon::Drain(bool checkpoint, absl::AnyInvocable<void(absl::StatusOr<DrainSummary>)> done) {
  spdlog::info("drain{}: no new calls", checkpoint ? " with a checkpoint" : "");
  compute_->StartDraining();
  absl::StatusOr<DrainSummary> summary = DrainSummary{};
  {
    absl::MutexLock lock(&checkpoint_mu_);
    if (checkpoint) {
      summary = WriteCheckpointLocked();
    } else {
      checkpoint_done_ = true;  // Drained on purpose without one: SIGTERM writes none either.
    }
  }
  if (!summary.ok()) {
    compute_->StopDraining();
    spdlog::info("drain refused ({}): serving on", std::string(summary.status().message()));
    done(std::move(summary));
    absl::MutexLock lock(&drain_mu_);
    // Done: a later drain may start another (unless Shutdown took the thread to join it).
    if (drain_thread_.joinable()) drain_thread_.detach();
    return;
  }
  done(std::move(summary));
  kill(getpid(), SIGTERM);  // main's WaitForTerminationSignal returns and runs Shutdown.
}

void Daemon::CheckpointAtShutdown() {
  std::thread drain;
  {
    absl::MutexLock lock(&drain_mu_);
    stopping_ = true;
    drain = std::move(drain_thread_);
  }
  if (drain.joinable()) drain.join();
  if (config_.checkpoint_dir.empty()) return;
  absl::MutexLock lock(&checkpoint_mu_);
  if (checkpoint_done_) return;
  absl::StatusOr<DrainSummary> summary = WriteCheckpointLocked();
  if (!summary.ok()) spdlog::error("sessions are not kept: the checkpoint failed");
}

}  // namespace cubed
