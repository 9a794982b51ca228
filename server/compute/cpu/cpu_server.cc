#include "server/compute/cpu/cpu_server.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "kernels/builtin.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/validated_calls.h"
#include "storage/host_storage.h"

namespace cubed {
namespace {

uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return uint64_t{8} << 30;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

// Copies a strided tensor of `bytes` dense bytes (TensorBytes of its shape, > 0) into `out`,
// densely packed in row-major order.
void PackTensor(const uint8_t* base, const ResolvedTensor& t, uint64_t bytes, uint8_t* out) {
  const size_t rank = t.shape.size();
  const uint64_t elem = t.elem_size;
  const uint64_t cols = rank == 0 ? 1 : t.shape[rank - 1];
  const uint64_t rows = bytes / (cols * elem);  // No dimension is 0: bytes > 0.
  const uint64_t col_stride = rank == 0 ? 1 : t.strides[rank - 1];
  std::vector<uint64_t> index(rank, 0);
  for (uint64_t r = 0; r < rows; ++r) {
    uint64_t offset = 0;
    for (size_t d = 0; d + 1 < rank; ++d) offset += index[d] * t.strides[d];
    const uint8_t* src = base + offset * elem;
    if (col_stride == 1) {
      std::memcpy(out, src, cols * elem);
      out += cols * elem;
    } else {
      for (uint64_t c = 0; c < cols; ++c, out += elem)
        std::memcpy(out, src + c * col_stride * elem, elem);
    }
    for (size_t d = rank - 1; d-- > 0;) {  // Next row index, odometer style.
      if (++index[d] < t.shape[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace

template <typename F>
auto CpuServer::Timed(F&& work) -> decltype(work()) {
  // Only an open profile reads busy_: without one, no clock (two reads were ~13% of the loop's
  // time for a tiny execute on the 2-core VM).
  if (profiles_.empty()) return work();
  const absl::Time start = absl::Now();
  struct AddOnExit {
    absl::Duration* busy;
    absl::Time start;
    ~AddOnExit() { *busy += absl::Now() - start; }
  } add{&busy_, start};
  return work();
}

CpuServer::CpuServer(CpuServerOptions options)
    : test_lost_file_(options.test_lost_file),
      validated_calls_(std::make_unique<kernels::ValidatedCalls>()) {
  const uint64_t physical = PhysicalMemoryBytes();
  const uint64_t limit =
      options.memory_limit != 0
          ? options.memory_limit
          : std::max<uint64_t>(physical / 2 / std::max<uint32_t>(options.devices_sharing, 1), 1);
  storage_ = std::make_unique<HostStorage>();
  MemoryManagerOptions mm;
  mm.memory_limit = limit;
  mm.max_allocation = options.max_allocation != 0 ? std::min(options.max_allocation, limit) : limit;
  memory_ = std::make_unique<MemoryManager>(storage_.get(), mm);

  DeviceDescription& d = description_;
  d.backend = DeviceDescription::Backend::kCpu;
  d.index = options.index;
  d.name = absl::StrCat("host CPU (", std::thread::hardware_concurrency(), " threads)");
  d.memory_total = physical;
  d.memory_limit = limit;
  d.alignment = static_cast<uint32_t>(memory_->alignment());
  d.max_allocation = mm.max_allocation;
  d.max_cube_count[0] = 0x7fffffff;
  d.max_cube_count[1] = 65535;
  d.max_cube_count[2] = 65535;
  d.max_cube_dim[0] = 1024;
  d.max_cube_dim[1] = 1024;
  d.max_cube_dim[2] = 64;
  d.max_units_per_cube = 1024;
  d.compute_units = std::thread::hardware_concurrency();
  d.elem_types.assign(std::begin(kAllElemTypes), std::end(kAllElemTypes));
  d.matmul_types = kernels::BuiltinMatmulTypes();
  d.builtin_kernels = kernels::BuiltinKernelNames();
  d.features = {"builtin_kernels", "dynamic_cube_count", "profiling"};
}

CpuServer::~CpuServer() = default;

absl::StatusOr<uint8_t*> CpuServer::Address(const ResolvedBinding& binding) const {
  if (IsImportedSlice(binding.slice)) {
    auto it = imports_.find(binding.slice);
    if (it == imports_.end()) {
      return absl::NotFoundError(absl::StrCat("no imported slice ", binding.slice));
    }
    if (binding.offset + binding.size > it->second.bytes.size()) {
      return absl::InternalError(absl::StrCat("binding [", binding.offset, ", +", binding.size,
                                              ") exceeds its imported range of ",
                                              it->second.bytes.size(), " bytes"));
    }
    return it->second.bytes.data() + binding.offset;
  }
  ASSIGN_OR_RETURN(SliceLocation where, memory_->Locate(binding.slice));
  ASSIGN_OR_RETURN(StorageResource resource, storage_->Resource(where.storage));
  // Device checked the view against the slice; this guards the invariant against bugs.
  if (binding.offset + binding.size > where.size) {
    return absl::InternalError(absl::StrCat("binding [", binding.offset, ", +", binding.size,
                                            ") exceeds its slice of ", where.size, " bytes"));
  }
  return resource.host_ptr + where.offset + binding.offset;
}

absl::StatusOr<SliceId> CpuServer::Reserve(uint64_t size, MemoryOwner owner, uint64_t covered) {
  ASSIGN_OR_RETURN(Reservation r, memory_->Reserve(size, owner));
  if (!r.dirty) return r.slice;
  // Note [Owner-tagged memory] (storage/memory_manager.cc): the whole extent, padding included.
  absl::StatusOr<SliceLocation> where = memory_->Locate(r.slice);
  absl::StatusOr<StorageResource> page =
      where.ok() ? storage_->Resource(where->storage) : where.status();
  if (!page.ok()) {
    memory_->FreeUninitialized(r.slice);
    return page.status();
  }
  if (covered < where->extent) {
    uint8_t* slice = page->host_ptr + where->offset;
    Timed([&] { std::memset(slice + covered, 0, where->extent - covered); });
  }
  return r.slice;
}

absl::StatusOr<Allocation> CpuServer::Empty(uint64_t size, MemoryOwner owner) {
  ASSIGN_OR_RETURN(SliceId slice, Reserve(size, owner, /*covered=*/0));
  return Allocation{slice, size, {}};
}

absl::StatusOr<Allocation> CpuServer::ReserveTensor(absl::Span<const uint64_t> shape,
                                                    uint32_t elem_size, MemoryOwner owner,
                                                    uint64_t covered) {
  std::optional<uint64_t> count = CheckedProduct(shape);
  std::optional<uint64_t> bytes = count ? CheckedMul(*count, elem_size) : std::nullopt;
  if (!bytes) return absl::InvalidArgumentError("tensor size overflows 64 bits");
  ASSIGN_OR_RETURN(SliceId slice, Reserve(*bytes, owner, covered));
  Allocation a{slice, *bytes, std::vector<uint64_t>(shape.size())};
  uint64_t stride = 1;  // Host tensors are contiguous.
  for (size_t i = shape.size(); i-- > 0;) {
    a.strides[i] = stride;
    stride *= shape[i];
  }
  return a;
}

absl::StatusOr<Allocation> CpuServer::EmptyTensor(absl::Span<const uint64_t> shape,
                                                  uint32_t elem_size, MemoryOwner owner) {
  return ReserveTensor(shape, elem_size, owner, /*covered=*/0);
}

absl::StatusOr<Allocation> CpuServer::Create(absl::Span<const uint8_t> data, MemoryOwner owner) {
  ASSIGN_OR_RETURN(SliceId slice, Reserve(data.size(), owner, /*covered=*/data.size()));
  Allocation a{slice, data.size(), {}};
  absl::StatusOr<uint8_t*> dst = Address({a.slice, 0, a.size});
  if (!dst.ok()) {
    memory_->FreeUninitialized(a.slice);
    return dst.status();
  }
  Timed([&] { std::memcpy(*dst, data.data(), data.size()); });
  return a;
}

absl::StatusOr<Allocation> CpuServer::CreateTensor(absl::Span<const uint8_t> data,
                                                   absl::Span<const uint64_t> shape,
                                                   uint32_t elem_size, MemoryOwner owner) {
  ASSIGN_OR_RETURN(Allocation a, ReserveTensor(shape, elem_size, owner, /*covered=*/data.size()));
  absl::StatusOr<uint8_t*> dst = Address({a.slice, 0, a.size});
  if (!dst.ok() || data.size() != a.size) {
    memory_->FreeUninitialized(a.slice);
    if (!dst.ok()) return dst.status();
    return absl::InternalError("tensor data length differs from its allocation");
  }
  Timed([&] { std::memcpy(*dst, data.data(), data.size()); });
  return a;
}

void CpuServer::Free(SliceId slice) {
  if (IsImportedSlice(slice)) {
    imports_.erase(slice);  // Its keep_alive goes: the region may unmap now.
    return;
  }
  memory_->Free(slice);
}

absl::StatusOr<Allocation> CpuServer::Import(const ImportSource& source) {
  if (source.kind != ImportSource::Kind::kHost) {
    return absl::UnimplementedError(
        "the cpu backend cannot import CUDA memory (cuda_ipc); import a range of a "
        "shared-memory region instead, or use a daemon with --backend=cuda");
  }
  if (source.host_bytes.empty()) {
    return absl::InvalidArgumentError("import: the range is empty (size 0)");
  }
  const SliceId slice = kImportedSlice | next_import_++;
  imports_[slice] = Imported{source.host_bytes, source.keep_alive};
  return Allocation{slice, source.host_bytes.size(), {}};
}

ImportedMemory CpuServer::Imports() const {
  ImportedMemory m;
  for (const auto& [slice, imported] : imports_) {
    ++m.buffers;
    m.bytes += imported.bytes.size();
  }
  return m;
}

void CpuServer::Write(const ResolvedTensor& target, uint64_t dense_offset,
                      absl::Span<const absl::Span<const uint8_t>> pieces, DoneCallback done) {
  uint64_t size = 0;
  for (absl::Span<const uint8_t> piece : pieces) {
    const std::optional<uint64_t> sum = CheckedAdd(size, piece.size());
    if (!sum) {
      done(absl::InternalError("cpu Write: the pieces' sizes overflow"));
      return;
    }
    size = *sum;
  }
  uint64_t stride = 1;  // Dense row-major strides, as EmptyTensor lays tensors out.
  for (size_t i = target.shape.size(); i-- > 0;) {
    if (target.strides[i] != stride && target.shape[i] != 1) {
      done(absl::InternalError("cpu Write: the target layout is not dense"));
      return;
    }
    stride *= target.shape[i];
  }
  if (dense_offset > target.binding.size || size > target.binding.size - dense_offset) {
    done(absl::InternalError(absl::StrCat("cpu Write: [", dense_offset, ", +", size,
                                          ") exceeds the ", target.binding.size, "-byte target")));
    return;
  }
  absl::StatusOr<uint8_t*> dst = Address(target.binding);
  if (!dst.ok()) {
    done(dst.status());
    return;
  }
  Timed([&] {
    uint8_t* to = *dst + dense_offset;
    for (absl::Span<const uint8_t> piece : pieces) {
      if (piece.empty()) continue;
      std::memcpy(to, piece.data(), piece.size());
      to += piece.size();
    }
  });
  done(absl::OkStatus());
}

void CpuServer::Read(std::vector<ResolvedBinding> bindings, std::vector<std::string>* out,
                     DoneCallback done) {
  out->resize(bindings.size());
  absl::Status status = Timed([&]() -> absl::Status {
    for (size_t i = 0; i < bindings.size(); ++i) {
      ASSIGN_OR_RETURN(uint8_t * src, Address(bindings[i]));
      (*out)[i].assign(reinterpret_cast<const char*>(src), bindings[i].size);
    }
    return absl::OkStatus();
  });
  done(std::move(status));
}

void CpuServer::ReadTensor(std::vector<ResolvedTensor> tensors, std::vector<std::string>* out,
                           DoneCallback done) {
  out->resize(tensors.size());
  absl::Status status = Timed([&]() -> absl::Status {
    for (size_t i = 0; i < tensors.size(); ++i) {
      ASSIGN_OR_RETURN(uint8_t * src, Address(tensors[i].binding));
      ASSIGN_OR_RETURN(const uint64_t bytes,
                       TensorBytes(tensors[i].shape, tensors[i].elem_size, "tensor"));
      (*out)[i].resize(bytes);
      if (bytes == 0) continue;
      PackTensor(src, tensors[i], bytes, reinterpret_cast<uint8_t*>((*out)[i].data()));
    }
    return absl::OkStatus();
  });
  done(std::move(status));
}

void CpuServer::ReadTensorInto(std::vector<ResolvedTensor> tensors,
                               std::vector<absl::Span<uint8_t>> out, DoneCallback done) {
  absl::Status status = Timed([&]() -> absl::Status {
    for (size_t i = 0; i < tensors.size(); ++i) {
      ASSIGN_OR_RETURN(uint8_t * src, Address(tensors[i].binding));
      ASSIGN_OR_RETURN(const uint64_t bytes,
                       TensorBytes(tensors[i].shape, tensors[i].elem_size, "tensor"));
      if (bytes != out[i].size()) {
        return absl::InternalError(
            absl::StrCat("read into: ", out[i].size(), " bytes of room for a tensor of ", bytes));
      }
      if (bytes == 0) continue;
      PackTensor(src, tensors[i], bytes, out[i].data());
    }
    return absl::OkStatus();
  });
  done(std::move(status));
}

namespace {

// A checkpoint batch (Note [Checkpoint I/O]): large enough that a batch costs its I/O, not its
// call; within one writev/preadv (IOV_MAX = 1024).
constexpr uint64_t kHostBatchBytes = uint64_t{16} << 20;
constexpr size_t kHostBatchChunks = 1024;

// Cuts allocations at `bases` (sizes[i] bytes each) into chunks and hands them to `sink` in
// batches of at most kHostBatchBytes and kHostBatchChunks.
absl::Status HandOut(absl::Span<uint8_t* const> bases, absl::Span<const uint64_t> sizes,
                     HostChunkCallback sink) {
  std::vector<HostChunk> batch;
  uint64_t batch_bytes = 0;
  for (size_t i = 0; i < bases.size(); ++i) {
    for (uint64_t offset = 0; offset < sizes[i];) {
      const uint64_t n = std::min(sizes[i] - offset, kHostBatchBytes - batch_bytes);
      batch.push_back(
          HostChunk{i, offset, absl::MakeSpan(bases[i] + offset, n), offset + n == sizes[i]});
      offset += n;
      batch_bytes += n;
      if (batch_bytes == kHostBatchBytes || batch.size() == kHostBatchChunks) {
        RETURN_IF_ERROR(sink(batch));
        batch.clear();
        batch_bytes = 0;
      }
    }
  }
  if (!batch.empty()) RETURN_IF_ERROR(sink(batch));
  return absl::OkStatus();
}

}  // namespace

absl::Status CpuServer::ReadToHost(absl::Span<const ResolvedBinding> bindings,
                                   HostChunkCallback sink) {
  std::vector<uint8_t*> bases(bindings.size());
  std::vector<uint64_t> sizes(bindings.size());
  for (size_t i = 0; i < bindings.size(); ++i) {
    ASSIGN_OR_RETURN(bases[i], Address(bindings[i]));
    sizes[i] = bindings[i].size;
  }
  return Timed([&] { return HandOut(bases, sizes, sink); });
}

absl::StatusOr<std::vector<Allocation>> CpuServer::CreateFromHost(absl::Span<const uint64_t> sizes,
                                                                  MemoryOwner owner,
                                                                  HostChunkCallback fill) {
  std::vector<Allocation> out;
  std::vector<uint8_t*> bases;
  out.reserve(sizes.size());
  bases.reserve(sizes.size());
  auto free_all = [&] {
    for (const Allocation& a : out) memory_->FreeUninitialized(a.slice);
  };
  for (uint64_t size : sizes) {
    absl::StatusOr<SliceId> slice = Reserve(size, owner, /*covered=*/size);
    absl::StatusOr<uint8_t*> base =
        slice.ok() ? Address({*slice, 0, size}) : absl::StatusOr<uint8_t*>(slice.status());
    if (slice.ok()) out.push_back(Allocation{*slice, size, {}});
    if (!base.ok()) {
      free_all();
      return base.status();
    }
    bases.push_back(*base);
  }
  if (absl::Status s = Timed([&] { return HandOut(bases, sizes, fill); }); !s.ok()) {
    free_all();
    return s;
  }
  return out;
}

absl::StatusOr<ResourceDescription> CpuServer::GetResource(const ResolvedBinding& binding) {
  if (IsImportedSlice(binding.slice)) {  // Not a page of the pools: no storage id.
    RETURN_IF_ERROR(Address(binding).status());
    ResourceDescription r;
    r.offset = binding.offset;
    r.size = binding.size;
    return r;
  }
  ASSIGN_OR_RETURN(SliceLocation where, memory_->Locate(binding.slice));
  ResourceDescription r;
  r.storage_id = where.storage;
  r.offset = where.offset + binding.offset;
  r.size = binding.size;
  return r;
}

absl::Status CpuServer::CopyWithin(const ResolvedBinding& from, const ResolvedBinding& to) {
  if (from.size != to.size) {
    return absl::InternalError(
        absl::StrCat("copy of ", from.size, " bytes into a binding of ", to.size));
  }
  ASSIGN_OR_RETURN(uint8_t * src, Address(from));
  ASSIGN_OR_RETURN(uint8_t * dst, Address(to));
  Timed([&] { std::memmove(dst, src, from.size); });
  return absl::OkStatus();
}

absl::Status CpuServer::Execute(const Launch& launch) {
  if (!lost_.ok()) return lost_;
  if (!test_lost_file_.empty() && access(test_lost_file_.c_str(), F_OK) == 0) {
    lost_ = absl::UnavailableError(
        absl::StrCat("device lost: ", test_lost_file_, " exists (a test lost this device)"));
    if (on_lost_ != nullptr) on_lost_(lost_);
    return lost_;
  }
  if (!launch.Kernel().is_builtin) {
    return absl::UnimplementedError(
        "the cpu backend runs builtin kernels only; cuda_source and ptx kernels need the cuda "
        "backend");
  }
  if (launch.count.dynamic) {
    // The count is read as the kernel would read it; builtin kernels cover their output whatever
    // the count, so it is only validated.
    ASSIGN_OR_RETURN(uint8_t * src, Address(launch.count.binding));
    uint32_t xyz[3];
    std::memcpy(xyz, src, sizeof(xyz));
    for (int i = 0; i < 3; ++i) {
      if (xyz[i] == 0 || xyz[i] > description_.max_cube_count[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "dynamic cube count: ", std::string(1, "xyz"[i]), " = ", xyz[i],
            " read from the binding is outside 1 .. ", description_.max_cube_count[i]));
      }
    }
  }
  absl::InlinedVector<kernels::HostBuffer, 4> buffers(launch.buffers.size());
  absl::InlinedVector<uint64_t, 4> sizes(launch.buffers.size());
  for (size_t i = 0; i < launch.buffers.size(); ++i) {
    ASSIGN_OR_RETURN(buffers[i].data, Address(launch.buffers[i]));
    buffers[i].size_bytes = sizes[i] = launch.buffers[i].size;
  }
  const kernels::BuiltinCall& call = launch.Kernel().builtin;
  return Timed([&]() -> absl::Status {
    ASSIGN_OR_RETURN(const kernels::ValidatedCall* v, validated_calls_->Validate(call, sizes));
    return kernels::RunValidatedCpu(*v->def, call, v->meta, buffers);
  });
}

absl::StatusOr<ProfileToken> CpuServer::StartProfile() {
  const ProfileToken token = next_profile_++;
  profiles_[token] = busy_;
  return token;
}

void CpuServer::EndProfile(ProfileToken token, DurationCallback done) {
  auto it = profiles_.find(token);
  if (it == profiles_.end()) {
    done(absl::InternalError(absl::StrCat("unknown profile token ", token)));
    return;
  }
  const absl::Duration elapsed = busy_ - it->second;
  profiles_.erase(it);
  done(elapsed);
}

}  // namespace cubed
