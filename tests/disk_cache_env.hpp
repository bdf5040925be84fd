#pragma once
// Helpers for tests of the disk cache: a fresh temporary folder, and the disk
// cache turned on in it (the suite runs with EPIFUSE_CACHE=0, tests/main.cpp).
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

namespace epifuse::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "epifuse-test") {
    path = std::filesystem::temp_directory_path() /
           (prefix + "-" + std::to_string(::getpid()) + "-" +
            std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

/// The disk cache on, in `dir`, for this object's lifetime (Jits made meanwhile use it).
struct DiskCacheOn {
  explicit DiskCacheOn(const std::filesystem::path& dir) {
    ::unsetenv("EPIFUSE_CACHE");
    ::setenv("EPIFUSE_CACHE_DIR", dir.c_str(), 1);
  }
  ~DiskCacheOn() {
    ::setenv("EPIFUSE_CACHE", "0", 1);
    ::unsetenv("EPIFUSE_CACHE_DIR");
  }
  DiskCacheOn(const DiskCacheOn&) = delete;
  DiskCacheOn& operator=(const DiskCacheOn&) = delete;
};

}  // namespace epifuse::test
