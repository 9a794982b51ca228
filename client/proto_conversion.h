#pragma once

// Conversions between the SDK's plain types (client.h) and the cubed.v1 wire messages.

#include "absl/status/status.h"
#include "client/client.h"
#include "common/memory_usage.h"
#include "cubed/v1/compute.pb.h"
#include "cubed/v1/types.pb.h"

namespace cubed {

// INVALID_ARGUMENT when `binding` has an empty handle.
// INVALID_ARGUMENT for a binding with an empty handle.
absl::Status CheckBinding(const Binding& binding);
absl::Status ToProto(const Binding& binding, v1::Binding* out);
v1::ExecutionMode ToWire(ExecutionMode mode);
// INVALID_ARGUMENT when the tensor's handle is empty or its strides and shape differ in rank.
absl::Status ToProto(const Tensor& tensor, v1::BindingWithMeta* out);
// INVALID_ARGUMENT when values are given in a list that does not match `scalars.elem`.
// INVALID_ARGUMENT when `scalars` has values in a list other than its type's (floats for float
// types, ints for signed, uints for unsigned and bool).
absl::Status CheckScalarLists(const Scalars& scalars);
absl::Status ToProto(const Scalars& scalars, v1::ScalarGroup* out);
void ToProto(const BuiltinKernel& kernel, v1::BuiltinKernel* out);

MemoryUsage FromProto(const v1::MemoryUsage& usage);

}  // namespace cubed
