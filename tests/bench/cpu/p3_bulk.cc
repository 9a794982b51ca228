#include "tests/bench/cpu/p3_bulk.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/client.h"
#include "common/status_macros.h"
#include "tests/bench/cpu/baseline_child.h"

namespace cubed::cpubench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string PatternBytes(uint64_t n) {
  std::string data(n, '\0');
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (uint64_t i = 0; i + 8 <= n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(&data[i], &x, 8);
  }
  return data;
}

}  // namespace

absl::StatusOr<std::vector<Row>> MeasureBulkCreateRead(const std::vector<BulkPath>& paths,
                                                       const BulkOptions& options) {
  const std::string data = PatternBytes(options.bytes);
  const auto span = absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  const double gib = 2.0 * static_cast<double>(options.bytes) / (1ull << 30);
  std::vector<Row> rows;
  std::string back;
  std::string into(data.size(), '\0');  // ReadInto's target, reused like the raw path's `back`.
  const auto into_span = absl::MakeSpan(reinterpret_cast<uint8_t*>(into.data()), into.size());
  for (const BulkPath& path : paths) {
    ASSIGN_OR_RETURN(int fd, path.connect_raw());
    std::unique_ptr<int, void (*)(int*)> closer(&fd, [](int* f) { close(*f); });
    const size_t settings = path.settings == 0 ? options.settings.size()
                                               : std::min(path.settings, options.settings.size());
    for (size_t c = 0; c < settings; ++c) {
      const BulkOptions::Setting& setting = options.settings[c];
      ClientOptions client_options;
      client_options.address = path.daemon_address;
      client_options.transport = Transport::kStream;
      client_options.bulk_threshold = 1;    // Everything through Upload / Download.
      client_options.region_threshold = 0;  // P4 measures shared memory.
      client_options.bulk_chunk = setting.chunk;
      client_options.bulk_lanes = setting.lanes;
      ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(client_options));
      std::vector<double> sdk, raw, create_gibs, read_gibs;
      for (int r = -1; r < options.repetitions; ++r) {  // r = -1 warms both paths up.
        Clock::time_point t0 = Clock::now();
        ASSIGN_OR_RETURN(Handle h, client->Create(span));
        Clock::time_point t1 = Clock::now();
        bool same = true;
        if (setting.read_into) {
          ASSIGN_OR_RETURN(uint64_t n, client->ReadInto(Binding(h), into_span).get());
          same = n == data.size() && (r != -1 || into == data);
        } else {
          ASSIGN_OR_RETURN(std::vector<std::string> got, client->Read({Binding(h)}).get());
          same = got.size() == 1 && (r != -1 || got[0] == data);
        }
        Clock::time_point t2 = Clock::now();
        if (!same) {
          return absl::InternalError("P3: the bytes read back differ from the bytes created");
        }
        h = Handle();
        RETURN_IF_ERROR(client->FlushReleases());
        Clock::time_point t3 = Clock::now();
        RETURN_IF_ERROR(RawRoundTrip(fd, data, &back));
        const double raw_s = Seconds(t3, Clock::now());
        if (r == -1) {
          if (back != data) return absl::InternalError("the raw baseline echoed different bytes");
          continue;
        }
        sdk.push_back(gib / Seconds(t0, t2));
        create_gibs.push_back(gib / 2 / Seconds(t0, t1));
        read_gibs.push_back(gib / 2 / Seconds(t1, t2));
        raw.push_back(gib / raw_s);
      }
      Row row;
      const bool headline = c == 0 && (&path == &paths.front() || path.name == "tcp");
      row.id = !headline ? "P3*" : path.name == "tcp" ? "P3t" : "P3";
      row.name = absl::StrCat("SDK bulk Create+Read ", options.bytes >> 20, " MiB, chunk ",
                              setting.chunk >> 10, " KiB, ", client->options().bulk_lanes, " lane",
                              client->options().bulk_lanes == 1 ? "" : "s",
                              setting.read_into ? ", ReadInto" : "",
                              setting.lanes == 0 ? " (default)" : "", " (", path.name, ")");
      row.unit = "GiB/s";
      row.lower_is_better = false;
      row.figure = Summarize(sdk);
      row.baseline_name = absl::StrCat("raw ", path.name, " stream there and back, child process");
      row.baseline = Summarize(raw);
      row.goal = ">= 0.8x";
      row.goal_met = row.Ratio() >= 0.8;
      row.verdict = headline ? (row.goal_met ? "met" : "missed") : "";
      row.note = absl::StrFormat(
          "bytes counted both ways; ratio %.2fx; Create alone %.2f GiB/s, Read alone %.2f GiB/s "
          "(medians of %d)%s",
          row.Ratio(), Summarize(create_gibs).p50, Summarize(read_gibs).p50, options.repetitions,
          headline ? "" : "; diagnostic: another chunk size or lane count");
      rows.push_back(row);
    }
  }
  return rows;
}

}  // namespace cubed::cpubench
