#pragma once
// A named in-memory header, as NVRTC is given it and as hipRTC's child gets it
// inlined (inline_headers): generated code's `#include "common/philox.cuh"` is
// served from `text` without touching the file system.
#include <string>
#include <vector>

namespace epifuse::backend {

struct Header {
  std::string name;  ///< the include name, exactly as written in the #include
  std::string text;
};

/// The kernels' shared headers, templates/common/*, named as the templates
/// include them (from the embedded templates, or EPIFUSE_TEMPLATE_DIR).
std::vector<Header> template_headers();

}  // namespace epifuse::backend
