#include "server/service/authenticator.h"

#include <grpcpp/security/auth_context.h>
#include <grpcpp/server_context.h>

#include <algorithm>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "spdlog/spdlog.h"

namespace cubed {
namespace {

absl::string_view View(grpc::string_ref s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

bool ConstantTimeEquals(absl::string_view presented, absl::string_view stored) {
  unsigned char diff = presented.size() == stored.size() ? 0 : 1;
  for (size_t i = 0; i < presented.size(); ++i) {
    const unsigned char s = i < stored.size() ? static_cast<unsigned char>(stored[i]) : 0;
    diff |= static_cast<unsigned char>(presented[i]) ^ s;
  }
  return diff == 0;
}

Authenticator::Authenticator(AuthPolicy policy, const UnixListener* unix_listener)
    : policy_(std::move(policy)), unix_listener_(unix_listener) {}

absl::StatusOr<PrincipalPtr> Authenticator::Identify(const grpc::ServerContextBase& ctx) const {
  const std::string peer = ctx.peer();
  if (unix_listener_ != nullptr) {
    if (std::optional<PeerCredentials> cred = unix_listener_->Lookup(peer)) {
      return IdentifyUnixPeer(*cred);
    }
  }
  if (absl::StartsWith(peer, "ipv4:") || absl::StartsWith(peer, "ipv6:")) return IdentifyTcp(ctx);
  return absl::UnauthenticatedError(
      absl::StrCat("the connection (", peer, ") is of no known listener"));
}

absl::StatusOr<PrincipalPtr> Authenticator::IdentifyUnixPeer(const PeerCredentials& cred) const {
  for (const PrincipalPtr& p : policy_.principals) {
    if (std::find(p->uids.begin(), p->uids.end(), cred.uid) != p->uids.end()) return p;
  }
  for (const PrincipalPtr& p : policy_.principals) {
    if (std::find(p->gids.begin(), p->gids.end(), cred.gid) != p->gids.end()) return p;
  }
  spdlog::info("refused a call from uid {} gid {} (pid {}): not in the allow-list", cred.uid,
               cred.gid, cred.pid);
  return absl::PermissionDeniedError(
      absl::StrCat("uid ", cred.uid, " (gid ", cred.gid,
                   ") is not in this daemon's allow-list (principal uids/gids of --auth_config)"));
}

absl::StatusOr<PrincipalPtr> Authenticator::IdentifyTcp(const grpc::ServerContextBase& ctx) const {
  const auto& metadata = ctx.client_metadata();
  auto auth = metadata.find("authorization");
  if (auth != metadata.end()) {
    absl::string_view value = View(auth->second);
    if (!absl::ConsumePrefix(&value, "Bearer ") && !absl::ConsumePrefix(&value, "bearer ")) {
      return absl::UnauthenticatedError(
          "authorization: expected 'Bearer TOKEN' (the value is not logged)");
    }
    value = absl::StripAsciiWhitespace(value);
    // Every principal's token is compared, so the time does not say which one came close.
    PrincipalPtr match;
    for (const PrincipalPtr& p : policy_.principals) {
      if (!p->token.empty() && ConstantTimeEquals(value, p->token) && match == nullptr) match = p;
    }
    if (match == nullptr) {
      spdlog::info("refused a call from {}: the bearer token matches no principal", ctx.peer());
      return absl::UnauthenticatedError("authorization: the bearer token matches no principal");
    }
    return match;
  }
  const std::shared_ptr<const grpc::AuthContext> auth_context = ctx.auth_context();
  if (auth_context != nullptr && auth_context->IsPeerAuthenticated()) {
    for (const grpc::string_ref& cn : auth_context->FindPropertyValues("x509_common_name")) {
      for (const PrincipalPtr& p : policy_.principals) {
        for (const std::string& name : p->cert_common_names) {
          if (View(cn) == name) return p;
        }
      }
    }
    spdlog::info("refused a call from {}: its client certificate names no principal", ctx.peer());
    return absl::UnauthenticatedError(
        "the client certificate's subject CN names no principal (cert_common_names of "
        "--auth_config)");
  }
  if (policy_.anonymous_tcp != nullptr) return policy_.anonymous_tcp;
  return absl::UnauthenticatedError(
      "no credentials: send 'authorization: Bearer TOKEN' metadata or a client certificate");
}

absl::StatusOr<PrincipalPtr> Authenticator::Authorize(const grpc::ServerContextBase& ctx,
                                                      absl::string_view rpc) const {
  absl::StatusOr<PrincipalPtr> p = Identify(ctx);
  if (!p.ok()) return p.status();
  if (absl::Status s = (*p)->CheckRpc(rpc); !s.ok()) return s;
  return p;
}

}  // namespace cubed
