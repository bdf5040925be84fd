#include "backend/header.hpp"

#include "codegen/template_engine.hpp"

namespace epifuse::backend {

std::vector<Header> template_headers() {
  std::vector<Header> headers;
  for (const auto& [path, text] : embedded_templates())
    if (path.starts_with("common/")) headers.push_back({std::string(path), std::string(text)});
  return headers;
}

}  // namespace epifuse::backend
