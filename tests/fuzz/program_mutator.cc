#include "tests/fuzz/program_mutator.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "tests/fuzz/program.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace cubed::fuzz {
namespace {

using Role = ProgramField::Role;
using Rng = std::minstd_rand;

// A num selector (Note [Edge values]): one magnitude step from `old`, or a fresh edge value.
uint8_t NumSelector(Rng& rng, uint8_t old) {
  switch (rng() % 8) {
    case 0:
    case 1: {
      const int cls = old & 0xc0, k = old & 0x3f;
      const int next = std::clamp(k + (rng() % 2 ? 1 : -1), 0, cls == 0xc0 ? 62 : 63);
      return static_cast<uint8_t>(cls | next);
    }
    case 2:
    case 3:
    case 4:
      return static_cast<uint8_t>(0x40 | rng() % 64);  // 2^k
    case 5:
      return static_cast<uint8_t>(0x80 | rng() % 64);  // 2^(k+1) - 1
    case 6:
      return static_cast<uint8_t>(0xc0 | rng() % 63);  // 2^(k+1) + 1
    default:
      return static_cast<uint8_t>(rng() % 64);  // Small.
  }
}

uint8_t Mutated(Rng& rng, Role role, uint8_t old) {
  switch (role) {
    case Role::kNum:
      return NumSelector(rng, old);
    case Role::kList:  // Usually the repeats only (bits 3-5), keeping the elements.
      if (rng() % 4 != 0) return static_cast<uint8_t>((old & ~0x38) | (rng() % 8) << 3);
      return static_cast<uint8_t>(rng());
    case Role::kCount:
      return static_cast<uint8_t>(rng() % 2 ? old + (rng() % 2 ? 1 : -1) : rng() % 10);
    default:
      return static_cast<uint8_t>(rng());
  }
}

// How often a field of each role is picked for an edit: sizes and counts, where arithmetic on
// client numbers happens, more often than the bytes that pick sessions, kinds and modes.
int Weight(Role role) {
  switch (role) {
    case Role::kNum:
    case Role::kList:
      return 4;
    case Role::kCount:
      return 2;
    default:
      return 1;
  }
}

const ProgramField& PickField(const std::vector<ProgramField>& layout, Rng& rng) {
  int total = 0;
  for (const ProgramField& f : layout) total += Weight(f.role);
  int pick = static_cast<int>(rng() % total);
  for (const ProgramField& f : layout) {
    pick -= Weight(f.role);
    if (pick < 0) return f;
  }
  return layout.back();
}

// Where each op starts, and the end of the program.
std::vector<size_t> OpStarts(const std::vector<ProgramField>& layout, size_t size) {
  std::vector<size_t> starts;
  for (const ProgramField& f : layout) {
    if (f.role == Role::kOp) starts.push_back(f.pos);
  }
  starts.push_back(size);
  return starts;
}

// Copies one op (with its operands) to just after itself.
size_t DuplicateOp(uint8_t* program, size_t size, size_t max_size,
                   const std::vector<size_t>& starts, Rng& rng) {
  const size_t i = rng() % (starts.size() - 1);
  const size_t begin = starts[i], len = starts[i + 1] - begin;
  if (len == 0 || size + len > max_size) return size;
  std::memmove(program + begin + len, program + begin, size - begin);  // Now twice.
  return size + len;
}

size_t DeleteOp(uint8_t* program, size_t size, const std::vector<size_t>& starts, Rng& rng) {
  if (starts.size() <= 2) return size;  // Keep at least one op.
  const size_t i = rng() % (starts.size() - 1);
  const size_t begin = starts[i], end = starts[i + 1];
  std::memmove(program + begin, program + end, size - end);
  return size - (end - begin);
}

}  // namespace

size_t MutateInput(uint8_t* data, size_t size, size_t max_size, unsigned seed) {
  Rng rng(seed);
  // libFuzzer turns its length control off for a custom mutator; grow gently instead, so that
  // inputs stay short (and fast) unless length pays.
  max_size = std::min(max_size, std::max<size_t>(2 * size, 64));
  if (size < 2 || max_size < 2 || data[0] % 4 != 3 || rng() % 4 == 0) {
    return LLVMFuzzerMutate(data, size, max_size);
  }
  uint8_t* program = data + 1;
  const size_t n = size - 1;
  const std::vector<ProgramField> layout = ProgramLayout(program, n);
  if (layout.empty()) return LLVMFuzzerMutate(data, size, max_size);
  const std::vector<size_t> starts = OpStarts(layout, n);
  switch (rng() % 8) {
    case 0:
      return 1 + DuplicateOp(program, n, max_size - 1, starts, rng);
    case 1:
      return 1 + DeleteOp(program, n, starts, rng);
    default:
      for (int edits = 1 + rng() % 2; edits > 0; --edits) {
        const ProgramField& f = PickField(layout, rng);
        program[f.pos] = Mutated(rng, f.role, program[f.pos]);
      }
      return size;
  }
}

}  // namespace cubed::fuzz
