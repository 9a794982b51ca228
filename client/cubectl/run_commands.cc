// cubectl run / profile: one builtin kernel on handles of the joined session.

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/cubectl/commands.h"
#include "client/cubectl/output.h"
#include "client/cubectl/tensor_refs.h"
#include "common/status_macros.h"

namespace cubed::cubectl {
namespace {

constexpr char kRunUsage[] =
    "usage: cubectl --session=ID run KERNEL --dtype=f32 [--axis=N] [--out-dtype=T] "
    "[--index-dtype=i32|i64] --in=HANDLE:SHAPE... --out=HANDLE:SHAPE|new:SHAPE... "
    "[--scalar=V...]";

// A launch assembled from the command line. Outputs given as new:SHAPE are allocated here and
// kept alive on the daemon (their ids are reported).
struct Launch {
  BuiltinKernel kernel;
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  std::vector<Scalars> scalars;
};

absl::StatusOr<Scalars> ParseScalars(ElemType dtype, const std::vector<std::string>& texts) {
  Scalars scalars;
  scalars.elem = dtype;
  for (const auto& text : texts) {
    bool ok;
    if (IsFloat(dtype)) {
      ok = absl::SimpleAtod(text, &scalars.floats.emplace_back());
    } else if (IsSigned(dtype)) {
      ok = absl::SimpleAtoi(text, &scalars.ints.emplace_back());
    } else {
      ok = absl::SimpleAtoi(text, &scalars.uints.emplace_back());
    }
    if (!ok) {
      return UsageError(absl::StrCat("--scalar: '", text, "' is not a ", ElemTypeName(dtype)));
    }
  }
  return scalars;
}

bool IsComparison(absl::string_view name) {
  return name == "eq" || name == "ne" || name == "lt" || name == "le" || name == "gt" ||
         name == "ge";
}

// Element type of input `index` of `kernel`, as docs/kernel-abi.md gives it: where's condition
// is bool, gather's indices have index_dtype, every other input has the kernel's dtype.
ElemType InputElem(const BuiltinKernel& kernel, size_t index) {
  if (kernel.name == "where" && index == 0) return ElemType::kBool;
  if (kernel.name == "gather" && index == 1) return kernel.index_dtype;
  return kernel.dtype;
}

// Element type of the outputs: argmax writes i64 and the comparisons bool whatever out_dtype
// says; cast writes out_dtype; the others their dtype (out_dtype defaults to it).
ElemType OutputElem(const BuiltinKernel& kernel) {
  if (kernel.name == "argmax") return ElemType::kI64;
  if (IsComparison(kernel.name)) return ElemType::kBool;
  return kernel.out_dtype;
}

absl::StatusOr<Launch> PrepareLaunch(const Context& ctx, Client& client) {
  const auto& words = ctx.args.positional();
  if (words.size() != 2 || !ctx.args.Has("dtype")) return UsageError(kRunUsage);
  Launch launch;
  launch.kernel.name = words[1];
  ASSIGN_OR_RETURN(launch.kernel.dtype, ParseDtypeFlag("--dtype", *ctx.args.Get("dtype")));
  launch.kernel.out_dtype = launch.kernel.dtype;
  if (auto text = ctx.args.Get("out-dtype")) {
    ASSIGN_OR_RETURN(launch.kernel.out_dtype, ParseDtypeFlag("--out-dtype", *text));
  }
  if (auto text = ctx.args.Get("index-dtype")) {
    ASSIGN_OR_RETURN(launch.kernel.index_dtype, ParseDtypeFlag("--index-dtype", *text));
  }
  if (auto text = ctx.args.Get("axis")) {
    ASSIGN_OR_RETURN(uint64_t axis, ParseUint("--axis", *text));
    if (axis >= 8) return UsageError("--axis: must be below 8");
    launch.kernel.axis = static_cast<uint32_t>(axis);
  }
  const ElemType out_elem = OutputElem(launch.kernel);

  const std::vector<std::string> ins = ctx.args.GetAll("in");
  const std::vector<std::string> outs = ctx.args.GetAll("out");
  if (outs.empty())
    return UsageError(absl::StrCat("run: at least one --out is needed\n", kRunUsage));
  // Parse everything before touching the daemon, so a usage error allocates nothing.
  std::vector<TensorRef> in_refs, out_refs;
  for (const auto& text : ins) {
    ASSIGN_OR_RETURN(TensorRef ref, ParseTensorRef("--in", text));
    if (ref.id == 0) return UsageError(absl::StrCat("--in=", text, ": inputs must name a handle"));
    in_refs.push_back(std::move(ref));
  }
  for (const auto& text : outs) {
    ASSIGN_OR_RETURN(TensorRef ref, ParseTensorRef("--out", text));
    out_refs.push_back(std::move(ref));
  }
  if (ctx.args.Has("scalar")) {
    ASSIGN_OR_RETURN(Scalars scalars, ParseScalars(launch.kernel.dtype, ctx.args.GetAll("scalar")));
    launch.scalars.push_back(std::move(scalars));
  }

  for (size_t i = 0; i < in_refs.size(); ++i) {
    ASSIGN_OR_RETURN(Tensor t, AttachTensor(client, in_refs[i].id, in_refs[i].shape,
                                            InputElem(launch.kernel, i)));
    launch.inputs.push_back(std::move(t));
  }
  for (const auto& ref : out_refs) {
    if (ref.id != 0) {
      ASSIGN_OR_RETURN(Tensor t, AttachTensor(client, ref.id, ref.shape, out_elem));
      launch.outputs.push_back(std::move(t));
    } else {
      ASSIGN_OR_RETURN(Tensor t, client.EmptyTensor(ref.shape, ElemSize(out_elem)));
      launch.outputs.push_back(std::move(t));
    }
  }
  return launch;
}

// Keeps new outputs alive after this process and lists every output handle.
Field OutputsField(Launch& launch) {
  std::vector<std::string> ids;
  for (Tensor& t : launch.outputs) ids.push_back(absl::StrCat(t.handle.Detach()));
  return ListField("outputs", ids);
}

}  // namespace

absl::Status RunCommand(const Context& ctx) {
  RETURN_IF_ERROR(RequireSession(ctx.global, "run"));
  ASSIGN_OR_RETURN(std::unique_ptr<Client> client, ConnectClient(ctx.global));
  ASSIGN_OR_RETURN(Launch launch, PrepareLaunch(ctx, *client));
  RETURN_IF_ERROR(client->Execute(launch.kernel, launch.inputs, launch.outputs, launch.scalars));
  RETURN_IF_ERROR(client->Sync().get());
  PrintReport({TextField("kernel", launch.kernel.name),
               TextField("dtype", ElemTypeName(launch.kernel.dtype)), OutputsField(launch)},
              ctx.global.json, *ctx.out);
  return absl::OkStatus();
}

absl::Status ProfileCommand(const Context& ctx) {
  RETURN_IF_ERROR(RequireSession(ctx.global, "profile"));
  ASSIGN_OR_RETURN(std::unique_ptr<Client> client, ConnectClient(ctx.global));
  ASSIGN_OR_RETURN(Launch launch, PrepareLaunch(ctx, *client));
  RETURN_IF_ERROR(client->StartProfile());
  absl::Status run = client->Execute(launch.kernel, launch.inputs, launch.outputs, launch.scalars);
  // End the profile even when the launch failed, so the session can be profiled again.
  absl::StatusOr<absl::Duration> duration = client->EndProfile();
  RETURN_IF_ERROR(run);
  RETURN_IF_ERROR(duration.status());
  PrintReport({TextField("kernel", launch.kernel.name),
               TextField("dtype", ElemTypeName(launch.kernel.dtype)), OutputsField(launch),
               DurationField("duration", *duration)},
              ctx.global.json, *ctx.out);
  return absl::OkStatus();
}

}  // namespace cubed::cubectl
