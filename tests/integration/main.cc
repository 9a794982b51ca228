// main of cubed_integration_tests: either a child client (child_client.h) or the test runner.

#include "gtest/gtest.h"
#include "tests/integration/child_client.h"

int main(int argc, char** argv) {
  cubed::integration::MaybeRunChildClient(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
