// CudaKernelCompiler: builtin programs and client code through NVRTC, cached in memory and in
// options.cache_dir.

#include <algorithm>
#include <chrono>
#include <list>
#include <map>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/crypto/sha256.h"
#include "common/cuda/nvrtc_api.h"
#include "common/status_macros.h"
#include "kernels/cuda/builtin_catalog.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/disk_cache.h"
#include "kernels/cuda/embedded_sources.h"
#include "kernels/cuda/nvrtc_program.h"

namespace cubed::kernels {
namespace {

// Bump when the record layout or the meaning of a key changes.
constexpr absl::string_view kCacheVersion = "cubed-kernel-cache-v1";

// Client options NVRTC may take: exact flags, and prefixes of flags with a value.
constexpr absl::string_view kClientFlags[] = {"-default-device",
                                              "--device-as-default-execution-space",
                                              "-use_fast_math",
                                              "--use_fast_math",
                                              "-lineinfo",
                                              "--generate-line-info",
                                              "-restrict",
                                              "--restrict",
                                              "-w",
                                              "--disable-warnings",
                                              "-G",
                                              "--device-debug",
                                              "-extra-device-vectorization",
                                              "--extra-device-vectorization"};
constexpr absl::string_view kClientPrefixes[] = {"-D",
                                                 "--define-macro=",
                                                 "-U",
                                                 "--undefine-macro=",
                                                 "-std=",
                                                 "--std=",
                                                 "-ftz=",
                                                 "--ftz=",
                                                 "-prec-div=",
                                                 "--prec-div=",
                                                 "-prec-sqrt=",
                                                 "--prec-sqrt=",
                                                 "-fmad=",
                                                 "--fmad=",
                                                 "-maxrregcount=",
                                                 "--maxrregcount=",
                                                 "-dopt=",
                                                 "--dopt=",
                                                 "-diag-suppress=",
                                                 "--diag-suppress="};

absl::Status CheckClientOption(const std::string& option) {
  for (absl::string_view f : kClientFlags) {
    if (option == f) return absl::OkStatus();
  }
  for (absl::string_view p : kClientPrefixes) {
    if (absl::StartsWith(option, p) && option.size() > p.size()) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "NVRTC option '", option.substr(0, 100),
      "' is not allowed for client kernels (the daemon sets the architecture and include paths; "
      "allowed: -D, -U, -std=, -use_fast_math, -ftz=, -prec-div=, -prec-sqrt=, -fmad=, "
      "-lineinfo, -maxrregcount=, -restrict, -default-device, -G, -dopt=, -w, -diag-suppress=, "
      "-extra-device-vectorization)"));
}

// True when `ptx` declares a kernel named `entry`: ".entry <entry>" followed by "(" or space.
bool PtxDeclaresEntry(absl::string_view ptx, absl::string_view entry) {
  const std::string needle = absl::StrCat(".entry ", entry);
  for (size_t pos = ptx.find(needle); pos != absl::string_view::npos;
       pos = ptx.find(needle, pos + 1)) {
    const size_t end = pos + needle.size();
    if (end < ptx.size() && (ptx[end] == '(' || ptx[end] == ' ' || ptx[end] == '\n' ||
                             ptx[end] == '\t' || ptx[end] == '\r')) {
      return true;
    }
  }
  return false;
}

absl::StatusOr<std::string> KeyOf(absl::string_view kind, const NvrtcApi& api,
                                  const NvrtcInput& input) {
  Sha256 h;
  h.UpdateField(kCacheVersion);
  h.UpdateField(kind);
  h.UpdateField(absl::StrCat(api.version_major, ".", api.version_minor));
  h.UpdateField(input.cubin ? "cubin" : "ptx");
  h.UpdateField(absl::StrCat(input.options.size()));
  for (const std::string& o : input.options) h.UpdateField(o);
  h.UpdateField(absl::StrCat(input.expressions.size()));
  for (const std::string& e : input.expressions) h.UpdateField(e);
  h.UpdateField(absl::StrCat(input.headers.size()));
  for (const auto& [name, text] : input.headers) {
    h.UpdateField(name);
    h.UpdateField(text);
  }
  h.UpdateField(input.name);
  h.UpdateField(input.source);
  ASSIGN_OR_RETURN(const std::string digest, h.Finish());
  return absl::BytesToHexString(digest);
}

const char* EmbeddedText(absl::string_view name) {
  for (size_t i = 0; i < kNumEmbeddedCudaSources; ++i) {
    if (name == kEmbeddedCudaSources[i].name) return kEmbeddedCudaSources[i].text;
  }
  return nullptr;
}

}  // namespace

class CudaKernelCompiler::Impl {
 public:
  Impl(const NvrtcApi* api, CudaCompilerOptions options, std::string target, bool cubin)
      : api_(api),
        options_(std::move(options)),
        target_(std::move(target)),
        cubin_(cubin),
        programs_(CudaBuiltinPrograms().size()) {
    if (!options_.cache_dir.empty()) disk_.emplace(options_.cache_dir);
  }

  const std::string& target() const { return target_; }

  absl::StatusOr<const CompiledCudaKernel*> Builtin(const BuiltinCall& call, size_t num_buffers) {
    absl::StatusOr<CudaBuiltinKernel> kernel =
        FindCudaBuiltin(call.name, num_buffers, call.dtype, call.out_dtype, call.index_dtype);
    if (!kernel.ok()) return kernel.status();
    std::pair<size_t, std::string> id(kernel->program, kernel->expression);
    if (auto it = builtins_.find(id); it != builtins_.end()) {
      ++hits_;
      return it->second.get();
    }
    const CudaBuiltinProgram& program = CudaBuiltinPrograms()[kernel->program];
    if (programs_[kernel->program] == nullptr) {
      absl::StatusOr<Compiled> compiled = CompileBuiltinProgram(program);
      if (!compiled.ok()) return compiled.status();
      programs_[kernel->program] = std::make_unique<Compiled>(*std::move(compiled));
    }
    const Compiled& compiled = *programs_[kernel->program];
    auto entry = std::make_unique<CompiledCudaKernel>();
    entry->image = compiled.output.image;
    entry->is_cubin = compiled.output.is_cubin;
    entry->cache_key = compiled.key;
    entry->log = compiled.output.log;
    for (const auto& [expression, lowered] : compiled.output.lowered) {
      if (expression == kernel->expression) entry->entry_point = lowered;
    }
    if (entry->entry_point.empty()) {
      return absl::InternalError(
          absl::StrCat("builtin program ", program.name, " lacks kernel ", kernel->expression));
    }
    const CompiledCudaKernel* result = entry.get();
    builtins_.emplace(std::move(id), std::move(entry));
    return result;
  }

  absl::StatusOr<const CompiledCudaKernel*> Client(absl::string_view code, absl::string_view entry,
                                                   absl::Span<const std::string> options,
                                                   bool is_ptx) {
    if (entry.empty()) return absl::InvalidArgumentError("kernel entry point is empty");
    if (code.empty()) return absl::InvalidArgumentError("kernel code is empty");
    NvrtcInput input;
    input.name = "client.cu";
    input.source = std::string(code);
    input.expressions = {std::string(entry)};
    input.cubin = cubin_;
    if (is_ptx) {
      if (!options.empty()) {
        return absl::InvalidArgumentError("compile options are not accepted with PTX code");
      }
      if (code.find('\0') != absl::string_view::npos) {
        return absl::InvalidArgumentError("PTX code contains a NUL byte");
      }
    } else {
      for (const std::string& o : options) {
        if (absl::Status s = CheckClientOption(o); !s.ok()) return s;
      }
      input.options = BaseOptions();
      input.options.insert(input.options.end(), options.begin(), options.end());
    }
    ASSIGN_OR_RETURN(const std::string key, KeyOf(is_ptx ? "ptx" : "cuda", *api_, input));
    if (auto it = clients_.find(key); it != clients_.end()) {
      ++hits_;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return it->second.kernel.get();
    }
    NvrtcOutput output;
    if (is_ptx) {
      if (!PtxDeclaresEntry(code, entry)) {
        return absl::InvalidArgumentError(
            absl::StrCat("PTX code declares no kernel '.entry ", entry.substr(0, 200), "'"));
      }
      output.image = std::string(code);
      output.image.push_back('\0');
      output.lowered.emplace_back(std::string(entry), std::string(entry));
      ++misses_;
    } else {
      absl::StatusOr<NvrtcOutput> compiled = CompileCached(key, input);
      if (!compiled.ok()) return compiled.status();
      output = *std::move(compiled);
    }
    auto kernel = std::make_unique<CompiledCudaKernel>();
    kernel->image = std::move(output.image);
    kernel->is_cubin = output.is_cubin;
    kernel->entry_point = output.lowered.empty() ? std::string(entry) : output.lowered[0].second;
    kernel->cache_key = key;
    kernel->log = std::move(output.log);
    return Insert(key, std::move(kernel));
  }

  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }
  uint64_t disk_hits() const { return disk_hits_; }
  uint64_t disk_write_failures() const { return disk_write_failures_; }
  uint64_t compile_microseconds() const { return compile_us_; }

 private:
  struct Compiled {
    std::string key;
    NvrtcOutput output;
  };
  struct ClientEntry {
    std::unique_ptr<CompiledCudaKernel> kernel;
    std::list<std::string>::iterator lru;
  };

  std::vector<std::string> BaseOptions() const {
    return {absl::StrCat("--gpu-architecture=", target_), "-std=c++17"};
  }

  absl::StatusOr<Compiled> CompileBuiltinProgram(const CudaBuiltinProgram& program) {
    NvrtcInput input;
    input.name = absl::StrCat(program.name, ".cu");
    input.source = absl::StrCat("#include \"", program.source, "\"\n");
    for (size_t i = 0; i < kNumEmbeddedCudaSources; ++i) {
      input.headers.emplace_back(kEmbeddedCudaSources[i].name, kEmbeddedCudaSources[i].text);
    }
    if (EmbeddedText(program.source) == nullptr) {
      return absl::InternalError(absl::StrCat("builtin source ", program.source, " not embedded"));
    }
    input.options = BaseOptions();
    input.expressions = program.expressions;
    input.cubin = cubin_;
    Compiled out;
    ASSIGN_OR_RETURN(out.key, KeyOf("builtin", *api_, input));
    absl::StatusOr<NvrtcOutput> output = CompileCached(out.key, input);
    if (!output.ok()) {
      return absl::InternalError(
          absl::StrCat("builtin CUDA program ", program.name,
                       " does not compile (a bug in cubed): ", output.status().message()));
    }
    out.output = *std::move(output);
    if (out.output.lowered.size() != input.expressions.size()) {
      return absl::InternalError(
          absl::StrCat("builtin CUDA program ", program.name, ": cached record lacks kernels"));
    }
    return out;
  }

  // The output for `key`: from cache_dir, else compiled and written there.
  absl::StatusOr<NvrtcOutput> CompileCached(const std::string& key, const NvrtcInput& input) {
    if (disk_.has_value()) {
      std::optional<NvrtcOutput> cached = disk_->Read(key);
      if (cached.has_value() && cached->lowered.size() == input.expressions.size()) {
        ++disk_hits_;
        return *std::move(cached);
      }
    }
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<NvrtcOutput> output = CompileWithNvrtc(*api_, input);
    compile_us_ += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                             std::chrono::steady_clock::now() - start)
                                             .count());
    ++misses_;
    if (!output.ok()) return output.status();
    // A failed write only costs a recompile in the next process; the daemon warns.
    if (disk_.has_value()) {
      if (absl::Status stored = disk_->Write(key, *output); !stored.ok()) {
        ++disk_write_failures_;
        if (options_.on_cache_write_error) options_.on_cache_write_error(stored);
      }
    }
    return output;
  }

  const CompiledCudaKernel* Insert(const std::string& key,
                                   std::unique_ptr<CompiledCudaKernel> kernel) {
    const size_t limit = std::max<size_t>(options_.max_memory_entries, 1);
    while (clients_.size() >= limit && !lru_.empty()) {
      clients_.erase(lru_.back());
      lru_.pop_back();
    }
    lru_.push_front(key);
    const CompiledCudaKernel* result = kernel.get();
    clients_[key] = ClientEntry{std::move(kernel), lru_.begin()};
    return result;
  }

  const NvrtcApi* const api_;
  const CudaCompilerOptions options_;
  const std::string target_;  // "sm_90" or "compute_120".
  const bool cubin_;
  std::optional<DiskCache> disk_;
  std::vector<std::unique_ptr<Compiled>> programs_;  // By CudaBuiltinPrograms() index.
  std::map<std::pair<size_t, std::string>, std::unique_ptr<CompiledCudaKernel>> builtins_;
  absl::flat_hash_map<std::string, ClientEntry> clients_;
  std::list<std::string> lru_;  // Client keys, most recently used first.
  uint64_t hits_ = 0, misses_ = 0, disk_hits_ = 0, compile_us_ = 0, disk_write_failures_ = 0;
};

absl::StatusOr<std::unique_ptr<CudaKernelCompiler>> CudaKernelCompiler::Create(
    CudaCompilerOptions options) {
  absl::StatusOr<const NvrtcApi*> loaded = NvrtcApi::Load();
  if (!loaded.ok()) return loaded.status();
  const NvrtcApi& api = **loaded;
  if (options.arch_major < 1 || options.arch_major > 99 || options.arch_minor < 0 ||
      options.arch_minor > 9) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid compute capability ", options.arch_major, ".", options.arch_minor));
  }
  int count = 0;
  NVRTC_RETURN_IF_ERROR(api, api.GetNumSupportedArchs(&count));
  std::vector<int> archs(static_cast<size_t>(std::max(count, 0)));
  if (count > 0) NVRTC_RETURN_IF_ERROR(api, api.GetSupportedArchs(archs.data()));
  const int arch = options.arch_major * 10 + options.arch_minor;
  std::string target;
  bool cubin = true;
  if (std::find(archs.begin(), archs.end(), arch) != archs.end()) {
    target = absl::StrCat("sm_", arch);
  } else if (!archs.empty() && arch > *std::max_element(archs.begin(), archs.end())) {
    target = absl::StrCat("compute_", *std::max_element(archs.begin(), archs.end()));
    cubin = false;
  } else {
    return absl::FailedPreconditionError(
        absl::StrCat("NVRTC ", api.version_major, ".", api.version_minor, " (", api.library,
                     ") cannot compile for compute capability ", options.arch_major, ".",
                     options.arch_minor, "; it supports sm_", absl::StrJoin(archs, ", sm_")));
  }
  return std::unique_ptr<CudaKernelCompiler>(new CudaKernelCompiler(
      std::make_unique<Impl>(&api, std::move(options), std::move(target), cubin)));
}

CudaKernelCompiler::CudaKernelCompiler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaKernelCompiler::~CudaKernelCompiler() = default;

const std::string& CudaKernelCompiler::target() const { return impl_->target(); }

absl::StatusOr<const CompiledCudaKernel*> CudaKernelCompiler::Builtin(const BuiltinCall& call,
                                                                      size_t num_buffers) {
  return impl_->Builtin(call, num_buffers);
}

absl::StatusOr<const CompiledCudaKernel*> CudaKernelCompiler::Client(
    absl::string_view code, absl::string_view entry, absl::Span<const std::string> options,
    bool is_ptx) {
  return impl_->Client(code, entry, options, is_ptx);
}

uint64_t CudaKernelCompiler::hits() const { return impl_->hits(); }
uint64_t CudaKernelCompiler::misses() const { return impl_->misses(); }
uint64_t CudaKernelCompiler::disk_hits() const { return impl_->disk_hits(); }
uint64_t CudaKernelCompiler::disk_write_failures() const { return impl_->disk_write_failures(); }
uint64_t CudaKernelCompiler::compile_microseconds() const { return impl_->compile_microseconds(); }

}  // namespace cubed::kernels
