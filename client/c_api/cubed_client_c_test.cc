// The C ABI (cubed_client_c.h) against the real daemon, through the shared library: each
// function, its bad inputs, and the reply / next_done contract of Note [One client core].
// Commands are encoded by hand here: this test does not link the generated protobuf code (the
// library holds its own copy, and two copies may not register in one process).

#include "client/c_api/cubed_client_c.h"

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/kernel_metadata.h"
#include "gtest/gtest.h"
#include "tests/testing/daemon_process.h"

namespace {

using ::cubed::testing::DaemonProcess;

constexpr int32_t kInvalidArgument = 3;
constexpr int32_t kDeadlineExceeded = 4;
constexpr int32_t kNotFound = 5;
constexpr int32_t kFailedPrecondition = 9;
constexpr int32_t kOutOfRange = 11;
constexpr int32_t kUnavailable = 14;

// Protobuf wire encoding, enough for the commands below.
void Varint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void U64(std::string* out, int field, uint64_t v) {
  Varint(out, static_cast<uint64_t>(field) << 3);
  Varint(out, v);
}
void Message(std::string* out, int field, const std::string& bytes) {
  Varint(out, (static_cast<uint64_t>(field) << 3) | 2);
  Varint(out, bytes.size());
  out->append(bytes);
}

std::string SyncCommand() {
  std::string c;
  Message(&c, 11, "");
  return c;
}
std::string MemoryUsageCommand() {
  std::string c;
  Message(&c, 12, "");
  return c;
}
std::string FlushCommand() {
  std::string c;
  Message(&c, 10, "");
  return c;
}

// A serialized Command.Execute of builtin `name` on f32 over `buffers` dense tensors of `n`
// elements each: its kernel, count and bindings (the `handles` given, then the metadata).
std::string ExecuteOf(const std::string& name, uint64_t buffers, uint64_t n,
                      const std::vector<uint64_t>& handles) {
  std::string builtin, kernel, count, dims, bindings, execute;
  Message(&builtin, 1, name);
  U64(&builtin, 2, 1);  // ELEM_TYPE_F32
  Message(&kernel, 1, builtin);
  U64(&dims, 1, (n + 255) / 256);
  U64(&dims, 2, 1);
  U64(&dims, 3, 1);
  Message(&count, 1, dims);
  for (uint64_t h : handles) {
    std::string b;
    U64(&b, 1, h);
    Message(&bindings, 1, b);
  }
  const cubed::TensorLayout t = cubed::TensorLayout::Contiguous({n});
  absl::StatusOr<std::vector<uint32_t>> words = cubed::EncodeKernelMetadata(
      std::vector<uint64_t>(buffers, n), std::vector<cubed::TensorLayout>(buffers, t));
  EXPECT_TRUE(words.ok()) << words.status();
  if (words.ok()) {
    for (uint32_t w : *words) U64(&bindings, 2, w);
  }
  Message(&execute, 1, kernel);
  Message(&execute, 2, count);
  Message(&execute, 3, bindings);
  return execute;
}

// out = lhs + rhs over `n` dense f32 elements (builtin "add"), as a serialized Command.
std::string AddCommand(uint64_t lhs, uint64_t rhs, uint64_t out, uint64_t n) {
  std::string command;
  Message(&command, 6, ExecuteOf("add", 3, n, {lhs, rhs, out}));
  return command;
}

// The same without buffers: cubed_launch_prepare's input.
std::string PreparedExecute(const std::string& name, uint64_t buffers, uint64_t n) {
  return ExecuteOf(name, buffers, n, {});
}

// A serialized Bindings holding one ScalarGroup of f32 `value` (Bindings.scalars).
std::string F32Scalar(double value) {
  std::string group, packed(8, '\0'), bindings;
  std::memcpy(packed.data(), &value, 8);
  U64(&group, 1, 1);  // ELEM_TYPE_F32
  Message(&group, 2, packed);
  Message(&bindings, 3, group);
  return bindings;
}

std::string Floats(const std::vector<float>& v) {
  std::string s(v.size() * sizeof(float), '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

// Frees an error's message at scope end.
struct Error : cubed_error {
  Error() : cubed_error{0, nullptr} {}
  ~Error() { cubed_error_clear(this); }
  std::string text() const { return message == nullptr ? "" : message; }
};

struct ClientDeleter {
  void operator()(cubed_client* c) const { cubed_client_free(c); }
};
struct ReplyDeleter {
  void operator()(cubed_reply* r) const { cubed_reply_free(r); }
};
using ClientPtr = std::unique_ptr<cubed_client, ClientDeleter>;
using ReplyPtr = std::unique_ptr<cubed_reply, ReplyDeleter>;

class CApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    DaemonProcess::Options options;
    options.tcp = true;
    auto d = DaemonProcess::Start(options);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = d->release();
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }

  // A client of the daemon's Unix socket (carrier 0 auto: the ring), or of `address`.
  ClientPtr Connect(int32_t carrier = 0, const std::string& address = "",
                    uint64_t bulk_threshold = 0, int32_t transport = 0) {
    cubed_connect_options o;
    cubed_connect_options_init(&o);
    const std::string a = address.empty() ? daemon_->unix_address() : address;
    o.address = a.c_str();
    o.timeout_ms = 20000;
    o.carrier = carrier;
    o.transport = transport;
    if (bulk_threshold != 0) o.bulk_threshold = bulk_threshold;
    cubed_client* c = nullptr;
    Error e;
    EXPECT_EQ(cubed_client_connect(&o, &c, &e), 0) << e.text();
    return ClientPtr(c);
  }

  // Waits for `reply` and returns its first data entry ("" on failure, with a test failure).
  static std::string ReadData(cubed_reply* reply) {
    Error e;
    EXPECT_EQ(cubed_reply_wait(reply, 20000, &e), 0) << e.text();
    EXPECT_EQ(cubed_reply_status(reply, &e), 0) << e.text();
    const uint8_t* data = nullptr;
    uint64_t size = 0;
    if (cubed_reply_data(reply, 0, &data, &size, &e) != 0) {
      ADD_FAILURE() << e.text();
      return "";
    }
    return std::string(reinterpret_cast<const char*>(data), size);
  }

  static std::string Read(cubed_client* c, uint64_t id) {
    ReplyPtr reply(cubed_reply_create(0));
    Error e;
    EXPECT_EQ(cubed_client_read(c, id, 0, 0, reply.get(), &e), 0) << e.text();
    return ReadData(reply.get());
  }

  static DaemonProcess* daemon_;
};

DaemonProcess* CApiTest::daemon_ = nullptr;

TEST_F(CApiTest, VersionAndDefaults) {
  EXPECT_EQ(cubed_c_api_version(), CUBED_C_API_VERSION);
  cubed_connect_options o;
  std::memset(&o, 0xff, sizeof(o));
  cubed_connect_options_init(&o);
  EXPECT_EQ(o.struct_size, sizeof(o));
  EXPECT_EQ(o.address, nullptr);
  EXPECT_EQ(o.timeout_ms, 60000);
  EXPECT_EQ(o.bulk_threshold, uint64_t{4} << 20);
  EXPECT_EQ(o.region_threshold, uint64_t{1} << 20);
  EXPECT_EQ(o.transport, 0);
  EXPECT_EQ(o.carrier, 0);
}

TEST_F(CApiTest, ConnectRefusesBadOptionsNamingThem) {
  cubed_client* c = nullptr;
  Error e;
  EXPECT_EQ(cubed_client_connect(nullptr, &c, &e), kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(e.text(), "options is NULL")) << e.text();
  cubed_connect_options o;
  cubed_connect_options_init(&o);
  EXPECT_EQ(cubed_client_connect(&o, nullptr, &e), kInvalidArgument);
  EXPECT_EQ(cubed_client_connect(&o, &c, &e), kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(e.text(), "address is empty")) << e.text();
  const std::string address = daemon_->unix_address();
  struct Case {
    const char* field;
    void (*set)(cubed_connect_options*);
  };
  const Case cases[] = {
      {"struct_size", [](cubed_connect_options* p) { p->struct_size = 8; }},
      {"timeout_ms", [](cubed_connect_options* p) { p->timeout_ms = 0; }},
      {"lease_ms", [](cubed_connect_options* p) { p->lease_ms = -1; }},
      {"max_message_bytes", [](cubed_connect_options* p) { p->max_message_bytes = 0; }},
      {"transport", [](cubed_connect_options* p) { p->transport = 7; }},
      {"carrier", [](cubed_connect_options* p) { p->carrier = 3; }},
      {"bulk_chunk", [](cubed_connect_options* p) { p->bulk_chunk = 0; }},
      {"resume_timeout_ms", [](cubed_connect_options* p) { p->resume_timeout_ms = -5; }},
      {"reply_spin_us", [](cubed_connect_options* p) { p->reply_spin_us = 1000001; }},
      {"bulk_lanes", [](cubed_connect_options* p) { p->bulk_lanes = 17; }},
  };
  for (const Case& k : cases) {
    cubed_connect_options_init(&o);
    o.address = address.c_str();
    k.set(&o);
    EXPECT_EQ(cubed_client_connect(&o, &c, &e), kInvalidArgument) << k.field;
    EXPECT_TRUE(absl::StrContains(e.text(), k.field)) << k.field << ": " << e.text();
    EXPECT_EQ(c, nullptr);
  }
  cubed_error_clear(nullptr);  // A no-op.
}

TEST_F(CApiTest, ConnectToNoDaemonIsUnavailable) {
  cubed_connect_options o;
  cubed_connect_options_init(&o);
  o.address = "unix:/nonexistent/cubed.sock";
  o.timeout_ms = 3000;
  cubed_client* c = nullptr;
  Error e;
  EXPECT_EQ(cubed_client_connect(&o, &c, &e), kUnavailable) << e.text();
  EXPECT_EQ(c, nullptr);
  EXPECT_FALSE(e.text().empty());
}

TEST_F(CApiTest, CreateExecuteReadOnEveryCarrier) {
  for (int32_t carrier : {1, 2}) {
    SCOPED_TRACE(carrier);
    ClientPtr c = Connect(carrier);
    ASSERT_NE(c, nullptr);
    EXPECT_NE(cubed_client_session(c.get()), 0u);
    EXPECT_GT(cubed_client_lease_ms(c.get()), 0);
    EXPECT_EQ(cubed_client_transport(c.get()), 0);
    EXPECT_EQ(cubed_client_carrier(c.get()), carrier);
    const std::string a = Floats({1, 2, 3, 4}), b = Floats({10, 20, 30, 40});
    uint64_t ia = 0, ib = 0, out = 0;
    Error e;
    ASSERT_EQ(cubed_client_create(c.get(), a.data(), a.size(), &ia, &e), 0) << e.text();
    ASSERT_EQ(cubed_client_create(c.get(), b.data(), b.size(), &ib, &e), 0) << e.text();
    ASSERT_EQ(cubed_client_empty(c.get(), a.size(), &out, &e), 0) << e.text();
    EXPECT_NE(ia, ib);
    const std::string add = AddCommand(ia, ib, out, 4);
    ASSERT_EQ(cubed_client_execute(c.get(), add.data(), add.size(), &e), 0) << e.text();
    EXPECT_EQ(Read(c.get(), out), Floats({11, 22, 33, 44}));
    // A read of a slice: 4 bytes off the front, 8 off the back.
    ReplyPtr slice(cubed_reply_create(0));
    ASSERT_EQ(cubed_client_read(c.get(), ia, 4, 8, slice.get(), &e), 0) << e.text();
    EXPECT_EQ(ReadData(slice.get()), Floats({2}));
    // A reply serves one command.
    EXPECT_EQ(cubed_client_read(c.get(), ia, 0, 0, slice.get(), &e), kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(e.text(), "sent before")) << e.text();
    const uint64_t ids[] = {ia, ib, out};
    EXPECT_EQ(cubed_client_release(c.get(), ids, 3, &e), 0) << e.text();
    EXPECT_EQ(cubed_client_flush(c.get(), &e), 0) << e.text();
    ReplyPtr sync(cubed_reply_create(0));
    cubed_reply* r = sync.get();
    ASSERT_EQ(cubed_client_sync(c.get(), r, &e), 0) << e.text();
    ASSERT_EQ(cubed_reply_wait(r, 20000, &e), 0) << e.text();
    EXPECT_EQ(cubed_reply_status(r, &e), 0) << e.text();
    EXPECT_EQ(cubed_reply_failed_commands(r), 0u);
  }
}

struct LaunchDeleter {
  void operator()(cubed_launch* l) const { cubed_launch_free(l); }
};
using LaunchPtr = std::unique_ptr<cubed_launch, LaunchDeleter>;

// Note [Prepared C ABI launches]: a launch prepared once runs with each send's buffers (offsets
// too) and scalars, on every carrier, from several clients; bad parts are refused by the call that
// gets them, and nothing refused reaches the stream.
TEST_F(CApiTest, PreparedLaunchesRunWithEachSendsBuffersAndScalars) {
  Error e;
  cubed_launch* raw = nullptr;
  const std::string add_bytes = PreparedExecute("add", 3, 4);
  ASSERT_EQ(cubed_launch_prepare(add_bytes.data(), add_bytes.size(), &raw, &e), 0) << e.text();
  LaunchPtr add(raw);
  const std::string fill_bytes = PreparedExecute("fill", 1, 2);
  ASSERT_EQ(cubed_launch_prepare(fill_bytes.data(), fill_bytes.size(), &raw, &e), 0) << e.text();
  LaunchPtr fill(raw);
  for (int32_t carrier : {1, 2}) {
    SCOPED_TRACE(carrier);
    ClientPtr c = Connect(carrier);
    ASSERT_NE(c, nullptr);
    const std::string a = Floats({1, 2, 3, 4, 5}), b = Floats({10, 20, 30, 40});
    uint64_t ia = 0, ib = 0, out = 0, two = 0;
    ASSERT_EQ(cubed_client_create(c.get(), a.data(), a.size(), &ia, &e), 0) << e.text();
    ASSERT_EQ(cubed_client_create(c.get(), b.data(), b.size(), &ib, &e), 0) << e.text();
    ASSERT_EQ(cubed_client_empty(c.get(), 16, &out, &e), 0) << e.text();
    ASSERT_EQ(cubed_client_empty(c.get(), 8, &two, &e), 0) << e.text();
    const uint64_t sum[] = {ia, 0, 4, ib, 0, 0, out, 0, 0};
    ASSERT_EQ(cubed_client_send_launch(c.get(), add.get(), sum, 3, nullptr, 0, &e), 0) << e.text();
    EXPECT_EQ(Read(c.get(), out), Floats({11, 22, 33, 44}));
    const uint64_t shifted[] = {ia, 4, 0, ib, 0, 0, out, 0, 0};  // a[1:] + b.
    ASSERT_EQ(cubed_client_send_launch(c.get(), add.get(), shifted, 3, nullptr, 0, &e), 0)
        << e.text();
    EXPECT_EQ(Read(c.get(), out), Floats({12, 23, 34, 45}));
    const uint64_t filled[] = {two, 0, 0};
    for (double v : {2.5, 2.5, -1.0, 2.5}) {  // The same bytes twice: the checked memo's hit.
      const std::string scalar = F32Scalar(v);
      ASSERT_EQ(cubed_client_send_launch(c.get(), fill.get(), filled, 1, scalar.data(),
                                         scalar.size(), &e),
                0)
          << e.text();
      EXPECT_EQ(Read(c.get(), two), Floats({static_cast<float>(v), static_cast<float>(v)}));
    }
    // Refused here, sending nothing: scalars that are not a Bindings of scalars only, NULLs.
    std::string buffer_binding;
    Message(&buffer_binding, 1, "\x08\x01");
    // 98 nested unknown groups: a top-level parse takes them (protobuf's recursion limit is 100),
    // the daemon's, three messages deeper, would not, and would end the stream.
    const std::string deep = std::string(98, '\x7b') + std::string(98, '\x7c');
    for (const std::string& bad : {std::string("\xff\xff\xff"), buffer_binding, deep}) {
      EXPECT_EQ(
          cubed_client_send_launch(c.get(), fill.get(), filled, 1, bad.data(), bad.size(), &e),
          kInvalidArgument);
      EXPECT_TRUE(absl::StrContains(e.text(), "scalars only")) << e.text();
    }
    EXPECT_EQ(cubed_client_send_launch(c.get(), nullptr, filled, 1, nullptr, 0, &e),
              kInvalidArgument);
    EXPECT_EQ(cubed_client_send_launch(c.get(), fill.get(), nullptr, 1, nullptr, 0, &e),
              kInvalidArgument);
    // The daemon's refusal of a well-formed launch (an unknown handle) fails it alone.
    const uint64_t unknown[] = {987654321, 0, 0};
    ASSERT_EQ(cubed_client_send_launch(c.get(), fill.get(), unknown, 1, nullptr, 0, &e), 0)
        << e.text();
    ReplyPtr sync(cubed_reply_create(0));
    ASSERT_EQ(cubed_client_sync(c.get(), sync.get(), &e), 0) << e.text();
    ASSERT_EQ(cubed_reply_wait(sync.get(), 20000, &e), 0) << e.text();
    EXPECT_NE(cubed_reply_status(sync.get(), &e), 0);
    EXPECT_EQ(cubed_reply_failed_commands(sync.get()), 1u);
    EXPECT_EQ(Read(c.get(), out), Floats({12, 23, 34, 45}));  // The session goes on.
  }
  // The unary transport has no stream.
  ClientPtr unary = Connect(0, "", 0, /*transport=*/1);
  ASSERT_NE(unary, nullptr);
  const uint64_t one[] = {1, 0, 0};
  EXPECT_EQ(cubed_client_send_launch(unary.get(), add.get(), one, 1, nullptr, 0, &e),
            kFailedPrecondition);
}

TEST_F(CApiTest, APreparedLaunchIsCheckedOnce) {
  Error e;
  cubed_launch* launch = reinterpret_cast<cubed_launch*>(1);
  EXPECT_EQ(cubed_launch_prepare("\xff\xff", 2, &launch, &e), kInvalidArgument);
  EXPECT_EQ(launch, nullptr);
  EXPECT_TRUE(absl::StrContains(e.text(), "not a cubed.v1.Command.Execute")) << e.text();
  EXPECT_EQ(cubed_launch_prepare("", 0, &launch, &e), kInvalidArgument);  // No kernel.
  EXPECT_TRUE(absl::StrContains(e.text(), "no kernel")) << e.text();
  std::string with_buffer = PreparedExecute("add", 3, 4), binding, bindings;
  U64(&binding, 1, 5);
  Message(&bindings, 1, binding);
  Message(&with_buffer, 3, bindings);  // A second bindings field: merged, holding a buffer.
  EXPECT_EQ(cubed_launch_prepare(with_buffer.data(), with_buffer.size(), &launch, &e),
            kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(e.text(), "buffers or scalars")) << e.text();
  EXPECT_EQ(cubed_launch_prepare(nullptr, 3, &launch, &e), kInvalidArgument);
  EXPECT_EQ(cubed_launch_prepare("", 0, nullptr, &e), kInvalidArgument);
  cubed_launch_free(nullptr);  // A no-op.
}

TEST_F(CApiTest, UnaryCallsGoToTheSessionsDaemon) {
  ClientPtr c = Connect();
  ASSERT_NE(c, nullptr);
  Error e;
  // GetInfo of device 0 (an empty request): the response names the daemon's version.
  ReplyPtr info(cubed_reply_create(0));
  ASSERT_EQ(cubed_client_call(c.get(), "/cubed.v1.Compute/GetInfo", "", 0, info.get(), &e), 0)
      << e.text();
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  ASSERT_EQ(cubed_reply_data(info.get(), 0, &data, &size, &e), 0) << e.text();
  EXPECT_GT(size, 0u);
  EXPECT_EQ(cubed_reply_status(info.get(), &e), 0);
  // Errors name the method; the reply stays unused.
  ReplyPtr r(cubed_reply_create(0));
  EXPECT_EQ(cubed_client_call(c.get(), "/cubed.v1.Compute/NoSuchMethod", "", 0, r.get(), &e), 12);
  EXPECT_TRUE(absl::StrContains(e.text(), "NoSuchMethod")) << e.text();
  EXPECT_EQ(cubed_client_call(c.get(), "GetInfo", "", 0, r.get(), &e), kInvalidArgument);
  EXPECT_EQ(cubed_client_call(c.get(), nullptr, "", 0, r.get(), &e), kInvalidArgument);
  EXPECT_EQ(cubed_client_call(c.get(), "/cubed.v1.Compute/GetInfo", "", 0, info.get(), &e),
            kInvalidArgument);  // Used already.
  // The daemon's own refusal: an unknown session.
  std::string close_unknown;
  U64(&close_unknown, 1, 12345);
  EXPECT_EQ(cubed_client_call(c.get(), "/cubed.v1.Compute/CloseSession", close_unknown.data(),
                              close_unknown.size(), r.get(), &e),
            kNotFound)
      << e.text();
  uint64_t resumes = 9;
  int32_t resuming = 9;
  cubed_client_resume_state(c.get(), &resumes, &resuming);
  EXPECT_EQ(resumes, 0u);
  EXPECT_EQ(resuming, 0);
  cubed_client_resume_state(nullptr, &resumes, &resuming);  // NULL: zeros.
  EXPECT_EQ(resumes, 0u);
}

TEST_F(CApiTest, BulkCreateOverTcpRoundTrips) {
  ClientPtr c = Connect(2, daemon_->tcp_address(), /*bulk_threshold=*/1024);
  ASSERT_NE(c, nullptr);
  std::string data(3 * 1024 * 1024 + 7, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);
  uint64_t id = 0;
  Error e;
  ASSERT_EQ(cubed_client_create(c.get(), data.data(), data.size(), &id, &e), 0) << e.text();
  EXPECT_EQ(Read(c.get(), id), data);
}

TEST_F(CApiTest, CreateAndEmptyRefuseBadInputs) {
  ClientPtr c = Connect();
  ASSERT_NE(c, nullptr);
  uint64_t id = 0;
  Error e;
  const char byte = 1;
  EXPECT_EQ(cubed_client_create(c.get(), &byte, 0, &id, &e), kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(e.text(), "size is 0")) << e.text();
  EXPECT_EQ(cubed_client_create(c.get(), nullptr, 4, &id, &e), kInvalidArgument);
  EXPECT_EQ(cubed_client_create(c.get(), &byte, 1, nullptr, &e), kInvalidArgument);
  EXPECT_EQ(cubed_client_create(nullptr, &byte, 1, &id, &e), kInvalidArgument);
  EXPECT_EQ(cubed_client_empty(c.get(), 0, &id, &e), kInvalidArgument);
  EXPECT_EQ(cubed_client_release(c.get(), nullptr, 2, &e), kInvalidArgument);
  EXPECT_EQ(cubed_client_release(c.get(), nullptr, 0, &e), 0);
  EXPECT_EQ(cubed_client_read(c.get(), 0, 0, 0, nullptr, &e), kInvalidArgument);
  ReplyPtr r(cubed_reply_create(0));
  EXPECT_EQ(cubed_client_read(c.get(), 0, 0, 0, r.get(), &e), kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(e.text(), "handle id 0")) << e.text();
}

TEST_F(CApiTest, SendRefusesWhatIsNotACommandOrMismatchesItsReply) {
  ClientPtr c = Connect();
  ASSERT_NE(c, nullptr);
  Error e;
  ReplyPtr unused(cubed_reply_create(0));
  cubed_reply* r = unused.get();
  const std::string garbage = "\xff\xff\xff\xff";
  EXPECT_EQ(cubed_client_send(c.get(), garbage.data(), garbage.size(), nullptr, &e),
            kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(e.text(), "not a cubed.v1.Command")) << e.text();
  EXPECT_EQ(cubed_client_send(c.get(), "", 0, nullptr, &e), kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(e.text(), "no command set")) << e.text();
  const std::string sync = SyncCommand(), flush = FlushCommand();
  EXPECT_EQ(cubed_client_send(c.get(), sync.data(), sync.size(), nullptr, &e), kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(e.text(), "pass a reply")) << e.text();
  EXPECT_EQ(cubed_client_send(c.get(), flush.data(), flush.size(), r, &e), kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(e.text(), "pass no reply")) << e.text();
  EXPECT_EQ(cubed_client_execute(c.get(), sync.data(), sync.size(), &e), kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(e.text(), "`execute` set")) << e.text();
  std::string bulk_read;  // read { bindings { handle: 5 } bulk: true }
  {
    std::string read, binding;
    U64(&binding, 1, 5);
    Message(&read, 1, binding);
    U64(&read, 2, 1);
    Message(&bulk_read, 8, read);
  }
  EXPECT_EQ(cubed_client_send(c.get(), bulk_read.data(), bulk_read.size(), r, &e),
            kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(e.text(), "bulk")) << e.text();
  // The stream still works after every refusal.
  // The refused sends left `r` unused.
  ASSERT_EQ(cubed_client_send(c.get(), sync.data(), sync.size(), r, &e), 0) << e.text();
  ASSERT_EQ(cubed_reply_wait(r, 20000, &e), 0);
  EXPECT_EQ(cubed_reply_status(r, &e), 0) << e.text();
}

// cubed_client_read_into: the read waited for and copied into the caller's memory, on both
// carriers and with the waiter polling or not (Note [Waiting awake]); errors as a reply's.
TEST_F(CApiTest, ReadIntoCopiesIntoTheCallersMemory) {
  for (int32_t carrier : {1, 2}) {
    for (int64_t spin_us : {0, 200}) {
      SCOPED_TRACE(absl::StrCat("carrier ", carrier, ", spin ", spin_us, " us"));
      cubed_connect_options o;
      cubed_connect_options_init(&o);
      const std::string address = daemon_->unix_address();
      o.address = address.c_str();
      o.carrier = carrier;
      o.reply_spin_us = spin_us;
      cubed_client* raw = nullptr;
      Error e;
      ASSERT_EQ(cubed_client_connect(&o, &raw, &e), 0) << e.text();
      ClientPtr c(raw);
      EXPECT_EQ(cubed_client_reply_spin_us(c.get()), spin_us);
      const std::string a = Floats({1, 2, 3, 4});
      uint64_t id = 0;
      ASSERT_EQ(cubed_client_create(c.get(), a.data(), a.size(), &id, &e), 0) << e.text();
      std::string out(16, '\0');
      uint64_t size = 0;
      ASSERT_EQ(cubed_client_read_into(c.get(), id, 4, 4, out.data(), out.size(), &size, 20000, &e),
                0)
          << e.text();
      EXPECT_EQ(size, 8u);
      EXPECT_EQ(out.substr(0, 8), Floats({2, 3}));
      // Too small: OUT_OF_RANGE naming both sizes, nothing copied.
      std::string small(4, 'x');
      EXPECT_EQ(
          cubed_client_read_into(c.get(), id, 0, 0, small.data(), small.size(), &size, 20000, &e),
          kOutOfRange);
      EXPECT_TRUE(absl::StrContains(e.text(), "16 bytes do not fit the 4")) << e.text();
      EXPECT_EQ(small, "xxxx");
      // An unknown handle: the daemon's NOT_FOUND.
      uint64_t unknown = 0;
      ASSERT_EQ(cubed_client_next_id(c.get(), &unknown, &e), 0) << e.text();
      EXPECT_EQ(
          cubed_client_read_into(c.get(), unknown, 0, 0, out.data(), out.size(), &size, 20000, &e),
          kNotFound);
      EXPECT_EQ(cubed_client_read_into(c.get(), id, 0, 0, nullptr, 4, &size, 20000, &e),
                kInvalidArgument);
      EXPECT_EQ(
          cubed_client_read_into(c.get(), id, 0, 0, out.data(), out.size(), nullptr, 20000, &e),
          kInvalidArgument);
    }
  }
}

// A read_into at or above bulk_threshold goes through Download instead of one reply message
// (which max_message_bytes would refuse here): the bytes are exact, at an offset and with room
// to spare, and the errors are the read's.
TEST_F(CApiTest, ALargeReadIntoGoesThroughDownload) {
  cubed_connect_options o;
  cubed_connect_options_init(&o);
  const std::string address = daemon_->unix_address();
  o.address = address.c_str();
  o.region_threshold = 0;         // Not through a staging region.
  o.bulk_threshold = 1 << 20;     // 1 MiB and more: Upload / Download ...
  o.max_message_bytes = 2 << 20;  // ... which a 6 MiB message could not be.
  o.bulk_chunk = 1 << 20;
  cubed_client* raw = nullptr;
  Error e;
  ASSERT_EQ(cubed_client_connect(&o, &raw, &e), 0) << e.text();
  ClientPtr c(raw);
  std::string data(6 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + (i >> 12));
  uint64_t id = 0;
  ASSERT_EQ(cubed_client_create(c.get(), data.data(), data.size(), &id, &e), 0) << e.text();
  std::string out(data.size(), '\0');
  uint64_t size = 0;
  ASSERT_EQ(cubed_client_read_into(c.get(), id, 0, 0, out.data(), out.size(), &size, 20000, &e), 0)
      << e.text();
  EXPECT_EQ(size, data.size());
  EXPECT_TRUE(out == data);
  // 100 bytes off the front, room for 64 bytes more than the read holds.
  std::string roomy(data.size() - 100 + 64, 'x');
  ASSERT_EQ(
      cubed_client_read_into(c.get(), id, 100, 0, roomy.data(), roomy.size(), &size, 20000, &e), 0)
      << e.text();
  EXPECT_EQ(size, data.size() - 100);
  EXPECT_TRUE(roomy.substr(0, size) == data.substr(100));
  EXPECT_EQ(roomy.substr(size), std::string(64, 'x'));
  // Not waited for: the reply completes once the bytes are in.
  std::string later(data.size(), '\0');
  ReplyPtr async_read(cubed_reply_create(7));
  ASSERT_EQ(cubed_client_read_into_async(c.get(), id, 0, 0, later.data(), later.size(),
                                         async_read.get(), &e),
            0)
      << e.text();
  ASSERT_EQ(cubed_reply_wait(async_read.get(), 20000, &e), 0) << e.text();
  EXPECT_EQ(cubed_reply_status(async_read.get(), &e), 0) << e.text();
  EXPECT_EQ(cubed_reply_read_size(async_read.get()), data.size());
  EXPECT_TRUE(later == data);
  uint64_t unknown = 0;
  ASSERT_EQ(cubed_client_next_id(c.get(), &unknown, &e), 0) << e.text();
  EXPECT_EQ(
      cubed_client_read_into(c.get(), unknown, 0, 0, out.data(), out.size(), &size, 20000, &e),
      kNotFound);
  ReplyPtr failed(cubed_reply_create(8));
  ASSERT_EQ(cubed_client_read_into_async(c.get(), unknown, 0, 0, later.data(), later.size(),
                                         failed.get(), &e),
            0)
      << e.text();
  ASSERT_EQ(cubed_reply_wait(failed.get(), 20000, &e), 0) << e.text();
  EXPECT_EQ(cubed_reply_status(failed.get(), &e), kNotFound);
  EXPECT_EQ(cubed_reply_read_size(failed.get()), 0u);
  // The handle still belongs to the caller: releasing it frees the memory.
  ASSERT_EQ(cubed_client_release(c.get(), &id, 1, &e), 0) << e.text();
}

TEST_F(CApiTest, ErrorsComeBackFromTheReplyThatTouchesThem) {
  ClientPtr c = Connect();
  ASSERT_NE(c, nullptr);
  Error e;
  uint64_t unknown = 0;
  ASSERT_EQ(cubed_client_next_id(c.get(), &unknown, &e), 0) << e.text();
  ReplyPtr read(cubed_reply_create(0));
  cubed_reply* r = read.get();
  ASSERT_EQ(cubed_client_read(c.get(), unknown, 0, 0, r, &e), 0) << e.text();
  ASSERT_EQ(cubed_reply_wait(r, 20000, &e), 0);
  EXPECT_EQ(cubed_reply_status(r, &e), kNotFound);
  EXPECT_FALSE(e.text().empty());
  EXPECT_EQ(cubed_reply_data_count(r), 0u);
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  EXPECT_EQ(cubed_reply_data(r, 0, &data, &size, &e), kInvalidArgument);
  // A release of an unknown id fails the next sync, which counts it.
  ASSERT_EQ(cubed_client_release(c.get(), &unknown, 1, &e), 0) << e.text();
  ReplyPtr sync(cubed_reply_create(0));
  r = sync.get();
  ASSERT_EQ(cubed_client_sync(c.get(), r, &e), 0) << e.text();
  ASSERT_EQ(cubed_reply_wait(r, 20000, &e), 0);
  EXPECT_EQ(cubed_reply_status(r, &e), kNotFound) << e.text();
  EXPECT_GE(cubed_reply_failed_commands(r), 1u);
}

TEST_F(CApiTest, NotifiedRepliesComeFromNextDone) {
  ClientPtr c = Connect();
  ASSERT_NE(c, nullptr);
  Error e;
  uint64_t tag = 0;
  EXPECT_EQ(cubed_client_next_done(c.get(), 10, &tag, &e), kDeadlineExceeded);
  const std::string sync = SyncCommand();
  ReplyPtr p1(cubed_reply_create(41)), p2(cubed_reply_create(42));
  ASSERT_EQ(cubed_client_send(c.get(), sync.data(), sync.size(), p1.get(), &e), 0);
  ASSERT_EQ(cubed_client_send(c.get(), sync.data(), sync.size(), p2.get(), &e), 0);
  cubed_reply_notify(p1.get());
  cubed_reply_notify(p2.get());
  cubed_reply_notify(p2.get());  // Once is enough: no second tag.
  ASSERT_EQ(cubed_client_next_done(c.get(), 20000, &tag, &e), 0) << e.text();
  EXPECT_EQ(tag, 41u);
  ASSERT_EQ(cubed_client_next_done(c.get(), 20000, &tag, &e), 0) << e.text();
  EXPECT_EQ(tag, 42u);
  EXPECT_EQ(cubed_reply_done(p1.get()), 1);
  EXPECT_EQ(cubed_reply_status(p2.get(), &e), 0) << e.text();
  // A reply nobody asked to be told about is only waited for: no tag.
  ReplyPtr p3(cubed_reply_create(43));
  ASSERT_EQ(cubed_client_send(c.get(), sync.data(), sync.size(), p3.get(), &e), 0);
  ASSERT_EQ(cubed_reply_wait(p3.get(), 20000, &e), 0);
  EXPECT_EQ(cubed_client_next_done(c.get(), 50, &tag, &e), kDeadlineExceeded);
  // Asked after it completed: its tag comes at once.
  cubed_reply_notify(p3.get());
  ASSERT_EQ(cubed_client_next_done(c.get(), 0, &tag, &e), 0) << e.text();
  EXPECT_EQ(tag, 43u);
  // A reply never sent never completes: notify is a no-op.
  ReplyPtr unsent(cubed_reply_create(44));
  cubed_reply_notify(unsent.get());
  EXPECT_EQ(cubed_reply_wait(unsent.get(), 10, &e), kDeadlineExceeded);
  EXPECT_EQ(cubed_client_next_done(c.get(), 10, &tag, &e), kDeadlineExceeded);
  // A poller blocked in next_done wakes when the client closes.
  std::thread poller([&] {
    uint64_t t = 0;
    Error pe;
    EXPECT_EQ(cubed_client_next_done(c.get(), -1, &t, &pe), kFailedPrecondition);
  });
  absl::SleepFor(absl::Milliseconds(50));
  cubed_client_close(c.get());
  poller.join();
}

TEST_F(CApiTest, ReplyBytesAndMemoryUsage) {
  ClientPtr c = Connect();
  ASSERT_NE(c, nullptr);
  Error e;
  cubed_memory_usage before{}, during{}, after{};
  ASSERT_EQ(cubed_client_memory_usage(c.get(), &before, &e), 0) << e.text();
  std::string data(1 << 20, 'x');
  uint64_t id = 0;
  ASSERT_EQ(cubed_client_create(c.get(), data.data(), data.size(), &id, &e), 0) << e.text();
  ASSERT_EQ(cubed_client_memory_usage(c.get(), &during, &e), 0) << e.text();
  EXPECT_GE(during.bytes_in_use, before.bytes_in_use + data.size());
  EXPECT_EQ(during.number_allocs, before.number_allocs + 1);
  ASSERT_EQ(cubed_client_release(c.get(), &id, 1, &e), 0);
  ASSERT_EQ(cubed_client_memory_usage(c.get(), &after, &e), 0) << e.text();
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  // memory_usage through send: the Reply's bytes hold field 7 (memory_usage).
  const std::string command = MemoryUsageCommand();
  ReplyPtr reply(cubed_reply_create(0));
  cubed_reply* r = reply.get();
  ASSERT_EQ(cubed_client_send(c.get(), command.data(), command.size(), r, &e), 0);
  const uint8_t* bytes = nullptr;
  size_t size = 0;
  ASSERT_EQ(cubed_reply_wait(r, 20000, &e), 0);
  ASSERT_EQ(cubed_reply_bytes(r, &bytes, &size, &e), 0) << e.text();
  const std::string wire(reinterpret_cast<const char*>(bytes), size);
  EXPECT_NE(wire.find(static_cast<char>((7 << 3) | 2)), std::string::npos);
  EXPECT_EQ(cubed_client_memory_usage(c.get(), nullptr, &e), kInvalidArgument);
}

TEST_F(CApiTest, CloseFailsLaterCallsAndKeepsRepliesReadable) {
  ClientPtr c = Connect();
  ASSERT_NE(c, nullptr);
  Error e;
  const std::string data = Floats({5});
  uint64_t id = 0;
  ASSERT_EQ(cubed_client_create(c.get(), data.data(), data.size(), &id, &e), 0);
  ReplyPtr reply(cubed_reply_create(0));
  cubed_reply* r = reply.get();
  ASSERT_EQ(cubed_client_read(c.get(), id, 0, 0, r, &e), 0);
  cubed_client_close(c.get());
  cubed_client_close(c.get());                   // Idempotent.
  ASSERT_EQ(cubed_reply_wait(r, 20000, &e), 0);  // Answered before the end, or failed by it.
  const int32_t status = cubed_reply_status(r, &e);
  EXPECT_TRUE(status == 0 || status == kUnavailable || status == 1) << status << e.text();
  EXPECT_EQ(cubed_client_create(c.get(), data.data(), data.size(), &id, &e), kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(e.text(), "closed")) << e.text();
  EXPECT_EQ(cubed_client_next_id(c.get(), &id, &e), kFailedPrecondition);
  ReplyPtr late(cubed_reply_create(0));
  EXPECT_EQ(cubed_client_sync(c.get(), late.get(), &e), kFailedPrecondition);
  EXPECT_EQ(cubed_client_flush(c.get(), &e), kFailedPrecondition);
  uint64_t tag = 99;
  EXPECT_EQ(cubed_client_next_done(c.get(), 0, &tag, &e), kFailedPrecondition);
}

TEST_F(CApiTest, CancelEndsTheStreamAndFreesTheSession) {
  ClientPtr watcher = Connect();
  ASSERT_NE(watcher, nullptr);
  Error e;
  cubed_memory_usage before{};
  ASSERT_EQ(cubed_client_memory_usage(watcher.get(), &before, &e), 0) << e.text();
  ClientPtr c = Connect();
  ASSERT_NE(c, nullptr);
  std::string data(1 << 20, 'y');
  uint64_t id = 0;
  ASSERT_EQ(cubed_client_create(c.get(), data.data(), data.size(), &id, &e), 0) << e.text();
  ReplyPtr read(cubed_reply_create(0));
  ASSERT_EQ(cubed_client_read(c.get(), id, 0, 0, read.get(), &e), 0) << e.text();
  cubed_client_cancel(c.get());
  ASSERT_EQ(cubed_reply_wait(read.get(), 20000, &e), 0);  // Answered first, or cancelled.
  // Later calls fail with the stream's end.
  ReplyPtr late(cubed_reply_create(0));
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  int32_t code = 0;
  while ((code = cubed_client_sync(c.get(), late.get(), &e)) == 0 && absl::Now() < deadline) {
    late.reset(cubed_reply_create(0));  // Sent before the reader saw the end: try again.
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_NE(code, 0);
  // The daemon frees the session's memory.
  cubed_memory_usage after{};
  deadline = absl::Now() + absl::Seconds(10);
  do {
    ASSERT_EQ(cubed_client_memory_usage(watcher.get(), &after, &e), 0) << e.text();
  } while (after.bytes_in_use != before.bytes_in_use && absl::Now() < deadline);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  cubed_client_cancel(nullptr);  // A no-op.
}

TEST_F(CApiTest, UnaryTransportCreatesButHasNoStream) {
  ClientPtr c = Connect(0, "", 0, /*transport=*/1);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(cubed_client_transport(c.get()), 1);
  EXPECT_EQ(cubed_client_carrier(c.get()), 2);
  Error e;
  uint64_t id = 0;
  const std::string data = Floats({1});
  EXPECT_EQ(cubed_client_create(c.get(), data.data(), data.size(), &id, &e), 0) << e.text();
  EXPECT_NE(id, 0u);
  EXPECT_EQ(cubed_client_next_id(c.get(), &id, &e), kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(e.text(), "session stream only")) << e.text();
  const std::string sync = SyncCommand();
  ReplyPtr r(cubed_reply_create(0));
  EXPECT_EQ(cubed_client_send(c.get(), sync.data(), sync.size(), r.get(), &e), kFailedPrecondition);
  EXPECT_EQ(cubed_client_release(c.get(), &id, 1, &e), 0) << e.text();
}

}  // namespace
