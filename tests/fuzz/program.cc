#include "tests/fuzz/program.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/elem_type.h"
#include "common/kernel_metadata.h"
#include "cubed/v1/compute.pb.h"
#include "cubed/v1/session.pb.h"
#include "kernels/builtin.h"
#include "server/auth/rpc.h"
#include "server/channel/session.h"
#include "tests/fuzz/harness.h"
#include "tests/fuzz/stream_client.h"
#include "tests/fuzz/unary_client.h"

namespace cubed::fuzz {
namespace {

constexpr int kMaxOps = 64;
// Data operands stop just past 64 KiB (past the quota principal's byte quotas; the memory
// limit is reached with empty): larger strings would make most inputs slow.
constexpr uint64_t kMaxData = (uint64_t{64} << 10) + 1;
constexpr uint32_t kRepeats[8] = {1, 2, 3, 4, 8, 16, 64, 1025};

using Dims = google::protobuf::RepeatedField<uint64_t>;
using Role = ProgramField::Role;

// The program's bytes, read front to back; past the end every byte reads 0. With a layout, it
// records the role of every byte it reads (ProgramLayout).
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, std::vector<ProgramField>* layout)
      : data_(data), size_(size), layout_(layout) {}
  bool empty() const { return pos_ >= size_; }
  uint8_t Byte(ProgramField::Role role) {
    if (pos_ >= size_) return 0;
    if (layout_ != nullptr) layout_->push_back({static_cast<uint32_t>(pos_), role});
    return data_[pos_++];
  }
  uint64_t Num() {
    const uint8_t v = Byte(Role::kNum);
    if (v != 0xff) return EdgeValue(v);
    uint64_t raw = 0;
    for (int i = 0; i < 8; ++i) raw |= uint64_t{Byte(Role::kRaw)} << (8 * i);
    return raw;
  }
  uint32_t Num32() { return static_cast<uint32_t>(Num()); }
  // Up to `n` next bytes (not recorded: data).
  std::string Take(uint64_t n) {
    n = std::min<uint64_t>(n, size_ - std::min(pos_, size_));
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  std::vector<ProgramField>* layout_;
  size_t pos_ = 0;
};

// `n` bytes: fill, fill + 1, ... for the first 256 (enough to tell elements apart), then fill.
std::string Pattern(uint64_t n, uint8_t fill) {
  std::string s(n, static_cast<char>(fill));
  for (uint64_t i = 0; i < std::min<uint64_t>(n, 256); ++i) s[i] = static_cast<char>(fill + i);
  return s;
}

const std::vector<std::string>& BuiltinNames() {
  static const auto* names = new std::vector<std::string>(kernels::BuiltinKernelNames());
  return *names;
}

// As compute_service.cc LeaseOf: a millisecond count as a Duration, clamped to 100 years.
absl::Duration Millis(uint64_t ms) {
  constexpr uint64_t kMaxMs = uint64_t{100} * 365 * 24 * 3600 * 1000;
  return absl::Milliseconds(static_cast<int64_t>(std::min(ms, kMaxMs)));
}

// Decodes and runs a program. With a layout it only decodes (nothing reaches the device), which
// reads the same bytes: the decoding depends on the bytes alone, never on what requests return.
class Program {
 public:
  Program(const uint8_t* data, size_t size, std::vector<ProgramField>* layout = nullptr)
      : in_(data, size, layout), dry_(layout != nullptr), stream_(unary_) {}

  void Run() {
    if (!dry_ && !unary_.Start()) return;
    for (int n = 0; n < kMaxOps && !in_.empty(); ++n) {
      const ProgramOp op = static_cast<ProgramOp>(in_.Byte(Role::kOp) % kNumProgramOps);
      if (op < kOpStreamCreate) {
        UnaryOp(op);
      } else {
        StreamOp(op);
      }
    }
    if (dry_) return;
    stream_.Close();
    unary_.Finish();
  }

 private:
  // Runs `call` (a request) unless the program is only being decoded.
  template <typename Call>
  void Send(Call call) {
    if (!dry_) call();
  }
  void UnaryOp(ProgramOp op);
  void StreamOp(ProgramOp op);
  v1::Command NextCommand();
  Transfer Upload();
  Transfer Download();

  // Operands (program.h). Sessions and handles are wire numbers, as a client puts them in its
  // requests; the typed ids that unary_ and stream_ remember become them with .value().
  uint64_t Session() {
    const uint8_t s = in_.Byte(Role::kChoice);
    const std::vector<SessionId>& sessions = unary_.sessions();
    if (s >= 0x80) return in_.Num();
    return sessions.empty() ? s : sessions[s % sessions.size()].value();  // Empty only when dry.
  }
  uint64_t Handle(uint64_t session) { return Handle(session, in_.Byte(Role::kChoice)); }
  uint64_t Handle(uint64_t session, uint8_t h);
  uint64_t ClientId();
  // A graph id of the stream's session: mostly 0 .. 3 (so that ids collide), else any number.
  uint64_t GraphId() {
    return (in_.Byte(Role::kChoice) & 1) ? in_.Byte(Role::kChoice) % 4 : in_.Num();
  }
  v1::Binding Binding(uint64_t session);
  void Shape(Dims* shape);
  void Strides(const Dims& shape, Dims* strides);
  v1::BindingWithMeta Tensor(uint64_t session);
  template <typename Decode>
  auto List(Decode decode) -> std::vector<decltype(decode())>;
  std::string Data();
  std::string TensorData(const Dims& shape, uint32_t elem_size);
  // Fills an ExecuteRequest or a Command.Execute (the same fields).
  template <typename Execute>
  void ExecuteOf(uint64_t session, Execute* e);
  // Returns the element size of the kernel's dtype (4 when it has none).
  uint32_t Kernel(v1::Kernel* k);
  void Metadata(uint64_t session, uint32_t elem, v1::Bindings* b);
  void Scalars(v1::Bindings* b);

  Reader in_;
  const bool dry_;
  UnaryClient unary_;
  StreamClient stream_;
  uint64_t seq_ = 0;
  uint64_t next_client_id_ = kFirstClientId;
};

uint64_t Program::Handle(uint64_t session, uint8_t h) {
  if (h >= 0x80) return in_.Num();
  const std::vector<KnownHandle>& known = unary_.handles();
  if (known.empty()) return h;
  auto of_session = [&](const KnownHandle& k) { return k.session.value() == session; };
  const size_t in_session = std::count_if(known.begin(), known.end(), of_session);
  if (in_session == 0) return known[h % known.size()].id.value();
  size_t pick = h % in_session;
  for (const KnownHandle& k : known) {
    if (of_session(k) && pick-- == 0) return k.id.value();
  }
  return h;  // Unreachable.
}

uint64_t Program::ClientId() {
  const uint8_t i = in_.Byte(Role::kChoice);
  if (i < 0x80) return next_client_id_++;
  if (i < 0xc0) return Handle(stream_.session().value(), i - 0x80);
  return in_.Num();
}

v1::Binding Program::Binding(uint64_t session) {
  v1::Binding b;
  b.set_handle(Handle(session));
  b.set_offset_start(in_.Num());
  b.set_offset_end(in_.Num());
  return b;
}

void Program::Shape(Dims* shape) {
  const int rank = in_.Byte(Role::kCount) % 10;
  for (int i = 0; i < rank; ++i) shape->Add(in_.Num());
}

void Program::Strides(const Dims& shape, Dims* strides) {
  const uint8_t m = in_.Byte(Role::kChoice);
  switch (m % 4) {
    case 0: {  // Dense row-major (wrapping, like a client computing them naively).
      strides->Resize(shape.size(), 0);
      uint64_t stride = 1;
      for (int i = shape.size(); i-- > 0;) {
        strides->Set(i, stride);
        stride *= shape.Get(i);
      }
      return;
    }
    case 1:
      strides->Resize(shape.size(), 0);
      return;
    case 2:
      for (int i = 0; i < shape.size(); ++i) strides->Add(in_.Num());
      return;
    default:
      for (int i = 0; i < (m >> 2) % 10; ++i) strides->Add(in_.Num());
      return;
  }
}

v1::BindingWithMeta Program::Tensor(uint64_t session) {
  v1::BindingWithMeta t;
  *t.mutable_binding() = Binding(session);
  Shape(t.mutable_shape());
  Strides(t.shape(), t.mutable_strides());
  t.set_elem_size(in_.Num32());
  return t;
}

template <typename Decode>
auto Program::List(Decode decode) -> std::vector<decltype(decode())> {
  const uint8_t c = in_.Byte(Role::kList);
  std::vector<decltype(decode())> distinct;
  for (int i = 0; i < c % 8; ++i) distinct.push_back(decode());
  if (dry_) return distinct;  // The copies read no bytes.
  std::vector<decltype(decode())> out;
  const uint32_t repeats = kRepeats[(c >> 3) % 8];
  out.reserve(distinct.size() * repeats);
  for (uint32_t r = 0; r < repeats; ++r) out.insert(out.end(), distinct.begin(), distinct.end());
  return out;
}

std::string Program::Data() {
  const uint64_t n = std::min(in_.Num(), kMaxData);
  const uint8_t fill = in_.Byte(Role::kChoice);
  if (fill != 0xff) return Pattern(n, fill);
  std::string s = in_.Take(n);
  s.resize(n, '\0');
  return s;
}

std::string Program::TensorData(const Dims& shape, uint32_t elem_size) {
  const uint8_t d = in_.Byte(Role::kChoice);
  if (d & 1) return Data();
  const std::optional<uint64_t> bytes =
      DenseBytes(std::vector<uint64_t>(shape.begin(), shape.end()), elem_size);
  return bytes && *bytes <= kMaxData ? Pattern(*bytes, d) : std::string();
}

uint32_t Program::Kernel(v1::Kernel* k) {
  const uint8_t kind = in_.Byte(Role::kChoice);
  switch (kind % 4) {
    case 0: {
      v1::BuiltinKernel* b = k->mutable_builtin();
      const std::vector<std::string>& names = BuiltinNames();
      const size_t name = in_.Byte(Role::kChoice) % (names.size() + 1);
      b->set_name(name < names.size() ? names[name] : "no_such_kernel");
      b->set_dtype(static_cast<v1::ElemType>(in_.Byte(Role::kChoice) % 7));
      b->set_out_dtype(static_cast<v1::ElemType>(in_.Byte(Role::kChoice) % 7));
      b->set_axis(in_.Num32());
      b->set_allow_tf32((kind & 0x80) != 0);
      absl::StatusOr<ElemType> dtype = ElemTypeFromWire(b->dtype(), "dtype");
      return dtype.ok() ? ElemSize(*dtype) : 4;
    }
    case 1:
    case 2: {
      const bool ptx = kind % 4 == 2;
      v1::CubeDim* dim =
          ptx ? k->mutable_ptx()->mutable_cube_dim() : k->mutable_cuda_source()->mutable_cube_dim();
      dim->set_x(in_.Num32());
      dim->set_y(in_.Num32());
      dim->set_z(in_.Num32());
      if (ptx) {
        k->mutable_ptx()->set_ptx(".version 7.0\n.target sm_80\n");
        k->mutable_ptx()->set_entry_point("k");
        k->mutable_ptx()->set_shared_memory_bytes(in_.Num32());
      } else {
        k->mutable_cuda_source()->set_source("extern \"C\" __global__ void k(float* x) {}");
        k->mutable_cuda_source()->set_entry_point("k");
        k->mutable_cuda_source()->set_shared_memory_bytes(in_.Num32());
      }
      return 4;
    }
    default:
      return 4;  // No kernel set.
  }
}

void Program::Metadata(uint64_t session, uint32_t elem, v1::Bindings* b) {
  const uint8_t m = in_.Byte(Role::kChoice);
  if (m % 4 == 0) return;
  std::vector<uint32_t> words;
  if (m % 4 == 3) {
    const int n = in_.Byte(Role::kCount) % 64;
    for (int i = 0; i < n; ++i) words.push_back(in_.Num32());
  } else {
    // Every buffer a tensor: its elements after the offsets, laid out as it was created.
    std::vector<uint64_t> lens;
    std::vector<TensorLayout> layouts;
    for (const v1::Binding& buffer : b->buffers()) {
      std::vector<uint64_t> shape;
      uint64_t bytes = 0;
      for (const KnownHandle& h : unary_.handles()) {
        if (h.session.value() != session || h.id.value() != buffer.handle()) continue;
        shape = h.shape;
        bytes = h.size;
      }
      const uint64_t cut = buffer.offset_start() + buffer.offset_end();
      bytes = cut <= bytes ? bytes - cut : bytes;
      lens.push_back(bytes / elem);
      const std::optional<uint64_t> dense = DenseBytes(shape, elem);
      const bool keep = !shape.empty() && shape.size() <= kMaxRank && dense && *dense == bytes;
      layouts.push_back(
          TensorLayout::Contiguous(keep ? shape : std::vector<uint64_t>{lens.back()}));
    }
    // The replacement is read whatever the encoding gives: decoding depends on bytes alone.
    const uint8_t index = m % 4 == 2 ? in_.Byte(Role::kChoice) : 0;
    const uint32_t word = m % 4 == 2 ? in_.Num32() : 0;
    absl::StatusOr<std::vector<uint32_t>> encoded = EncodeKernelMetadata(lens, layouts);
    if (!encoded.ok()) return;
    words = *std::move(encoded);
    if (m % 4 == 2 && !words.empty()) words[index % words.size()] = word;
  }
  for (uint32_t w : words) b->add_metadata(w);
}

void Program::Scalars(v1::Bindings* b) {
  const int groups = in_.Byte(Role::kCount) % 4;
  for (int g = 0; g < groups; ++g) {
    v1::ScalarGroup* group = b->add_scalars();
    const uint8_t e = in_.Byte(Role::kChoice);
    group->set_elem(static_cast<v1::ElemType>(e % 7));
    // Bits 3-4 pick the value list: 0 the one the type needs, else floats, ints or uints.
    int list = (e >> 3) % 4;
    if (list == 0) {
      const v1::ElemType t = group->elem();
      list = t == v1::ELEM_TYPE_F32 || t == v1::ELEM_TYPE_F64 ? 1 : t == v1::ELEM_TYPE_U32 ? 3 : 2;
    }
    const int n = in_.Byte(Role::kCount) % 8;
    for (int i = 0; i < n; ++i) {
      const uint64_t v = in_.Num();
      if (list == 1) {
        group->add_floats(static_cast<double>(static_cast<int64_t>(v)));
      } else if (list == 2) {
        group->add_ints(static_cast<int64_t>(v));
      } else {
        group->add_uints(v);
      }
    }
  }
}

template <typename Execute>
void Program::ExecuteOf(uint64_t session, Execute* e) {
  const uint32_t elem = Kernel(e->mutable_kernel());
  if (in_.Byte(Role::kChoice) & 1) {
    *e->mutable_count()->mutable_dynamic() = Binding(session);
  } else {
    v1::CubeCount::Static* s = e->mutable_count()->mutable_static_count();
    s->set_x(in_.Num32());
    s->set_y(in_.Num32());
    s->set_z(in_.Num32());
  }
  v1::Bindings* b = e->mutable_bindings();
  for (v1::Binding& buffer : List([&] { return Binding(session); })) {
    *b->add_buffers() = std::move(buffer);
  }
  Metadata(session, elem, b);
  Scalars(b);
  e->set_mode(static_cast<v1::ExecutionMode>(in_.Byte(Role::kChoice) % 4));
}

void Program::UnaryOp(ProgramOp op) {
  switch (op) {
    case kOpOpenSession: {
      v1::OpenSessionRequest r;
      r.set_lease_ms(in_.Num());
      const uint8_t flags = in_.Byte(Role::kChoice);
      r.set_device((flags >> 1) & 1);
      Send([&] { unary_.OpenSession(r, flags & 1); });
      return;
    }
    case kOpCloseSession: {
      v1::CloseSessionRequest r;
      r.set_session(Session());
      Send([&] { unary_.CloseSession(r); });
      return;
    }
    case kOpCreate: {
      v1::CreateRequest r;
      r.set_session(Session());
      r.set_data(Data());
      Send([&] { unary_.Create(r); });
      return;
    }
    case kOpCreateTensor: {
      v1::CreateTensorRequest r;
      r.set_session(Session());
      Shape(r.mutable_shape());
      r.set_elem_size(in_.Num32());
      r.set_data(TensorData(r.shape(), r.elem_size()));
      Send([&] { unary_.CreateTensor(r); });
      return;
    }
    case kOpEmpty: {
      v1::EmptyRequest r;
      r.set_session(Session());
      r.set_size(in_.Num());
      Send([&] { unary_.Empty(r); });
      return;
    }
    case kOpEmptyTensor: {
      v1::EmptyTensorRequest r;
      r.set_session(Session());
      Shape(r.mutable_shape());
      r.set_elem_size(in_.Num32());
      Send([&] { unary_.EmptyTensor(r); });
      return;
    }
    case kOpRead: {
      v1::ReadRequest r;
      r.set_session(Session());
      for (v1::Binding& b : List([&] { return Binding(r.session()); })) {
        *r.add_bindings() = std::move(b);
      }
      Send([&] { unary_.Read(r); });
      return;
    }
    case kOpReadTensor: {
      v1::ReadTensorRequest r;
      r.set_session(Session());
      for (v1::BindingWithMeta& t : List([&] { return Tensor(r.session()); })) {
        *r.add_bindings() = std::move(t);
      }
      Send([&] { unary_.ReadTensor(r); });
      return;
    }
    case kOpGetResource: {
      v1::GetResourceRequest r;
      r.set_session(Session());
      *r.mutable_binding() = Binding(r.session());
      Send([&] { unary_.GetResource(r); });
      return;
    }
    case kOpExecute: {
      v1::ExecuteRequest r;
      r.set_session(Session());
      ExecuteOf(r.session(), &r);
      Send([&] { unary_.Execute(r); });
      return;
    }
    case kOpSessionCall: {
      constexpr Method kCalls[] = {Method::kFlush, Method::kSync, Method::kStartProfile,
                                   Method::kEndProfile};
      const Method method = kCalls[in_.Byte(Role::kChoice) % 4];
      const uint64_t session = Session();
      Send([&] { unary_.SessionCall(method, session); });
      return;
    }
    case kOpDeviceCall: {
      constexpr Method kCalls[] = {Method::kMemoryUsage, Method::kMemoryCleanup, Method::kGetInfo};
      const Method method = kCalls[in_.Byte(Role::kChoice) % 3];
      Send([&] { unary_.DeviceCall(method, 0); });
      return;
    }
    case kOpRelease: {
      v1::ReleaseRequest r;
      r.set_session(Session());
      for (uint64_t h : List([&] { return Handle(r.session()); })) r.add_handles(h);
      Send([&] { unary_.Release(r); });
      return;
    }
    case kOpTime: {
      const absl::Time later = absl::Now() + Millis(in_.Num());
      Send([&] {
        NoThrow("ExpireSessions", [&] { return unary_.device().ExpireSessions(later); });
      });
      return;
    }
    default:
      return;
  }
}

v1::Command Program::NextCommand() {
  v1::Command c;
  c.set_seq(++seq_);
  return c;
}

Transfer Program::Upload() {
  Transfer t;
  const uint8_t u = in_.Byte(Role::kChoice);
  if (u & 0x40) {
    t.explicit_chunks = true;
    for (int i = 0; i < u % 8; ++i) {
      const uint64_t offset = in_.Num();
      t.chunks.emplace_back(offset, in_.Num());
    }
  } else {
    t.chunk_bytes = in_.Num();
  }
  if (u & 0x80) t.cancel_after = (u >> 3) % 8;
  return t;
}

Transfer Program::Download() {
  Transfer t;
  t.chunk_bytes = in_.Num();
  const uint8_t c = in_.Byte(Role::kChoice);
  if (c & 0x80) t.cancel_after = c % 128;
  return t;
}

void Program::StreamOp(ProgramOp op) {
  if (op == kOpStreamReopen) {
    v1::SessionRequest::Open open;
    open.set_lease_ms(in_.Num());
    const bool quota_owner = in_.Byte(Role::kChoice) & 1;
    Send([&] { stream_.Open(open, quota_owner); });
    return;
  }
  // Without a principal the open does not fail; if it did, StreamClient::Run would skip the
  // command.
  Send([&] {
    if (!stream_.is_open()) stream_.Open(v1::SessionRequest::Open(), false);
  });
  const uint64_t s = stream_.session().value();
  v1::Command c = NextCommand();
  Transfer transfer;
  switch (op) {
    case kOpStreamCreate: {
      v1::Command::Create* create = c.mutable_create();
      create->set_id(ClientId());
      if (in_.Byte(Role::kChoice) & 1) {
        create->set_bulk_size(in_.Num());
        transfer = Upload();
      } else {
        create->set_data(Data());
      }
      break;
    }
    case kOpStreamCreateTensor: {
      v1::Command::CreateTensor* t = c.mutable_create_tensor();
      t->set_id(ClientId());
      Shape(t->mutable_shape());
      t->set_elem_size(in_.Num32());
      if (in_.Byte(Role::kChoice) & 1) {
        t->set_bulk(true);
        transfer = Upload();
      } else {
        t->set_data(TensorData(t->shape(), t->elem_size()));
      }
      break;
    }
    case kOpStreamEmpty:
      c.mutable_empty()->set_id(ClientId());
      c.mutable_empty()->set_size(in_.Num());
      break;
    case kOpStreamEmptyTensor: {
      v1::Command::EmptyTensor* t = c.mutable_empty_tensor();
      t->set_id(ClientId());
      Shape(t->mutable_shape());
      t->set_elem_size(in_.Num32());
      break;
    }
    case kOpStreamExecute:
      ExecuteOf(s, c.mutable_execute());
      break;
    case kOpStreamRelease:
      for (uint64_t id : List([&] { return Handle(s); })) c.mutable_release()->add_ids(id);
      break;
    case kOpStreamRead: {
      v1::Command::Read* read = c.mutable_read();
      for (v1::Binding& b : List([&] { return Binding(s); })) *read->add_bindings() = std::move(b);
      if (in_.Byte(Role::kChoice) & 1) {
        read->set_bulk(true);
        transfer = Download();
      }
      break;
    }
    case kOpStreamReadTensor: {
      v1::Command::ReadTensor* read = c.mutable_read_tensor();
      for (v1::BindingWithMeta& t : List([&] { return Tensor(s); })) {
        *read->add_bindings() = std::move(t);
      }
      if (in_.Byte(Role::kChoice) & 1) {
        read->set_bulk(true);
        transfer = Download();
      }
      break;
    }
    default:
      switch (in_.Byte(Role::kChoice) % 12) {
        case 0:
          c.mutable_flush();
          break;
        case 1:
          c.mutable_sync();
          break;
        case 2:
          c.mutable_memory_usage();
          break;
        case 3:
          c.mutable_memory_cleanup();
          break;
        case 4:
          c.mutable_start_profile();
          break;
        case 5:
          c.mutable_end_profile();
          break;
        case 6:
          break;  // No kind set.
        case 7:   // Recorded graphs: few ids, so that they collide, or any number.
          c.mutable_begin_graph()->set_graph(GraphId());
          for (uint64_t id : List([&] { return Handle(s); })) {
            c.mutable_begin_graph()->add_parameters(id);
          }
          break;
        case 8:
          c.mutable_end_graph();
          break;
        case 9:
          c.mutable_replay_graph()->set_graph(GraphId());
          for (uint64_t id : List([&] { return Handle(s); })) {
            c.mutable_replay_graph()->add_bindings(id);
          }
          break;
        case 10:
          c.mutable_release_graph()->set_graph(GraphId());
          break;
        default:
          c.set_seq(--seq_);  // The previous command's seq again.
          c.mutable_sync();
          break;
      }
      break;
  }
  Send([&] { stream_.Run(c, transfer); });
}

}  // namespace

void RunProgram(const uint8_t* data, size_t size) { Program(data, size).Run(); }

std::vector<ProgramField> ProgramLayout(const uint8_t* data, size_t size) {
  std::vector<ProgramField> layout;
  Program(data, size, &layout).Run();
  return layout;
}

}  // namespace cubed::fuzz
