// Must-fail inputs kept as data files (NAME.json in tests/errors/): each must
// be rejected with a UserError whose message contains the one line of NAME.expect.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "epifuse/errors.hpp"
#include "epifuse/json.hpp"

using namespace epifuse;
namespace fs = std::filesystem;

namespace {

const fs::path k_errors_dir = fs::path(EPIFUSE_SOURCE_DIR) / "tests" / "errors";

std::vector<fs::path> files_with_extension(const std::string& ext) {
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(k_errors_dir))
    if (entry.is_regular_file() && entry.path().extension() == ext) out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::string first_line(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

}  // namespace

TEST_CASE("every must-fail JSON input is rejected with its expected UserError") {
  const auto cases = files_with_extension(".json");
  // A missing or emptied directory must not pass vacuously.
  REQUIRE(cases.size() >= 25);
  int passed = 0;
  for (const auto& json : cases) {
    const std::string name = json.stem().string();
    CAPTURE(name);
    fs::path expect_file = json;
    expect_file.replace_extension(".expect");
    REQUIRE_MESSAGE(fs::exists(expect_file), "missing " << expect_file.string());
    const std::string expected = first_line(expect_file);
    REQUIRE_MESSAGE(!expected.empty(), expect_file.string() << " is empty");

    std::string message;
    bool user_error = false;
    try {
      (void)load_spec(json);
      FAIL_CHECK("accepted an input that must fail: " << name);
    } catch (const UserError& e) {
      user_error = true;
      message = e.what();
    } catch (const std::exception& e) {
      FAIL_CHECK("threw a non-user error for " << name << ": " << e.what());
    }
    if (!user_error) continue;
    CAPTURE(message);
    CHECK_MESSAGE(message.find(expected) != std::string::npos,
                  name << ": expected the message to contain: " << expected);
    // One line, no internal error text.
    CHECK(message.find('\n') == std::string::npos);
    CHECK(message.find("internal error") == std::string::npos);
    if (message.find(expected) != std::string::npos) ++passed;
  }
  MESSAGE(passed << " of " << cases.size() << " must-fail inputs rejected as expected");
}

TEST_CASE("every .expect file has its .json input") {
  for (const auto& expect : files_with_extension(".expect")) {
    fs::path json = expect;
    json.replace_extension(".json");
    CHECK_MESSAGE(fs::exists(json), "orphan " << expect.string());
  }
}
