// `epifuse info`: the GPU toolkits this process finds (info.hpp), and the
// devices behind the two runtimes. No GPU is needed: what is missing is said.
#include "info.hpp"

#include <fmt/format.h>

#include "backend/cuda_driver.hpp"
#include "backend/hip_runtime.hpp"
#include "backend/hiprtc.hpp"
#include "backend/nvrtc.hpp"
#include "commands.hpp"
#include "common.hpp"

namespace epifuse::cli {

namespace {

BackendReport nvrtc_report() {
  BackendReport r{"NVRTC"};
  if (const backend::Nvrtc* n = backend::nvrtc_or_null()) {
    r = {r.name, true, n->version_string(), n->library_path()};
  } else {
    r.reason = backend::nvrtc_unavailable_reason();
  }
  return r;
}

// ", 4.9 TB/s DRAM at 1,980 MHz": what tile heuristics read of the memory
// (Note [Staged column loads]); nothing where the runtime does not say.
std::string memory_and_clock(const backend::DeviceInfo& d) {
  const std::uint64_t bw = backend::dram_bytes_per_second(d);
  if (bw == 0) return "";
  std::string out = fmt::format(", {:.2f} TB/s DRAM", static_cast<double>(bw) / 1e12);
  if (d.clock_khz > 0) out += fmt::format(" at {} MHz", d.clock_khz / 1000);
  return out;
}

BackendReport cuda_report() {
  BackendReport r{"CUDA driver"};
  backend::CudaDriver* cu = backend::cuda_or_null();
  if (!cu) {
    r.reason = backend::cuda_unavailable_reason();
    return r;
  }
  r = {r.name, true, cu->version_string(), cu->library_path()};
  for (int i = 0; i < cu->device_count(); ++i) {
    const backend::DeviceInfo& d = cu->device(i);
    r.devices.push_back(fmt::format("{}: {} ({}, {} SMs{})", i, d.name, backend::detect_target(i).str(),
                                    d.multiprocessors, memory_and_clock(d)));
  }
  return r;
}

BackendReport hiprtc_report() {
  BackendReport r{"hipRTC"};
  if (const backend::Hiprtc* h = backend::hiprtc_or_null()) {
    r = {r.name, true, fmt::format("{} from {}", h->version_string(), h->layout()), h->library_path()};
  } else {
    r.reason = backend::hiprtc_unavailable_reason();
  }
  return r;
}

BackendReport hip_report() {
  BackendReport r{"HIP runtime"};
  backend::HipRuntime* hip = backend::hip_runtime_or_null();
  if (!hip) {
    r.reason = backend::hip_runtime_unavailable_reason();
    return r;
  }
  r = {r.name, true, hip->version_string(), hip->library_path()};
  for (int i = 0; i < hip->device_count(); ++i) {
    const backend::AmdDeviceInfo& d = hip->amd_device(i);
    r.devices.push_back(fmt::format("{}: {} ({}, {} CUs, wave{}{})", i, d.common.name, d.arch_name,
                                    d.common.multiprocessors, d.warp_size, memory_and_clock(d.common)));
  }
  return r;
}

void info_command() {
  const std::vector<BackendReport> reports = backend_reports();
  if (session().json)
    print_json(backend_json(reports));
  else
    print_text(backend_text(reports));
}

}  // namespace

std::vector<BackendReport> backend_reports() { return {nvrtc_report(), cuda_report(), hiprtc_report(), hip_report()}; }

std::string backend_text(const std::vector<BackendReport>& reports) {
  std::string out;
  for (const BackendReport& r : reports) {
    out += r.available ? fmt::format("{:<12} {} ({})\n", r.name, r.version, r.library)
                       : fmt::format("{:<12} unavailable: {}\n", r.name, r.reason);
    for (const std::string& d : r.devices) out += fmt::format("{:<12}   device {}\n", "", d);
  }
  return out;
}

nlohmann::ordered_json backend_json(const std::vector<BackendReport>& reports) {
  nlohmann::ordered_json doc = nlohmann::ordered_json::array();
  for (const BackendReport& r : reports) {
    nlohmann::ordered_json b{{"name", r.name}, {"available", r.available}};
    if (r.available) {
      b["version"] = r.version;
      b["library"] = r.library;
      b["devices"] = r.devices;
    } else {
      b["reason"] = r.reason;
    }
    doc.push_back(b);
  }
  return {{"backends", doc}};
}

void add_info(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "info", "Show the GPU toolkits found (NVRTC, CUDA driver, hipRTC, HIP runtime) and their devices, or why not");
  add_json_flag(*sub);
  sub->callback([] { info_command(); });
}

}  // namespace epifuse::cli
