// Every RPC of cubed.v1.Compute through the SDK, success and the documented failures.

#include <random>

#include "tests/integration/integration_test.h"

namespace cubed::integration {
namespace {

using RpcTest = DaemonTest;

TEST_F(RpcTest, GetInfoDescribesTheDeviceUnderTest) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto info = client->GetInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_GE(info->devices, 1u);
  EXPECT_FALSE(info->version.empty());
  EXPECT_EQ(info->device.backend(), testing::TestBackendWire());
  EXPECT_GT(info->device.alignment(), 0u);
  EXPECT_GT(info->device.max_allocation(), 0u);
  EXPECT_GT(info->device.compute_units(), 0u);
  EXPECT_FALSE(info->device.builtin_kernels().empty());
  EXPECT_FALSE(info->device.elem_types().empty());
}

TEST_F(RpcTest, OpenSessionGrantsTheRequestedLease) {
  ClientOptions options;
  options.lease = absl::Seconds(42);
  auto client = Connect(options);
  ASSERT_NE(client, nullptr);
  EXPECT_NE(client->session(), 0u);
  EXPECT_EQ(client->lease(), absl::Seconds(42));
  auto other = Connect();
  ASSERT_NE(other, nullptr);
  EXPECT_NE(other->session(), client->session());
}

TEST_F(RpcTest, ConnectToNothingIsUnavailable) {
  ClientOptions options;
  options.address = "unix:/nonexistent/cubed.sock";
  options.timeout = absl::Seconds(5);
  auto client = Client::Connect(options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable) << client.status();
}

TEST_F(RpcTest, UnknownSessionIsNotFound) {
  ClientOptions options;
  options.address = daemon().unix_address();
  options.session = 0x1234567;  // Never handed out.
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  auto h = (*client)->Empty(16);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kNotFound) << h.status();
}

TEST_F(RpcTest, JoinedSessionSharesHandlesAndOutlivesTheJoiner) {
  auto owner = Connect();
  ASSERT_NE(owner, nullptr);
  auto h = owner->Create(ToBytes(std::vector<uint32_t>{1, 2, 3}));
  ASSERT_TRUE(h.ok()) << h.status();
  {
    ClientOptions options;
    options.session = owner->session();
    auto joiner = Connect(options);
    ASSERT_NE(joiner, nullptr);
    EXPECT_EQ(joiner->session(), owner->session());
    auto mine = joiner->Empty(8);
    ASSERT_TRUE(mine.ok()) << mine.status();
  }
  // The joiner did not close the session: the owner's handle is still readable.
  EXPECT_EQ(FromBytes<uint32_t>(ReadOrDie(*owner, *h)), (std::vector<uint32_t>{1, 2, 3}));
}

TEST_F(RpcTest, CreateEmptyAndTheirTensorFormsReturnSizedHandles) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto c = client->Create(ToBytes(std::vector<uint8_t>{1, 2, 3, 4, 5}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NE(c->id(), 0u);
  EXPECT_EQ(c->size(), 5u);

  auto e = client->Empty(100);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->size(), 100u);
  EXPECT_NE(e->id(), c->id());

  auto t = client->CreateTensor(ToBytes(std::vector<float>(6, 1.f)), {2, 3}, 4);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_GE(t->handle.size(), 24u);
  ASSERT_EQ(t->strides.size(), 2u);
  EXPECT_EQ(t->strides[1], 1u);
  EXPECT_GE(t->strides[0], 3u);

  auto et = client->EmptyTensor({4, 5, 6}, 8);
  ASSERT_TRUE(et.ok()) << et.status();
  ASSERT_EQ(et->strides.size(), 3u);
  EXPECT_EQ(et->strides[2], 1u);
  EXPECT_GE(et->handle.size(), 4u * 5 * 6 * 8);
}

TEST_F(RpcTest, BadCreatesAreInvalidArgument) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->Create({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Empty(0).status().code(), absl::StatusCode::kInvalidArgument);
  // 5 bytes for a 2x3 f32 tensor.
  EXPECT_EQ(client->CreateTensor(ToBytes(std::vector<uint8_t>(5)), {2, 3}, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->EmptyTensor({}, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->EmptyTensor({2, 0}, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->EmptyTensor({1, 1, 1, 1, 1, 1, 1, 1, 1}, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->EmptyTensor({2}, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RpcTest, EmptyBeyondTheMemoryLimitIsResourceExhausted) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto info = client->GetInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  auto h = client->Empty(info->device.memory_limit() + 1);
  // On the session stream the failure arrives at the next sync.
  const absl::Status s = h.ok() ? client->Sync().get() : h.status();
  EXPECT_TRUE(s.code() == absl::StatusCode::kResourceExhausted ||
              s.code() == absl::StatusCode::kInvalidArgument)
      << s;
}

TEST_F(RpcTest, ReadAndReadTensorReturnTheStoredBytes) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::vector<int32_t> values = {1, -2, 3, -4, 5, -6};
  auto h = client->Create(ToBytes(values));
  auto t = client->CreateTensor(ToBytes(values), {3, 2}, 4);
  ASSERT_TRUE(h.ok() && t.ok());
  auto both = client->Read({*h, t->handle}).get();
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ(both->size(), 2u);
  EXPECT_EQ(FromBytes<int32_t>((*both)[0]), values);
  EXPECT_EQ(FromBytes<int32_t>(ReadTensorOrDie(*client, *t)), values);
}

TEST_F(RpcTest, ReadOfAnUnknownOrOutOfRangeBindingFails) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto h = client->Create(ToBytes(std::vector<uint8_t>(16, 7)));
  ASSERT_TRUE(h.ok());
  auto past_end = client->Read({Binding(*h, 10, 10)}).get();
  EXPECT_EQ(past_end.status().code(), absl::StatusCode::kInvalidArgument) << past_end.status();

  // A handle of another session is unknown here.
  auto other = Connect();
  ASSERT_NE(other, nullptr);
  // Ids are per session (the stream's client ids start at 2^63 in each): take one that `client`
  // does not use.
  auto unused = other->Create(ToBytes(std::vector<uint8_t>(16, 9)));
  auto foreign = other->Create(ToBytes(std::vector<uint8_t>(16, 9)));
  ASSERT_TRUE(unused.ok() && foreign.ok());
  auto read = client->Read({*foreign}).get();
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound) << read.status();

  // An empty handle never leaves the SDK.
  auto empty = client->Read({Binding()}).get();
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RpcTest, GetResourceDescribesTheBindingInsideItsPage) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto h = client->Create(ToBytes(std::vector<uint8_t>(100, 1)));
  ASSERT_TRUE(h.ok());
  auto whole = client->GetResource(*h);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->size, 100u);
  if (testing::TestBackend() == "cpu") {
    EXPECT_EQ(whole->device_pointer, 0u) << "CPU backend exposes no daemon addresses";
    EXPECT_TRUE(whole->ipc_handle.empty());
  } else {
    EXPECT_NE(whole->device_pointer, 0u) << "CUDA: the binding's device pointer";
    EXPECT_EQ(whole->ipc_handle.size(), 64u) << "CUDA: a cuIpcGetMemHandle of the page";
  }
  auto view = client->GetResource(Binding(*h, 10, 20));
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->storage_id, whole->storage_id);
  EXPECT_EQ(view->offset, whole->offset + 10);
  EXPECT_EQ(view->size, 70u);
}

TEST_F(RpcTest, ExecuteFlushAndSyncRunAKernel) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto out = client->EmptyTensor({3, 5}, 4);
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(client
                  ->Execute(Builtin("fill", ElemType::kF32), {}, {*out},
                            {Scalars{ElemType::kF32, {2.5}, {}, {}}})
                  .ok());
  EXPECT_TRUE(client->Flush().ok());
  EXPECT_TRUE(client->Sync().get().ok());
  EXPECT_EQ(FromBytes<float>(ReadTensorOrDie(*client, *out)), std::vector<float>(15, 2.5f));
}

TEST_F(RpcTest, ExecuteOfAnUnknownKernelIsNotFound) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto t = client->EmptyTensor({4}, 4);
  ASSERT_TRUE(t.ok());
  absl::Status s =
      Settled(*client, client->Execute(Builtin("no_such_kernel", ElemType::kF32), {*t}, {*t}));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
}

TEST_F(RpcTest, ExecuteWithMismatchedShapesIsInvalidArgument) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto a = client->EmptyTensor({4}, 4);
  auto b = client->EmptyTensor({5}, 4);
  ASSERT_TRUE(a.ok() && b.ok());
  absl::Status s = Settled(*client, client->Execute(Builtin("copy", ElemType::kF32), {*a}, {*b}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST_F(RpcTest, UncheckedExecuteIsRefusedByDefault) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto a = client->EmptyTensor({4}, 4);
  ASSERT_TRUE(a.ok());
  LaunchBindings bindings;
  bindings.buffers = {a->handle};
  bindings.metadata = {1, 1};  // One plain buffer of 1 element... irrelevant: refused first.
  absl::Status s =
      Settled(*client, client->Execute(Builtin("copy", ElemType::kF32), CubeCount{1, 1, 1},
                                       bindings, ExecutionMode::kUnchecked));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
}

TEST_F(RpcTest, ProfileMeasuresAPositiveDuration) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::vector<float> data(1 << 16, 1.f);
  auto in = client->CreateTensor(ToBytes(data), {256, 256}, 4);
  auto out = client->EmptyTensor({256, 256}, 4);
  ASSERT_TRUE(in.ok() && out.ok());
  ASSERT_TRUE(client->StartProfile().ok());
  ASSERT_TRUE(client->Execute(Builtin("matmul", ElemType::kF32), {*in, *in}, {*out}).ok());
  auto d = client->EndProfile();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_GT(*d, absl::ZeroDuration());
  EXPECT_LT(*d, absl::Seconds(30));
}

TEST_F(RpcTest, EndProfileWithoutStartIsFailedPrecondition) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->EndProfile().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(RpcTest, ReleaseFreesTheHandleAtTheLastCopy) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto before = client->GetMemoryUsage();
  ASSERT_TRUE(before.ok()) << before.status();
  uint64_t id = 0;
  {
    auto h = client->Create(ToBytes(std::vector<uint8_t>(64, 3)));
    ASSERT_TRUE(h.ok());
    id = h->id();
    Handle copy = *h;
    h = absl::StatusOr<Handle>(Handle());
    ASSERT_TRUE(client->FlushReleases().ok());
    // One copy is still alive: the handle must still be readable.
    EXPECT_EQ(ReadOrDie(*client, copy), std::string(64, 3));
  }
  ASSERT_TRUE(client->FlushReleases().ok());
  auto after = client->GetMemoryUsage();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->number_allocs, before->number_allocs);
  EXPECT_EQ(after->bytes_in_use, before->bytes_in_use);
  // The id is gone: using it again is NOT_FOUND (detached so the SDK does not release it twice).
  Handle stale = client->Adopt(id, 64);
  stale.Detach();
  EXPECT_EQ(client->Read({stale}).get().status().code(), absl::StatusCode::kNotFound);
}

TEST_F(RpcTest, DetachedHandleSurvivesUntilAdoptedAndDropped) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  uint64_t id = 0;
  {
    auto h = client->Create(ToBytes(std::vector<uint8_t>(32, 5)));
    ASSERT_TRUE(h.ok());
    id = h->Detach();
  }
  ASSERT_TRUE(client->FlushReleases().ok());
  {
    Handle adopted = client->Adopt(id, 32);
    EXPECT_EQ(ReadOrDie(*client, adopted), std::string(32, 5));
  }
  ASSERT_TRUE(client->FlushReleases().ok());
  Handle stale = client->Adopt(id, 32);
  stale.Detach();
  EXPECT_EQ(client->Read({stale}).get().status().code(), absl::StatusCode::kNotFound);
}

TEST_F(RpcTest, ReleasesGoOutWithoutFlushWithinTheBatchDelay) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto before = client->GetMemoryUsage();
  ASSERT_TRUE(before.ok());
  for (int batch : {1, 64, 100}) {
    {
      std::vector<Handle> handles;
      for (int i = 0; i < batch; ++i) {
        auto h = client->Empty(128);
        ASSERT_TRUE(h.ok()) << h.status();
        handles.push_back(*h);
      }
    }
    // No FlushReleases: the background flusher must send them on its own.
    absl::Time deadline = absl::Now() + absl::Seconds(5);
    uint64_t allocs = 0;
    while (absl::Now() < deadline) {
      auto u = client->GetMemoryUsage();
      ASSERT_TRUE(u.ok());
      allocs = u->number_allocs;
      if (allocs == before->number_allocs) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_EQ(allocs, before->number_allocs) << "batch of " << batch << " never released";
  }
}

TEST_F(RpcTest, ClosingTheClientReleasesItsSession) {
  auto observer = Connect();
  ASSERT_NE(observer, nullptr);
  auto before = observer->GetMemoryUsage();
  ASSERT_TRUE(before.ok());
  {
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    for (int i = 0; i < 10; ++i) {
      auto h = client->Empty(4096);
      ASSERT_TRUE(h.ok());
      h->Detach();  // Only CloseSession can free these.
    }
    ASSERT_TRUE(client->Sync().get().ok());  // The stream may still hold them.
    auto during = observer->GetMemoryUsage();
    ASSERT_TRUE(during.ok());
    EXPECT_EQ(during->number_allocs, before->number_allocs + 10);
  }
  auto after = observer->GetMemoryUsage();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->number_allocs, before->number_allocs);
  EXPECT_EQ(after->bytes_in_use, before->bytes_in_use);
}

}  // namespace
}  // namespace cubed::integration
