// Connects to a daemon given as argv[1], stores bytes, reads them back and prints them.
#include <cstdio>
#include <string>

#include "client/client.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  cubed::ClientOptions options;
  options.address = argv[1];
  auto client = cubed::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  const std::string text = "consumer says hello";
  auto handle = (*client)->Create(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  if (!handle.ok()) return 1;
  auto bytes = (*client)->Read({cubed::Binding(*handle)}).get();
  if (!bytes.ok()) return 1;
  std::printf("%s\n", (*bytes)[0].c_str());
  return (*bytes)[0] == text ? 0 : 1;
}
