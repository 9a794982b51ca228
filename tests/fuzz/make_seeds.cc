// Writes the seed corpus of cubed_fuzz_requests (fuzz_requests.cc) into a directory: valid
// session-stream batches, unary request sequences and metadata blocks that run real kernels, so
// the fuzzer starts past the validation and mutates from there.
//
//   cubed_fuzz_seeds DIR     writes DIR/seed-NN files (DIR must exist); exit 1 on an I/O error.

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/kernel_metadata.h"
#include "cubed/v1/compute.pb.h"
#include "cubed/v1/session.pb.h"

namespace cubed {
namespace {

constexpr uint64_t kId = uint64_t{1} << 63;  // First client id of the session stream.

std::string F32s(std::initializer_list<float> values) {
  std::string out(values.size() * 4, '\0');
  std::memcpy(out.data(), values.begin(), out.size());
  return out;
}

std::string F32Fill(size_t n, float start) {
  std::string out(n * 4, '\0');
  for (size_t i = 0; i < n; ++i) {
    const float v = start + static_cast<float>(i);
    std::memcpy(&out[i * 4], &v, 4);
  }
  return out;
}

// Metadata for builtin kernels: every buffer a contiguous tensor of the given shape.
std::vector<uint32_t> Meta(const std::vector<std::vector<uint64_t>>& shapes) {
  std::vector<uint64_t> lens;
  std::vector<TensorLayout> tensors;
  for (const auto& shape : shapes) {
    tensors.push_back(TensorLayout::Contiguous(shape));
    lens.push_back(tensors.back().NumElements());
  }
  return *EncodeKernelMetadata(lens, tensors);
}

void SetBuiltin(v1::Kernel* k, const std::string& name, v1::ElemType dtype, uint32_t axis = 0,
                v1::ElemType out = v1::ELEM_TYPE_UNSPECIFIED) {
  k->mutable_builtin()->set_name(name);
  k->mutable_builtin()->set_dtype(dtype);
  k->mutable_builtin()->set_out_dtype(out);
  k->mutable_builtin()->set_axis(axis);
}

void SetStatic(v1::CubeCount* c) {
  c->mutable_static_count()->set_x(1);
  c->mutable_static_count()->set_y(1);
  c->mutable_static_count()->set_z(1);
}

void AddBuffers(v1::Bindings* b, std::initializer_list<uint64_t> handles,
                const std::vector<uint32_t>& metadata) {
  for (uint64_t h : handles) b->add_buffers()->set_handle(h);
  for (uint32_t w : metadata) b->add_metadata(w);
}

// ---- Session stream (mode byte 0) --------------------------------------------------------

class Stream {
 public:
  Stream() { request_.mutable_open()->set_lease_ms(60000); }
  v1::Command* Add() {
    v1::Command* c = request_.add_commands();
    c->set_seq(++seq_);
    return c;
  }
  void CreateTensor(uint64_t id, const std::vector<uint64_t>& shape, std::string data) {
    v1::Command::CreateTensor* t = Add()->mutable_create_tensor();
    t->set_id(id);
    for (uint64_t d : shape) t->add_shape(d);
    t->set_elem_size(4);
    t->set_data(std::move(data));
  }
  void EmptyTensor(uint64_t id, const std::vector<uint64_t>& shape) {
    v1::Command::EmptyTensor* t = Add()->mutable_empty_tensor();
    t->set_id(id);
    for (uint64_t d : shape) t->add_shape(d);
    t->set_elem_size(4);
  }
  v1::Command::Execute* Execute(const std::string& name, v1::ElemType dtype,
                                std::initializer_list<uint64_t> handles,
                                const std::vector<std::vector<uint64_t>>& shapes,
                                uint32_t axis = 0) {
    v1::Command::Execute* e = Add()->mutable_execute();
    SetBuiltin(e->mutable_kernel(), name, dtype, axis);
    SetStatic(e->mutable_count());
    AddBuffers(e->mutable_bindings(), handles, Meta(shapes));
    return e;
  }
  void Read(uint64_t id, uint64_t start = 0, uint64_t end = 0) {
    v1::Binding* b = Add()->mutable_read()->add_bindings();
    b->set_handle(id);
    b->set_offset_start(start);
    b->set_offset_end(end);
  }
  void ReadTensor(uint64_t id, const std::vector<uint64_t>& shape,
                  const std::vector<uint64_t>& strides) {
    v1::BindingWithMeta* b = Add()->mutable_read_tensor()->add_bindings();
    b->mutable_binding()->set_handle(id);
    for (uint64_t d : shape) b->add_shape(d);
    for (uint64_t s : strides) b->add_strides(s);
    b->set_elem_size(4);
  }
  void Sync() { Add()->mutable_sync(); }
  std::string Bytes() const { return std::string(1, '\0') + request_.SerializeAsString(); }

 private:
  v1::SessionRequest request_;
  uint64_t seq_ = 0;
};

std::vector<std::string> StreamSeeds() {
  std::vector<std::string> seeds;
  {  // Elementwise add, every kind of command.
    Stream s;
    s.CreateTensor(kId + 1, {2, 4}, F32Fill(8, 1));
    s.CreateTensor(kId + 2, {2, 4}, F32Fill(8, 10));
    s.EmptyTensor(kId + 3, {2, 4});
    s.Add()->mutable_start_profile();
    s.Execute("add", v1::ELEM_TYPE_F32, {kId + 1, kId + 2, kId + 3}, {{2, 4}, {2, 4}, {2, 4}});
    s.Add()->mutable_end_profile();
    s.Add()->mutable_flush();
    s.Read(kId + 3);
    s.Read(kId + 3, 4, 8);
    s.ReadTensor(kId + 3, {4, 2}, {1, 4});
    s.Add()->mutable_memory_usage();
    v1::Command::Empty* e = s.Add()->mutable_empty();
    e->set_id(kId + 4);
    e->set_size(64);
    v1::Command::Create* c = s.Add()->mutable_create();
    c->set_id(kId + 5);
    c->set_data(F32s({1, 2, 3}));
    s.Add()->mutable_release()->add_ids(kId + 1);
    s.Add()->mutable_memory_cleanup();
    s.Sync();
    seeds.push_back(s.Bytes());
  }
  {  // Matmul, then a reduction over its output, with a broadcast input (stride 0).
    Stream s;
    s.CreateTensor(kId + 1, {2, 3}, F32Fill(6, 1));
    s.CreateTensor(kId + 2, {3, 2}, F32Fill(6, -2));
    s.EmptyTensor(kId + 3, {2, 2});
    s.Execute("matmul", v1::ELEM_TYPE_F32, {kId + 1, kId + 2, kId + 3}, {{2, 3}, {3, 2}, {2, 2}});
    s.EmptyTensor(kId + 4, {2, 1});
    s.Execute("sum", v1::ELEM_TYPE_F32, {kId + 3, kId + 4}, {{2, 2}, {2, 1}}, 1);
    s.Add()->mutable_empty()->set_id(kId + 5);
    s.Add()->mutable_release()->add_ids(kId + 5);
    v1::Command::Empty* e = s.Add()->mutable_empty();
    e->set_id(kId + 6);
    e->set_size(16);
    s.Execute("argmax", v1::ELEM_TYPE_F32, {kId + 3, kId + 6}, {{2, 2}, {1, 2}}, 0);
    s.Read(kId + 4);
    s.Sync();
    seeds.push_back(s.Bytes());
  }
  {  // fill (scalars), softmax, cast, and an execute with a dynamic count.
    Stream s;
    s.EmptyTensor(kId + 1, {4, 4});
    v1::Command::Execute* fill = s.Execute("fill", v1::ELEM_TYPE_F32, {kId + 1}, {{4, 4}});
    v1::ScalarGroup* g = fill->mutable_bindings()->add_scalars();
    g->set_elem(v1::ELEM_TYPE_F32);
    g->add_floats(0.5);
    s.EmptyTensor(kId + 2, {4, 4});
    s.Execute("softmax", v1::ELEM_TYPE_F32, {kId + 1, kId + 2}, {{4, 4}, {4, 4}});
    s.EmptyTensor(kId + 3, {4, 4});
    v1::Command::Execute* cast =
        s.Execute("cast", v1::ELEM_TYPE_F32, {kId + 2, kId + 3}, {{4, 4}, {4, 4}});
    cast->mutable_kernel()->mutable_builtin()->set_out_dtype(v1::ELEM_TYPE_I32);
    v1::Command::Create* count = s.Add()->mutable_create();
    count->set_id(kId + 4);
    count->set_data(std::string("\1\0\0\0\1\0\0\0\1\0\0\0", 12));
    v1::Command::Execute* dyn =
        s.Execute("relu", v1::ELEM_TYPE_F32, {kId + 2, kId + 1}, {{4, 4}, {4, 4}});
    dyn->mutable_count()->mutable_dynamic()->set_handle(kId + 4);
    s.ReadTensor(kId + 3, {4, 4}, {4, 1});
    s.Sync();
    seeds.push_back(s.Bytes());
  }
  {  // Client kernels (UNIMPLEMENTED on the CPU backend) and commands on poisoned ids.
    Stream s;
    s.EmptyTensor(kId + 1, {8});
    v1::Command::Execute* e = s.Add()->mutable_execute();
    v1::CudaSourceKernel* k = e->mutable_kernel()->mutable_cuda_source();
    k->set_source("extern \"C\" __global__ void k(float* x) { x[threadIdx.x] = 1; }");
    k->set_entry_point("k");
    k->mutable_cube_dim()->set_x(8);
    k->mutable_cube_dim()->set_y(1);
    k->mutable_cube_dim()->set_z(1);
    SetStatic(e->mutable_count());
    e->mutable_bindings()->add_buffers()->set_handle(kId + 1);
    s.Read(kId + 1);
    s.Add()->mutable_release()->add_ids(kId + 1);
    s.Sync();
    seeds.push_back(s.Bytes());
  }
  return seeds;
}

// ---- Unary RPCs (mode byte 1) ------------------------------------------------------------

// Record numbers as in fuzz_requests.cc's enum Rpc (compute.proto order).
enum Rpc : uint8_t {
  kOpenSession,
  kCloseSession,
  kCreate,
  kCreateTensor,
  kEmpty,
  kEmptyTensor,
  kRead,
  kReadTensor,
  kGetResource,
  kExecute,
  kFlush,
  kSync,
  kMemoryUsage,
  kMemoryCleanup,
  kStartProfile,
  kEndProfile,
  kGetInfo,
  kRelease,
};

class Unary {
 public:
  Unary() : bytes_(1, '\1') {}
  void Add(Rpc rpc, const google::protobuf::Message& m) {
    const std::string body = m.SerializeAsString();
    bytes_.push_back(static_cast<char>(rpc));
    bytes_.push_back(static_cast<char>(body.size() & 0xff));
    bytes_.push_back(static_cast<char>(body.size() >> 8));
    bytes_ += body;
  }
  const std::string& Bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

std::vector<std::string> UnarySeeds() {
  std::vector<std::string> seeds;
  {  // Handles 1, 2, 3 (the harness maps them to the created ids); session 0 = the first.
    Unary u;
    v1::CreateTensorRequest a;
    a.add_shape(2);
    a.add_shape(4);
    a.set_elem_size(4);
    a.set_data(F32Fill(8, 1));
    u.Add(kCreateTensor, a);
    u.Add(kCreateTensor, a);
    v1::EmptyTensorRequest out;
    out.add_shape(2);
    out.add_shape(4);
    out.set_elem_size(4);
    u.Add(kEmptyTensor, out);
    v1::ExecuteRequest e;
    SetBuiltin(e.mutable_kernel(), "mul", v1::ELEM_TYPE_F32);
    SetStatic(e.mutable_count());
    AddBuffers(e.mutable_bindings(), {1, 2, 3}, Meta({{2, 4}, {2, 4}, {2, 4}}));
    u.Add(kExecute, e);
    v1::ReadRequest r;
    r.add_bindings()->set_handle(3);
    v1::Binding* part = r.add_bindings();
    part->set_handle(1);
    part->set_offset_start(4);
    part->set_offset_end(8);
    u.Add(kRead, r);
    v1::ReadTensorRequest rt;
    v1::BindingWithMeta* t = rt.add_bindings();
    t->mutable_binding()->set_handle(3);
    t->add_shape(4);
    t->add_shape(2);
    t->add_strides(1);
    t->add_strides(4);
    t->set_elem_size(4);
    u.Add(kReadTensor, rt);
    v1::GetResourceRequest g;
    g.mutable_binding()->set_handle(2);
    u.Add(kGetResource, g);
    v1::ReleaseRequest rel;
    rel.add_handles(1);
    rel.add_handles(2);
    u.Add(kRelease, rel);
    u.Add(kSync, v1::SyncRequest());
    seeds.push_back(u.Bytes());
  }
  {  // Sessions, plain buffers, profiles and device RPCs.
    Unary u;
    v1::OpenSessionRequest open;
    open.set_lease_ms(5000);
    u.Add(kOpenSession, open);
    v1::CreateRequest c;
    c.set_session(1);
    c.set_data("hello world");
    u.Add(kCreate, c);
    v1::EmptyRequest e;
    e.set_session(1);
    e.set_size(300);
    u.Add(kEmpty, e);
    v1::StartProfileRequest sp;
    sp.set_session(1);
    u.Add(kStartProfile, sp);
    v1::ExecuteRequest copy;
    copy.set_session(1);
    SetBuiltin(copy.mutable_kernel(), "copy", v1::ELEM_TYPE_I32);
    SetStatic(copy.mutable_count());
    AddBuffers(copy.mutable_bindings(), {1, 2}, Meta({{2}, {2}}));
    u.Add(kExecute, copy);
    v1::FlushRequest f;
    f.set_session(1);
    u.Add(kFlush, f);
    v1::EndProfileRequest ep;
    ep.set_session(1);
    u.Add(kEndProfile, ep);
    u.Add(kMemoryUsage, v1::MemoryUsageRequest());
    u.Add(kMemoryCleanup, v1::MemoryCleanupRequest());
    u.Add(kGetInfo, v1::GetInfoRequest());
    v1::CloseSessionRequest close;
    close.set_session(1);
    u.Add(kCloseSession, close);
    seeds.push_back(u.Bytes());
  }
  return seeds;
}

// ---- Metadata (mode byte 2) --------------------------------------------------------------

std::vector<std::string> MetadataSeeds() {
  std::vector<std::string> seeds;
  for (const auto& shapes : std::vector<std::vector<std::vector<uint64_t>>>{
           {{2, 3}, {3, 2}, {2, 2}}, {{8}, {1}}, {{2, 2, 2, 2, 2, 2, 2, 2}}}) {
    const std::vector<uint32_t> words = Meta(shapes);
    std::string s(3, '\2');
    s[1] = static_cast<char>(shapes.size());
    s[2] = static_cast<char>(shapes.size());
    s.append(reinterpret_cast<const char*>(words.data()), words.size() * 4);
    seeds.push_back(s);
  }
  return seeds;
}

}  // namespace
}  // namespace cubed

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: cubed_fuzz_seeds DIR\n");
    return 2;
  }
  std::vector<std::string> seeds = cubed::StreamSeeds();
  for (auto* more : {&cubed::UnarySeeds, &cubed::MetadataSeeds}) {
    for (std::string& s : more()) seeds.push_back(std::move(s));
  }
  for (size_t i = 0; i < seeds.size(); ++i) {
    const std::string path = std::string(argv[1]) + "/seed-" + std::to_string(i);
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr || std::fwrite(seeds[i].data(), 1, seeds[i].size(), f) != seeds[i].size() ||
        std::fclose(f) != 0) {
      std::fprintf(stderr, "cubed_fuzz_seeds: cannot write %s\n", path.c_str());
      return 1;
    }
  }
  std::printf("cubed_fuzz_seeds: %zu seeds in %s\n", seeds.size(), argv[1]);
  return 0;
}
