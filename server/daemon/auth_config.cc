#include "server/daemon/auth_config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "cubed/v1/auth.pb.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "server/auth/rpc.h"
#include "spdlog/spdlog.h"

namespace cubed {
namespace {

constexpr size_t kMinTokenLength = 16;

class CollectFirstError final : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (!error.empty()) return;
    error = absl::StrCat(line + 1, ":", column + 1, ": ", message);
  }
  std::string error;
};

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, absl::string_view what) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(what, ": cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') {
      return false;
    }
  }
  return true;
}

absl::StatusOr<std::shared_ptr<Principal>> ToPrincipal(const v1::Principal& p,
                                                       absl::string_view where) {
  auto out = std::make_shared<Principal>();
  if (!ValidName(p.name())) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": name '", p.name(), "' must be 1 to 64 characters of [A-Za-z0-9_.-]"));
  }
  out->name = p.name();
  out->uids.assign(p.uids().begin(), p.uids().end());
  out->gids.assign(p.gids().begin(), p.gids().end());
  out->cert_common_names.assign(p.cert_common_names().begin(), p.cert_common_names().end());
  out->all_rpcs = p.permissions().all_rpcs();
  for (const std::string& rpc : p.permissions().rpcs()) {
    if (!IsComputeRpcName(rpc)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": permissions.rpcs: '", rpc,
          "' is not an RPC of cubed.v1.Compute (e.g. OpenSession, Create, Execute, Read)"));
    }
    out->rpcs.insert(rpc);
  }
  out->client_kernels = p.permissions().client_kernels();
  out->unchecked = p.permissions().unchecked();
  const v1::Quotas& q = p.quotas();
  out->quotas = Quotas{q.max_bytes(),
                       q.max_handles(),
                       q.max_inflight_commands(),
                       q.max_sessions(),
                       q.max_session_bytes(),
                       q.max_session_handles(),
                       q.max_session_inflight_commands()};
  return out;
}

// Reads "PRINCIPAL TOKEN" lines into the principals named.
absl::Status LoadTokens(const std::string& path,
                        const absl::flat_hash_map<std::string, Principal*>& by_name) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & 0077) != 0) {
    spdlog::warn("token_file {} is readable by group or others (mode {:o}); chmod 600 it", path,
                 st.st_mode & 0777);
  }
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path, "token_file"));
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const std::string where = absl::StrCat("token_file ", path, ":", line_number);
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expected 'PRINCIPAL TOKEN' (two fields)"));
    }
    auto it = by_name.find(fields[0]);
    if (it == by_name.end()) {  // Fails closed: that token identifies nobody.
      spdlog::warn("{}: principal '{}' is not in the config; its token is ignored", where,
                   std::string(fields[0]));
      continue;
    }
    if (fields[1].size() < kMinTokenLength) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": the token of '", fields[0],
                                                     "' is shorter than ", kMinTokenLength,
                                                     " characters"));
    }
    if (!it->second->token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": principal '", fields[0], "' already has a token"));
    }
    it->second->token = std::string(fields[1]);
  }
  // Two principals with one token would make the token ambiguous.
  absl::flat_hash_map<std::string, std::string> owners;
  for (const auto& [name, p] : by_name) {
    if (p->token.empty()) continue;
    auto [it, inserted] = owners.emplace(p->token, name);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("token_file ", path, ": principals '",
                                                     it->second, "' and '", name,
                                                     "' have the same token"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AuthPolicy> ParseAuthConfig(absl::string_view text, absl::string_view source,
                                           const std::string& base_dir) {
  v1::AuthConfig config;
  google::protobuf::TextFormat::Parser parser;
  CollectFirstError errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &config)) {
    return absl::InvalidArgumentError(absl::StrCat(source, ":", errors.error));
  }
  AuthPolicy policy;
  absl::flat_hash_map<std::string, Principal*> by_name;
  for (int i = 0; i < config.principal_size(); ++i) {
    const std::string where =
        absl::StrCat(source, ": principal[", i, "] '", config.principal(i).name(), "'");
    ASSIGN_OR_RETURN(std::shared_ptr<Principal> p, ToPrincipal(config.principal(i), where));
    if (!by_name.emplace(p->name, p.get()).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": the name is used twice"));
    }
    policy.principals.push_back(p);
  }
  if (!config.token_file().empty()) {
    std::filesystem::path token_path(config.token_file());
    if (token_path.is_relative() && !base_dir.empty()) token_path = base_dir / token_path;
    RETURN_IF_ERROR(LoadTokens(token_path.string(), by_name));
  }
  return policy;
}

absl::StatusOr<AuthPolicy> LoadAuthConfig(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path, "--auth_config"));
  return ParseAuthConfig(text, path, std::filesystem::path(path).parent_path().string());
}

}  // namespace cubed
