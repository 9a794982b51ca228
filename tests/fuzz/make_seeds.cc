// Writes the seed corpus of cubed_fuzz_requests (fuzz_requests.cc) into a directory: valid
// session-stream batches, unary request sequences, metadata blocks and programs (program.h) that
// run real kernels and transfers with ordinary sizes, so the fuzzer starts past the validation
// and mutates from there. No seed is a finding: the edge values are the fuzzer's to find.
//
//   cubed_fuzz_seeds DIR     writes DIR/seed-NN files (DIR must exist); exit 1 on an I/O error.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/kernel_metadata.h"
#include "cubed/v1/compute.pb.h"
#include "cubed/v1/session.pb.h"
#include "kernels/builtin.h"
#include "server/auth/rpc.h"
#include "tests/fuzz/program.h"

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

// Writes a session-stream input (mode byte 0): one SessionRequest, seqs counted from 1.
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
  {  // The 1- and 2-byte types: fills whose scalar groups carry wire values above 7, a cast.
    Stream s;
    s.EmptyTensor(kId + 1, {4, 4});
    const auto fill = [&](v1::ElemType elem) {
      v1::ScalarGroup* g =
          s.Execute("fill", elem, {kId + 1}, {{4, 4}})->mutable_bindings()->add_scalars();
      g->set_elem(elem);
      return g;
    };
    fill(v1::ELEM_TYPE_BF16)->add_floats(-1.5);
    fill(v1::ELEM_TYPE_I8)->add_ints(-3);
    fill(v1::ELEM_TYPE_BOOL)->add_uints(1);
    s.EmptyTensor(kId + 2, {4, 4});
    v1::Command::Execute* cast =
        s.Execute("cast", v1::ELEM_TYPE_BOOL, {kId + 1, kId + 2}, {{4, 4}, {4, 4}});
    cast->mutable_kernel()->mutable_builtin()->set_out_dtype(v1::ELEM_TYPE_U16);
    s.Read(kId + 2);
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

// Writes a unary input (mode byte 1): records of requests.
class Unary {
 public:
  Unary() : bytes_(1, '\1') {}
  // A record of `method` (its number in server/auth/rpc.h, as fuzz_requests.cc reads it).
  void Add(Method method, const google::protobuf::Message& m) {
    const std::string body = m.SerializeAsString();
    bytes_.push_back(static_cast<char>(method));
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
    u.Add(Method::kCreateTensor, a);
    u.Add(Method::kCreateTensor, a);
    v1::EmptyTensorRequest out;
    out.add_shape(2);
    out.add_shape(4);
    out.set_elem_size(4);
    u.Add(Method::kEmptyTensor, out);
    v1::ExecuteRequest e;
    SetBuiltin(e.mutable_kernel(), "mul", v1::ELEM_TYPE_F32);
    SetStatic(e.mutable_count());
    AddBuffers(e.mutable_bindings(), {1, 2, 3}, Meta({{2, 4}, {2, 4}, {2, 4}}));
    u.Add(Method::kExecute, e);
    v1::ReadRequest r;
    r.add_bindings()->set_handle(3);
    v1::Binding* part = r.add_bindings();
    part->set_handle(1);
    part->set_offset_start(4);
    part->set_offset_end(8);
    u.Add(Method::kRead, r);
    v1::ReadTensorRequest rt;
    v1::BindingWithMeta* t = rt.add_bindings();
    t->mutable_binding()->set_handle(3);
    t->add_shape(4);
    t->add_shape(2);
    t->add_strides(1);
    t->add_strides(4);
    t->set_elem_size(4);
    u.Add(Method::kReadTensor, rt);
    v1::GetResourceRequest g;
    g.mutable_binding()->set_handle(2);
    u.Add(Method::kGetResource, g);
    v1::ReleaseRequest rel;
    rel.add_handles(1);
    rel.add_handles(2);
    u.Add(Method::kRelease, rel);
    u.Add(Method::kSync, v1::SyncRequest());
    seeds.push_back(u.Bytes());
  }
  {  // Sessions, plain buffers, profiles and device RPCs.
    Unary u;
    v1::OpenSessionRequest open;
    open.set_lease_ms(5000);
    u.Add(Method::kOpenSession, open);
    v1::CreateRequest c;
    c.set_session(1);
    c.set_data("hello world");
    u.Add(Method::kCreate, c);
    v1::EmptyRequest e;
    e.set_session(1);
    e.set_size(300);
    u.Add(Method::kEmpty, e);
    v1::StartProfileRequest sp;
    sp.set_session(1);
    u.Add(Method::kStartProfile, sp);
    v1::ExecuteRequest copy;
    copy.set_session(1);
    SetBuiltin(copy.mutable_kernel(), "copy", v1::ELEM_TYPE_I32);
    SetStatic(copy.mutable_count());
    AddBuffers(copy.mutable_bindings(), {1, 2}, Meta({{2}, {2}}));
    u.Add(Method::kExecute, copy);
    v1::FlushRequest f;
    f.set_session(1);
    u.Add(Method::kFlush, f);
    v1::EndProfileRequest ep;
    ep.set_session(1);
    u.Add(Method::kEndProfile, ep);
    u.Add(Method::kMemoryUsage, v1::MemoryUsageRequest());
    u.Add(Method::kMemoryCleanup, v1::MemoryCleanupRequest());
    u.Add(Method::kGetInfo, v1::GetInfoRequest());
    v1::CloseSessionRequest close;
    close.set_session(1);
    u.Add(Method::kCloseSession, close);
    seeds.push_back(u.Bytes());
  }
  return seeds;
}

// Metadata blocks (mode byte 2) of contiguous tensors.
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

// Writes a program (mode byte 3) in the encoding of program.h.
class ProgramWriter {
 public:
  ProgramWriter() : bytes_(1, '\3') {}
  ProgramWriter& Op(fuzz::ProgramOp op) { return Byte(op); }
  ProgramWriter& Byte(uint8_t b) {
    bytes_.push_back(static_cast<char>(b));
    return *this;
  }
  // A num operand: the one-byte selector when `v` has one, else the raw escape.
  ProgramWriter& Num(uint64_t v) {
    for (int s = 0; s < 0xff; ++s) {
      if (fuzz::EdgeValue(static_cast<uint8_t>(s)) == v) return Byte(static_cast<uint8_t>(s));
    }
    Byte(0xff);
    for (int i = 0; i < 8; ++i) Byte(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  // The index-th handle of the request's session (creation order).
  ProgramWriter& Handle(uint8_t index) { return Byte(index); }
  ProgramWriter& FreshId() { return Byte(0); }
  ProgramWriter& Session(uint8_t index) { return Byte(index); }
  ProgramWriter& Binding(uint8_t handle, uint64_t start = 0, uint64_t end = 0) {
    return Handle(handle).Num(start).Num(end);
  }
  ProgramWriter& Shape(std::initializer_list<uint64_t> dims) {
    Byte(static_cast<uint8_t>(dims.size()));
    for (uint64_t d : dims) Num(d);
    return *this;
  }
  ProgramWriter& DenseStrides() { return Byte(0); }
  ProgramWriter& ZeroStrides() { return Byte(1); }
  ProgramWriter& Strides(std::initializer_list<uint64_t> strides) {
    Byte(2);
    for (uint64_t s : strides) Num(s);
    return *this;
  }
  // A list header: `distinct` elements follow, repeated kRepeats[repeat] times (program.h).
  ProgramWriter& List(uint8_t distinct, uint8_t repeat = 0) {
    return Byte(static_cast<uint8_t>(distinct | (repeat << 3)));
  }
  ProgramWriter& Data(uint64_t n, uint8_t fill = 1) { return Num(n).Byte(fill); }
  // A builtin kernel operand: `name` by its index in kernels::BuiltinKernelNames() (an unknown
  // name by the index one past them), dtype, out_dtype, axis.
  ProgramWriter& Builtin(const std::string& name, v1::ElemType dtype,
                         v1::ElemType out = v1::ELEM_TYPE_UNSPECIFIED, uint64_t axis = 0) {
    const std::vector<std::string> names = kernels::BuiltinKernelNames();
    const size_t index = std::find(names.begin(), names.end(), name) - names.begin();
    return Byte(0).Byte(static_cast<uint8_t>(index)).Byte(dtype).Byte(out).Num(axis);
  }
  const std::string& Bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// The buffers a seed binds for a builtin kernel (docs/kernel-abi.md): three for the binary
// kernels, gather and matmul (max and min also reduce, with two), one for fill, two for the rest.
int SeedBuffers(const std::string& kernel) {
  for (const char* three : {"add", "div", "gather", "matmul", "max", "min", "mul", "pow", "sub"}) {
    if (kernel == three) return 3;
  }
  return kernel == "fill" ? 1 : 2;
}

std::vector<std::string> ProgramSeeds() {
  std::vector<std::string> seeds;
  // Short programs, one or two requests each: most mutations land on an operand that matters.
  auto add = [&](const ProgramWriter& p) { seeds.push_back(p.Bytes()); };
  {
    ProgramWriter p;
    p.Op(fuzz::kOpCreate).Session(0).Data(16);
    p.Op(fuzz::kOpReadTensor).Session(0).List(1).Binding(0).Shape({4}).DenseStrides().Num(4);
    add(p);
  }
  {
    ProgramWriter p;
    p.Op(fuzz::kOpCreateTensor).Session(0).Shape({2, 4}).Num(4).Byte(0);
    p.Op(fuzz::kOpRead).Session(0).List(1).Binding(0, 4, 4);
    add(p);
  }
  {  // A broadcast (one element read three times), bound twice.
    ProgramWriter p;
    p.Op(fuzz::kOpCreate).Session(0).Data(8);
    p.Op(fuzz::kOpReadTensor).Session(0).List(1, 1).Binding(0).Shape({3}).ZeroStrides().Num(4);
    add(p);
  }
  {  // The same in the stream: a 2x2 broadcast of one row.
    ProgramWriter p;
    p.Op(fuzz::kOpStreamCreate).FreshId().Byte(0).Data(8);
    p.Op(fuzz::kOpStreamReadTensor).List(1, 1).Binding(0).Shape({2, 2}).Strides({0, 1}).Num(4);
    p.Byte(0);
    add(p);
  }
  {
    ProgramWriter p;
    p.Op(fuzz::kOpEmptyTensor).Session(0).Shape({2, 4}).Num(4);
    p.Op(fuzz::kOpGetResource).Session(0).Binding(0, 8, 0);
    p.Op(fuzz::kOpRelease).Session(0).List(1).Handle(0);
    add(p);
  }
  {
    ProgramWriter p;
    p.Op(fuzz::kOpEmpty).Session(0).Num(64);
    p.Op(fuzz::kOpExecute).Session(0).Builtin("fill", v1::ELEM_TYPE_F32);
    p.Byte(0).Num(1).Num(1).Num(1).List(1).Binding(0).Byte(1);
    p.Byte(1).Byte(v1::ELEM_TYPE_F32).Byte(1).Num(3).Byte(0);  // One f32 scalar: 3.
    add(p);
  }
  {
    ProgramWriter p;
    p.Op(fuzz::kOpStreamCreate).FreshId().Byte(0).Data(16);
    p.Op(fuzz::kOpStreamReadTensor).List(1).Binding(0).Shape({2, 2}).Strides({2, 1}).Num(4);
    p.Byte(0);
    add(p);
  }
  {
    ProgramWriter p;
    p.Op(fuzz::kOpStreamCreateTensor).FreshId().Shape({4}).Num(4).Byte(0).Byte(0);
    p.Op(fuzz::kOpStreamRead).List(1).Binding(0).Byte(1).Num(8).Byte(0);  // Bulk, 8-byte chunks.
    add(p);
  }
  {
    ProgramWriter p;
    p.Op(fuzz::kOpStreamCreate).FreshId().Byte(1).Num(64).Byte(0).Num(16);  // Bulk, 16-byte chunks.
    p.Op(fuzz::kOpStreamRelease).List(1).Handle(0);
    add(p);
  }
  {
    ProgramWriter p;
    p.Op(fuzz::kOpStreamEmptyTensor).FreshId().Shape({2, 2}).Num(4);
    p.Op(fuzz::kOpStreamOther).Byte(1);  // Sync.
    add(p);
  }
  {
    ProgramWriter p;
    p.Op(fuzz::kOpOpenSession).Num(5000).Byte(1);
    p.Op(fuzz::kOpCreate).Session(1).Data(16);
    p.Op(fuzz::kOpCloseSession).Session(1);
    add(p);
  }
  // Longer programs: requests that build on each other.
  {  // Unary: buffers and tensors in the first session, an add, every kind of read, release.
    ProgramWriter p;
    p.Op(fuzz::kOpCreate).Session(0).Data(16);                            // handle 0
    p.Op(fuzz::kOpCreateTensor).Session(0).Shape({2, 4}).Num(4).Byte(2);  // handle 1
    p.Op(fuzz::kOpEmptyTensor).Session(0).Shape({2, 4}).Num(4);           // handle 2
    p.Op(fuzz::kOpExecute).Session(0).Builtin("add", v1::ELEM_TYPE_F32);
    p.Byte(0).Num(1).Num(1).Num(1);                                      // Static count 1x1x1.
    p.List(3).Binding(1).Binding(1).Binding(2).Byte(1).Byte(0).Byte(0);  // Metadata; checked.
    p.Op(fuzz::kOpRead).Session(0).List(2).Binding(2).Binding(0, 4, 4);
    p.Op(fuzz::kOpReadTensor).Session(0).List(1);
    p.Binding(0).Shape({4}).DenseStrides().Num(4);
    p.Op(fuzz::kOpReadTensor).Session(0).List(2, 1);  // Two bindings, twice.
    p.Binding(1).Shape({4, 2}).Strides({1, 4}).Num(4);
    p.Binding(2).Shape({3}).ZeroStrides().Num(4);  // A broadcast: one element three times.
    p.Op(fuzz::kOpGetResource).Session(0).Binding(1, 8);
    p.Op(fuzz::kOpSessionCall).Byte(1).Session(0);  // Sync.
    p.Op(fuzz::kOpDeviceCall).Byte(0);
    p.Op(fuzz::kOpRelease).Session(0).List(2).Handle(0).Handle(1);
    seeds.push_back(p.Bytes());
  }
  {  // The session stream: the same, with client ids.
    ProgramWriter p;
    p.Op(fuzz::kOpStreamCreate).FreshId().Byte(0).Data(16);
    p.Op(fuzz::kOpStreamCreateTensor).FreshId().Shape({2, 4}).Num(4).Byte(0).Byte(2);
    p.Op(fuzz::kOpStreamEmptyTensor).FreshId().Shape({2, 4}).Num(4);
    p.Op(fuzz::kOpStreamExecute).Builtin("mul", v1::ELEM_TYPE_F32);
    p.Byte(0).Num(1).Num(1).Num(1);
    p.List(3).Binding(1).Binding(1).Binding(2).Byte(1).Byte(0).Byte(0);
    p.Op(fuzz::kOpStreamRead).List(1).Binding(2).Byte(0);
    p.Op(fuzz::kOpStreamReadTensor).List(1).Binding(0).Shape({2, 2}).Strides({2, 1}).Num(4);
    p.Byte(0);
    p.Op(fuzz::kOpStreamOther).Byte(1);  // Sync.
    p.Op(fuzz::kOpStreamRelease).List(1).Handle(0);
    p.Op(fuzz::kOpStreamOther).Byte(2);  // memory_usage.
    seeds.push_back(p.Bytes());
  }
  {  // Bulk transfers: creates uploaded in chunks, reads downloaded in pieces.
    ProgramWriter p;
    p.Op(fuzz::kOpStreamCreate).FreshId().Byte(1).Num(1000).Byte(0).Num(256);
    p.Op(fuzz::kOpStreamCreateTensor).FreshId().Shape({16, 16}).Num(4).Byte(1).Byte(0).Num(0);
    p.Op(fuzz::kOpStreamRead).List(1).Binding(0, 10, 10).Byte(1).Num(100).Byte(0);
    p.Op(fuzz::kOpStreamReadTensor).List(2).Binding(1).Shape({16, 16}).DenseStrides().Num(4);
    p.Binding(1).Shape({8, 8}).Strides({32, 2}).Num(4).Byte(1).Num(64).Byte(0);
    p.Op(fuzz::kOpStreamCreate).FreshId().Byte(1).Num(64).Byte(0x41).Num(0).Num(32);  // Short.
    p.Op(fuzz::kOpStreamOther).Byte(1);
    seeds.push_back(p.Bytes());
  }
  {  // Sessions: a quota principal's session, another stream, leases, expiry.
    ProgramWriter p;
    p.Op(fuzz::kOpOpenSession).Num(5000).Byte(1);
    p.Op(fuzz::kOpEmpty).Session(1).Num(4096);
    p.Op(fuzz::kOpCreateTensor).Session(1).Shape({8}).Num(8).Byte(4);
    p.Op(fuzz::kOpRead).Session(1).List(1).Binding(1, 0, 8);
    p.Op(fuzz::kOpSessionCall).Byte(2).Session(1);  // StartProfile.
    p.Op(fuzz::kOpSessionCall).Byte(3).Session(1);  // EndProfile.
    p.Op(fuzz::kOpStreamReopen).Num(60000).Byte(1);
    p.Op(fuzz::kOpStreamEmpty).FreshId().Num(128);
    p.Op(fuzz::kOpStreamOther).Byte(1);
    p.Op(fuzz::kOpTime).Num(1000);
    p.Op(fuzz::kOpCloseSession).Session(1);
    p.Op(fuzz::kOpDeviceCall).Byte(1);
    seeds.push_back(p.Bytes());
  }
  {  // Every builtin kernel and an unknown one, one with a dynamic count, fill with a scalar.
    ProgramWriter p;
    p.Op(fuzz::kOpCreateTensor).Session(0).Shape({4, 4}).Num(4).Byte(0);  // 0
    p.Op(fuzz::kOpEmptyTensor).Session(0).Shape({4, 4}).Num(4);           // 1
    p.Op(fuzz::kOpCreate).Session(0).Data(12, 0xff);                      // 2: the count 1,1,1.
    for (int i = 0; i < 3; ++i) p.Byte(1).Byte(0).Byte(0).Byte(0);
    std::vector<std::string> names = kernels::BuiltinKernelNames();
    names.push_back("no_such_kernel");
    for (const std::string& name : names) {
      const v1::ElemType out = name == "cast" ? v1::ELEM_TYPE_I32 : v1::ELEM_TYPE_UNSPECIFIED;
      p.Op(fuzz::kOpExecute).Session(0).Builtin(name, v1::ELEM_TYPE_F32, out, /*axis=*/1);
      if (name == "relu") {
        p.Byte(1).Binding(2);  // Dynamic count.
      } else {
        p.Byte(0).Num(1).Num(1).Num(1);
      }
      switch (SeedBuffers(name)) {
        case 1:
          p.List(1).Binding(1).Byte(1);
          p.Byte(1).Byte(v1::ELEM_TYPE_F32).Byte(1).Num(2);  // One f32 scalar: 2.
          break;
        case 3:
          p.List(3).Binding(0).Binding(0).Binding(1).Byte(1).Byte(0);
          break;
        default:
          p.List(2).Binding(0).Binding(1).Byte(1).Byte(0);
          break;
      }
      p.Byte(0);  // mode
    }
    p.Op(fuzz::kOpReadTensor).Session(0).List(1).Binding(1).Shape({4, 4}).Strides({1, 4}).Num(4);
    seeds.push_back(p.Bytes());
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
  for (auto* more : {&cubed::UnarySeeds, &cubed::MetadataSeeds, &cubed::ProgramSeeds}) {
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
