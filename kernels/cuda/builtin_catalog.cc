#include "kernels/cuda/builtin_catalog.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cubed::kernels {
namespace {

using Mask = uint32_t;
constexpr Mask Bit(ElemType t) { return Mask{1} << static_cast<uint32_t>(t); }
constexpr Mask kFloat =
    Bit(ElemType::kF32) | Bit(ElemType::kF64) | Bit(ElemType::kF16) | Bit(ElemType::kBF16);
constexpr Mask kSigned =
    kFloat | Bit(ElemType::kI32) | Bit(ElemType::kI64) | Bit(ElemType::kI8) | Bit(ElemType::kI16);
constexpr Mask kNumeric = kSigned | Bit(ElemType::kU32) | Bit(ElemType::kU8) | Bit(ElemType::kU16);
// bool: fill, copy, cast, max, min, comparisons.
constexpr Mask kAll = kNumeric | Bit(ElemType::kBool);

// One builtin (as kernels/builtin_registry.cc lists them, sorted by name) and its CUDA template.
struct Row {
  absl::string_view name;
  size_t num_buffers;
  CudaFamily family;
  absl::string_view op;  // Template argument naming the operation (unary, binary, reduce, norm)
                         // or the rows' rule (softmax).
  Mask dtypes;
};

constexpr Row kRows[] = {
    {"abs", 2, CudaFamily::kUnary, "cubed::AbsOp", kSigned},
    {"add", 3, CudaFamily::kBinary, "cubed::AddOp", kNumeric},
    {"argmax", 2, CudaFamily::kReduce, "cubed::ArgmaxR", kNumeric},
    {"cast", 2, CudaFamily::kCast, "", kAll},
    {"causal_attention", 4, CudaFamily::kAttention, "", kFloat},
    {"causal_softmax", 2, CudaFamily::kSoftmax, "cubed::CausalKeys", kFloat},
    {"copy", 2, CudaFamily::kCopy, "", kAll},
    {"div", 3, CudaFamily::kBinary, "cubed::DivOp", kNumeric},
    {"eq", 3, CudaFamily::kCompare, "cubed::EqOp", kAll},
    {"exp", 2, CudaFamily::kUnary, "cubed::ExpOp", kFloat},
    {"fill", 1, CudaFamily::kFill, "", kAll},
    {"gather", 3, CudaFamily::kGather, "", kAll},
    {"ge", 3, CudaFamily::kCompare, "cubed::GeOp", kAll},
    {"gelu", 2, CudaFamily::kUnary, "cubed::GeluOp", kFloat},
    {"gelu_tanh", 2, CudaFamily::kUnary, "cubed::GeluTanhOp", kFloat},
    {"gt", 3, CudaFamily::kCompare, "cubed::GtOp", kAll},
    {"layer_norm", 2, CudaFamily::kNorm, "cubed::LayerNormOp", kFloat},
    {"layer_norm", 3, CudaFamily::kNorm, "cubed::LayerNormOp", kFloat},
    {"layer_norm", 4, CudaFamily::kNorm, "cubed::LayerNormOp", kFloat},
    {"le", 3, CudaFamily::kCompare, "cubed::LeOp", kAll},
    {"log", 2, CudaFamily::kUnary, "cubed::LogOp", kFloat},
    {"lt", 3, CudaFamily::kCompare, "cubed::LtOp", kAll},
    {"matmul", 3, CudaFamily::kMatmul, "", kNumeric},
    {"max", 2, CudaFamily::kReduce, "cubed::MaxR", kAll},
    {"max", 3, CudaFamily::kBinary, "cubed::MaxOp", kAll},
    {"mean", 2, CudaFamily::kReduce, "cubed::MeanR", kFloat},
    {"min", 2, CudaFamily::kReduce, "cubed::MinR", kAll},
    {"min", 3, CudaFamily::kBinary, "cubed::MinOp", kAll},
    {"mul", 3, CudaFamily::kBinary, "cubed::MulOp", kNumeric},
    {"ne", 3, CudaFamily::kCompare, "cubed::NeOp", kAll},
    {"neg", 2, CudaFamily::kUnary, "cubed::NegOp", kSigned},
    {"pow", 3, CudaFamily::kBinary, "cubed::PowOp", kFloat},
    {"relu", 2, CudaFamily::kUnary, "cubed::ReluOp", kSigned},
    {"rms_norm", 2, CudaFamily::kNorm, "cubed::RmsNormOp", kFloat},
    {"rms_norm", 3, CudaFamily::kNorm, "cubed::RmsNormOp", kFloat},
    {"sigmoid", 2, CudaFamily::kUnary, "cubed::SigmoidOp", kFloat},
    {"silu", 2, CudaFamily::kUnary, "cubed::SiluOp", kFloat},
    {"softmax", 2, CudaFamily::kSoftmax, "cubed::AllKeys", kFloat},
    {"sqrt", 2, CudaFamily::kUnary, "cubed::SqrtOp", kFloat},
    {"sub", 3, CudaFamily::kBinary, "cubed::SubOp", kNumeric},
    {"sum", 2, CudaFamily::kReduce, "cubed::SumR", kNumeric},
    {"tanh", 2, CudaFamily::kUnary, "cubed::TanhOp", kFloat},
    {"where", 4, CudaFamily::kWhere, "", kAll},
};

absl::string_view CudaType(ElemType t) {
  switch (t) {
    case ElemType::kF32:
      return "float";
    case ElemType::kF64:
      return "double";
    case ElemType::kI32:
      return "int";
    case ElemType::kU32:
      return "unsigned int";
    case ElemType::kI64:
      return "long long";
    case ElemType::kF16:
      return "cubed::Half";
    case ElemType::kBF16:
      return "cubed::BF16";
    case ElemType::kI8:
      return "signed char";
    case ElemType::kU8:
      return "unsigned char";
    case ElemType::kI16:
      return "short";
    case ElemType::kU16:
      return "unsigned short";
    case ElemType::kBool:
      return "cubed::Bool8";
  }
  return "void";
}

// fill, copy and where move bits: one kernel per element size.
absl::string_view BitsType(ElemType t) {
  switch (ElemSize(t)) {
    case 1:
      return "unsigned char";
    case 2:
      return "unsigned short";
    case 4:
      return "unsigned int";
    default:
      return "unsigned long long";
  }
}

// Note [Builtin program grouping]
// A program holds one family's kernels for one input dtype: NVRTC pays a fixed cost per program
// (front end, built-in headers) and ptxas a cost per kernel, so one program per family and dtype
// compiles a first call's kernel (and its siblings, likely next) in well under a second, and the
// whole catalog in a few dozen programs. The comparisons have programs of their own, so that a
// first add does not also compile six kernels it does not need; where, which moves bits, has one
// program for every dtype, like fill and copy.
std::string ProgramName(CudaFamily family, ElemType dtype) {
  switch (family) {
    case CudaFamily::kFill:
    case CudaFamily::kCopy:
      return "fill_copy";
    case CudaFamily::kCast:
      return absl::StrCat("cast_", ElemTypeName(dtype));
    case CudaFamily::kUnary:
      return absl::StrCat("unary_", ElemTypeName(dtype));
    case CudaFamily::kBinary:
      return absl::StrCat("binary_", ElemTypeName(dtype));
    case CudaFamily::kCompare:
      return absl::StrCat("compare_", ElemTypeName(dtype));
    case CudaFamily::kWhere:
      return "where";
    case CudaFamily::kReduce:
      return absl::StrCat("reduce_", ElemTypeName(dtype));
    case CudaFamily::kSoftmax:
      return absl::StrCat("softmax_", ElemTypeName(dtype));
    case CudaFamily::kMatmul:
      return absl::StrCat("matmul_", ElemTypeName(dtype));
    case CudaFamily::kNorm:
      return absl::StrCat("norm_", ElemTypeName(dtype));
    case CudaFamily::kGather:
      return "gather";  // Moves bits: 4 element sizes x 2 index types.
    case CudaFamily::kAttention:
      return absl::StrCat("attention_", ElemTypeName(dtype));
  }
  return "";
}

absl::string_view SourceFile(CudaFamily family) {
  switch (family) {
    case CudaFamily::kFill:
    case CudaFamily::kCopy:
    case CudaFamily::kCast:
    case CudaFamily::kUnary:
    case CudaFamily::kBinary:
    case CudaFamily::kCompare:
      return "elementwise.cuh";
    case CudaFamily::kWhere:
      return "where.cuh";
    case CudaFamily::kReduce:
      return "reduce.cuh";
    case CudaFamily::kSoftmax:
      return "softmax.cuh";
    case CudaFamily::kMatmul:
      return "matmul.cuh";
    case CudaFamily::kNorm:
      return "norm.cuh";
    case CudaFamily::kGather:
      return "gather.cuh";
    case CudaFamily::kAttention:
      return "attention.cuh";
  }
  return "";
}

std::string Expression(const Row& row, ElemType dtype, ElemType out_dtype, ElemType index_dtype) {
  const absl::string_view t = CudaType(dtype);
  switch (row.family) {
    case CudaFamily::kFill:
      return absl::StrCat("cubed::FillKernel<", BitsType(dtype), ">");
    case CudaFamily::kCopy:
      return absl::StrCat("cubed::CastKernel<", BitsType(dtype), ", ", BitsType(dtype), ">");
    case CudaFamily::kCast:
      return absl::StrCat("cubed::CastKernel<", t, ", ", CudaType(out_dtype), ">");
    case CudaFamily::kUnary:
      return absl::StrCat("cubed::UnaryKernel<", row.op, ", ", t, ">");
    case CudaFamily::kBinary:
      return absl::StrCat("cubed::BinaryKernel<", row.op, ", ", t, ">");
    case CudaFamily::kCompare:
      return absl::StrCat("cubed::CompareKernel<", row.op, ", ", t, ">");
    case CudaFamily::kWhere:
      return absl::StrCat("cubed::WhereKernel<", BitsType(dtype), ">");
    case CudaFamily::kReduce:
      return absl::StrCat("cubed::ReduceKernel<", row.op, ", ", t, ">");
    case CudaFamily::kSoftmax:
      return absl::StrCat("cubed::SoftmaxKernel<", row.op, ", ", t, ">");
    case CudaFamily::kMatmul:
      return absl::StrCat("cubed::MatmulKernel<", t, ">");
    case CudaFamily::kNorm:  // The affine inputs bound: 0, weight (1), weight and bias (2).
      return absl::StrCat("cubed::NormKernel<", row.op, ", ", t, ", ", row.num_buffers - 2, ">");
    case CudaFamily::kGather:
      return absl::StrCat("cubed::GatherKernel<", BitsType(dtype), ", ", CudaType(index_dtype),
                          ">");
    case CudaFamily::kAttention:
      return absl::StrCat("cubed::AttentionKernel<", t, ">");
  }
  return "";
}

// Every row by (name, buffer count): a launch finds its row by one lookup (the scan below, with
// its string compares, ran on every builtin launch: BuiltinLaunchDims' FindCudaFamily).
const absl::flat_hash_map<std::pair<absl::string_view, size_t>, const Row*>& RowIndex() {
  static const auto* const index = [] {
    auto* m = new absl::flat_hash_map<std::pair<absl::string_view, size_t>, const Row*>();
    for (const Row& row : kRows) m->emplace(std::make_pair(row.name, row.num_buffers), &row);
    return m;
  }();
  return *index;
}

absl::StatusOr<const Row*> FindRow(absl::string_view name, size_t num_buffers) {
  const auto& index = RowIndex();
  if (auto it = index.find(std::make_pair(name, num_buffers)); it != index.end()) {
    return it->second;
  }
  std::vector<std::string> counts;  // Not found: the counts it does take say why.
  for (const Row& row : kRows) {
    if (row.name == name) counts.push_back(absl::StrCat(row.num_buffers));
  }
  if (counts.empty()) {
    return absl::NotFoundError(absl::StrCat("unknown builtin kernel '", name.substr(0, 100),
                                            "' (docs/kernel-abi.md lists the builtin kernels)"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "kernel '", name, "' takes ", absl::StrJoin(counts, " or "), " buffers, got ", num_buffers));
}

struct Catalog {
  std::vector<CudaBuiltinProgram> programs;
  std::map<std::string, size_t> program_index;  // By name.
};

const Catalog& GetCatalog() {
  static const Catalog* const catalog = [] {
    auto* c = new Catalog;
    for (const CudaBuiltinSignature& sig : CudaBuiltinSignatures()) {
      const Row& row = **FindRow(sig.name, sig.num_buffers);
      const std::string name = ProgramName(row.family, sig.dtype);
      auto [it, inserted] = c->program_index.emplace(name, c->programs.size());
      if (inserted) c->programs.push_back({name, std::string(SourceFile(row.family)), {}});
      c->programs[it->second].expressions.push_back(
          Expression(row, sig.dtype, sig.out_dtype, sig.index_dtype));
    }
    for (CudaBuiltinProgram& p : c->programs) {
      std::sort(p.expressions.begin(), p.expressions.end());
      p.expressions.erase(std::unique(p.expressions.begin(), p.expressions.end()),
                          p.expressions.end());
    }
    return c;
  }();
  return *catalog;
}

}  // namespace

const std::vector<CudaBuiltinProgram>& CudaBuiltinPrograms() { return GetCatalog().programs; }

absl::StatusOr<CudaFamily> FindCudaFamily(absl::string_view name, size_t num_buffers) {
  absl::StatusOr<const Row*> row = FindRow(name, num_buffers);
  if (!row.ok()) return row.status();
  return (*row)->family;
}

absl::StatusOr<CudaBuiltinKernel> FindCudaBuiltin(absl::string_view name, size_t num_buffers,
                                                  ElemType dtype, ElemType out_dtype,
                                                  ElemType index_dtype) {
  absl::StatusOr<const Row*> found = FindRow(name, num_buffers);
  if (!found.ok()) return found.status();
  const Row& row = **found;
  for (ElemType t : {dtype, out_dtype}) {
    if ((row.dtypes & Bit(t)) == 0) {
      std::vector<absl::string_view> names;
      for (ElemType s : kAllElemTypes) {
        if ((row.dtypes & Bit(s)) != 0) names.push_back(ElemTypeName(s));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("kernel '", name, "' does not support dtype ", ElemTypeName(t),
                       " (supported: ", absl::StrJoin(names, ", "), ")"));
    }
    if (row.family != CudaFamily::kCast) break;
  }
  if (row.family == CudaFamily::kGather && index_dtype != ElemType::kI32 &&
      index_dtype != ElemType::kI64) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel '", name, "' does not support index_dtype ", ElemTypeName(index_dtype),
                     " (supported: i32, i64)"));
  }
  const Catalog& catalog = GetCatalog();
  return CudaBuiltinKernel{row.family, catalog.program_index.at(ProgramName(row.family, dtype)),
                           Expression(row, dtype, out_dtype, index_dtype)};
}

std::vector<CudaBuiltinSignature> CudaBuiltinSignatures() {
  std::vector<CudaBuiltinSignature> out;
  for (const Row& row : kRows) {
    for (ElemType t : kAllElemTypes) {
      if ((row.dtypes & Bit(t)) == 0) continue;
      if (row.family == CudaFamily::kCast) {
        for (ElemType to : kAllElemTypes)
          out.push_back({std::string(row.name), row.num_buffers, t, to});
      } else if (row.family == CudaFamily::kGather) {
        for (ElemType index : {ElemType::kI32, ElemType::kI64})
          out.push_back({std::string(row.name), row.num_buffers, t, t, index});
      } else {
        out.push_back({std::string(row.name), row.num_buffers, t, t});
      }
    }
  }
  return out;
}

}  // namespace cubed::kernels
