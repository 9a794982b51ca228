#include "kernels/cpu/fill_copy_cast.h"

#include <cstring>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/strided_loop.h"

namespace cubed::kernels {
namespace {

template <typename T>
void FillLoop(const KernelArgs& args, T value) {
  const TensorLayout& out = args.meta.tensors[0];
  const StridedLoop<1> loop(out, {out.strides});
  T* y = BufferAs<T>(args, 0);
  ParallelFor(loop.size(), kElementwiseGrain, [&](uint64_t begin, uint64_t end) {
    loop.ForRuns(begin, end, [&](const auto& off, uint64_t n, const auto& step) {
      T* ys = y + off[0];
      if (step[0] == 1) {
        for (uint64_t i = 0; i < n; ++i) ys[i] = value;
      } else {
        for (uint64_t i = 0; i < n; ++i) ys[i * step[0]] = value;
      }
    });
  });
}

template <typename From, typename To>
void ConvertLoop(const KernelArgs& args) {
  const TensorLayout& in = args.meta.tensors[0];
  const TensorLayout& out = args.meta.tensors[1];
  const StridedLoop<2> loop(out, {in.strides, out.strides});
  const From* x = BufferAs<const From>(args, 0);
  To* y = BufferAs<To>(args, 1);
  ParallelFor(loop.size(), kElementwiseGrain, [&](uint64_t begin, uint64_t end) {
    loop.ForRuns(begin, end, [&](const auto& off, uint64_t n, const auto& step) {
      const From* xs = x + off[0];
      To* ys = y + off[1];
      // Same type moves bytes; bool to bool still writes 0 or 1 (any non-zero byte reads true).
      if constexpr (std::is_same_v<From, To> && !std::is_same_v<To, Bool8>) {
        if (step[0] == 1 && step[1] == 1) {
          if (xs != ys) std::memcpy(ys, xs, n * sizeof(To));
          return;
        }
      }
      if (step[0] == 1 && step[1] == 1) {
        for (uint64_t i = 0; i < n; ++i) ys[i] = Convert<To>(xs[i]);
      } else {
        for (uint64_t i = 0; i < n; ++i) ys[i * step[1]] = Convert<To>(xs[i * step[0]]);
      }
    });
  });
}

}  // namespace

absl::Status RunFill(const KernelArgs& args) {
  return DispatchDtype<kAllTypes>(args.call.dtype, [&](auto tag) {
    using T = decltype(tag);
    T value;
    std::memcpy(&value, args.call.scalars[0].bytes.data(), sizeof(T));  // Little-endian host.
    FillLoop<T>(args, value);
    return absl::OkStatus();
  });
}

absl::Status RunCopy(const KernelArgs& args) {
  // A copy moves bits: only the element size matters.
  switch (ElemSize(args.call.dtype)) {
    case 1:
      ConvertLoop<uint8_t, uint8_t>(args);
      break;
    case 2:
      ConvertLoop<uint16_t, uint16_t>(args);
      break;
    case 4:
      ConvertLoop<uint32_t, uint32_t>(args);
      break;
    default:
      ConvertLoop<uint64_t, uint64_t>(args);
      break;
  }
  return absl::OkStatus();
}

absl::Status RunCast(const KernelArgs& args) {
  return DispatchDtype<kAllTypes>(args.call.dtype, [&](auto from_tag) {
    return DispatchDtype<kAllTypes>(args.call.out_dtype, [&](auto to_tag) {
      ConvertLoop<decltype(from_tag), decltype(to_tag)>(args);
      return absl::OkStatus();
    });
  });
}

}  // namespace cubed::kernels
