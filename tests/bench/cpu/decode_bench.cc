// cubed_decode_bench: what the session stream's reading thread spends to turn a request's bytes
// into StreamCommands, per command: the RequestDecoder (Note [Fast execute decode],
// server/service/stream/execute_decoder.h) against its baseline in the same run, protobuf's
// parse on a reused arena followed by ToStreamCommand (the path before it), each request's
// commands then taken out in their vector as the stream's batch takes them. Interleaved samples,
// medians and spreads; one table on stdout.
//
//   cubed_decode_bench [--samples=N] [--commands=N]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "cubed/v1/session.pb.h"
#include "server/service/stream/request_arena.h"
#include "server/service/stream/request_decoder.h"
#include "server/service/stream/stream_command_conversion.h"

ABSL_FLAG(int, samples, 31, "Samples per row and path (each decodes --rounds requests).");
ABSL_FLAG(int, rounds, 200, "Requests decoded per sample.");
ABSL_FLAG(int, commands, 256, "Commands per request (the SDKs batch up to 256).");

namespace {

using cubed::v1::Command;

// P2's command: fill of one f32, as the SDKs write it.
void Fill(Command& c, uint64_t i) {
  c.set_seq(i);
  Command::Execute& e = *c.mutable_execute();
  e.mutable_kernel()->mutable_builtin()->set_name("fill");
  e.mutable_kernel()->mutable_builtin()->set_dtype(cubed::v1::ELEM_TYPE_F32);
  auto& count = *e.mutable_count()->mutable_static_count();
  count.set_x(1);
  count.set_y(1);
  count.set_z(1);
  e.mutable_bindings()->add_buffers()->set_handle((uint64_t{1} << 63) + i % 16);
  for (uint32_t w : {4u, 1u, 1u, 5u, 6u, 1u, 1u}) e.mutable_bindings()->add_metadata(w);
  auto& g = *e.mutable_bindings()->add_scalars();
  g.set_elem(cubed::v1::ELEM_TYPE_F32);
  g.add_floats(1.0);
}

// An elementwise add of two 2-D tensors into a third: three buffers, their metadata, no scalars.
void Add(Command& c, uint64_t i) {
  c.set_seq(i);
  Command::Execute& e = *c.mutable_execute();
  e.mutable_kernel()->mutable_builtin()->set_name("add");
  e.mutable_kernel()->mutable_builtin()->set_dtype(cubed::v1::ELEM_TYPE_BF16);
  e.mutable_count()->mutable_static_count()->set_x(4096);
  e.mutable_count()->mutable_static_count()->set_y(1);
  e.mutable_count()->mutable_static_count()->set_z(1);
  for (uint64_t b = 0; b < 3; ++b) {
    e.mutable_bindings()->add_buffers()->set_handle((uint64_t{1} << 63) + 3 * i + b);
  }
  for (uint32_t w :
       {2097152u, 2097152u, 2097152u, 1048576u, 1048576u, 1048576u, 2u,    2u,    2u,
        15u,      17u,      19u,      21u,      23u,      25u,      1024u, 1024u, 1024u,
        1024u,    1024u,    1024u,    1024u,    1u,       1024u,    1u,    1024u, 1u}) {
    e.mutable_bindings()->add_metadata(w);
  }
}

// Commands the fast path leaves to protobuf: releases.
void Release(Command& c, uint64_t i) {
  c.set_seq(i);
  c.mutable_release()->add_ids((uint64_t{1} << 63) + i);
}

std::string Request(int commands, const std::function<void(Command&, uint64_t)>& make) {
  cubed::v1::SessionRequest r;
  for (int i = 0; i < commands; ++i) make(*r.add_commands(), static_cast<uint64_t>(i));
  return r.SerializeAsString();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int samples = absl::GetFlag(FLAGS_samples);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const int n = absl::GetFlag(FLAGS_commands);
  const cubed::RequestLimits limits;
  struct Row {
    const char* name;
    std::function<void(Command&, uint64_t)> make;
  };
  const std::vector<Row> rows = {{"execute fill f32 (P2)", Fill},
                                 {"execute add bf16, 3 buffers", Add},
                                 {"release (protobuf on both)", Release}};
  std::printf(
      "| commands (%d a request) | bytes/cmd | protobuf + convert ns/cmd | decoder ns/cmd "
      "| decoder / protobuf | fast |\n| --- | --- | --- | --- | --- | --- |\n",
      n);
  for (const Row& row : rows) {
    const std::string bytes = Request(n, row.make);
    cubed::RequestArena arena;
    cubed::RequestDecoder decoder(limits, 4096);
    std::vector<double> base_ns, fast_ns;
    for (int s = -3; s < samples; ++s) {  // Three warm-up samples of each.
      auto t0 = std::chrono::steady_clock::now();
      // Each request's commands leave in their vector (the stream's batch takes it), so each
      // decode starts with a vector without room, as the stream's does when no spent batch came
      // back to give it some.
      for (int r = 0; r < rounds; ++r) {
        auto* parsed = arena.Create<cubed::v1::SessionRequest>();
        if (!parsed->ParseFromString(bytes)) return 1;
        std::vector<cubed::StreamCommand> batch;
        batch.reserve(static_cast<size_t>(parsed->commands_size()));
        for (Command& c : *parsed->mutable_commands()) {
          cubed::ToStreamCommand(c, limits, batch.emplace_back());
        }
        arena.Reset();
      }
      auto t1 = std::chrono::steady_clock::now();
      for (int r = 0; r < rounds; ++r) {
        if (!decoder.Merge(bytes).ok()) return 1;
        std::vector<cubed::StreamCommand> batch;
        batch.swap(decoder.commands());
        decoder.Reset();
      }
      auto t2 = std::chrono::steady_clock::now();
      if (s < 0) continue;
      const double per = 1e9 / (static_cast<double>(rounds) * n);
      base_ns.push_back(std::chrono::duration<double>(t1 - t0).count() * per);
      fast_ns.push_back(std::chrono::duration<double>(t2 - t1).count() * per);
    }
    std::vector<double> ratios;
    for (size_t i = 0; i < base_ns.size(); ++i) ratios.push_back(fast_ns[i] / base_ns[i]);
    std::sort(ratios.begin(), ratios.end());
    std::printf("| %s | %.1f | %.0f | %.0f | **%.2f×** (%.2f–%.2f) | %.0f%% |\n", row.name,
                static_cast<double>(bytes.size()) / n, Median(base_ns), Median(fast_ns),
                Median(ratios), ratios.front(), ratios.back(),
                100.0 * static_cast<double>(decoder.fast_decoded()) /
                    (static_cast<double>(samples + 3) * rounds * n));
  }
  return 0;
}
