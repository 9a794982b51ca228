// cubectl info, memory, cleanup.

#include "absl/strings/str_cat.h"
#include "client/cubectl/commands.h"
#include "client/cubectl/output.h"
#include "common/status_macros.h"
#include "cubed/v1/compute.pb.h"
#include "cubed/v1/types.pb.h"

namespace cubed::cubectl {
namespace {

std::vector<Field> UsageFields(const MemoryUsage& usage) {
  return {NumberField("number_allocs", usage.number_allocs),
          SizeField("bytes_in_use", usage.bytes_in_use),
          SizeField("bytes_padding", usage.bytes_padding),
          SizeField("bytes_reserved", usage.bytes_reserved)};
}

std::string BackendName(v1::DeviceInfo::Backend backend) {
  switch (backend) {
    case v1::DeviceInfo::BACKEND_CPU:
      return "cpu";
    case v1::DeviceInfo::BACKEND_CUDA:
      return "cuda";
    default:
      return absl::StrCat("unknown (", static_cast<int>(backend), ")");
  }
}

}  // namespace

absl::Status InfoCommand(const Context& ctx) {
  ASSIGN_OR_RETURN(std::unique_ptr<Client> client, ConnectClient(ctx.global));
  ASSIGN_OR_RETURN(DaemonInfo info, client->GetInfo());
  const v1::DeviceInfo& d = info.device;
  std::vector<std::string> elem_types;
  for (int t : d.elem_types()) {
    absl::StatusOr<ElemType> type = ElemTypeFromWire(t, "elem_types");
    elem_types.push_back(type.ok() ? std::string(ElemTypeName(*type)) : absl::StrCat(t));
  }
  const auto& count = d.max_cube_count();
  const auto& dim = d.max_cube_dim();
  std::vector<Field> fields = {
      TextField("version", info.version),
      NumberField("devices", info.devices),
      NumberField("device", d.device()),
      TextField("backend", BackendName(d.backend())),
      TextField("name", d.name()),
      SizeField("memory_total", d.memory_total()),
      SizeField("memory_limit", d.memory_limit()),
      SizeField("alignment", d.alignment()),
      SizeField("max_allocation", d.max_allocation()),
      RawField("max_cube_count", absl::StrCat(count.x(), " x ", count.y(), " x ", count.z()),
               absl::StrCat("[", count.x(), ", ", count.y(), ", ", count.z(), "]")),
      RawField("max_cube_dim", absl::StrCat(dim.x(), " x ", dim.y(), " x ", dim.z()),
               absl::StrCat("[", dim.x(), ", ", dim.y(), ", ", dim.z(), "]")),
      NumberField("max_units_per_cube", d.max_units_per_cube()),
      NumberField("compute_units", d.compute_units()),
      RawField("compute_capability", d.compute_capability().empty() ? "-" : d.compute_capability(),
               JsonQuote(d.compute_capability())),
      RawField("uuid", d.uuid().empty() ? "-" : d.uuid(), JsonQuote(d.uuid())),
      ListField("elem_types", elem_types),
      ListField("builtin_kernels", {d.builtin_kernels().begin(), d.builtin_kernels().end()}),
      ListField("features", {d.features().begin(), d.features().end()}),
  };
  PrintReport(fields, ctx.global.json, *ctx.out);
  return absl::OkStatus();
}

// The pools' four numbers, then the imported memory beside them (ImportMemory: other processes'
// memory that handles map, which the four never count).
absl::Status MemoryCommand(const Context& ctx) {
  ASSIGN_OR_RETURN(std::unique_ptr<Client> client, ConnectClient(ctx.global));
  v1::MemoryUsageRequest request;
  request.set_device(client->options().device);
  ASSIGN_OR_RETURN(std::string bytes,
                   client->CallUnary("/cubed.v1.Compute/MemoryUsage", request.SerializeAsString()));
  v1::MemoryUsageResponse response;
  if (!response.ParseFromString(bytes)) {
    return absl::InternalError("MemoryUsage: the daemon's answer does not parse");
  }
  const v1::MemoryUsage& u = response.usage();
  std::vector<Field> fields = UsageFields(
      MemoryUsage{u.number_allocs(), u.bytes_in_use(), u.bytes_padding(), u.bytes_reserved()});
  fields.push_back(SizeField("imported_bytes", response.imported_bytes()));
  fields.push_back(NumberField("imported_buffers", response.imported_buffers()));
  PrintReport(fields, ctx.global.json, *ctx.out);
  return absl::OkStatus();
}

absl::Status CleanupCommand(const Context& ctx) {
  ASSIGN_OR_RETURN(std::unique_ptr<Client> client, ConnectClient(ctx.global));
  ASSIGN_OR_RETURN(MemoryUsage usage, client->MemoryCleanup());
  PrintReport(UsageFields(usage), ctx.global.json, *ctx.out);
  return absl::OkStatus();
}

}  // namespace cubed::cubectl
