#pragma once

// The CUDA C++ sources of the builtin kernels (kernels/cuda/*.cuh and builtin_args.h), embedded
// into the binary at build time (embed_sources.cmake), so nothing is read from disk at run time.

#include <cstddef>

namespace cubed::kernels {

struct EmbeddedSource {
  const char* name;  // File name, e.g. "reduce.cuh": the name NVRTC sees in #include lines.
  const char* text;
};

extern const EmbeddedSource kEmbeddedCudaSources[];
extern const size_t kNumEmbeddedCudaSources;

}  // namespace cubed::kernels
