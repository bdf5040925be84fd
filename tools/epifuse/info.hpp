#pragma once
/// What `epifuse info` and `epifuse --version` report: each GPU toolkit this
/// process can load (all through dlopen), its version and library, or why not.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace epifuse::cli {

/// One toolkit: NVRTC, the CUDA driver, hipRTC, the HIP runtime.
struct BackendReport {
  std::string name;                  ///< "HIP runtime"
  bool available = false;
  std::string version;               ///< "HIP runtime 5.2.21153"
  std::string library;               ///< the file the loader picked
  std::string reason;                ///< why it is unavailable
  std::vector<std::string> devices;  ///< "0: AMD Instinct MI210 (gfx90a:sramecc+:xnack-, 104 CUs, wave64)"
};

/// Loads each backend (once per process) and says what it found.
std::vector<BackendReport> backend_reports();

/// One line a backend, then a line a device under it, for humans.
std::string backend_text(const std::vector<BackendReport>& reports);
nlohmann::ordered_json backend_json(const std::vector<BackendReport>& reports);

}  // namespace epifuse::cli
