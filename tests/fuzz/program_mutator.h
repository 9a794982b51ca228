#pragma once

// Structure-aware mutation for libFuzzer (LLVMFuzzerCustomMutator, fuzz_requests.cc). libFuzzer's
// own mutations change bytes at random positions, so in a program (program.h) most of them hit
// a byte whose change reshapes everything after it, and an operand gets a given edge value only
// by chance. For program inputs this mutator usually decodes the program's layout
// (ProgramLayout) and edits operands by their role, nums and list headers most often: a num gets
// an edge value, often one power of two away from its old one (climbing with Note [Magnitude
// feedback], magnitude.h), a list header new repeats, a count a neighbour; or it duplicates or
// drops one op. The rest of the time, and for the other modes, it leaves the mutation to
// libFuzzer (LLVMFuzzerMutate).

#include <cstddef>
#include <cstdint>

namespace cubed::fuzz {

// Mutates `data` (`size` bytes, room for `max_size`) in place; returns the new size.
size_t MutateInput(uint8_t* data, size_t size, size_t max_size, unsigned seed);

}  // namespace cubed::fuzz
