#include "server/metrics/metrics_http.h"

#include <httplib.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace cubed {
namespace {

constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

struct HostPort {
  std::string host;  // Without brackets.
  int port = 0;
};

absl::StatusOr<HostPort> ParseAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  auto bad = [&address](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics_listen=", address, ": ", why,
                                                   " (expected HOST:PORT, e.g. 127.0.0.1:9464)"));
  };
  if (colon == std::string::npos || colon == 0) return bad("no host");
  HostPort hp;
  hp.host = address.substr(0, colon);
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  if (hp.host.empty()) return bad("no host");
  if (!absl::SimpleAtoi(address.substr(colon + 1), &hp.port) || hp.port < 0 || hp.port > 65535) {
    return bad("the port is not 0 .. 65535");
  }
  return hp;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, Render render) {
  absl::StatusOr<HostPort> hp = ParseAddress(address);
  if (!hp.ok()) return hp.status();
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer());
  s->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *s->server_;
  // Scrapes are rare: two threads are plenty and bound what a flood of connections can take.
  server.new_task_queue = [] { return new httplib::ThreadPool(2); };
  server.set_read_timeout(5, 0);
  server.set_write_timeout(5, 0);
  server.Get("/metrics",
             [render = std::move(render)](const httplib::Request&, httplib::Response& res) {
               absl::StatusOr<std::string> body = render();
               if (!body.ok()) {
                 res.status = 503;
                 res.set_content(absl::StrCat(body.status().ToString(), "\n"), "text/plain");
                 return;
               }
               res.set_content(*std::move(body), kContentType);
             });
  if (hp->port == 0) {
    s->port_ = server.bind_to_any_port(hp->host);
  } else if (server.bind_to_port(hp->host, hp->port)) {
    s->port_ = hp->port;
  } else {
    s->port_ = -1;
  }
  if (s->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("--metrics_listen=", address,
                                               ": cannot bind (address in use, or a bad host?)"));
  }
  const bool v6 = hp->host.find(':') != std::string::npos;
  s->address_ =
      v6 ? absl::StrCat("[", hp->host, "]:", s->port_) : absl::StrCat(hp->host, ":", s->port_);
  s->thread_ = std::thread([&server] { server.listen_after_bind(); });
  // stop() is ignored until the listen loop runs: wait for it, so that Stop always ends it.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!server.is_running() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  return s;
}

void MetricsHttpServer::Stop() {
  if (server_ == nullptr) return;
  server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

}  // namespace cubed
