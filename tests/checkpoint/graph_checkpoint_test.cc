// Recorded graphs across a checkpoint (Note [Checkpointed graphs],
// server/channel/graph_checkpoint.h) with the real daemon on the CPU backend: a session stream
// records graphs (one over a handle it then releases, one still recording), the daemon stops
// with a checkpoint, a new one restores it, and the resumed stream replays the graphs under the
// same ids, finishes the recording, and gets the bytes the same replays gave before; then
// doctored graph sections of that checkpoint, each refused as a whole with a clear error.

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/crypto/sha256.h"
#include "common/kernel_metadata.h"
#include "cubed/v1/checkpoint.pb.h"
#include "cubed/v1/compute.grpc.pb.h"
#include "cubed/v1/session.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/testing/daemon_process.h"
#include "tests/testing/temp_dir.h"

namespace {

using ::cubed::testing::DaemonProcess;
using ::cubed::testing::TempDir;
namespace v1 = ::cubed::v1;
namespace fs = std::filesystem;

constexpr uint64_t kC = uint64_t{1} << 63;  // The first client-chosen id.
constexpr uint64_t kN = 64;                 // f32 elements of every buffer.
constexpr uint64_t kBytes = kN * sizeof(float);
// The stream's handles.
constexpr uint64_t kX = kC + 1, kOne = kC + 2, kOut = kC + 3, kTmp = kC + 4, kAcc = kC + 5,
                   kAcc2 = kC + 6, kAcc3 = kC + 7, kOut2 = kC + 8;
constexpr uint64_t kGraph = 7, kRecording = 9;

std::string FloatBytes(const std::vector<float>& v) {
  std::string s(v.size() * sizeof(float), '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteWholeFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::chrono::system_clock::time_point In(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

// A session stream: opened, or resuming `resume`.
class Stream {
 public:
  Stream(v1::SessionStream::Stub& stub, uint64_t resume = 0) {
    ctx_.set_deadline(In(absl::Seconds(30)));
    rw_ = stub.Session(&ctx_);
    v1::SessionRequest open;
    open.mutable_open()->set_resume_session(resume);
    rw_->Write(open);
    v1::SessionResponse first;
    if (rw_->Read(&first) && first.has_opened()) {
      session_ = first.opened().session();
      resumed_seq_ = first.opened().resumed_seq();
    }
  }
  uint64_t session() const { return session_; }
  uint64_t resumed_seq() const { return resumed_seq_; }
  // Sends `commands`, numbering them on from the last seq sent.
  bool Send(std::vector<v1::Command> commands) {
    v1::SessionRequest req;
    for (v1::Command& c : commands) {
      c.set_seq(++seq_);
      *req.add_commands() = std::move(c);
    }
    return rw_->Write(req);
  }
  void set_seq(uint64_t seq) { seq_ = seq; }
  // The next reply; code -1 when the stream ended.
  v1::Reply Next() {
    v1::SessionResponse resp;
    while (pending_.empty()) {
      if (!rw_->Read(&resp)) {
        v1::Reply none;
        none.set_code(-1);
        return none;
      }
      for (const v1::Reply& r : resp.replies()) pending_.push_back(r);
    }
    v1::Reply r = pending_.front();
    pending_.erase(pending_.begin());
    return r;
  }
  grpc::Status Finish() {
    rw_->WritesDone();
    v1::SessionResponse resp;
    while (rw_->Read(&resp)) {
    }
    return rw_->Finish();
  }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>> rw_;
  std::vector<v1::Reply> pending_;
  uint64_t session_ = 0;
  uint64_t resumed_seq_ = 0;
  uint64_t seq_ = 0;
};

v1::Command Create(uint64_t id, const std::string& data) {
  v1::Command c;
  c.mutable_create()->set_id(id);
  c.mutable_create()->set_data(data);
  return c;
}

v1::Command Empty(uint64_t id) {
  v1::Command c;
  c.mutable_empty()->set_id(id);
  c.mutable_empty()->set_size(kBytes);
  return c;
}

void SetMetadata(v1::Bindings* b, size_t buffers) {
  const cubed::TensorLayout t = cubed::TensorLayout::Contiguous({kN});
  absl::StatusOr<std::vector<uint32_t>> words = cubed::EncodeKernelMetadata(
      std::vector<uint64_t>(buffers, kN), std::vector<cubed::TensorLayout>(buffers, t));
  ASSERT_TRUE(words.ok()) << words.status();
  for (uint32_t w : *words) b->add_metadata(w);
}

v1::Command Builtin(const std::string& name, std::vector<uint64_t> buffers) {
  v1::Command c;
  v1::Command::Execute* e = c.mutable_execute();
  e->mutable_kernel()->mutable_builtin()->set_name(name);
  e->mutable_kernel()->mutable_builtin()->set_dtype(v1::ELEM_TYPE_F32);
  e->mutable_count()->mutable_static_count()->set_x(1);
  e->mutable_count()->mutable_static_count()->set_y(1);
  e->mutable_count()->mutable_static_count()->set_z(1);
  for (uint64_t h : buffers) e->mutable_bindings()->add_buffers()->set_handle(h);
  SetMetadata(e->mutable_bindings(), buffers.size());
  return c;
}

v1::Command Add(uint64_t lhs, uint64_t rhs, uint64_t out) {
  return Builtin("add", {lhs, rhs, out});
}

v1::Command Fill(uint64_t out, float value) {
  v1::Command c = Builtin("fill", {out});
  v1::ScalarGroup* g = c.mutable_execute()->mutable_bindings()->add_scalars();
  g->set_elem(v1::ELEM_TYPE_F32);
  g->add_floats(value);
  return c;
}

v1::Command BeginGraph(uint64_t graph, std::vector<uint64_t> parameters) {
  v1::Command c;
  c.mutable_begin_graph()->set_graph(graph);
  for (uint64_t p : parameters) c.mutable_begin_graph()->add_parameters(p);
  return c;
}

v1::Command EndGraph() {
  v1::Command c;
  c.mutable_end_graph();
  return c;
}

v1::Command Replay(uint64_t graph, std::vector<uint64_t> bindings) {
  v1::Command c;
  c.mutable_replay_graph()->set_graph(graph);
  for (uint64_t b : bindings) c.mutable_replay_graph()->add_bindings(b);
  return c;
}

v1::Command ReleaseGraph(uint64_t graph) {
  v1::Command c;
  c.mutable_release_graph()->set_graph(graph);
  return c;
}

v1::Command Release(uint64_t id) {
  v1::Command c;
  c.mutable_release()->add_ids(id);
  return c;
}

v1::Command Read(uint64_t id) {
  v1::Command c;
  c.mutable_read()->add_bindings()->set_handle(id);
  return c;
}

v1::Command Sync() {
  v1::Command c;
  c.mutable_sync();
  return c;
}

v1::Command Usage() {
  v1::Command c;
  c.mutable_memory_usage();
  return c;
}

// The bytes of the next reply, a read; a failure's message instead.
std::string NextRead(Stream& s) {
  v1::Reply r = s.Next();
  if (r.code() != 0 || r.read().data_size() != 1) return "error: " + r.message();
  return r.read().data(0);
}

std::unique_ptr<DaemonProcess> StartDaemon(std::vector<std::string> flags,
                                           const std::string& socket = "") {
  DaemonProcess::Options options;
  options.flags = std::move(flags);
  options.socket = socket;
  absl::StatusOr<std::unique_ptr<DaemonProcess>> d = DaemonProcess::Start(options);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : nullptr;
}

// What the session held and computed before the checkpoint.
struct Before {
  uint64_t session = 0;
  uint64_t last_seq = 0;
  std::vector<float> x, tmp;
  std::string out, acc;  // After one replay of graph 7 over kOut.
  uint64_t bytes_in_use = 0;
};

// Records graph 7 (parameter kOut: out = x + tmp; acc = out + 1), releases tmp (kept by the
// graph alone), replays it once, and leaves graph 9 recording (acc2 = 3.5).
void RecordGraphs(Stream& s, Before& b) {
  b.x.resize(kN);
  b.tmp.resize(kN);
  for (uint64_t i = 0; i < kN; ++i) {
    b.x[i] = static_cast<float>(i) * 0.25f;
    b.tmp[i] = 1000.0f - static_cast<float>(3 * i);
  }
  ASSERT_TRUE(
      s.Send({Create(kX, FloatBytes(b.x)), Create(kOne, FloatBytes(std::vector<float>(kN, 1.0f))),
              Empty(kOut), Create(kTmp, FloatBytes(b.tmp)), Empty(kAcc), Empty(kAcc2), Empty(kAcc3),
              BeginGraph(kGraph, {kOut}), Add(kX, kTmp, kOut), Add(kOut, kOne, kAcc), EndGraph()}));
  v1::Reply end = s.Next();
  ASSERT_EQ(end.code(), 0) << end.message();
  ASSERT_EQ(end.graph_steps(), 2u);
  ASSERT_TRUE(s.Send({Release(kTmp), Replay(kGraph, {kOut}), Read(kOut), Read(kAcc),
                      BeginGraph(kRecording, {}), Fill(kAcc2, 3.5f), Usage(), Sync()}));
  b.out = NextRead(s);
  b.acc = NextRead(s);
  v1::Reply usage = s.Next();
  ASSERT_EQ(usage.code(), 0) << usage.message();
  b.bytes_in_use = usage.memory_usage().bytes_in_use();
  v1::Reply sync = s.Next();
  ASSERT_EQ(sync.code(), 0) << sync.message();
  b.last_seq = sync.seq();
  std::vector<float> out(kN), acc(kN);
  for (uint64_t i = 0; i < kN; ++i) {
    out[i] = b.x[i] + b.tmp[i];
    acc[i] = out[i] + 1.0f;
  }
  ASSERT_EQ(b.out, FloatBytes(out));
  ASSERT_EQ(b.acc, FloatBytes(acc));
}

// A checkpoint of RecordGraphs's session in `dir`, written by SIGTERM.
void MakeCheckpoint(const std::string& dir, Before& b) {
  std::unique_ptr<DaemonProcess> a = StartDaemon({"--checkpoint_dir=" + dir});
  ASSERT_NE(a, nullptr);
  auto channel = grpc::CreateChannel(a->unix_address(), grpc::InsecureChannelCredentials());
  auto stub = v1::SessionStream::NewStub(channel);
  auto s = std::make_unique<Stream>(*stub);
  b.session = s->session();
  ASSERT_NE(b.session, 0u);
  RecordGraphs(*s, b);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  absl::StatusOr<int> code = a->Stop(SIGTERM);
  ASSERT_TRUE(code.ok()) << code.status();
  ASSERT_EQ(*code, 0) << a->LogTail();
  // 6 handles live (tmp released), one graph, one recording.
  EXPECT_TRUE(absl::StrContains(a->Log(), "checkpoint: 1 sessions (6 handles, 1 graphs"))
      << a->LogTail();
}

TEST(GraphCheckpointTest, GraphsComeBackUnderTheirIdsAndReplayAsBefore) {
  TempDir tmp("cubed-gckpt");
  const std::string dir = tmp.path() + "/checkpoint";
  Before b;
  MakeCheckpoint(dir, b);
  ASSERT_FALSE(HasFatalFailure());
  v1::CheckpointFile file;
  ASSERT_TRUE(file.ParseFromString(ReadWholeFile(dir + "/manifest")));
  EXPECT_EQ(file.version(), 2u);
  v1::CheckpointManifest m;
  ASSERT_TRUE(m.ParseFromString(file.manifest()));
  ASSERT_EQ(m.sessions_size(), 1);
  EXPECT_EQ(m.sessions(0).orphans_size(), 1);  // tmp's bytes, kept for graph 7.
  EXPECT_EQ(m.sessions(0).graphs_size(), 1);
  EXPECT_TRUE(m.sessions(0).has_recording());

  std::unique_ptr<DaemonProcess> d = StartDaemon({"--restore=" + dir});
  ASSERT_NE(d, nullptr);
  EXPECT_TRUE(absl::StrContains(d->Log(), "restored 1 sessions (6 handles, 1 graphs"))
      << d->LogTail();
  auto channel = grpc::CreateChannel(d->unix_address(), grpc::InsecureChannelCredentials());
  auto stub = v1::SessionStream::NewStub(channel);
  Stream s(*stub, b.session);
  ASSERT_EQ(s.session(), b.session);
  ASSERT_EQ(s.resumed_seq(), b.last_seq);
  s.set_seq(b.last_seq);
  // The orphan is accounted as before; the recording goes on where it stopped.
  ASSERT_TRUE(s.Send({Usage(), Add(kAcc2, kX, kAcc3), EndGraph()}));
  v1::Reply usage = s.Next();
  ASSERT_EQ(usage.code(), 0) << usage.message();
  EXPECT_EQ(usage.memory_usage().bytes_in_use(), b.bytes_in_use);
  v1::Reply end = s.Next();
  ASSERT_EQ(end.code(), 0) << end.message();
  EXPECT_EQ(end.graph_steps(), 2u);  // fill, recorded before; add, after the restore.

  // Graph 7 over kOut again, and over a new handle: tmp's bytes come from the orphan.
  ASSERT_TRUE(
      s.Send({Empty(kOut2), Replay(kGraph, {kOut}), Read(kOut), Read(kAcc), Replay(kGraph, {kOut2}),
              Read(kOut2), Replay(kRecording, {}), Read(kAcc2), Read(kAcc3), Sync()}));
  EXPECT_EQ(NextRead(s), b.out);
  EXPECT_EQ(NextRead(s), b.acc);
  EXPECT_EQ(NextRead(s), b.out);
  EXPECT_EQ(NextRead(s), FloatBytes(std::vector<float>(kN, 3.5f)));
  std::vector<float> acc3(kN);
  for (uint64_t i = 0; i < kN; ++i) acc3[i] = 3.5f + b.x[i];
  EXPECT_EQ(NextRead(s), FloatBytes(acc3));
  v1::Reply sync = s.Next();
  EXPECT_EQ(sync.code(), 0) << sync.message();

  // Releasing graph 7 frees the orphan it alone kept: the holds came back too.
  ASSERT_TRUE(s.Send({Usage(), ReleaseGraph(kGraph), Usage(), Replay(kGraph, {kOut}), Sync()}));
  const uint64_t held = s.Next().memory_usage().bytes_in_use();
  const uint64_t after = s.Next().memory_usage().bytes_in_use();
  EXPECT_EQ(held - after, kBytes);
  v1::Reply gone = s.Next();
  EXPECT_EQ(gone.code(), grpc::StatusCode::NOT_FOUND) << gone.message();
  EXPECT_TRUE(absl::StrContains(gone.message(), "graph 7")) << gone.message();
  EXPECT_TRUE(s.Finish().ok());
  absl::StatusOr<int> code = d->Stop(SIGTERM);
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0) << d->LogTail();
}

v1::Command CudaSource(std::vector<uint64_t> buffers, uint64_t count_handle) {
  v1::Command c;
  v1::Command::Execute* e = c.mutable_execute();
  v1::CudaSourceKernel* k = e->mutable_kernel()->mutable_cuda_source();
  k->set_source("extern \"C\" __global__ void k(float* a, float* b) { b[0] = a[0]; }");
  k->set_entry_point("k");
  k->mutable_cube_dim()->set_x(32);
  k->mutable_cube_dim()->set_y(2);
  k->mutable_cube_dim()->set_z(1);
  k->set_shared_memory_bytes(128);
  k->add_options("--use_fast_math");
  v1::Binding* count = e->mutable_count()->mutable_dynamic();
  count->set_handle(count_handle);
  count->set_offset_start(4);
  count->set_offset_end(kBytes - 20);  // 16 bytes from 4: three u32 and room.
  for (uint64_t h : buffers) e->mutable_bindings()->add_buffers()->set_handle(h);
  e->mutable_bindings()->add_buffers()->set_handle(buffers[0]);
  e->mutable_bindings()->mutable_buffers(2)->set_offset_start(8);
  SetMetadata(e->mutable_bindings(), 3);
  v1::ScalarGroup* g = e->mutable_bindings()->add_scalars();
  g->set_elem(v1::ELEM_TYPE_I16);
  g->add_ints(-7);
  g->add_ints(300);
  v1::ScalarGroup* flags = e->mutable_bindings()->add_scalars();
  flags->set_elem(v1::ELEM_TYPE_BOOL);
  flags->add_uints(1);
  return c;
}

v1::Command Ptx(uint64_t out) {
  v1::Command c;
  v1::Command::Execute* e = c.mutable_execute();
  v1::PtxKernel* k = e->mutable_kernel()->mutable_ptx();
  k->set_ptx(".version 7.0\n.target sm_70\n.address_size 64\n");
  k->set_entry_point("p");
  k->mutable_cube_dim()->set_x(64);
  k->mutable_cube_dim()->set_y(1);
  k->mutable_cube_dim()->set_z(1);
  e->mutable_count()->mutable_static_count()->set_x(3);
  e->mutable_count()->mutable_static_count()->set_y(2);
  e->mutable_count()->mutable_static_count()->set_z(1);
  e->mutable_bindings()->add_buffers()->set_handle(out);
  return c;
}

// The graphs of the only session of the checkpoint in `dir`, by id.
std::map<uint64_t, std::string> GraphsOf(const std::string& dir) {
  std::map<uint64_t, std::string> graphs;
  v1::CheckpointFile file;
  v1::CheckpointManifest m;
  EXPECT_TRUE(file.ParseFromString(ReadWholeFile(dir + "/manifest")));
  EXPECT_TRUE(m.ParseFromString(file.manifest()));
  EXPECT_EQ(m.sessions_size(), 1);
  if (m.sessions_size() != 1) return graphs;
  for (const v1::CheckpointGraph& g : m.sessions(0).graphs()) {
    graphs[g.id()] = g.SerializeAsString();
  }
  graphs[0] = m.sessions(0).recording().SerializeAsString();
  return graphs;
}

// Every field of a graph section survives a restore: a restored daemon, checkpointed again,
// writes the same graphs (client CUDA kernels with options and a dynamic count, PTX, scalars
// of several types, views at offsets), though none of them could run on this backend.
TEST(GraphCheckpointTest, GraphSectionsSurviveARoundTrip) {
  TempDir tmp("cubed-gckpt");
  const std::string first = tmp.path() + "/first", second = tmp.path() + "/second";
  Before b;
  MakeCheckpoint(first, b);
  ASSERT_FALSE(HasFatalFailure());
  {
    // More graphs: restore, record them on the resumed stream, checkpoint again.
    std::unique_ptr<DaemonProcess> d =
        StartDaemon({"--restore=" + first, "--checkpoint_dir=" + first + "-more"});
    ASSERT_NE(d, nullptr);
    auto channel = grpc::CreateChannel(d->unix_address(), grpc::InsecureChannelCredentials());
    auto stub = v1::SessionStream::NewStub(channel);
    Stream s(*stub, b.session);
    s.set_seq(b.last_seq);
    ASSERT_TRUE(s.Send({EndGraph(), BeginGraph(11, {kOut, kAcc}), CudaSource({kX, kOut}, kAcc),
                        Ptx(kAcc2), EndGraph(), BeginGraph(12, {}), Ptx(kX)}));
    for (uint64_t steps : {1u, 2u}) {
      v1::Reply end = s.Next();
      ASSERT_EQ(end.code(), 0) << end.message();
      EXPECT_EQ(end.graph_steps(), steps);
    }
    absl::StatusOr<int> code = d->Stop(SIGTERM);
    ASSERT_TRUE(code.ok());
    ASSERT_EQ(*code, 0) << d->LogTail();
  }
  const std::map<uint64_t, std::string> before = GraphsOf(first + "-more");
  ASSERT_EQ(before.size(), 4u);  // 7, 9, 11 and the recording of 12.
  {                              // What the live graph 11 was, field by field.
    v1::CheckpointGraph g;
    ASSERT_TRUE(g.ParseFromString(before.at(11)));
    ASSERT_EQ(g.steps_size(), 2);
    EXPECT_EQ(g.parameter_sizes_size(), 2);
    const v1::CheckpointStep& c = g.steps(0);
    EXPECT_EQ(c.kernel().cuda_source().entry_point(), "k");
    EXPECT_EQ(c.kernel().cuda_source().cube_dim().y(), 2u);
    EXPECT_EQ(c.kernel().cuda_source().shared_memory_bytes(), 128u);
    ASSERT_EQ(c.kernel().cuda_source().options_size(), 1);
    EXPECT_EQ(c.kernel().cuda_source().options(0), "--use_fast_math");
    EXPECT_EQ(c.dynamic_count().parameter(), 1u);  // kAcc.
    EXPECT_EQ(c.dynamic_count().offset(), 4u);
    EXPECT_EQ(c.dynamic_count().size(), 16u);
    ASSERT_EQ(c.buffers_size(), 3);
    EXPECT_EQ(c.buffers(0).handle(), kX);
    EXPECT_EQ(c.buffers(1).parameter(), 0u);  // kOut.
    EXPECT_EQ(c.buffers(2).handle(), kX);
    EXPECT_EQ(c.buffers(2).offset(), 8u);
    EXPECT_EQ(c.buffers(2).size(), kBytes - 8);
    ASSERT_EQ(c.scalars_size(), 2);
    EXPECT_EQ(c.scalars(0).elem(), v1::ELEM_TYPE_I16);
    EXPECT_EQ(c.scalars(0).bytes(), std::string("\xf9\xff\x2c\x01", 4));  // -7, 300.
    EXPECT_EQ(c.scalars(1).bytes(), std::string("\x01", 1));
    EXPECT_EQ(g.steps(1).kernel().ptx().entry_point(), "p");
    EXPECT_EQ(g.steps(1).static_count().x(), 3u);
  }
  std::unique_ptr<DaemonProcess> d =
      StartDaemon({"--restore=" + first + "-more", "--checkpoint_dir=" + second});
  ASSERT_NE(d, nullptr);
  absl::StatusOr<int> code = d->Stop(SIGTERM);
  ASSERT_TRUE(code.ok());
  ASSERT_EQ(*code, 0) << d->LogTail();
  const std::map<uint64_t, std::string> after = GraphsOf(second);
  ASSERT_EQ(after.size(), before.size());
  for (const auto& [id, bytes] : before) {
    v1::CheckpointGraph a, z;
    ASSERT_TRUE(a.ParseFromString(bytes));
    ASSERT_TRUE(z.ParseFromString(after.at(id)));
    EXPECT_EQ(a.DebugString(), z.DebugString()) << "graph " << id;
  }
}

// A recording that failed before the checkpoint keeps its failure: end_graph on the resumed
// stream answers it, as it would have without the restart.
TEST(GraphCheckpointTest, AFailedRecordingStillAnswersItsFailure) {
  TempDir tmp("cubed-gckpt");
  const std::string dir = tmp.path() + "/checkpoint";
  std::unique_ptr<DaemonProcess> a = StartDaemon({"--checkpoint_dir=" + dir});
  ASSERT_NE(a, nullptr);
  uint64_t session = 0;
  {
    auto channel = grpc::CreateChannel(a->unix_address(), grpc::InsecureChannelCredentials());
    auto stub = v1::SessionStream::NewStub(channel);
    Stream s(*stub);
    session = s.session();
    ASSERT_TRUE(s.Send({Empty(kX), BeginGraph(5, {12345}), Fill(kX, 1.0f), Sync()}));
    ASSERT_EQ(s.Next().code(), 0);
    absl::StatusOr<int> code = a->Stop(SIGTERM);
    ASSERT_TRUE(code.ok());
    ASSERT_EQ(*code, 0) << a->LogTail();
  }
  std::unique_ptr<DaemonProcess> d = StartDaemon({"--restore=" + dir});
  ASSERT_NE(d, nullptr);
  auto channel = grpc::CreateChannel(d->unix_address(), grpc::InsecureChannelCredentials());
  auto stub = v1::SessionStream::NewStub(channel);
  Stream s(*stub, session);
  ASSERT_EQ(s.session(), session);
  ASSERT_TRUE(s.Send({EndGraph(), Replay(5, {})}));
  v1::Reply end = s.Next();
  EXPECT_EQ(end.code(), grpc::StatusCode::NOT_FOUND) << end.message();
  EXPECT_TRUE(absl::StrContains(end.message(), "begin_graph.parameters[0]: handle 12345"))
      << end.message();
  ASSERT_TRUE(s.Send({Sync()}));
  v1::Reply sync = s.Next();  // The graph id stayed free: the replay found no graph 5.
  EXPECT_EQ(sync.code(), grpc::StatusCode::NOT_FOUND) << sync.message();
  EXPECT_TRUE(absl::StrContains(sync.message(), "graph 5")) << sync.message();
}

// Restoring `dir` must fail before serving, with exit status 1 (not a signal), the error naming
// `what`.
void ExpectRefused(const std::string& dir, const std::string& what) {
  TempDir run("cubed-gckpt");
  absl::StatusOr<cubed::testing::ExitedProcess> p = cubed::testing::RunCubedToExit(
      {"--listen=" + run.path() + "/cubed.sock", "--backend=cpu", "--restore=" + dir}, run.path());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->exit_code, 1) << p->err;
  EXPECT_TRUE(absl::StrContains(p->err, "--restore")) << p->err;
  EXPECT_TRUE(absl::StrContains(p->err, what)) << p->err;
  EXPECT_FALSE(absl::StrContains(p->err, "serving on")) << p->err;
  // Under the sanitizer build: no report on the way out (a leak, an overflow) either.
  EXPECT_FALSE(absl::StrContains(p->err, "Sanitizer")) << p->err;
  EXPECT_FALSE(absl::StrContains(p->err, "runtime error")) << p->err;
}

TEST(GraphCheckpointTest, CorruptGraphSectionsAreRefusedAsAWhole) {
  TempDir tmp("cubed-gckpt");
  const std::string good = tmp.path() + "/good";
  Before b;
  MakeCheckpoint(good, b);
  ASSERT_FALSE(HasFatalFailure());
  const std::string data = ReadWholeFile(good + "/data");
  v1::CheckpointFile file;
  ASSERT_TRUE(file.ParseFromString(ReadWholeFile(good + "/manifest")));
  v1::CheckpointManifest original;
  ASSERT_TRUE(original.ParseFromString(file.manifest()));
  ASSERT_EQ(original.sessions(0).graphs_size(), 1);
  ASSERT_EQ(original.sessions(0).graphs(0).steps_size(), 2);
  int n = 0;
  // A checkpoint whose manifest is `original` changed by `edit`, re-signed so that only the
  // graph checks can catch it.
  auto variant = [&](auto edit, uint32_t version = 2) {
    v1::CheckpointManifest m = original;
    edit(*m.mutable_sessions(0));
    v1::CheckpointFile f;
    f.set_version(version);
    f.set_manifest(m.SerializeAsString());
    absl::StatusOr<std::string> digest = cubed::Sha256::Of(f.manifest());
    EXPECT_TRUE(digest.ok()) << digest.status();
    f.set_manifest_sha256(digest.value_or(""));
    const std::string dir = absl::StrCat(tmp.path(), "/v", n++);
    fs::create_directory(dir);
    WriteWholeFile(dir + "/manifest", f.SerializeAsString());
    WriteWholeFile(dir + "/data", data);
    return dir;
  };
  using Session = v1::CheckpointSession;
  auto step = [](Session& s, int i) { return s.mutable_graphs(0)->mutable_steps(i); };
  // A binding of a handle the session does not have.
  ExpectRefused(variant([&](Session& s) { step(s, 0)->mutable_buffers(0)->set_handle(12345); }),
                "graph 7 step 0: buffer 0: handle 12345 is not a handle of the session");
  // A view past its target, with an offset that overflows.
  ExpectRefused(variant([&](Session& s) { step(s, 1)->mutable_buffers(1)->set_offset(~0ull); }),
                "graph 7 step 1: buffer 1: bytes [18446744073709551615, +256) exceed");
  // An orphan or parameter index out of range.
  ExpectRefused(variant([&](Session& s) { step(s, 0)->mutable_buffers(1)->set_orphan(5); }),
                "orphan 5 of 1");
  ExpectRefused(variant([&](Session& s) { step(s, 1)->mutable_buffers(2)->set_parameter(3); }),
                "parameter 3 of 1");
  // A binding with no target, a kernel that is not one, a kernel no execute could carry.
  ExpectRefused(variant([&](Session& s) { step(s, 0)->mutable_buffers(0)->Clear(); }),
                "buffers[0]: no target");
  ExpectRefused(
      variant([&](Session& s) { step(s, 0)->mutable_kernel()->mutable_builtin()->set_name("x"); }),
      "graph 7 step 0: unknown builtin kernel 'x'");
  ExpectRefused(variant([&](Session& s) { step(s, 0)->mutable_kernel()->Clear(); }),
                "kernel: no kernel set");
  ExpectRefused(variant([&](Session& s) { step(s, 0)->mutable_static_count()->set_x(0); }),
                "static count x = 0");
  // Scalars that are not whole elements (the recording's fill).
  ExpectRefused(variant([&](Session& s) {
                  s.mutable_recording()
                      ->mutable_graph()
                      ->mutable_steps(0)
                      ->mutable_scalars(0)
                      ->mutable_bytes()
                      ->push_back('\0');
                }),
                "5 bytes are not whole f32 elements");
  // Parameters: repeated, or of another count than their sizes.
  ExpectRefused(variant([&](Session& s) {
                  s.mutable_graphs(0)->add_parameters(s.graphs(0).parameters(0));
                  s.mutable_graphs(0)->add_parameter_sizes(kBytes);
                }),
                "is 0, repeated or empty");
  ExpectRefused(variant([&](Session& s) { s.mutable_graphs(0)->add_parameter_sizes(4); }),
                "1 parameters with 2 sizes");
  // The same graph id twice; the recording and a graph of one id.
  ExpectRefused(variant([&](Session& s) { *s.add_graphs() = s.graphs(0); }),
                "graph 7 appears twice");
  // Graph-only memory that no graph keeps.
  ExpectRefused(variant([&](Session& s) { s.clear_graphs(); }),
                "orphan 0 (256 bytes) is held by no graph");
  // A recording that is neither a graph nor a failure, or both.
  ExpectRefused(variant([&](Session& s) { s.mutable_recording()->clear_graph(); }),
                "neither a graph nor a failure");
  ExpectRefused(variant([&](Session& s) { s.mutable_recording()->set_failure_code(99); }),
                "failure code 99");
  // Graphs in a version 1 checkpoint, which had none.
  ExpectRefused(variant([](Session&) {}, 1), "graphs in a version 1 checkpoint");
  // Unchecked steps on a daemon that does not allow them.
  ExpectRefused(variant([&](Session& s) { step(s, 0)->set_unchecked(true); }), "--allow_unchecked");
  // Random bytes in place of the graph section: refused, never a crash.
  ExpectRefused(variant([&](Session& s) {
                  std::string junk = s.graphs(0).SerializeAsString();
                  for (size_t i = 0; i < junk.size(); i += 7) junk[i] ^= 0x5a;
                  v1::CheckpointGraph g;
                  if (!g.ParseFromString(junk)) g.set_id(7);  // Still one graph to check.
                  *s.mutable_graphs(0) = g;
                }),
                "graph");
}

}  // namespace
